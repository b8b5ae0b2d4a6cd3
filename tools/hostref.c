#include "hostref.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f)
{
    const uint32_t u = f32_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (abs >= 0x477ff000u)  /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below 2^-14: onto the subnormal grid of 2^-24 */
        const float r = nearbyintf(bits_f32(abs) * 16777216.0f);
        return (uint16_t)(sign | (uint32_t)r);
    }
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  /* nearest even at bit 13 */
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0)
        return (sign ? -1.0f : 1.0f) * (float)mant * 5.9604644775390625e-8f;  /* 2^-24 */
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float bf16_to_f32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

uint8_t f32_to_e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    const uint8_t sign = signbit(f) ? 0x80 : 0;
    const double a = fabs((double)f);
    if (a >= 448.0)
        return sign | 0x7e;
    int e;
    frexp(a, &e);  /* a = m 2^e, m in [0.5, 1) */
    const int exponent = e - 1 < -6 ? -6 : e - 1;  /* subnormals share 2^-6's spacing */
    const double step = ldexp(1.0, exponent - 3);
    const double q = nearbyint(a / step) * step;  /* to nearest even (the default mode); exact in double */
    if (q == 0.0)
        return sign;
    int qe;
    const double qm = frexp(q, &qe);
    if (qe - 1 < -6)  /* subnormal: q = m 2^-9 */
        return sign | (uint8_t)(q / ldexp(1.0, -9));
    return sign | (uint8_t)((qe - 1 + 7) << 3) | (uint8_t)((qm * 2.0 - 1.0) * 8.0);
}

float e4m3_to_f32(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    const float magnitude = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + m / 8.0f, e - 7);
    return b & 0x80 ? -magnitude : magnitude;
}

double hostref_load(const void *buf, flashcl_dtype dtype, size_t idx)
{
    switch (dtype) {
    case FLASHCL_E4M3:
        return e4m3_to_f32(((const uint8_t *)buf)[idx]);
    case FLASHCL_F32:
        return ((const float *)buf)[idx];
    case FLASHCL_F16:
        return f16_to_f32(((const uint16_t *)buf)[idx]);
    default:
        return bf16_to_f32(((const uint16_t *)buf)[idx]);
    }
}

