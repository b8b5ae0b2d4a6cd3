/*
 * A running model: the command queue, the KV cache and the activations on
 * the device, and the forward pass over a batch of new tokens.
 *
 * Each layer enqueues 9 operations: RMSNorm, the fused QKV GEMM, RoPE (which
 * also writes K and V into the cache), attention (flashcl), the output
 * projection GEMM (adding into the residual stream: beta = 1), RMSNorm, the
 * fused gate/up GEMM, SwiGLU, the down projection GEMM (beta = 1).
 */
#ifndef LLM_SESSION_H
#define LLM_SESSION_H

#include <flashcl.h>

#include "model.h"
#include "profile.h"

struct llm_session_params {
    int capacity;        /* KV-cache rows (the longest sequence), <= the model's context */
    int max_tokens;      /* tokens one llm_forward call may take (prefill chunk) */
    int max_logit_rows;  /* logit rows one call may return */
    int profiling;       /* nonzero: OpenCL profiling events, times per phase */
};

struct llm_session;

int llm_session_create(const struct llm_model *model, flashcl_context *fa, const struct llm_session_params *params,
                       struct llm_session **out, char *err, size_t err_size);
void llm_session_free(struct llm_session **s);

/* Runs tokens[0..n) at positions n_past .. n_past + n - 1, appends their K
 * and V to the cache, and writes the logits of the last logit_rows of them
 * to logits ([logit_rows][n_vocab], host). Attention runs through
 * flashcl_forward (dense causal prefill) when the cache is empty and
 * dense_prefill is set, else through flashcl_forward_kv_cache (the new
 * queries attend to the cache and to themselves, causally). 0, or -1 with
 * a sentence in err. */
int llm_forward(struct llm_session *s, const int *tokens, int n, int logit_rows, float *logits, int dense_prefill,
                char *err, size_t err_size);

/* The flashcl kernel and tile a layer's attention of n queries after
 * n_past cached keys runs (dense: flashcl_forward's, else
 * flashcl_forward_kv_cache's, split-KV count included). 0, or -1. */
int llm_session_attention_config(struct llm_session *s, int n, int n_past, int dense, struct flashcl_tile *tile);

/* Empties the KV cache (a new sequence). */
void llm_session_reset(struct llm_session *s);
int llm_session_n_past(const struct llm_session *s);
/* Device bytes of the KV cache and of the activations (weights: model->device_bytes). */
size_t llm_session_cache_bytes(const struct llm_session *s);
size_t llm_session_activation_bytes(const struct llm_session *s);
/* The times and launch counts gathered so far; llm_profile_clear resets them. */
struct llm_profile *llm_session_profile(struct llm_session *s);

#endif
