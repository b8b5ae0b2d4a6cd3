/* The tuning file: per-device shapes measured by flashcl-probe --tune,
 * loaded at context creation. A human-readable text file:
 *
 *     flashcl-tuning 2
 *     device=NVIDIA H200|driver=580.159.04|flashcl=0.3.0|kind=local_mem|bytes=232448
 *     device=...|driver=...|flashcl=...|kind=forward|kernel=portable|dtype=f32|d=64|mask=none|block_m=64|block_n=48|ms=1.2
 *     device=...|kind=forward|kernel=tensor-core|dtype=f16|d=128|mask=causal|warps=4|m_tiles=2|block_n=64|ms=4.9
 *     device=...|kind=forward|kernel=decode|dtype=f16|d=128|mask=none|rows=4|block_n=64|splits=6|groups=32|ms=0.4
 *     device=...|kind=backward|kernel=backward-tf32|dtype=f32|d=64|mask=none|precision=tf32x3|warps=4|...
 *
 * Each entry names a kernel of the table and gives every axis it has; the
 * decode kernel's may add the rows they are for and a split count with the
 * grid it was measured on, the TF32 kernels' the precision they are for
 * (flashcl_tuned_config says how each applies). Lines
 * of another device are skipped; lines of this device measured with another
 * driver or flashcl version are kept as fallbacks (used where no entry of
 * this exact identity exists, with an INFO line saying so). Version-1 files
 * (variant=, causal=0/1) read the same. Anything malformed makes the whole
 * file ignored, with a WARN naming the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_LINE 1024
#define PROBE_LOCAL_MAX ((size_t)256 << 10)  /* flashcl-probe's search limit past the reported size */
#define MAX_FILE_BYTES (1 << 20)

/* Device and driver strings as they appear in the file: no separators. */
static void sanitize(char *s)
{
    for (; *s; s++)
        if (*s == '|' || *s == '\n' || *s == '\r' || *s == '=')
            *s = '_';
}

static void tuning_identity(flashcl_context *ctx)
{
    snprintf(ctx->tuning_device, sizeof(ctx->tuning_device), "%s", ctx->dev.name);
    snprintf(ctx->tuning_driver, sizeof(ctx->tuning_driver), "%s", ctx->dev.driver);
    sanitize(ctx->tuning_device);
    sanitize(ctx->tuning_driver);
}


static const char *mask_word(int mask)
{
    return mask == FLASHCL_MASK_CAUSAL ? "causal" : "none";
}

#define MAX_GROUPS (1 << 30)
_Static_assert(FCL_DECODE_MAX_ROWS == 16 && FCL_MAX_SPLITS == 64, "the reasons below quote them");

/* A TF32 kernel's precision field: its word ("tf32", "tf32x3"), NULL for 0 (either). */
static const char *precision_word(enum flashcl_precision precision)
{
    return precision == FLASHCL_PRECISION_TF32 ? "tf32" : precision == FLASHCL_PRECISION_TF32X3 ? "tf32x3" : NULL;
}

/* The precision field, checked alike in configurations and in lines: only
 * a kernel that runs f32 at the TF32 precisions alone has one (the others
 * run whatever the precision); NULL if valid, else why. */
static const char *precision_invalid(const struct kernel_info *k, enum flashcl_precision precision)
{
    const bool tf32_kernel = k->dtypes == DTYPE_BIT(FLASHCL_F32) &&
                             !(k->f32_precisions & PRECISION_BIT(FLASHCL_PRECISION_EXACT));
    if (precision == FLASHCL_PRECISION_EXACT)
        return NULL;
    if (!tf32_kernel)
        return "precision is only the TF32 kernels'";
    return precision_word(precision) ? NULL : "precision must be tf32 or tf32x3";
}

/* What entries of a packs_group kernel (decode) add, checked alike in
 * configurations and in lines (0: unset); NULL if valid, else why. */
static const char *group_fields_invalid(const struct kernel_info *k, int rows, int splits, int groups)
{
    if (!k->packs_group)
        return rows || splits || groups ? "rows, splits and groups are only the decode kernel's" : NULL;
    if (rows < 0 || rows > FCL_DECODE_MAX_ROWS || (rows & (rows - 1)) != 0)
        return "rows must be a power of two, 1..16";
    if (splits < 0 || splits > FCL_MAX_SPLITS)
        return "splits must be 1..64";
    if ((splits > 0) != (groups > 0))
        return "splits needs groups (the grid it was measured on) and groups splits";
    if (groups < 0 || groups > MAX_GROUPS)
        return "groups must be 1..2^30";
    return NULL;
}

