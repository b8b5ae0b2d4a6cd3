/* The backward pass's test helpers, shared by tests/test_backward.c and
 * tests/test_tensor_cores.c: a case's buffers (random inputs, poisoned
 * outputs), the forward and backward calls, the double-precision reference
 * gradients and the check against them. */
#ifndef FLASHCL_TESTS_BACKWARD_COMMON_H
#define FLASHCL_TESTS_BACKWARD_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

enum { T_Q, T_K, T_V, T_O, T_DO, T_DQ, T_DK, T_DV, N_TENSORS };
extern const char *const tensor_names[N_TENSORS];
bool kv_like(int t);  /* a tensor of the keys' shape (K, V, dK, dV) */

struct bwd_case {
    int batch, seq_q, seq_kv, heads_q, heads_kv, head_dim;
    flashcl_dtype dtype;
    int causal;
    float scale;               /* 0: 1/sqrt(d) */
    enum test_layout layout;   /* BNHD, BHND or PADDED */
    int own_workspace;         /* pass a workspace of exactly the size the workspace query gives */
    int standard;              /* flashcl_standard_backward instead of flashcl_backward */
    int windowed;              /* mask FLASHCL_MASK_WINDOW with these (causal ignored) */
    int window_left, window_right;
    enum flashcl_precision precision;  /* f32: attn.precision of both the forward and the backward */
    float softcap;             /* attn.softcap of both (0: none) */
    int sinks;                 /* attn.sinks (test_make_sinks) and grad.d_sinks, checked */
    int alibi;                 /* attn.alibi_slopes of both (test_make_alibi_slopes) */
    int head_dim_v;            /* attn.head_dim_v (0: head_dim): V's, O's, dO's and dV's columns */
};

/* A tensor's columns: head_dim_v for V, O, dO, dV (where given), else head_dim. */
size_t tensor_columns(const struct bwd_case *c, int t);

/* One case's buffers on the device and their host images. */
struct problem {
    struct bwd_case c;
    size_t esize;
    flashcl_tensor view[N_TENSORS];
    size_t count[N_TENSORS];  /* elements of each buffer */
    unsigned char *img[N_TENSORS];
    cl_mem mem[N_TENSORS], lse;
    double *sinks;             /* with c.sinks: the heads' sinks (else NULL) */
    cl_mem sink_mem, d_sink_mem;  /* with c.sinks: both after 4 floats of padding (d_sinks' poisoned) */
    double *slopes;            /* with c.alibi: the heads' ALiBi slopes (else NULL) */
    cl_mem slope_mem;          /* with c.alibi: after 4 floats of padding */
    struct flashcl_attention a;
    struct flashcl_attention_grad g;
    const char *kernel;  /* the kernel problem_backward ran (flashcl_backward_config); 0: standard */
};

struct bwd_result {
    double max_err[3];   /* dQ, dK, dV: max |got - ref| / max|ref| */
    const char *kernel;
};

/* Random inputs (also in the gaps of padded layouts), poisoned O, LSE and gradients. */
void problem_create(struct problem *p, const struct bwd_case *c, uint64_t seed);
void problem_free(struct problem *p);
void wait_complete(cl_event ev);
void problem_forward(struct problem *p, flashcl_context *ctx);
/* Runs the backward call on queue, with the case's workspace choice, and waits; records the variant. */
void problem_backward(struct problem *p, flashcl_context *ctx, cl_command_queue queue);
unsigned char *read_back(const struct problem *p, int t);
/* |got - ref| <= atol + rtol * max|ref| per output tensor, for the kernel that ran (and the precision
 * the call allowed, which only "backward-tf32" uses). */
void backward_tolerance(flashcl_dtype dtype, const char *variant, enum flashcl_precision precision,
                        double *atol, double *rtol);
/* Compares with the reference; rows that see no key have dQ exactly 0; bytes outside the views kept their poison. */
void problem_check(const struct problem *p, struct bwd_result *r);
/* create, forward, backward, check, print one line, free; out may be NULL. ctx NULL: the shared one. */
void run_case(flashcl_context *ctx, const char *what, const struct bwd_case *c, uint64_t seed,
              struct bwd_result *out);

#endif
