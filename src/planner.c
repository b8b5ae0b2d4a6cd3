/* The planner: one walk of the kernel table per call, one plan out.
 *
 * For each kernel in order of preference: does it run this problem (dtype,
 * precision, head_dim, views), does the device have what it needs, is it
 * turned off or broken here; then its shape — fixed axes from the overrides,
 * else the tuning file's entry, else the first built-in shape that applies
 * and fits, else the sizing rule shrunk until it fits. The first kernel with
 * a shape wins. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static bool arch_matches(const struct device_desc *dev, enum arch_class arch)
{
    return arch == ARCH_ANY || (arch == ARCH_NVIDIA_SM90 && dev->nv_major == 9);
}

/* The mask a built-in row is chosen by: a window that limits nothing is none, one that stops at the diagonal
 * causal (the same function, so the same measured shape). */
static enum flashcl_mask builtin_mask(const struct problem *p)
{
    if (p->mask != FLASHCL_MASK_WINDOW || p->window_left >= 0 || p->window_right > 0)
        return p->mask;
    return p->window_right < 0 ? FLASHCL_MASK_NONE : FLASHCL_MASK_CAUSAL;
}

static bool builtin_applies(const struct device_desc *dev, const struct builtin_shape *b, const struct problem *p)
{
    const int d = fcl_wide_dim(p);  /* with head_dim_v, the larger of the two: the shapes' registers and tiles */
    return arch_matches(dev, b->arch) && d >= b->head_dim_lo && d <= b->head_dim_hi &&
           (b->mask < 0 || b->mask == (int)builtin_mask(p)) &&
           (b->batches == ANY_BATCH || (b->batches & (1u << p->varlen)));
}

static bool launchable(const struct device_desc *dev, const struct kernel_info *k, const struct kernel_shape *s,
                       const struct problem *p)
{
    return !k->launchable || k->launchable(dev, s, p);
}

/* The shape's local memory, with the compiler's slack, within limit. */
static bool fits(const struct device_desc *dev, const struct kernel_info *k, const struct kernel_shape *s,
                 const struct problem *p, size_t limit)
{
    return k->local_bytes(dev, s, p) + FCL_LOCAL_SLACK <= limit;
}

/* The kernel's first shape for a problem before any fitting: its first
 * applicable built-in shape, else its rule. The base that fixed axes change. */
static void first_shape(const struct device_desc *dev, const struct kernel_info *k, const struct problem *p,
                        struct kernel_shape *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < k->n_builtin; i++)
        if (builtin_applies(dev, &k->builtin[i], p)) {
            *out = k->builtin[i].shape;
            return;
        }
    if (k->rule)
        k->rule(dev, p, out);
}

/* The shape `k` runs `p` with, or a reason it has none (written to why);
 * *tuned the tuning file's entry where the shape is its. */
