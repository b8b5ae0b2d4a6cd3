/*
 * --check: flashcl-llm against llama.cpp's reference data (make-reference.py).
 *
 * The reference is text, one record per line:
 *   tokenize SPECIAL HEX N id...        a text (hex of its bytes), parsed with or
 *                                       without special tokens, and llama.cpp's ids
 *   forced NAME N id...                 a token sequence run teacher-forced, then
 *   top K id logit ...                  N lines: llama.cpp's top K logits after each position
 *   generate N id... M id...            a prompt and llama.cpp's M greedy tokens, then
 *   top K id logit ...                  M lines: its top K at each generated step
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "sampler.h"

enum { TOP_MAX = 16 };

/* llama.cpp's greedy choice may differ from ours only where its top two are closer than this. */
#define NEAR_TIE 0.25

struct top {
    int k, id[TOP_MAX];
    float logit[TOP_MAX];
};

struct reader {
    FILE *f;
    char *line;
    size_t cap;
    int line_no;
    const char *path;
};

static char *next_line(struct reader *r)
{
    for (;;) {
        const ssize_t n = getline(&r->line, &r->cap, r->f);
        if (n < 0)
            return NULL;
        r->line_no++;
        if (n > 0 && r->line[n - 1] == '\n')
            r->line[n - 1] = '\0';
        if (r->line[0] && r->line[0] != '#')
            return r->line;
    }
}

/* Reads "N id..." from *s: a malloc'd array of N ids. */
static int *parse_ids(char **s, int *n)
{
    char *end;
    const long count = strtol(*s, &end, 10);
    if (end == *s || count < 0 || count > (1 << 24))
        return NULL;
    int *ids = malloc((size_t)(count ? count : 1) * sizeof *ids);
    for (long i = 0; ids && i < count; i++) {
        *s = end;
        ids[i] = (int)strtol(*s, &end, 10);
        if (end == *s) {
            free(ids);
            return NULL;
        }
    }
    *s = end;
    *n = (int)count;
    return ids;
}

