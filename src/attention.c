/* What an attention struct asks for beyond its views: the scale the kernels
 * multiply by and the keys each row sees. Read by the planner and every
 * operation, so they read a call one way. */
#include <math.h>

#include "internal.h"

#define LOG2E 1.4426950408889634

float fcl_effective_scale(const struct flashcl_attention *attn)
{
    return attn->scale != 0.0f ? attn->scale : (float)(1.0 / sqrt((double)attn->head_dim));
}

float fcl_scale_log2(const struct flashcl_attention *attn)
{
    return (float)(fcl_effective_scale(attn) * LOG2E);
}

float fcl_descale(const flashcl_tensor *t)
{
    return t->descale != 0.0f ? t->descale : 1.0f;
}

int fcl_head_dim_v(const struct flashcl_attention *attn)
{
    return attn->head_dim_v != 0 ? attn->head_dim_v : attn->head_dim;
}

void fcl_attention_window(const struct flashcl_attention *attn, int *left, int *right)
{
    const enum flashcl_mask mask = attn->mask;
    *left = mask == FLASHCL_MASK_WINDOW ? attn->window_left : -1;
    *right = mask == FLASHCL_MASK_WINDOW ? attn->window_right : mask == FLASHCL_MASK_CAUSAL ? 0 : -1;
    /* A window no row can reach past is no limit: unlimited, so the kernels' int sums cannot wrap (and a
     * huge window builds the program of none). Row i's diagonal lies in [seq_kv - seq_q, seq_kv - 1]. */
    if (*left >= attn->seq_kv)
        *left = -1;
    if (*right >= attn->seq_q)
        *right = -1;
}