flashcl_status flashcl_tuning_override(const struct flashcl_tuned_config *config, char *buf, size_t size)
{
    const flashcl_status entry = FCL_ENTER(NULL, config, buf);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    const struct flashcl_tuned_config *c = config;
    const struct kernel_info *k = fcl_kernel_named(c->kernel);
    if (!k)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "config.kernel = \"%s\" is not a kernel",
                        c->kernel ? c->kernel : "(null)");
    const flashcl_status reserved = FCL_CHECK_RESERVED(NULL, "config.reserved", c->reserved);
    if (reserved != FLASHCL_SUCCESS)
        return reserved;
    const char *group_why = group_fields_invalid(k, c->rows, c->splits, c->groups);
    if (!group_why)
        group_why = precision_invalid(k, c->precision);
    if (group_why)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "config: %s", group_why);
    struct kernel_shape shape;
    fcl_config_to_shape(k, c, &shape);
    size_t used = 0;
    int n = snprintf(buf, size, "%s:", k->name);
    for (int a = 0; a < AXIS_COUNT && n >= 0 && (size_t)n < size - used; a++) {
        used += (size_t)n;
        n = 0;
        if (k->axes[a].lo)
            n = snprintf(buf + used, size - used, "%s%s=%d", buf[used - 1] == ':' ? "" : ",", fcl_axis_name(a),
                         shape.axis[a]);
    }
    if (n >= 0 && (size_t)n < size - used && c->splits) {
        used += (size_t)n;
        n = snprintf(buf + used, size - used, ",splits=%d", c->splits);  /* as measured: for that grid */
    }
    if (n < 0 || (size_t)n >= size - used)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "buffer of %zu bytes is too small", size);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_tuning_format(const flashcl_context *ctx, const struct flashcl_tuned_config *c,
                                     size_t probed_local_mem, char *line, size_t size)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, line);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    int n = snprintf(line, size, "device=%s|driver=%s|flashcl=%s|", ctx->tuning_device, ctx->tuning_driver,
                     FLASHCL_VERSION_STRING);
    if (n < 0 || (size_t)n >= size)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "line buffer of %zu bytes is too small", size);
    size_t used = (size_t)n;
    if (!c) {
        n = snprintf(line + used, size - used, "kind=local_mem|bytes=%zu", probed_local_mem);
    } else {
        const struct kernel_info *k = fcl_kernel_named(c->kernel);
        const char *t = flashcl_dtype_name(c->dtype);
        const flashcl_status reserved = FCL_CHECK_RESERVED(ctx, "config.reserved", c->reserved);
        if (reserved != FLASHCL_SUCCESS)
            return reserved;
        if (!k || !t || c->head_dim < 1 || c->head_dim > FLASHCL_MAX_HEAD_DIM)
            return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "config has kernel \"%s\", dtype %d, head_dim %d",
                            c->kernel ? c->kernel : "(null)", (int)c->dtype, c->head_dim);
        const char *group_why = group_fields_invalid(k, c->rows, c->splits, c->groups);
        if (!group_why)
            group_why = precision_invalid(k, c->precision);
        if (group_why)
            return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "config: %s", group_why);
        struct kernel_shape shape;
        fcl_config_to_shape(k, c, &shape);
        n = snprintf(line + used, size - used, "kind=%s|kernel=%s|dtype=%s|d=%d|mask=%s",
                     k->op == OP_BACKWARD ? "backward" : "forward", k->name, t,
                     c->head_dim, mask_word(c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE));
        if (n >= 0 && (size_t)n < size - used && c->rows) {  /* a key field: beside the mask */
            used += (size_t)n;
            n = snprintf(line + used, size - used, "|rows=%d", c->rows);
        }
        if (n >= 0 && (size_t)n < size - used && c->precision) {  /* a key field too */
            used += (size_t)n;
            n = snprintf(line + used, size - used, "|precision=%s", precision_word(c->precision));
        }
        for (int a = 0; a < AXIS_COUNT && n >= 0 && (size_t)n < size - used; a++) {
            used += (size_t)n;
            n = k->axes[a].lo ? snprintf(line + used, size - used, "|%s=%d", fcl_axis_name(a), shape.axis[a]) : 0;
        }
        if (n >= 0 && (size_t)n < size - used && c->splits) {
            used += (size_t)n;
            n = snprintf(line + used, size - used, "|splits=%d|groups=%d", c->splits, c->groups);
        }
        if (n >= 0 && (size_t)n < size - used) {
            used += (size_t)n;
            n = snprintf(line + used, size - used, "|ms=%.4f", c->ms);
        }
    }
    if (n < 0 || (size_t)n >= size - used)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "line buffer of %zu bytes is too small", size);
    return FLASHCL_SUCCESS;
}

