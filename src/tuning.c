/* The tuning file: per-device tile choices measured by flashcl-probe --tune,
 * loaded at context creation. A human-readable text file:
 *
 *     flashcl-tuning 1
 *     device=NVIDIA H200|driver=580.159.04|flashcl=0.1.0|kind=local_mem|bytes=232448
 *     device=...|driver=...|flashcl=...|kind=forward|variant=portable|dtype=f32|d=64|causal=0|block_m=64|block_n=48|ms=1.2
 *     device=...|kind=forward|variant=tensor-core|dtype=f16|d=128|causal=1|warps=4|m_tiles=2|block_n=64|ms=4.9
 *
 * Lines of another device, driver or flashcl version are skipped; anything
 * malformed makes the whole file ignored, with a WARN naming the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_LINE 1024
#define MAX_FILE_BYTES (1 << 20)

/* Device and driver strings as they appear in the file: no separators. */
static void sanitize(char *s)
{
    for (; *s; s++)
        if (*s == '|' || *s == '\n' || *s == '\r' || *s == '=')
            *s = '_';
}

void tuning_identity(flashcl_context *ctx)
{
    snprintf(ctx->tuning_device, sizeof(ctx->tuning_device), "%s", ctx->device_name);
    clGetDeviceInfo(ctx->device, CL_DRIVER_VERSION, sizeof(ctx->tuning_driver), ctx->tuning_driver, NULL);
    ctx->tuning_driver[sizeof(ctx->tuning_driver) - 1] = '\0';
    sanitize(ctx->tuning_device);
    sanitize(ctx->tuning_driver);
}

static const char *dtype_word(flashcl_dtype t)
{
    return t == FLASHCL_F32 ? "f32" : t == FLASHCL_F16 ? "f16" : t == FLASHCL_BF16 ? "bf16" : NULL;
}


flashcl_status flashcl_tuning_format(const flashcl_context *ctx, const struct flashcl_tuned_config *c,
                                     size_t probed_local_mem, char *line, size_t size)
{
    clear_error();
    if (!ctx || !line)
        return fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL", ctx ? "line" : "ctx");
    int n = snprintf(line, size, "device=%s|driver=%s|flashcl=%s|", ctx->tuning_device, ctx->tuning_driver,
                     FLASHCL_VERSION_STRING);
    if (n < 0 || (size_t)n >= size)
        return fail(ctx, FLASHCL_INVALID_VALUE, "line buffer of %zu bytes is too small", size);
    const size_t used = (size_t)n;
    if (!c) {
        n = snprintf(line + used, size - used, "kind=local_mem|bytes=%zu", probed_local_mem);
    } else {
        const char *v = flashcl_variant_name(c->variant), *t = dtype_word(c->dtype);
        if (!v || !t || c->head_dim < 1 || c->head_dim > FLASHCL_MAX_HEAD_DIM)
            return fail(ctx, FLASHCL_INVALID_VALUE, "config has variant %d, dtype %d, head_dim %d", (int)c->variant,
                        (int)c->dtype, c->head_dim);
        if (c->variant == FLASHCL_VARIANT_PORTABLE || c->variant == FLASHCL_VARIANT_REGISTER_TILED)
            n = snprintf(line + used, size - used,
                         "kind=forward|variant=%s|dtype=%s|d=%d|causal=%d|block_m=%d|block_n=%d|ms=%.4f", v, t,
                         c->head_dim, c->causal ? 1 : 0, c->block_m, c->block_n, c->ms);
        else
            n = snprintf(line + used, size - used,
                         "kind=forward|variant=%s|dtype=%s|d=%d|causal=%d|warps=%d|m_tiles=%d|block_n=%d|ms=%.4f", v,
                         t, c->head_dim, c->causal ? 1 : 0, c->warps, c->m_tiles, c->block_n, c->ms);
    }
    if (n < 0 || (size_t)n >= size - used)
        return fail(ctx, FLASHCL_INVALID_VALUE, "line buffer of %zu bytes is too small", size);
    return FLASHCL_SUCCESS;
}

