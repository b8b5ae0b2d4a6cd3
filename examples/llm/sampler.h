/* Choosing the next token from a row of logits: greedy (the default) or
 * temperature with nucleus (top-p) sampling from a seeded generator. */
#ifndef LLM_SAMPLER_H
#define LLM_SAMPLER_H

#include <stdint.h>

struct sampler {
    float temperature;  /* 0: greedy (argmax, lowest id on ties) */
    float top_p;        /* 1: the whole distribution */
    uint64_t state;     /* the generator (splitmix64) */
    int n_vocab;
    float *probs;       /* scratch */
    int *order;
};

int sampler_init(struct sampler *s, int n_vocab, float temperature, float top_p, uint64_t seed);
void sampler_free(struct sampler *s);
int sampler_next(struct sampler *s, const float *logits);
/* The id of the largest logit (lowest on ties). */
int argmax(const float *logits, int n);

#endif