static bool choose_shape(const flashcl_context *ctx, const struct kernel_info *k, const struct problem *p,
                         struct kernel_shape *shape, enum flashcl_tile_source *source,
                         const struct tuned_entry **tuned_used, char *why, size_t why_size)
{
    const struct device_desc *dev = &ctx->dev;
    const struct kernel_override *ov = &ctx->overrides[fcl_kernel_index(k)];
    const size_t usable = dev->usable_local;
    *tuned_used = NULL;

    if (ov->fixed) {
        first_shape(dev, k, p, shape);
        for (int a = 0; a < AXIS_COUNT; a++)
            if (ov->fixed & (1u << a))
                shape->axis[a] = ov->shape.axis[a];
        *source = FLASHCL_TILE_FORCED;
        while (!fits(dev, k, shape, p, usable) || !launchable(dev, k, shape, p))
            if (!k->shrink || !k->shrink(dev, shape, ov->fixed)) {
                int block_m = 0, workgroup = 0;
                k->geometry(dev, shape, &block_m, &workgroup);
                if (!launchable(dev, k, shape, p) && (size_t)workgroup > dev->max_workgroup)
                    snprintf(why, why_size, "a %dx%d tile needs %d work-items per work-group; \"%s\" allows %zu",
                             block_m, shape->axis[AXIS_BLOCK_N], workgroup, dev->name, dev->max_workgroup);
                else if (!launchable(dev, k, shape, p))  /* e.g. decode-tensor-core: block_n a multiple of 16 x warps */
                    snprintf(why, why_size, "%s does not take the shape warps=%d, block_n=%d together", k->name,
                             shape->axis[AXIS_WARPS], shape->axis[AXIS_BLOCK_N]);
                else
                    snprintf(why, why_size, "a %dx%d tile for head_dim %d needs %zu bytes of local memory (and %d "
                             "of slack); \"%s\" has %zu", block_m, shape->axis[AXIS_BLOCK_N], p->head_dim,
                             k->local_bytes(dev, shape, p), FCL_LOCAL_SLACK, dev->name, usable);
                return false;
            }
        return true;
    }

    const struct tuned_entry *tuned = fcl_tuning_find(ctx, k, p);
    if (tuned && launchable(dev, k, &tuned->shape, p) && fits(dev, k, &tuned->shape, p, usable)) {
        *shape = tuned->shape;
        *source = FLASHCL_TILE_TUNED;
        *tuned_used = tuned;
        return true;
    }
    for (int i = 0; i < k->n_builtin; i++) {
        const struct builtin_shape *b = &k->builtin[i];
        if (builtin_applies(dev, b, p) && launchable(dev, k, &b->shape, p) && fits(dev, k, &b->shape, p, usable)) {
            *shape = b->shape;
            *source = FLASHCL_TILE_DEFAULT;
            return true;
        }
    }
    if (k->rule) {
        memset(shape, 0, sizeof(*shape));
        k->rule(dev, p, shape);
        const size_t limit = k->rule_reported ? dev->reported_local : usable;
        while (!fits(dev, k, shape, p, limit) || !launchable(dev, k, shape, p))
            if (!k->shrink || !k->shrink(dev, shape, 0)) {
                snprintf(why, why_size, "no tile for head_dim %d fits %zu bytes of local memory", p->head_dim, limit);
                return false;
            }
        *source = FLASHCL_TILE_RULE;
        return true;
    }
    snprintf(why, why_size, "no built-in shape fits %zu bytes of local memory", usable);
    return false;
}

/* Split-KV where the grid cannot fill the device; forced by kernel_options'
 * "splits". Only forward calls; 1 where the problem is unknown (tiles).
 * Each split takes at least two key blocks.
 * The FMA kernels aim at about four work-groups per compute unit. The
 * kernels of large work-groups (decode, whose work-group holds a KV head's
 * rows, and the tensor-core ones) count the work-groups a compute unit holds
 * at once (by local memory, or by registers where the build caps them for
 * that: kernel_info.resident) and take the fewest splits that fill whole waves
 * of them, since each split pays its first block and its merge however few
 * keys it has: 8 sequences x 8 KV heads on 132 units of 3 decode work-groups
 * run 6 splits (384 of 396), not 9 (576: a second wave a third full); a
 * 512-query prefill chunk of 32 heads (128 tensor-core work-groups, 264
 * slots) runs 2. For decode a tuned entry's split count (its shape in use)
 * replaces that guess at the occupancy with a measurement: as many splits
 * as keep the grid within the work-groups it measured fastest. */
