/* Kernel overrides: params.kernel_options (or FLASHCL_KERNELS) and the
 * deprecated fields that mean the same, parsed once at context creation
 * into one `struct kernel_override` per table entry.
 *
 *     "tensor-core:warps=4,m_tiles=2,block_n=64;register-tiled:off"
 *
 * Clauses are separated by ';', and an empty clause (";;", a ';' leading or
 * trailing) is nothing, so option strings can be joined. Inside a clause
 * every setting is written out: a name with no setting after its ':', or an
 * empty setting (",,", a ',' leading or trailing), is refused, likely a
 * setting lost in editing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Parses `text` into overrides (all clauses or none); NULL, or the reason. */
static const char *parse(const char *text, struct kernel_override *overrides, char *why, size_t why_size)
{
    struct kernel_override parsed[FCL_MAX_KERNELS];
    memcpy(parsed, overrides, sizeof(parsed));
    const char *p = text;
    while (*p) {
        const char *end = p + strcspn(p, ";");
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (end == p) {  /* an empty clause (";;" or a trailing ';') */
            p = *end ? end + 1 : end;
            continue;
        }
        if (!colon) {
            snprintf(why, why_size, "\"%.*s\" has no ':' after the kernel name", (int)(end - p), p);
            return why;
        }
        const struct kernel_info *k = fcl_kernel_by_name(p, (size_t)(colon - p));
        if (!k) {
            int n = snprintf(why, why_size, "\"%.*s\" is not a kernel (", (int)(colon - p), p);
            for (int i = 0; i < fcl_kernel_count && n > 0 && (size_t)n < why_size; i++)
                n += snprintf(why + n, why_size - (size_t)n, "%s%s", i ? ", " : "", fcl_kernels[i].name);
            if (n > 0 && (size_t)n < why_size)
                snprintf(why + n, why_size - (size_t)n, ")");
            return why;
        }
        struct kernel_override *ov = &parsed[fcl_kernel_index(k)];
        ov->off = false;  /* a clause naming the kernel uses it, unless it says off (a deprecated field may have) */
        ov->named = true;
        if (colon + 1 == end) {
            snprintf(why, why_size, "%s: no setting after ':' (axis=value, splits=N, merge=..., on or off)", k->name);
            return why;
        }
        for (const char *s = colon + 1;;) {
            const char *s_end = s + strcspn(s, ",;");
            if (s_end > end)
                s_end = end;
            const size_t len = (size_t)(s_end - s);
            const char *eq = memchr(s, '=', len);
            if (len == 0) {
                snprintf(why, why_size, "%s: an empty setting (a ',' leading, trailing or doubled) in \"%.*s\"",
                         k->name, (int)(end - p), p);
                return why;
            }
            if (len == 3 && strncmp(s, "off", 3) == 0) {
                ov->off = true;
                ov->named = false;
            } else if (len == 2 && strncmp(s, "on", 2) == 0) {
                /* named: enough for an opt-in kernel */
            } else if (eq && eq - s == 6 && strncmp(s, "splits", 6) == 0) {
                char *num_end;
                const bool digits = eq + 1 < s_end && eq[1] >= '0' && eq[1] <= '9';
                const long v = digits ? strtol(eq + 1, &num_end, 10) : 0;
                if (!k->combine) {
                    snprintf(why, why_size, "%s does not take split-KV (splits)", k->name);
                    return why;
                }
                if (!digits || num_end != s_end || v < 1 || v > FCL_MAX_SPLITS) {
                    snprintf(why, why_size, "%s:splits=%.*s; must be 1..%d", k->name, (int)(s_end - eq - 1), eq + 1,
                             FCL_MAX_SPLITS);
                    return why;
                }
                ov->splits = (int)v;
            } else if (eq && eq - s == 5 && strncmp(s, "merge", 5) == 0) {
                const bool separate = s_end - eq - 1 == 8 && strncmp(eq + 1, "separate", 8) == 0;
                const bool in_place = s_end - eq - 1 == 8 && strncmp(eq + 1, "in-place", 8) == 0;
                if (!k->combine || (in_place && !k->merge_floats)) {
                    snprintf(why, why_size, "%s does not %s", k->name,
                             k->combine ? "merge split-KV in place (merge=in-place)" : "take split-KV (merge)");
                    return why;
                }
                if (!separate && !in_place) {
                    snprintf(why, why_size, "%s:merge=%.*s; must be in-place or separate", k->name,
                             (int)(s_end - eq - 1), eq + 1);
                    return why;
                }
                ov->merge_in_place = in_place;
            } else if (eq) {
                const int a = fcl_axis_by_name(s, (size_t)(eq - s));
                char *num_end;
                const bool digits = eq + 1 < s_end && eq[1] >= '0' && eq[1] <= '9';  /* no sign, no space */
                const long v = digits ? strtol(eq + 1, &num_end, 10) : 0;
                if (!digits)
                    num_end = (char *)eq + 1;
                if (a < 0 || !k->axes[a].lo) {
                    snprintf(why, why_size, "%s has no axis \"%.*s\"", k->name, (int)(eq - s), s);
                    return why;
                }
                if (num_end != s_end || eq + 1 == s_end || v < k->axes[a].lo || v > k->axes[a].hi ||
                    (v - k->axes[a].lo) % k->axes[a].step != 0) {
                    snprintf(why, why_size, "%s:%s=%.*s; must be %d..%d in steps of %d", k->name, fcl_axis_name(a),
                             (int)(s_end - eq - 1), eq + 1, k->axes[a].lo, k->axes[a].hi, k->axes[a].step);
                    return why;
                }
                ov->fixed |= 1u << a;
                ov->shape.axis[a] = (int)v;
            } else {
                snprintf(why, why_size, "\"%.*s\" for %s is neither axis=value nor off", (int)len, s, k->name);
                return why;
            }
            if (s_end == end)
                break;
            s = s_end + 1;  /* past the ',': another setting must follow */
        }
        p = *end ? end + 1 : end;
    }
    memcpy(overrides, parsed, sizeof(parsed));
    return NULL;
}