double hostref_store(void *buf, flashcl_dtype dtype, size_t idx, float x)
{
    switch (dtype) {
    case FLASHCL_E4M3:
        ((uint8_t *)buf)[idx] = f32_to_e4m3(x);
        break;
    case FLASHCL_F32:
        ((float *)buf)[idx] = x;
        break;
    case FLASHCL_F16:
        ((uint16_t *)buf)[idx] = f32_to_f16(x);
        break;
    default:
        ((uint16_t *)buf)[idx] = f32_to_bf16(x);
        break;
    }
    return hostref_load(buf, dtype, idx);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void rng_seed(uint64_t seed)
{
    rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
}

double rng_uniform(double lo, double hi)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    const uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

void hostref_visible_keys(size_t i, size_t n_q, size_t n_kv, int window_left, int window_right, size_t *first,
                          size_t *end)
{
    const long long diag = (long long)i + (long long)n_kv - (long long)n_q;
    long long lo = window_left >= 0 ? diag - window_left : 0, hi = window_right >= 0 ? diag + window_right + 1
                                                                                     : (long long)n_kv;
    lo = lo < 0 ? 0 : lo;
    hi = hi > (long long)n_kv ? (long long)n_kv : hi;
    *first = (size_t)lo;
    *end = hi > lo ? (size_t)hi : (size_t)lo;
}

/* A scaled score through the softcap (0: none). */
static double capped(double s, double softcap)
{
    return softcap > 0 ? softcap * tanh(s / softcap) : s;
}

void hostref_attention_row_range(const double *q, const double *k, const double *v, size_t first, size_t end,
                                 size_t d, double scale, double *out, double *lse, double *scratch)
{
    hostref_attention_row_capped(q, k, v, first, end, d, scale, 0.0, out, lse, scratch);
}

void hostref_attention_row_capped(const double *q, const double *k, const double *v, size_t first, size_t end,
                                  size_t d, double scale, double softcap, double *out, double *lse, double *scratch)
{
    hostref_attention_row_sink(q, k, v, first, end, d, scale, softcap, -INFINITY, out, lse, scratch);
}

void hostref_attention_row_sink(const double *q, const double *k, const double *v, size_t first, size_t end,
                                size_t d, double scale, double softcap, double sink, double *out, double *lse,
                                double *scratch)
{
    const struct hostref_mods mods = {softcap, sink, 0.0};
    hostref_attention_row_mods(q, k, v, first, end, d, scale, &mods, 0, out, lse, scratch);
}

/* ALiBi's bias of key j against a row whose diagonal is key `diagonal` (0 without a slope). */
static double alibi_bias(double slope, long long j, long long diagonal)
{
    return slope != 0 ? -slope * (double)llabs(j - diagonal) : 0.0;
}

void hostref_attention_row_mods(const double *q, const double *k, const double *v, size_t first, size_t end,
                                size_t d, double scale, const struct hostref_mods *mods, long long diagonal,
                                double *out, double *lse, double *scratch)
{
    hostref_attention_row_dv(q, k, v, first, end, d, d, scale, mods, diagonal, out, lse, scratch);
}

void hostref_attention_row_dv(const double *q, const double *k, const double *v, size_t first, size_t end,
                              size_t d, size_t dv, double scale, const struct hostref_mods *mods, long long diagonal,
                              double *out, double *lse, double *scratch)
{
    const double sink = mods->sink;
    double max = sink;
    for (size_t j = first; j < end; j++) {
        double s = 0;
        for (size_t e = 0; e < d; e++)
            s += q[e] * k[j * d + e];
        scratch[j] = capped(s * scale, mods->softcap) + alibi_bias(mods->alibi_slope, (long long)j, diagonal);
        max = fmax(max, scratch[j]);
    }
    for (size_t e = 0; e < dv; e++)
        out[e] = 0;
    if (max == -INFINITY) {  /* no key and no sink */
        *lse = -INFINITY;
        return;
    }
    double sum = exp(sink - max);  /* the sink's share of the denominator (0 without one) */
    for (size_t j = first; j < end; j++) {
        const double p = exp(scratch[j] - max);
        sum += p;
        for (size_t e = 0; e < dv; e++)
            out[e] += p * v[j * dv + e];
    }
    for (size_t e = 0; e < dv; e++)
        out[e] /= sum;
    *lse = max + log(sum);
}

void hostref_attention_row(const double *q, const double *k, const double *v, size_t n_kv, size_t d,
                           double scale, long long last_visible, double *out, double *lse,
                           double *scratch)
{
    const size_t n_visible = last_visible < 0 ? 0
                             : (size_t)last_visible + 1 < n_kv ? (size_t)last_visible + 1 : n_kv;
    hostref_attention_row_range(q, k, v, 0, n_visible, d, scale, out, lse, scratch);
}

void hostref_attention_backward(const double *q, const double *k, const double *v, const double *d_o,
                                size_t n_q, size_t n_kv, size_t d, double scale, int causal, double *d_q,
                                double *d_k, double *d_v, double *scratch)
{
    hostref_attention_backward_window(q, k, v, d_o, n_q, n_kv, d, scale, -1, causal ? 0 : -1, d_q, d_k, d_v,
                                      scratch);
}

void hostref_attention_backward_window(const double *q, const double *k, const double *v, const double *d_o,
                                       size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                       int window_right, double *d_q, double *d_k, double *d_v, double *scratch)
{
    hostref_attention_backward_capped(q, k, v, d_o, n_q, n_kv, d, scale, window_left, window_right, 0.0, d_q, d_k,
                                      d_v, scratch);
}

void hostref_attention_backward_capped(const double *q, const double *k, const double *v, const double *d_o,
                                       size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                       int window_right, double softcap, double *d_q, double *d_k, double *d_v,
                                       double *scratch)
{
    hostref_attention_backward_sink(q, k, v, d_o, n_q, n_kv, d, scale, window_left, window_right, softcap, -INFINITY,
                                    d_q, d_k, d_v, NULL, scratch);
}

void hostref_attention_backward_sink(const double *q, const double *k, const double *v, const double *d_o,
                                     size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                     int window_right, double softcap, double sink, double *d_q, double *d_k,
                                     double *d_v, double *d_sink, double *scratch)
{
    const struct hostref_mods mods = {softcap, sink, 0.0};
    hostref_attention_backward_mods(q, k, v, d_o, n_q, n_kv, d, scale, window_left, window_right, &mods, d_q, d_k,
                                    d_v, d_sink, scratch);
}

void hostref_attention_backward_mods(const double *q, const double *k, const double *v, const double *d_o,
                                     size_t n_q, size_t n_kv, size_t d, double scale, int window_left,
                                     int window_right, const struct hostref_mods *mods, double *d_q, double *d_k,
                                     double *d_v, double *d_sink, double *scratch)
{
    hostref_attention_backward_dv(q, k, v, d_o, n_q, n_kv, d, d, scale, window_left, window_right, mods, d_q, d_k, d_v,
                                  d_sink, scratch);
}

void hostref_attention_backward_dv(const double *q, const double *k, const double *v, const double *d_o,
                                   size_t n_q, size_t n_kv, size_t d, size_t dv, double scale, int window_left,
                                   int window_right, const struct hostref_mods *mods, double *d_q, double *d_k,
                                   double *d_v, double *d_sink, double *scratch)
{
    const double softcap = mods->softcap, sink = mods->sink;
    double *p = scratch, *o = scratch + n_kv;
    for (size_t i = 0; i < n_q; i++) {
        size_t first, end;
        hostref_visible_keys(i, n_q, n_kv, window_left, window_right, &first, &end);
        const size_t n_visible = end - first;
        const long long diagonal = (long long)i + (long long)n_kv - (long long)n_q;
        /* Keys from `first` on: the loops below index j from 0 over these. */
        const double *kf = k + first * d, *vf = v + first * dv;
        double *dkf = d_k + first * d, *dvf = d_v + first * dv;
        const double *qi = &q[i * d], *doi = &d_o[i * dv];
        double *dqi = &d_q[i * d];
        for (size_t e = 0; e < d; e++)
            dqi[e] = 0;
        if (n_visible == 0)
            continue;  /* no key: P = 0, so every gradient term of this row is 0 */
        /* P_i from scratch (max-shifted softmax), O_i = P_i V and D_i = dO_i . O_i. The cap's slope at
         * each score, 1 - tanh², in slope (scratch past o). */
        double *slope = softcap > 0 ? o + dv : NULL;  /* uncapped: the slope is 1, and scratch n_kv + dv */
        for (size_t j = 0; slope && j < n_visible; j++) {
            double s = 0;
            for (size_t e = 0; e < d; e++)
                s += qi[e] * kf[j * d + e];
            const double t = tanh(s * scale / softcap);
            slope[j] = 1 - t * t;
        }
        double max = sink, sum = 0, delta = 0;
        for (size_t j = 0; j < n_visible; j++) {
            double s = 0;
            for (size_t e = 0; e < d; e++)
                s += qi[e] * kf[j * d + e];
            p[j] = capped(s * scale, softcap) + alibi_bias(mods->alibi_slope, (long long)(first + j), diagonal);
            max = fmax(max, p[j]);
        }
        sum = exp(sink - max);  /* the sink's share (0 without one) */
        for (size_t j = 0; j < n_visible; j++) {
            p[j] = exp(p[j] - max);
            sum += p[j];
        }
        for (size_t e = 0; e < dv; e++)
            o[e] = 0;
        for (size_t j = 0; j < n_visible; j++) {
            p[j] /= sum;
            for (size_t e = 0; e < dv; e++)
                o[e] += p[j] * vf[j * dv + e];
        }
        for (size_t e = 0; e < dv; e++)
            delta += doi[e] * o[e];
        if (d_sink)  /* the sink's dS: P_sink (0 - D), its dP being 0 (no value) */
            *d_sink -= exp(sink - max) / sum * delta;
        /* dP_ij = dO_i . v_j, dS_ij = P_ij (dP_ij - D_i); dQ_i = scale sum_j dS_ij k_j,
         * dK_j += scale dS_ij q_i, dV_j += P_ij dO_i. */
        for (size_t j = 0; j < n_visible; j++) {
            double dp = 0;
            for (size_t e = 0; e < dv; e++)
                dp += doi[e] * vf[j * dv + e];
            const double ds = p[j] * (dp - delta) * (slope ? slope[j] : 1.0);
            for (size_t e = 0; e < d; e++) {
                dqi[e] += scale * ds * kf[j * d + e];
                dkf[j * d + e] += scale * ds * qi[e];
            }
            for (size_t e = 0; e < dv; e++)
                dvf[j * dv + e] += p[j] * doi[e];
        }
    }
}
