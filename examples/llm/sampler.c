/* Greedy and top-p sampling on the host (one row of logits per token). */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

int argmax(const float *logits, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

int sampler_init(struct sampler *s, int n_vocab, float temperature, float top_p, uint64_t seed)
{
    s->temperature = temperature;
    s->top_p = top_p;
    s->state = seed;
    s->n_vocab = n_vocab;
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->order = malloc((size_t)n_vocab * sizeof *s->order);
    return s->probs && s->order ? 0 : -1;
}

void sampler_free(struct sampler *s)
{
    free(s->probs);
    free(s->order);
    s->probs = NULL;
    s->order = NULL;
}

static double next_uniform(struct sampler *s)
{
    uint64_t z = (s->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static const float *sort_probs;
static int by_prob_desc(const void *a, const void *b)
{
    const float pa = sort_probs[*(const int *)a], pb = sort_probs[*(const int *)b];
    return pa > pb ? -1 : pa < pb ? 1 : *(const int *)a - *(const int *)b;
}

int sampler_next(struct sampler *s, const float *logits)
{
    if (s->temperature <= 0)
        return argmax(logits, s->n_vocab);
    const float max = logits[argmax(logits, s->n_vocab)];
    double sum = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        s->probs[i] = expf((logits[i] - max) / s->temperature);
        sum += s->probs[i];
        s->order[i] = i;
    }
    sort_probs = s->probs;
    qsort(s->order, (size_t)s->n_vocab, sizeof *s->order, by_prob_desc);
    /* The smallest set of most likely tokens whose mass reaches top_p. */
    int kept = 0;
    double mass = 0;
    while (kept < s->n_vocab && (kept == 0 || mass < s->top_p * sum))
        mass += s->probs[s->order[kept++]];
    double r = next_uniform(s) * mass;
    for (int i = 0; i < kept; i++) {
        r -= s->probs[s->order[i]];
        if (r <= 0)
            return s->order[i];
    }
    return s->order[kept - 1];
}