flashcl_status fcl_overrides_from_params(flashcl_context *ctx, const struct flashcl_context_params *params,
                                         bool portable_only)
{
    struct kernel_override *ov = ctx->overrides;
    for (int i = 0; i < fcl_kernel_count && portable_only; i++)
        if (fcl_kernels[i].needs & NEEDS_TENSOR_CORES)
            ov[i].off = true;

    char why[256];
    if (params->kernel_options) {
        if (parse(params->kernel_options, ov, why, sizeof(why)))
            return fcl_fail(NULL, FLASHCL_ERROR_INVALID_CONFIG, "params.kernel_options: %s", why);
    } else if (ctx->env.kernels[0] && parse(ctx->env.kernels, ov, why, sizeof(why))) {
        fcl_log_msg(ctx, FLASHCL_LOG_WARN, "FLASHCL_KERNELS=\"%s\" ignored: %s", ctx->env.kernels, why);
    }
    for (int i = 0; i < fcl_kernel_count; i++) {
        /* Named or turned off, a kernel given way to takes this one with it: "tensor-core:off" means no
         * f16/bf16 tensor-core forward, wgmma's included, unless the clauses name that one too. An opt-in
         * kernel turned off was not going to run anyway, so that takes nothing with it. */
        const char *name = fcl_kernels[i].gives_way_to;
        while (name && *name && !ov[i].named) {
            const size_t len = strcspn(name, ",");
            const struct kernel_info *other = fcl_kernel_by_name(name, len);
            const struct kernel_override *o = other ? &ov[fcl_kernel_index(other)] : NULL;
            if (o && (o->named || (o->off && !other->opt_in)))
                ov[i].off = true;
            name += len + (name[len] == ',');
        }
    }
    return FLASHCL_SUCCESS;
}