/* Fields of one line, split in place. */
struct fields {
    char *key[16], *value[16];
    int n;
};

static const char *field(const struct fields *f, const char *key)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->key[i], key) == 0)
            return f->value[i];
    return NULL;
}

static bool to_int(const char *s, int lo, int hi, int *out)
{
    if (!s || !*s)
        return false;
    char *end;
    const long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* Parses one entry line; returns a reason on failure. *mine is set when the
 * line is for this device, driver and version. */
static const char *parse_line(const flashcl_context *ctx, char *line, bool *mine, bool *is_local_mem,
                              size_t *local_mem, struct flashcl_tuned_config *c)
{
    struct fields f = {0};
    for (char *save = NULL, *tok = strtok_r(line, "|", &save); tok; tok = strtok_r(NULL, "|", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || f.n == 16)
            return "a field is not key=value";
        *eq = '\0';
        f.key[f.n] = tok;
        f.value[f.n++] = eq + 1;
    }
    const char *device = field(&f, "device"), *driver = field(&f, "driver"), *version = field(&f, "flashcl");
    const char *kind = field(&f, "kind");
    if (!device || !driver || !version || !kind)
        return "device, driver, flashcl and kind are required";
    *mine = strcmp(device, ctx->tuning_device) == 0 && strcmp(driver, ctx->tuning_driver) == 0 &&
            strcmp(version, FLASHCL_VERSION_STRING) == 0;
    int expected_fields;
    if (strcmp(kind, "local_mem") == 0) {
        const char *bytes = field(&f, "bytes");
        char *end;
        const unsigned long long v = bytes ? strtoull(bytes, &end, 10) : 0;
        if (!bytes || *end || v == 0 || v > (1ull << 30))
            return "bytes must be 1..2^30";
        *is_local_mem = true;
        *local_mem = (size_t)v;
        expected_fields = 5;
    } else if (strcmp(kind, "forward") == 0) {
        *is_local_mem = false;
        memset(c, 0, sizeof(*c));
        const char *variant = field(&f, "variant"), *dtype = field(&f, "dtype"), *ms = field(&f, "ms");
        if (!variant || !dtype)
            return "variant and dtype are required";
        c->variant = (enum flashcl_variant)0;
        for (int v = FLASHCL_VARIANT_PORTABLE; v <= FLASHCL_VARIANT_TF32; v++)
            if (strcmp(variant, flashcl_variant_name((enum flashcl_variant)v)) == 0)
                c->variant = (enum flashcl_variant)v;
        c->dtype = strcmp(dtype, "f32") == 0    ? FLASHCL_F32
                   : strcmp(dtype, "f16") == 0  ? FLASHCL_F16
                   : strcmp(dtype, "bf16") == 0 ? FLASHCL_BF16
                                                : (flashcl_dtype)0;
        if (!c->variant || !c->dtype)
            return "unknown variant or dtype";
        if (!to_int(field(&f, "d"), 1, FLASHCL_MAX_HEAD_DIM, &c->head_dim) ||
            !to_int(field(&f, "causal"), 0, 1, &c->causal) || !to_int(field(&f, "block_n"), 1, 256, &c->block_n))
            return "d, causal or block_n out of range";
        if (c->variant == FLASHCL_VARIANT_PORTABLE || c->variant == FLASHCL_VARIANT_REGISTER_TILED) {
            if (!to_int(field(&f, "block_m"), 1, 256, &c->block_m))
                return "block_m out of range";
            if (c->variant == FLASHCL_VARIANT_REGISTER_TILED &&
                (c->block_m % 16 != 0 || c->block_m > 128 || c->block_n % 16 != 0 || c->block_n > 128))
                return "block_m or block_n out of range for the register-tiled kernel";
            expected_fields = 11;
        } else {
            const int d_step = c->variant == FLASHCL_VARIANT_TF32 ? 8 : 16;
            if (!to_int(field(&f, "warps"), 1, 8, &c->warps) || !to_int(field(&f, "m_tiles"), 1, 2, &c->m_tiles) ||
                c->block_n % 16 != 0 || c->block_n > 128 || c->head_dim % d_step != 0 || c->head_dim > 128)
                return "warps, m_tiles, block_n or d out of range for the tensor-core kernel";
            expected_fields = 12;
        }
        if (ms) {
            char *end;
            c->ms = strtod(ms, &end);
            if (*end)
                return "ms is not a number";
        } else {
            expected_fields--;
        }
    } else {
        return "kind must be local_mem or forward";
    }
    if (f.n != expected_fields)
        return "unknown or repeated fields";
    return NULL;
}

static void tuning_clear(flashcl_context *ctx)
{
    free(ctx->tuned);
    ctx->tuned = NULL;
    ctx->n_tuned = 0;
    ctx->probed_local_mem = 0;
}

void tuning_load(flashcl_context *ctx, const char *param_path)
{
    tuning_identity(ctx);
    const char *path = param_path ? param_path : getenv("FLASHCL_TUNING");
    char fallback[1024];
    if (!path) {
        if (!user_cache_path("tuning.txt", fallback, sizeof(fallback)))
            return;
        path = fallback;
    }
    if (!*path)
        return;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;  /* no file: the sizing rule decides */

    char line[MAX_LINE + 2];
    int line_no = 0, skipped = 0;
    bool header = false;
    size_t total = 0;
    const char *why = NULL;
    while (!why && fgets(line, sizeof(line), f)) {
        line_no++;
        const size_t len = strlen(line);
        total += len;
        if (total > MAX_FILE_BYTES) {
            why = "file larger than 1 MiB";
            break;
        }
        if (len > MAX_LINE || (len > 0 && line[len - 1] != '\n' && !feof(f))) {
            why = "line too long";
            break;
        }
        if (memchr(line, '\0', len) != NULL && strlen(line) != len) {
            why = "binary data";
            break;
        }
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (!header) {
            if (strcmp(line, "flashcl-tuning 1") != 0)
                why = "the first line must be \"flashcl-tuning 1\"";
            header = true;
            continue;
        }
        bool mine = false, is_local_mem = false;
        size_t local_mem = 0;
        struct flashcl_tuned_config c;
        why = parse_line(ctx, line, &mine, &is_local_mem, &local_mem, &c);
        if (why || !mine) {
            skipped += !why;
            continue;
        }
        if (is_local_mem) {
            ctx->probed_local_mem = local_mem;
        } else {
            struct flashcl_tuned_config *grown = realloc(ctx->tuned, (size_t)(ctx->n_tuned + 1) * sizeof(c));
            if (!grown) {
                why = "out of host memory";
                break;
            }
            ctx->tuned = grown;
            ctx->tuned[ctx->n_tuned++] = c;
        }
    }
    if (!why && ferror(f))
        why = "read error";
    if (!why && !header && line_no > 0)
        why = "no \"flashcl-tuning 1\" header";
    fclose(f);
    if (why) {
        log_msg(ctx, FLASHCL_LOG_WARN, "tuning file %s line %d: %s; ignoring the file", path, line_no, why);
        tuning_clear(ctx);
        return;
    }
    log_msg(ctx, FLASHCL_LOG_INFO, "tuning file %s: %d configuration(s) for this device, %d for others", path,
            ctx->n_tuned, skipped);
}

void tuning_free(flashcl_context *ctx)
{
    tuning_clear(ctx);
}

const struct flashcl_tuned_config *tuning_find(const flashcl_context *ctx, enum flashcl_variant variant,
                                               flashcl_dtype dtype, int head_dim, int causal)
{
    for (int i = ctx->n_tuned - 1; i >= 0; i--) {  /* the last line for a key wins */
        const struct flashcl_tuned_config *c = &ctx->tuned[i];
        if (c->variant == variant && c->dtype == dtype && c->head_dim == head_dim && c->causal == (causal ? 1 : 0))
            return c;
    }
    return NULL;
}

size_t flashcl_context_local_mem_bytes(const flashcl_context *ctx)
{
    return ctx ? usable_local_mem(ctx) : 0;
}

size_t usable_local_mem(const flashcl_context *ctx)
{
    if (ctx->param_local_mem)
        return ctx->param_local_mem;
    if (ctx->probed_local_mem > ctx->local_mem_size)
        return ctx->probed_local_mem;
    if (ctx->arch_local_mem > ctx->local_mem_size)
        return ctx->arch_local_mem;
    return (size_t)ctx->local_mem_size;
}

/* Appends a candidate (counting it even past max, so callers can size). */
static void add_candidate(struct flashcl_tuned_config *out, int max, int *count,
                          const struct flashcl_tuned_config *c)
{
    if (out && *count < max)
        out[*count] = *c;
    (*count)++;
}

int flashcl_tuning_candidates(const flashcl_context *ctx, enum flashcl_variant variant, flashcl_dtype dtype,
                              int head_dim, size_t local_mem_bytes, struct flashcl_tuned_config *out, int max)
{
    if (!ctx || head_dim < 1 || head_dim > FLASHCL_MAX_HEAD_DIM || flashcl_dtype_size(dtype) == 0)
        return 0;
    const size_t local = local_mem_bytes ? local_mem_bytes : usable_local_mem(ctx);
    int count = 0;
    if (variant == FLASHCL_VARIANT_PORTABLE) {
        const int side = ctx->max_workgroup_size >= 256 ? 16 : 8;
        const size_t bound = flashcl_block_size_bound(local, sizeof(float), (size_t)head_dim);
        static const int sizes[] = {8, 16, 32, 48, 64, 96, 128};
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < 7; j++) {
                const int bm = sizes[i], bn = sizes[j];
                if ((size_t)bm > bound || (size_t)bn > bound ||
                    forward_local_bytes(bm, bn, head_dim, side) > local)
                    continue;
                const struct flashcl_tuned_config c = {variant, dtype, head_dim, 0, bm, bn, 0, 0, 0.0};
                add_candidate(out, max, &count, &c);
            }
    } else if (variant == FLASHCL_VARIANT_REGISTER_TILED) {
        if (head_dim % 4 != 0)
            return 0;
        for (int bm = 16; bm <= 128; bm += 16)
            for (int bn = 16; bn <= 128; bn += 16) {
                if (forward_tiled_local_bytes(bm, bn, head_dim) > local || (size_t)(4 * bm) > ctx->max_workgroup_size)
                    continue;
                const struct flashcl_tuned_config c = {variant, dtype, head_dim, 0, bm, bn, 0, 0, 0.0};
                add_candidate(out, max, &count, &c);
            }
    } else if ((variant == FLASHCL_VARIANT_TENSOR_CORE && dtype != FLASHCL_F32 && head_dim % 16 == 0 &&
                head_dim <= 128) ||
               (variant == FLASHCL_VARIANT_TF32 && dtype == FLASHCL_F32 && head_dim % 8 == 0 && head_dim <= 128)) {
        static const int warps[] = {4, 8}, tiles[] = {1, 2}, blocks[] = {32, 48, 64, 128};
        for (int w = 0; w < 2; w++)
            for (int t = 0; t < 2; t++)
                for (int b = 0; b < 4; b++) {
                    const size_t bytes = variant_mma_local_bytes(variant, 16 * tiles[t] * warps[w], blocks[b], head_dim);
                    if (bytes > local)
                        continue;
                    const struct flashcl_tuned_config c = {variant, dtype, head_dim, 0, 16 * tiles[t] * warps[w],
                                                           blocks[b], warps[w], tiles[t], 0.0};
                    add_candidate(out, max, &count, &c);
                }
    }
    return count;
}