static int choose_splits(const struct device_desc *dev, const struct kernel_override *ov, const struct problem *p,
                         const struct tuned_entry *tuned, const struct kernel_info *k, const struct kernel_shape *shape,
                         int block_m, int block_n, size_t local_bytes)
{
    if (p->op != OP_FORWARD || p->batch < 1)
        return 1;
    const long long key_blocks = ((long long)p->seq_kv + block_n - 1) / block_n;
    if (ov->splits)
        return (int)(ov->splits < key_blocks ? ov->splits : key_blocks > 0 ? key_blocks : 1);
    const long long units = dev->compute_units > 0 ? dev->compute_units : 1;
    const long long most = key_blocks / 2 < FCL_MAX_SPLITS ? key_blocks / 2 : FCL_MAX_SPLITS;
    const long long groups = k->packs_group ? (long long)p->batch * p->heads_kv
                                            : (long long)p->batch * p->heads_q * (((long long)p->seq_q + block_m - 1) / block_m);
    if (k->packs_group && tuned && tuned->splits) {
        /* Rounded down: more work-groups than measured could start a partial second wave. */
        const long long splits = (long long)tuned->splits * tuned->groups / groups;
        return (int)(splits > most ? (most > 1 ? most : 1) : splits > 1 ? splits : 1);
    }
    if (k->packs_group || (k->needs & NEEDS_TENSOR_CORES)) {
        const int resident = k->resident ? k->resident(dev, shape, p) : 0;
        const long long by_local = fcl_groups_per_unit(dev, local_bytes);
        const long long slots = units * (resident > 0 && resident < by_local ? resident : by_local);
        if (groups >= 4 * slots)
            return 1;
        /* The fewest splits that fill 90% of the waves they make; else the best filling. */
        long long best = 1;
        double best_fill = 0.0;
        for (long long s = 1; s <= (most > 1 ? most : 1); s++) {
            const long long waves = (groups * s + slots - 1) / slots;
            const double fill = (double)(groups * s) / (double)(waves * slots);
            if (fill > best_fill) {
                best = s;
                best_fill = fill;
            }
            if (fill >= 0.9)
                break;
        }
        return (int)best;
    }
    const long long target = 4LL * units;
    if (groups >= target)
        return 1;
    long long splits = (target + groups - 1) / groups;
    if (splits > most)
        splits = most;
    return splits > 1 ? (int)splits : 1;
}

/* Plans `k` for `p`; false with the reason in why when it cannot run it here. */
static bool plan_kernel(const flashcl_context *ctx, const struct kernel_info *k, const struct problem *p,
                        float scale_log2, struct plan *out, char *why, size_t why_size)
{
    const int index = fcl_kernel_index(k);
    const char *unsupported = fcl_kernel_supports(k, p);
    if (unsupported) {
        snprintf(why, why_size, "does not run this %s", unsupported);
        return false;
    }
    if ((k->needs & NEEDS_TENSOR_CORES) && !ctx->dev.tensor_cores) {
        snprintf(why, why_size, "no tensor cores (%s)", ctx->tensor_core_note);
        return false;
    }
    if ((k->needs & NEEDS_SM90A) && !ctx->dev.wgmma) {
        snprintf(why, why_size, "wgmma %.200s", ctx->wgmma_note);
        return false;
    }
    if ((k->needs & NEEDS_TENSOR_CORES) && ctx->dev.tensor_cores_emulated && !(k->needs & NV_EMULATES)) {
        snprintf(why, why_size, "tensor cores emulated, and this kernel has no emulation");
        return false;
    }
    if (ctx->overrides[index].off) {
        snprintf(why, why_size, "turned off by the kernel options");
        return false;
    }
    if (k->opt_in && !ctx->overrides[index].named) {
        snprintf(why, why_size, "opt-in: planned only where the kernel options name it (\"%s:on\")", k->name);
        return false;
    }
    memset(out, 0, sizeof(*out));
    const struct tuned_entry *tuned;
    if (!choose_shape(ctx, k, p, &out->shape, &out->source, &tuned, why, why_size))
        return false;
    out->kernel = k;
    out->block_n = out->shape.axis[AXIS_BLOCK_N];
    k->geometry(&ctx->dev, &out->shape, &out->block_m, &out->workgroup);
    out->local_bytes = k->local_bytes(&ctx->dev, &out->shape, p);
    if (k->packs_group)
        out->block_m = p->seq_q;  /* every query position of the KV head's group */
    out->splits = k->combine ? choose_splits(&ctx->dev, &ctx->overrides[index], p, tuned, k, &out->shape,
                                             out->block_m, out->block_n, out->local_bytes) : 1;
    const int n = snprintf(out->options, sizeof(out->options), "-cl-std=CL1.2 ");
    k->options(&ctx->dev, p, &out->shape, scale_log2, out->options + n, sizeof(out->options) - (size_t)n);
    /* The last work-group merges where the kernel options ask for it ("merge=in-place": opt-in until it is
     * measured on a GPU), the kernel can, its weights fit, and a counter is left for each (sequence, KV head);
     * else the combine step. */
    const struct kernel_override *ov = &ctx->overrides[index];
    out->merge_in_place = out->splits > 1 && k->packs_group && k->merge_floats && ov->merge_in_place &&
                          (long long)p->batch * p->heads_kv <= FCL_SPLIT_COUNTERS &&
                          (size_t)(p->heads_q / p->heads_kv) * (size_t)p->seq_q * (size_t)(out->splits + 2) <=
                              k->merge_floats(&ctx->dev, &out->shape, p);
    if (k->combine) {
        const size_t used = strlen(out->options);
        snprintf(out->options + used, sizeof(out->options) - used, " -DSPLIT=%d", out->splits > 1);
    }
    if (p->softcap > 0.0f) {  /* the cap in base 2, as the kernels' scores are: softcap·log2(e), exact in hex */
        const size_t used = strlen(out->options);
        snprintf(out->options + used, sizeof(out->options) - used, " -DSOFTCAP2=%af",
                 (double)(p->softcap * 1.44269504f));
    }
    if (p->sinks) {
        const size_t used = strlen(out->options);
        snprintf(out->options + used, sizeof(out->options) - used, " -DSINKS=1");
    }
    if (p->alibi) {
        const size_t used = strlen(out->options);
        snprintf(out->options + used, sizeof(out->options) - used, " -DALIBI=1");
    }
    if ((k->needs & NEEDS_TENSOR_CORES) && ctx->dev.tensor_cores_emulated) {
        const size_t used = strlen(out->options);
        snprintf(out->options + used, sizeof(out->options) - used, " -DNV_EMULATE=1");
    }
    if (!fcl_append_build_options(ctx, out->options, sizeof(out->options))) {
        snprintf(why, why_size, "FLASHCL_BUILD_OPTIONS is too long (%zu characters)", strlen(ctx->env.build_options));
        return false;
    }
    if (fcl_program_failed(ctx, k, out->options)) {
        snprintf(why, why_size, "failed to build or launch here with these options before");
        return false;
    }
    return true;
}