#define MAX_FIELDS 16

/* Fields of one line, split in place. */
struct fields {
    char *key[MAX_FIELDS], *value[MAX_FIELDS];
    bool used[MAX_FIELDS];
    int n;
};

/* The value of `key`, marking it used; NULL if absent. */
static const char *field(struct fields *f, const char *key)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->key[i], key) == 0) {
            f->used[i] = true;
            return f->value[i];
        }
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

/* What one line says. */
struct line_entry {
    enum { LINE_LOCAL_MEM, LINE_SHAPE } kind;
    enum { ID_UNKNOWN, ID_OTHER_DEVICE, ID_OTHER_VERSION, ID_EXACT } identity;
    size_t local_mem;
    struct tuned_entry entry;
};

/* Parses one entry line; returns a reason on failure. */
static const char *parse_line(const flashcl_context *ctx, char *line, struct line_entry *out)
{
    struct fields f;
    memset(&f, 0, sizeof(f));
    memset(out, 0, sizeof(*out));
    for (char *save = NULL, *tok = strtok_r(line, "|", &save); tok; tok = strtok_r(NULL, "|", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || f.n == MAX_FIELDS)
            return "a field is not key=value";
        *eq = '\0';
        f.key[f.n] = tok;
        f.value[f.n++] = eq + 1;
    }
    for (int i = 0; i < f.n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(f.key[i], f.key[j]) == 0)
                return "a repeated field";
    const char *device = field(&f, "device"), *driver = field(&f, "driver"), *version = field(&f, "flashcl");
    const char *kind = field(&f, "kind");
    if (!device || !driver || !version || !kind)
        return "device, driver, flashcl and kind are required";
    out->identity = strcmp(device, ctx->tuning_device) != 0 ? ID_OTHER_DEVICE
                    : strcmp(driver, ctx->tuning_driver) != 0 || strcmp(version, FLASHCL_VERSION_STRING) != 0
                        ? ID_OTHER_VERSION
                        : ID_EXACT;
    if (strcmp(kind, "local_mem") == 0) {
        const char *bytes = field(&f, "bytes");
        char *end;
        const unsigned long long v = bytes ? strtoull(bytes, &end, 10) : 0;
        if (!bytes || *end || v == 0 || v > (1ull << 30))
            return "bytes must be 1..2^30";
        out->kind = LINE_LOCAL_MEM;
        out->local_mem = (size_t)v;
    } else if (strcmp(kind, "forward") == 0 || strcmp(kind, "backward") == 0) {
        struct tuned_entry *e = &out->entry;
        out->kind = LINE_SHAPE;
        const char *name = field(&f, "kernel");
        if (!name)
            name = field(&f, "variant");  /* version 1 */
        const char *dtype = field(&f, "dtype"), *mask = field(&f, "mask"), *causal = field(&f, "causal");
        const char *ms = field(&f, "ms");
        if (!name || !dtype)
            return "kernel and dtype are required";
        e->kernel = fcl_kernel_by_name(name, strlen(name));
        e->dtype = strcmp(dtype, "f32") == 0 ? FLASHCL_F32 : strcmp(dtype, "f16") == 0 ? FLASHCL_F16
                   : strcmp(dtype, "bf16") == 0 ? FLASHCL_BF16 : (flashcl_dtype)0;
        if (!e->kernel || !e->dtype || !(e->kernel->dtypes & DTYPE_BIT(e->dtype)))
            return "unknown kernel or dtype, or a dtype the kernel does not run";
        if ((e->kernel->op == OP_BACKWARD) != (strcmp(kind, "backward") == 0))
            return "the kind is not the kernel's operation";
        int causal_flag = 0;
        if (mask && !causal && (strcmp(mask, "none") == 0 || strcmp(mask, "causal") == 0))
            e->mask = strcmp(mask, "causal") == 0 ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
        else if (!mask && to_int(causal, 0, 1, &causal_flag))
            e->mask = causal_flag ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
        else
            return "mask must be none or causal";
        if (!to_int(field(&f, "d"), 1, e->kernel->head_dim_max, &e->head_dim) ||
            e->head_dim % e->kernel->head_dim_step != 0)
            return "d out of range for the kernel";
        for (int a = 0; a < AXIS_COUNT; a++) {
            if (!e->kernel->axes[a].lo)
                continue;
            if (!to_int(field(&f, fcl_axis_name(a)), 1, 1 << 20, &e->shape.axis[a]) ||
                !fcl_axis_in_range(e->kernel, a, e->shape.axis[a]))
                return "an axis of the kernel missing or out of range";
        }
        /* Asked for whatever the kernel, so another kernel's line naming them says why it is refused. */
        const char *rows = field(&f, "rows"), *splits = field(&f, "splits"), *groups = field(&f, "groups");
        if ((rows && !to_int(rows, 1, MAX_GROUPS, &e->rows)) ||
            (splits && !to_int(splits, 1, MAX_GROUPS, &e->splits)) ||
            (groups && !to_int(groups, 1, MAX_GROUPS, &e->groups)))
            return "rows, splits and groups must be positive integers";
        const char *group_why = group_fields_invalid(e->kernel, e->rows, e->splits, e->groups);
        if (group_why)
            return group_why;
        const char *precision = field(&f, "precision");
        if (precision) {
            if (strcmp(precision, "tf32") != 0 && strcmp(precision, "tf32x3") != 0)
                return "precision must be tf32 or tf32x3";
            e->precision = strcmp(precision, "tf32") == 0 ? FLASHCL_PRECISION_TF32 : FLASHCL_PRECISION_TF32X3;
            const char *precision_why = precision_invalid(e->kernel, e->precision);
            if (precision_why)
                return precision_why;
        }
        if (ms) {
            char *end;
            e->ms = strtod(ms, &end);
            if (*end)
                return "ms is not a number";
        }
    } else {
        return "kind must be local_mem, forward or backward";
    }
    for (int i = 0; i < f.n; i++)
        if (!f.used[i])
            return "an unknown field";
    out->entry.fallback = out->identity != ID_EXACT;
    return NULL;
}

