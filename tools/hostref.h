/* Host-side helpers shared by the tests and the benchmark: storage-format
 * conversion, deterministic random numbers and the double-precision
 * attention reference. Not part of the installed library. */
#ifndef FLASHCL_HOSTREF_H
#define FLASHCL_HOSTREF_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"

uint16_t f32_to_f16(float f);    /* round to nearest even, with subnormals and inf */
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);   /* round to nearest even */
float bf16_to_f32(uint16_t b);
uint8_t f32_to_e4m3(float f);    /* round to nearest even, past 448 to 448 (satfinite), NaN to 0x7f */
float e4m3_to_f32(uint8_t b);

/* Stores x in buf[idx] as dtype; returns the value actually stored. */
double hostref_store(void *buf, flashcl_dtype dtype, size_t idx, float x);
double hostref_load(const void *buf, flashcl_dtype dtype, size_t idx);

/* xorshift64*: deterministic, identical on every platform. */
void rng_seed(uint64_t seed);
double rng_uniform(double lo, double hi);

/* One query row of attention in double precision: q [d], k and v [n_kv][d].
 * Keys j > last_visible are masked (pass n_kv - 1 for none). Writes out [d]
 * and the natural-log LSE; a row that sees no key gets 0 and -inf. scratch
 * holds n_kv doubles. */
void hostref_attention_row(const double *q, const double *k, const double *v, size_t n_kv, size_t d,
                           double scale, long long last_visible, double *out, double *lse,
                           double *scratch);

/* The exact gradients of L = sum(dO o O) for one query head's problem in
 * double precision, P recomputed from q and k (no LSE from outside): q, d_o
 * and d_q [n_q][d], k, v, d_k and d_v [n_kv][d]. causal masks key j for
 * query i when j > i + n_kv - n_q (bottom-right); a row that sees no key
 * gets d_q = 0. d_q is written; d_k and d_v are ADDED to, so the query heads
 * of a GQA group sum into one buffer (zero it first). scratch holds
 * n_kv + d doubles. */
void hostref_attention_backward(const double *q, const double *k, const double *v, const double *d_o,
                                size_t n_q, size_t n_kv, size_t d, double scale, int causal, double *d_q,
                                double *d_k, double *d_v, double *scratch);
/* The same with a sliding window (FlashAttention's semantics, -1 unlimited;
 * causal is window_left -1, window_right 0); the _capped form with logit
 * softcapping too (0: none), scratch then holding 2 n_kv + d doubles. */
void hostref_attention_backward_window(const double *q, const double *k, const double *v, const double *d_o,
                                       size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                       int window_right, double *d_q, double *d_k, double *d_v, double *scratch);
void hostref_attention_backward_capped(const double *q, const double *k, const double *v, const double *d_o,
                                       size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                       int window_right, double softcap, double *d_q, double *d_k, double *d_v,
                                       double *scratch);
/* The same with an attention sink (a logit in the row's denominator with no value; -INFINITY: none): d_sink,
 * where not NULL, has -P_sink·D of every row added to it. */
void hostref_attention_backward_sink(const double *q, const double *k, const double *v, const double *d_o,
                                     size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                     int window_right, double softcap, double sink, double *d_q, double *d_k,
                                     double *d_v, double *d_sink, double *scratch);

/* The keys [*first, *end) query row i of n_q sees against n_kv keys with a
 * window around its bottom-right-aligned diagonal (-1: unlimited). */
void hostref_visible_keys(size_t i, size_t n_q, size_t n_kv, int window_left, int window_right, size_t *first,
                          size_t *end);
/* One row of attention over keys [first, end) only (scratch holds end doubles). */
void hostref_attention_row_range(const double *q, const double *k, const double *v, size_t first, size_t end,
                                 size_t d, double scale, double *out, double *lse, double *scratch);
/* The same with logit softcapping: each scaled score s becomes softcap·tanh(s / softcap) (0: none). */
void hostref_attention_row_capped(const double *q, const double *k, const double *v, size_t first, size_t end,
                                  size_t d, double scale, double softcap, double *out, double *lse, double *scratch);
/* The same with an attention sink: a logit that joins the denominator with no value (-INFINITY: none); a row
 * with no key then has out = 0 and lse = sink. */
void hostref_attention_row_sink(const double *q, const double *k, const double *v, size_t first, size_t end,
                                size_t d, double scale, double softcap, double sink, double *out, double *lse,
                                double *scratch);

/* What a score goes through beyond the scale and the mask: the softcap (0: none), then ALiBi's bias
 * -alibi_slope·|j - diagonal| (0: none; diagonal is the row's key i + n_kv - n_q), and the sink (-INFINITY:
 * none) in the denominator. The _mods forms of the row and the backward above take all three. */
struct hostref_mods {
    double softcap, sink, alibi_slope;
};
void hostref_attention_row_mods(const double *q, const double *k, const double *v, size_t first, size_t end,
                                size_t d, double scale, const struct hostref_mods *mods, long long diagonal,
                                double *out, double *lse, double *scratch);
/* The row with V and out of dv columns (a value head dim other than q's and k's d). */
void hostref_attention_row_dv(const double *q, const double *k, const double *v, size_t first, size_t end,
                              size_t d, size_t dv, double scale, const struct hostref_mods *mods, long long diagonal,
                              double *out, double *lse, double *scratch);
void hostref_attention_backward_mods(const double *q, const double *k, const double *v, const double *d_o,
                                     size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                     int window_right, const struct hostref_mods *mods, double *d_q, double *d_k,
                                     double *d_v, double *d_sink, double *scratch);
/* The backward with V, dO and dV of dv columns (scratch: 2 n_kv + dv doubles). */
void hostref_attention_backward_dv(const double *q, const double *k, const double *v, const double *d_o,
                                   size_t n_q, size_t n_kv, size_t d, size_t dv, double scale, int window_left,
                                   int window_right, const struct hostref_mods *mods, double *d_q, double *d_k,
                                   double *d_v, double *d_sink, double *scratch);

#endif
