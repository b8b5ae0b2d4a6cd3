/* The sizing rule and the tile a forward call runs with. */
#include <string.h>

#include "internal.h"

#define MAX_AUTO_BLOCK 128  /* past this the per-work-item register arrays only grow */

size_t flashcl_block_size_bound(size_t local_mem_bytes, size_t elem_bytes, size_t head_dim)
{
    if (elem_bytes == 0 || head_dim == 0)
        return 0;
    /* Four B×d arrays: Q, K, V blocks and the output accumulator. */
    const size_t per_row = 4 * elem_bytes * head_dim;
    return local_mem_bytes / per_row;
}

/* Mirrors the __local arrays of cl/flash_forward.cl. */
size_t forward_local_bytes(int block_m, int block_n, int head_dim, int tn)
{
    const size_t m = (size_t)block_m, n = (size_t)block_n, d = (size_t)head_dim;
    const size_t ldqk = d | 1;
    const size_t floats = m * ldqk + n * ldqk + n * d + m * n + m * (size_t)tn;
    return floats * sizeof(float);
}

/* Mirrors the __local arrays of cl/flash_forward_tiled.cl. */
size_t forward_tiled_local_bytes(int block_m, int block_n, int head_dim)
{
    const size_t m = (size_t)block_m, n = (size_t)block_n, d = (size_t)head_dim;
    const size_t floats = m * (d + 4) + 2 * n * (d + 4) + n * (m + 4) + 16 * m;
    return floats * sizeof(float);
}

static bool tiled_block_ok(int b)
{
    return b >= 16 && b <= 128 && b % 16 == 0;
}

/* The register-tiled kernel's tile: tuned, forced, else the sizing rule on
 * the usable local memory rounded down to a multiple of 16 and capped at 64
 * rows (32 when causal past d = 64), with at most 32 keys (64 x 32 beat
 * 64 x 64, 32 x 64, 48 x 32 and 32 x 32 on the H200 elsewhere: docs/perf.md);
 * shrunk by 16 until the real footprint fits. False if no tile of that
 * kernel fits or a forced size is not one it runs. */
static bool tiled_tile(const flashcl_context *ctx, int head_dim, flashcl_dtype dtype, int causal,
                       struct flashcl_tile *out)
{
    if (head_dim % 4 != 0 || ctx->max_workgroup_size < 64)
        return false;
    const size_t usable = usable_local_mem(ctx);
    memset(out, 0, sizeof(*out));
    out->variant = FLASHCL_VARIANT_REGISTER_TILED;
    const struct flashcl_tuned_config *tuned =
        tuning_find(ctx, FLASHCL_VARIANT_REGISTER_TILED, dtype, head_dim, causal);
    const size_t bound = flashcl_block_size_bound(usable, sizeof(float), (size_t)head_dim);
    /* Causal past d = 64: 32 rows (groups of 128 work-items) ran 19.0 against
     * 16.5 TFLOP/s at d = 128 on the H200; without the mask 64 rows won
     * (24.3 against 19.6). */
    const int rows = causal && head_dim > 64 ? 32 : 64;
    int block_m = bound >= (size_t)rows ? rows : (int)(bound / 16) * 16;
    int block_n = block_m < 32 ? block_m : 32;
    if (block_m < 16)
        block_m = block_n = 16;
    out->source = FLASHCL_TILE_RULE;
    if (ctx->forced_block_m || ctx->forced_block_n) {
        if ((ctx->forced_block_m && !tiled_block_ok(ctx->forced_block_m)) ||
            (ctx->forced_block_n && !tiled_block_ok(ctx->forced_block_n)))
            return false;
        block_m = ctx->forced_block_m ? ctx->forced_block_m : block_m;
        block_n = ctx->forced_block_n ? ctx->forced_block_n : block_n;
        out->source = FLASHCL_TILE_FORCED;
    } else if (tuned && tiled_block_ok(tuned->block_m) && tiled_block_ok(tuned->block_n) &&
               forward_tiled_local_bytes(tuned->block_m, tuned->block_n, head_dim) <= usable) {
        block_m = tuned->block_m;
        block_n = tuned->block_n;
        out->source = FLASHCL_TILE_TUNED;
    }
    /* 4·block_m work-items: four query rows each. */
    while (forward_tiled_local_bytes(block_m, block_n, head_dim) > usable ||
           (size_t)(4 * block_m) > ctx->max_workgroup_size) {
        if (out->source == FLASHCL_TILE_FORCED)
            return false;
        if (block_n > 16 && block_n >= block_m / 2)
            block_n -= 16;
        else if (block_m > 16)
            block_m -= 16;
        else
            return false;
    }
    out->block_m = block_m;
    out->block_n = block_n;
    out->workgroup_size = 4 * block_m;
    out->local_bytes = forward_tiled_local_bytes(block_m, block_n, head_dim);
    return true;
}