/* One line into buf (size bytes), its newline kept, like fgets; but *len is
 * the bytes read, so a NUL anywhere in it shows (strlen would stop there,
 * and at the end of the file nothing else would tell). False at the end. */
static bool read_line(FILE *f, char *buf, size_t size, size_t *len)
{
    size_t n = 0;
    int c;
    while (n + 1 < size && (c = getc(f)) != EOF) {
        buf[n++] = (char)c;
        if (c == '\n')
            break;
    }
    buf[n] = '\0';
    *len = n;
    return n > 0;
}

static void tuning_clear(flashcl_context *ctx)
{
    free(ctx->tuned);
    ctx->tuned = NULL;
    ctx->n_tuned = 0;
    ctx->probed_local_mem = 0;
}

void fcl_tuning_load(flashcl_context *ctx, const char *param_path)
{
    tuning_identity(ctx);
    char *fallback = NULL;
    const char *path = param_path ? param_path : ctx->env.tuning;
    if (!path) {
        if (!ctx->env.user_cache[0])
            return;
        fallback = malloc(strlen(ctx->env.user_cache) + sizeof("/tuning.txt"));
        if (!fallback)
            return;
        path = strcat(strcpy(fallback, ctx->env.user_cache), "/tuning.txt");
    }
    const char *open_why = "absent";
    FILE *f = *path ? fcl_open_regular(path, &open_why) : NULL;
    if (!f) {
        if (strcmp(open_why, "absent") != 0)
            fcl_log_msg(ctx, FLASHCL_LOG_WARN, "tuning file %s: %s; ignoring it", path, open_why);
        free(fallback);
        return;  /* no file: the built-in shapes and the sizing rule decide */
    }

    char line[MAX_LINE + 2];
    int line_no = 0, others = 0, fallbacks = 0, unread = 0;
    bool header = false;
    size_t total = 0;
    const char *why = NULL;
    size_t len;
    while (!why && read_line(f, line, sizeof(line), &len)) {
        line_no++;
        total += len;
        if (total > MAX_FILE_BYTES) {
            why = "file larger than 1 MiB";
            break;
        }
        if (memchr(line, '\0', len)) {
            why = "binary data (a NUL byte)";
            break;
        }
        if (len > MAX_LINE) {  /* its newline counted */
            why = "line too long";
            break;
        }
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (!header) {
            if (strcmp(line, "flashcl-tuning 2") != 0 && strcmp(line, "flashcl-tuning 1") != 0)
                why = "the first line must be \"flashcl-tuning 2\"";
            header = true;
            continue;
        }
        struct line_entry e;
        why = parse_line(ctx, line, &e);
        /* Lines of other devices and versions may use words this version does not know: skipped, counted. */
        if (why && (e.identity == ID_OTHER_DEVICE || e.identity == ID_OTHER_VERSION)) {
            why = NULL;
            unread++;
            continue;
        }
        if (why)
            break;
        if (e.identity == ID_OTHER_DEVICE) {
            others++;
            continue;
        }
        fallbacks += e.identity == ID_OTHER_VERSION;
        if (e.kind == LINE_LOCAL_MEM) {
            /* Only this very driver's probe (another driver may allow less), and only what the probe can
             * find: it searches up to the reported size or 256 KB, whichever is larger. */
            const size_t plausible = ctx->dev.reported_local > PROBE_LOCAL_MAX ? ctx->dev.reported_local
                                                                               : PROBE_LOCAL_MAX;
            if (e.identity == ID_EXACT && e.local_mem > plausible)
                fcl_log_msg(ctx, FLASHCL_LOG_WARN, "tuning file %s line %d: local memory of %zu bytes is past what "
                            "flashcl-probe can find here (%zu); ignored", path, line_no, e.local_mem, plausible);
            else if (e.identity == ID_EXACT)
                ctx->probed_local_mem = e.local_mem;
            continue;
        }
        struct tuned_entry *grown = realloc(ctx->tuned, (size_t)(ctx->n_tuned + 1) * sizeof(*grown));
        if (!grown) {
            why = "out of host memory";
            break;
        }
        ctx->tuned = grown;
        ctx->tuned[ctx->n_tuned++] = e.entry;
    }
    if (!why && ferror(f))
        why = "read error";
    if (!why && !header && line_no > 0)
        why = "no \"flashcl-tuning 2\" header";
    fclose(f);
    if (why) {
        fcl_log_msg(ctx, FLASHCL_LOG_WARN, "tuning file %s line %d: %s; ignoring the file", path, line_no, why);
        tuning_clear(ctx);
        free(fallback);
        return;
    }
    fcl_log_msg(ctx, FLASHCL_LOG_INFO, "tuning file %s: %d configuration(s) for this device, %d line(s) for others",
                path, ctx->n_tuned, others);
    if (fallbacks)
        fcl_log_msg(ctx, FLASHCL_LOG_INFO, "tuning file %s: %d line(s) of this device were measured with another "
                    "driver or flashcl version (not \"%s\", %s); shapes among them serve where no line of this one "
                    "does (a probed local-memory size does not)", path, fallbacks, ctx->tuning_driver,
                    FLASHCL_VERSION_STRING);
    if (unread)
        fcl_log_msg(ctx, FLASHCL_LOG_INFO, "tuning file %s: %d line(s) of other devices or versions not understood "
                    "by flashcl %s, skipped", path, unread, FLASHCL_VERSION_STRING);
    free(fallback);
}

void fcl_tuning_free(flashcl_context *ctx)
{
    tuning_clear(ctx);
}

const struct tuned_entry *fcl_tuning_find(const flashcl_context *ctx, const struct kernel_info *k,
                                          const struct problem *p)
{
    /* One query a sequence sees every key under causal too (aligned bottom-right): the attention of no mask,
     * whose entries (what flashcl-probe tunes for decode) serve it. */
    const enum flashcl_mask mask = k->packs_group && p->seq_q == 1 && p->mask == FLASHCL_MASK_CAUSAL
                                       ? FLASHCL_MASK_NONE : p->mask;
    const struct tuned_entry *fallback = NULL;
    for (int i = ctx->n_tuned - 1; i >= 0; i--) {  /* the last line for a key wins */
        const struct tuned_entry *e = &ctx->tuned[i];
        if (e->kernel != k || e->dtype != p->dtype || e->head_dim != p->head_dim || e->mask != mask ||
            (e->rows && e->rows != fcl_group_rows(p)) || (e->precision && e->precision != p->precision))
            continue;
        if (!e->fallback)
            return e;
        if (!fallback)
            fallback = e;
    }
    return fallback;
}