flashcl_status fcl_plan(const flashcl_context *ctx, const struct problem *p, float scale_log2, struct plan *out)
{
    char reasons[1024] = "";
    size_t used = 0;
    for (int i = 0; i < fcl_kernel_count; i++) {
        const struct kernel_info *k = &fcl_kernels[i];
        if (k->op != p->op)
            continue;
        char why[256];
        if (plan_kernel(ctx, k, p, scale_log2, out, why, sizeof(why)))
            return FLASHCL_SUCCESS;
        if (used < sizeof(reasons)) {
            const int n = snprintf(reasons + used, sizeof(reasons) - used, "%s%s: %s", used ? "; " : "", k->name, why);
            used += n > 0 ? (size_t)n : 0;
        }
    }
    if (p->kv_dtype == FLASHCL_E4M3 && p->dtype != FLASHCL_E4M3)  /* the kernels with kv_e4m3 read it */
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_CONFIG, "an E4M3 KV cache is read by the kernels that take one "
                        "(decode, decode-tensor-core, tensor-core, tensor-core-wgmma, register-tiled, portable); no "
                        "kernel runs this call on \"%s\" (%s)", ctx->dev.name, reasons);
    if (p->dtype == FLASHCL_E4M3)  /* one kernel takes it, on one kind of device */
        return fcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED_DEVICE, "e4m3 inputs run on Hopper's wgmma (compute capability "
                        "9.0) only; no kernel runs this call on \"%s\" (%s)", ctx->dev.name, reasons);
    return fcl_fail(ctx, FLASHCL_ERROR_INVALID_CONFIG, "no kernel runs this call on \"%s\" (%s)", ctx->dev.name,
                    reasons);
}

/* Every view's rows start on 16 bytes. */
static bool rows_16b(const flashcl_tensor *t)
{
    const size_t esize = flashcl_dtype_size(t->dtype);
    return t->offset % 16 == 0 && (t->stride_batch * esize) % 16 == 0 && (t->stride_seq * esize) % 16 == 0 &&
           (t->stride_head * esize) % 16 == 0;
}