static int parse_top(struct reader *r, struct top *t)
{
    char *s = next_line(r), *end;
    if (!s || strncmp(s, "top ", 4))
        return -1;
    t->k = (int)strtol(s + 4, &end, 10);
    if (t->k < 1 || t->k > TOP_MAX)
        return -1;
    for (int i = 0; i < t->k; i++) {
        s = end;
        t->id[i] = (int)strtol(s, &end, 10);
        s = end;
        t->logit[i] = strtof(s, &end);
        if (end == s)
            return -1;
    }
    return 0;
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

struct stats {
    long positions, agree;
    double max_diff, sum_diff;
    long diffs;
};

static void compare_row(const float *ours, int n_vocab, const struct top *ref, struct stats *st, int verbose,
                        const char *where, int pos)
{
    const int mine = argmax(ours, n_vocab);
    st->positions++;
    st->agree += mine == ref->id[0];
    for (int i = 0; i < ref->k; i++) {
        if (ref->id[i] < 0 || ref->id[i] >= n_vocab)
            continue;
        const double d = fabs((double)ours[ref->id[i]] - ref->logit[i]);
        st->max_diff = d > st->max_diff ? d : st->max_diff;
        st->sum_diff += d;
        st->diffs++;
    }
    if (mine != ref->id[0] && verbose)
        printf("  %s position %d: llama.cpp's top-1 %d (%.4f, next %d %.4f: margin %.4f), ours %d (%.4f; %.4f for "
               "llama.cpp's)\n", where, pos, ref->id[0], ref->logit[0], ref->id[1], ref->logit[1],
               ref->logit[0] - ref->logit[1], mine, ours[mine], ours[ref->id[0]]);
}

int run_reference_checks(struct app *app, const char *ref_path, int max_positions, int max_generations,
                         float min_agreement, const char *dump_path)
{
    struct reader r = {fopen(ref_path, "r"), NULL, 0, 0, ref_path};
    if (!r.f) {
        fprintf(stderr, "flashcl-llm: cannot open %s\n", ref_path);
        return -1;
    }
    FILE *dump = dump_path ? fopen(dump_path, "wb") : NULL;
    if (dump_path && !dump) {
        fprintf(stderr, "flashcl-llm: cannot write %s\n", dump_path);
        fclose(r.f);
        return -1;
    }
    const int n_vocab = app->cfg.n_vocab;
    int rc = -1, tok_cases = 0, tok_ok = 0, gen_cases = 0, gen_ok = 0, gen_tie = 0, capacity = 0;
    struct stats forced = {0}, generation = {0};
    struct llm_session *s = NULL;
    float *logits = NULL;
    int *ids = NULL, *prompt = NULL, *want = NULL;
    char err[4096];
    double forced_seconds = 0;
    long forced_tokens = 0;

    /* One pass to size the session: the longest sequence in the file. */
    for (char *line; (line = next_line(&r));) {
        char *p = line;
        int n = 0;
        if (!strncmp(line, "forced ", 7)) {
            p = strchr(line + 7, ' ');
            int *x = p ? parse_ids(&p, &n) : NULL;
            free(x);
        } else if (!strncmp(line, "generate ", 9)) {
            p += 9;
            int m = 0;
            int *x = parse_ids(&p, &n), *y = x ? parse_ids(&p, &m) : NULL;
            free(x);
            free(y);
            n += m;
        }
        capacity = n > capacity ? n : capacity;
    }
    rewind(r.f);
    r.line_no = 0;
    if (max_positions >= 0 && max_generations == 0 && capacity > max_positions)
        capacity = max_positions;
    else if (max_positions >= 0 && capacity > max_positions + 128)
        capacity = max_positions + 128;  /* room for a generation's prompt and tokens */
    capacity = (capacity + 16) / 16 * 16;
    struct llm_session_params sp = {capacity, capacity, capacity, 0};
    logits = malloc((size_t)capacity * n_vocab * sizeof *logits);
    if (!logits || llm_session_create(&app->model, app->fa, &sp, &s, err, sizeof err)) {
        fprintf(stderr, "flashcl-llm: %s\n", logits ? err : "out of host memory");
        goto done;
    }

    for (char *line; (line = next_line(&r));) {
        if (!strncmp(line, "tokenize ", 9)) {
            char *p = line + 9, *end;
            const int special = (int)strtol(p, &end, 10);
            p = end + 1;
            char *hex_end = strchr(p, ' ');
            if (!hex_end)
                goto bad;
            const size_t len = (size_t)(hex_end - p) / 2;
            char *text = malloc(len + 1);
            for (size_t i = 0; text && i < len; i++)
                text[i] = (char)(hex_value(p[2 * i]) << 4 | hex_value(p[2 * i + 1]));
            p = hex_end;
            int n = 0;
            size_t got_n = 0;
            int *got = NULL;
            free(want);
            want = parse_ids(&p, &n);
            if (!text || !want || tokenizer_encode(app->tok, text, len, special, &got, &got_n)) {
                free(text);
                free(got);
                goto bad;
            }
            int same = got_n == (size_t)n;
            for (int i = 0; same && i < n; i++)
                same = got[i] == want[i];
            tok_cases++;
            tok_ok += same;
            if (!same) {
                printf("  tokenizer mismatch on \"%.*s\"%s:\n    llama.cpp:", (int)(len > 60 ? 60 : len), text,
                       len > 60 ? "..." : "");
                for (int i = 0; i < n && i < 24; i++)
                    printf(" %d", want[i]);
                printf("\n    ours:     ");
                for (size_t i = 0; i < got_n && i < 24; i++)
                    printf(" %d", got[i]);
                printf("\n");
            }
            free(text);
            free(got);
        } else if (!strncmp(line, "forced ", 7)) {
            char name[64] = "";
            char *p = strchr(line + 7, ' ');
            int n = 0;
            if (!p)
                goto bad;
            snprintf(name, sizeof name, "%.*s", (int)(p - (line + 7)), line + 7);
            free(ids);
            if (!(ids = parse_ids(&p, &n)))
                goto bad;
            struct top *tops = malloc((size_t)(n ? n : 1) * sizeof *tops);
            for (int i = 0; tops && i < n; i++)
                if (parse_top(&r, &tops[i])) {
                    free(tops);
                    goto bad;
                }
            int use = n;
            if (max_positions >= 0 && use > max_positions - forced.positions)
                use = (int)(max_positions - forced.positions);
            if (!tops || use <= 0) {
                free(tops);
                continue;
            }
            llm_session_reset(s);
            const double t0 = now_seconds();
            if (llm_forward(s, ids, use, use, logits, 1, err, sizeof err)) {
                fprintf(stderr, "flashcl-llm: %s\n", err);
                free(tops);
                goto done;
            }
            forced_seconds += now_seconds() - t0;
            forced_tokens += use;
            const long agree_before = forced.agree;
            for (int i = 0; i < use; i++)
                compare_row(logits + (size_t)i * n_vocab, n_vocab, &tops[i], &forced, 1, name, i);
            printf("forced %s: %d positions, top-1 agreement %ld/%d\n", name, use, forced.agree - agree_before, use);
            if (dump && fwrite(logits, sizeof *logits, (size_t)use * n_vocab, dump) != (size_t)use * n_vocab) {
                fprintf(stderr, "flashcl-llm: writing %s failed\n", dump_path);
                free(tops);
                goto done;
            }
            free(tops);
        } else if (!strncmp(line, "generate ", 9)) {
            char *p = line + 9;
            int n = 0, m = 0;
            free(prompt);
            free(want);
            want = NULL;
            if (!(prompt = parse_ids(&p, &n)) || !(want = parse_ids(&p, &m)))
                goto bad;
            struct top *tops = malloc((size_t)(m ? m : 1) * sizeof *tops);
            for (int i = 0; tops && i < m; i++)
                if (parse_top(&r, &tops[i])) {
                    free(tops);
                    goto bad;
                }
            if (!tops || n + m > capacity || (max_generations >= 0 && gen_cases >= max_generations)) {
                free(tops);
                continue;
            }
            llm_session_reset(s);
            int diverged = -1, token = 0;
            if (llm_forward(s, prompt, n, 1, logits, 1, err, sizeof err)) {
                fprintf(stderr, "flashcl-llm: %s\n", err);
                free(tops);
                goto done;
            }
            for (int g = 0; g < m; g++) {
                token = argmax(logits, n_vocab);
                compare_row(logits, n_vocab, &tops[g], &generation, 0, "", g);
                if (token != want[g]) {
                    diverged = g;
                    break;
                }
                if (g + 1 < m && llm_forward(s, &token, 1, 1, logits, 0, err, sizeof err)) {
                    fprintf(stderr, "flashcl-llm: %s\n", err);
                    free(tops);
                    goto done;
                }
            }
            gen_cases++;
            if (diverged < 0) {
                gen_ok++;
                printf("generate %d: %d greedy tokens identical\n", gen_cases, m);
            } else {
                const struct top *t = &tops[diverged];
                const double margin = t->logit[0] - t->logit[1];
                const int tie = margin < NEAR_TIE && (token == t->id[1] || token == t->id[0]);
                gen_tie += tie;
                printf("generate %d: first divergence at token %d: llama.cpp %d (%.4f) over %d (%.4f), margin %.4f; "
                       "ours %d (%.4f) over %d (%.4f): %s\n", gen_cases, diverged, t->id[0], t->logit[0], t->id[1],
                       t->logit[1], margin, token, logits[token], t->id[0], logits[t->id[0]],
                       tie ? "a near-tie" : "NOT a near-tie");
            }
            free(tops);
        } else {
            goto bad;
        }
        continue;
bad:
        fprintf(stderr, "flashcl-llm: %s:%d: malformed line\n", ref_path, r.line_no);
        goto done;
    }

    printf("tokenizer: %d/%d texts give llama.cpp's ids\n", tok_ok, tok_cases);
    if (forced.positions)
        printf("teacher-forced: %ld positions, top-1 agreement %ld (%.2f%%); |logit - llama.cpp's| over its top-%s: "
               "max %.4f, mean %.4f; %.1f tokens/s (dense prefill, logits of every position)\n", forced.positions,
               forced.agree, 100.0 * forced.agree / forced.positions, "k", forced.max_diff,
               forced.diffs ? forced.sum_diff / forced.diffs : 0, forced_tokens / forced_seconds);
    if (gen_cases)
        printf("greedy generation: %d/%d identical, %d diverged at a near-tie (margin < %.2f); logits over the "
               "compared steps: max diff %.4f, mean %.4f\n", gen_ok, gen_cases, gen_tie, NEAR_TIE, generation.max_diff,
               generation.diffs ? generation.sum_diff / generation.diffs : 0);
    const int pass = tok_ok == tok_cases &&
                     (!forced.positions || 100.0 * forced.agree >= (double)min_agreement * forced.positions) &&
                     gen_ok + gen_tie == gen_cases;
    if (forced.positions)
        printf("top-1 agreement needed: %.2f%%\n", min_agreement);
    printf("%s\n", pass ? "PASS" : "FAIL");
    rc = pass ? 0 : 1;
done:
    free(r.line);
    fclose(r.f);
    if (dump)
        fclose(dump);
    free(logits);
    free(ids);
    free(prompt);
    free(want);
    llm_session_free(&s);
    return rc;
}