int portable_side(const flashcl_context *ctx)
{
    return ctx->max_workgroup_size >= 256 ? 16 : 8;
}

/* Rounds the rule's bound down to a block the kernel runs well: a multiple of
 * the work-group's side (16) when it is that large, else a power of two. */
static int round_block(size_t bound, int side)
{
    if (bound >= MAX_AUTO_BLOCK)
        return MAX_AUTO_BLOCK;
    if (bound >= (size_t)side)
        return (int)(bound / (size_t)side) * side;
    int b = 1;
    while ((size_t)b * 2 <= bound)
        b *= 2;
    return b;
}

flashcl_status tile_choose(flashcl_context *ctx, int head_dim, flashcl_dtype dtype, int causal,
                           struct flashcl_tile *out)
{
    if (ctx->fma_variant != FLASHCL_VARIANT_PORTABLE && tiled_tile(ctx, head_dim, dtype, causal, out))
        return FLASHCL_SUCCESS;
    const int side = portable_side(ctx);
    memset(out, 0, sizeof(*out));
    out->variant = FLASHCL_VARIANT_PORTABLE;
    out->workgroup_size = side * side;

    /* Forced sizes, else a tuned entry, else the rule. Forced and tuned tiles
     * may use the local memory that really works; the rule stays within what
     * the device reports. */
    const struct flashcl_tuned_config *tuned = tuning_find(ctx, FLASHCL_VARIANT_PORTABLE, dtype, head_dim, causal);
    const size_t usable = usable_local_mem(ctx);
    if (tuned && !ctx->forced_block_m && !ctx->forced_block_n &&
        forward_local_bytes(tuned->block_m, tuned->block_n, head_dim, side) <= usable) {
        out->source = FLASHCL_TILE_TUNED;
        out->block_m = tuned->block_m;
        out->block_n = tuned->block_n;
        out->local_bytes = forward_local_bytes(tuned->block_m, tuned->block_n, head_dim, side);
        return FLASHCL_SUCCESS;
    }

    const size_t bound = flashcl_block_size_bound(ctx->local_mem_size, sizeof(float), (size_t)head_dim);
    const int block = round_block(bound, side);
    int block_m = ctx->forced_block_m ? ctx->forced_block_m : block;
    int block_n = ctx->forced_block_n ? ctx->forced_block_n : block;
    const bool forced = ctx->forced_block_m || ctx->forced_block_n;
    const size_t limit = forced ? usable : (size_t)ctx->local_mem_size;

    /* The rule is approximate (the kernel also keeps a P block); shrink the
     * automatic sizes until the real footprint fits. */
    while (forward_local_bytes(block_m, block_n, head_dim, side) > limit) {
        const bool can_m = !ctx->forced_block_m && block_m > 1;
        const bool can_n = !ctx->forced_block_n && block_n > 1;
        if (!can_m && !can_n)
            return fail(ctx, FLASHCL_ERROR_INVALID_CONFIG,
                        "a %dx%d tile for head_dim %d needs %zu bytes of local memory; "
                        "\"%s\" has %zu", block_m, block_n, head_dim,
                        forward_local_bytes(block_m, block_n, head_dim, side), ctx->device_name, limit);
        if (can_m && (block_m >= block_n || !can_n))
            block_m = block_m > side ? block_m - side : block_m / 2;
        else
            block_n = block_n > side ? block_n - side : block_n / 2;
    }

    out->source = forced ? FLASHCL_TILE_FORCED : FLASHCL_TILE_RULE;
    out->block_m = block_m;
    out->block_n = block_n;
    out->local_bytes = forward_local_bytes(block_m, block_n, head_dim, side);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_forward_tile(flashcl_context *ctx, int head_dim, flashcl_dtype dtype,
                                    struct flashcl_tile *out)
{
    clear_error();
    if (!ctx || !out)
        return fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL", ctx ? "out" : "ctx");
    if (head_dim < 1 || head_dim > FLASHCL_MAX_HEAD_DIM)
        return fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "head_dim = %d; must be 1..%d", head_dim,
                    FLASHCL_MAX_HEAD_DIM);
    if (flashcl_dtype_size(dtype) == 0)
        return fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "dtype = %d is not a flashcl_dtype", (int)dtype);
    return tile_choose(ctx, head_dim, dtype, 0, out);
}