void fcl_forward_problem(const struct flashcl_attention *a, struct problem *out)
{
    memset(out, 0, sizeof(*out));
    out->op = OP_FORWARD;
    out->dtype = a->q.dtype;
    out->o_dtype = a->o.dtype;
    out->kv_dtype = a->k.dtype;
    out->precision = a->precision;
    out->head_dim = a->head_dim;
    out->mask = a->mask;
    fcl_attention_window(a, &out->window_left, &out->window_right);
    out->softcap = a->softcap;
    out->sinks = a->sinks.mem != NULL;
    out->alibi = a->alibi_slopes.mem != NULL;
    out->head_dim_v = fcl_head_dim_v(a);
    out->batch = a->batch;
    out->heads_q = a->heads_q;
    out->heads_kv = a->heads_kv;
    out->seq_q = a->seq_q;
    out->seq_kv = a->seq_kv;
    out->rows_16b = rows_16b(&a->q) && rows_16b(&a->k) && rows_16b(&a->v) && rows_16b(&a->o);
}

void fcl_plan_to_tile(const struct plan *plan, struct flashcl_tile *out)
{
    memset(out, 0, sizeof(*out));
    out->kernel = plan->kernel->name;
    out->source = plan->source;
    out->warps = plan->shape.axis[AXIS_WARPS];
    out->m_tiles = plan->shape.axis[AXIS_M_TILES];
    out->block_m = plan->block_m;
    out->block_n = plan->block_n;
    out->workgroup_size = plan->workgroup;
    out->local_bytes = plan->local_bytes;
    out->splits = plan->splits;
}

flashcl_status flashcl_forward_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                      struct flashcl_tile *out)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, out);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = fcl_validate_attention(ctx, attn);
    if (st == FLASHCL_SUCCESS)
        st = fcl_refuse_e4m3_cache(ctx, attn, "flashcl_forward_config");
    if (st != FLASHCL_SUCCESS)
        return st;
    struct problem p;
    fcl_forward_problem(attn, &p);
    struct plan plan;
    st = fcl_plan(ctx, &p, fcl_scale_log2(attn), &plan);
    if (st == FLASHCL_SUCCESS)
        fcl_plan_to_tile(&plan, out);
    return st;
}

size_t flashcl_context_local_mem_bytes(const flashcl_context *ctx)
{
    return ctx ? ctx->dev.usable_local : 0;
}

/* Appends a candidate (counting it even past max, so callers can size). */
static void add_candidate(struct flashcl_tuned_config *out, int max, int *count, const struct flashcl_tuned_config *c)
{
    if (out && *count < max)
        out[*count] = *c;
    (*count)++;
}

int flashcl_tuning_candidates(const flashcl_context *ctx, const char *kernel, flashcl_dtype dtype, int head_dim,
                              size_t local_mem_bytes, struct flashcl_tuned_config *out, int max)
{
    const struct kernel_info *k = fcl_kernel_named(kernel);
    if (!ctx || !k || head_dim < 1 || head_dim > FLASHCL_MAX_HEAD_DIM || flashcl_dtype_size(dtype) == 0)
        return 0;
    const struct problem p = {.op = k->op, .dtype = dtype, .head_dim = head_dim, .rows_16b = true,
                              .precision = dtype == FLASHCL_F32 && !(k->f32_precisions & 1u)
                                               ? FLASHCL_PRECISION_TF32 : FLASHCL_PRECISION_EXACT};
    if (fcl_kernel_supports(k, &p))
        return 0;
    const size_t local = local_mem_bytes ? local_mem_bytes : ctx->dev.usable_local;
    /* Every combination of the axes' candidate values: an odometer over the axes the kernel has. */
    int digit[AXIS_COUNT] = {0};
    int count = 0;
    for (;;) {
        struct kernel_shape s = {{0}};
        for (int a = 0; a < AXIS_COUNT; a++)
            if (k->axes[a].lo)
                s.axis[a] = k->axes[a].candidates[digit[a]];
        if (launchable(&ctx->dev, k, &s, &p) && fits(&ctx->dev, k, &s, &p, local)) {
            struct flashcl_tuned_config c;
            memset(&c, 0, sizeof(c));
            fcl_shape_to_config(&ctx->dev, k, &s, &c);
            c.dtype = dtype;
            c.head_dim = head_dim;
            add_candidate(out, max, &count, &c);
        }
        int a = AXIS_COUNT - 1;
        for (; a >= 0; a--) {
            if (!k->axes[a].lo)
                continue;
            if (digit[a] + 1 < 8 && k->axes[a].candidates[digit[a] + 1]) {
                digit[a]++;
                break;
            }
            digit[a] = 0;
        }
        if (a < 0)
            return count;
    }
}
