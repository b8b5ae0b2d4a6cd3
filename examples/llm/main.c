/*
 * flashcl-llm: runs a Llama GGUF model (SmolLM2-135M-Instruct) on an OpenCL
 * device, every attention through flashcl.
 *
 *     flashcl-llm [options] MODEL.gguf "prompt"      (or -f FILE for the prompt)
 *
 *   --chat            wrap the prompt in the model's ChatML template
 *   -n N              tokens to generate (default 64; stops at EOS)
 *   --temp T          sampling temperature (default 0: greedy)
 *   --top-p P         nucleus sampling mass (default 1)
 *   --seed S          the sampler's seed (default 1)
 *   --no-profile      no OpenCL profiling events (times per phase not shown)
 *   --chunk C         prefill in chunks of C tokens over the KV cache
 *                     (default: the whole prompt in one dense causal pass)
 *   --compare-chunked C   prefill once in one pass and once in chunks of C;
 *                     compare the last position's logits and the next -n greedy tokens
 *   --check REF       compare with llama.cpp's reference data (tests/data/llm-reference.txt)
 *   --max-positions N with --check: at most N teacher-forced positions (default all)
 *   --max-generations N  with --check: at most N greedy generations (default all)
 *   --min-agreement P with --check: the top-1 agreement (%) that passes (default 99)
 *   --dump-logits F   with --check: write our logits of every forced position (f32)
 *   --version         the library's version
 *
 * Text goes to stdout as it is generated; statistics to stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "sampler.h"

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [options] MODEL.gguf \"prompt\" | -f FILE\n"
            "       %s [--max-positions N] [--max-generations N] [--min-agreement P] [--dump-logits FILE] --check REFERENCE MODEL.gguf\n"
            "       %s --compare-chunked C [-n N] MODEL.gguf \"prompt\" | -f FILE\n"
            "  -f FILE               the prompt from a file\n"
            "  --chat                wrap the prompt in the model's ChatML template\n"
            "  -n N                  tokens to generate (default 64; stops at EOS)\n"
            "  --temp T              sampling temperature (default 0: greedy)\n"
            "  --top-p P             nucleus sampling mass (default 1)\n"
            "  --seed S              the sampler's seed (default 1)\n"
            "  --no-profile          no OpenCL profiling events (times per phase not shown)\n"
            "  --chunk C             prefill in chunks of C tokens over the KV cache (default: one dense causal pass)\n"
            "  --compare-chunked C   prefill once in one pass and once in chunks of C; compare the last position's\n"
            "                        logits and the next -n greedy tokens\n"
            "  --check REF           compare with llama.cpp's reference data (tests/data/llm-reference.txt)\n"
            "  --max-positions N     with --check: at most N teacher-forced positions (default all)\n"
            "  --max-generations N   with --check: at most N greedy generations (default all)\n"
            "  --min-agreement P     with --check: the top-1 agreement (%%) that passes (default 99)\n"
            "  --dump-logits F       with --check: write the logits of every forced position (f32)\n"
            "  --version             the library's version\n"
            "The device: FLASHCL_DEVICE (README). Text goes to stdout as it is generated; statistics to stderr.\n",
            argv0, argv0, argv0);
}

static int parse_int(const char *s, int lo, int hi, const char *what, int *out)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "flashcl-llm: %s must be an integer from %d to %d, not \"%s\"\n", what, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_float(const char *s, double lo, double hi, const char *what, float *out)
{
    char *end;
    const double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "flashcl-llm: %s must be a number from %g to %g, not \"%s\"\n", what, lo, hi, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static char *read_text_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "flashcl-llm: cannot open %s\n", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (!buf)
        fprintf(stderr, "flashcl-llm: out of memory reading %s\n", path);
    *len = n;
    return buf;
}

/* The ChatML text the model's template gives for one user message (its
 * default system prompt included), ending with the assistant's turn. */
static char *chat_wrap(const char *prompt, size_t len, size_t *out_len)
{
    static const char head[] = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                               "Face<|im_end|>\n<|im_start|>user\n";
    static const char tail[] = "<|im_end|>\n<|im_start|>assistant\n";
    char *s = malloc(sizeof head + len + sizeof tail);
    if (!s)
        return NULL;
    memcpy(s, head, sizeof head - 1);
    memcpy(s + sizeof head - 1, prompt, len);
    memcpy(s + sizeof head - 1 + len, tail, sizeof tail - 1);
    *out_len = sizeof head - 1 + len + sizeof tail - 1;
    return s;
}

static void print_memory(const struct app *app, struct llm_session *s)
{
    fprintf(stderr, "device memory: weights %.1f MB (f32), KV cache %.1f MB (%d rows), activations %.1f MB\n",
            app->model.device_bytes / 1e6, llm_session_cache_bytes(s) / 1e6,
            (int)(llm_session_cache_bytes(s) / ((size_t)app->cfg.n_layers * 2 * app->cfg.n_heads_kv *
                                                 app->cfg.head_dim * sizeof(float))),
            llm_session_activation_bytes(s) / 1e6);
}

static void print_profile(const char *what, const struct llm_profile *p, double wall)
{
    double total = 0;
    long launches = 0;
    for (int i = 0; i < LLM_PHASES; i++) {
        total += p->seconds[i];
        launches += p->launches[i];
    }
    if (total > 0) {
        fprintf(stderr, "  %s device time %.3f s of %.3f s wall:", what, total, wall);
        for (int i = 0; i < LLM_PHASES; i++)
            fprintf(stderr, " %s %.1f%%", llm_phase_name((enum llm_phase)i), 100 * p->seconds[i] / total);
        fprintf(stderr, "\n");
    }
    if (p->tokens)
        fprintf(stderr, "  %s launches: %ld (%.1f per token: %.1f CLBlast, %.1f flashcl, %.1f own kernels)\n", what,
                launches, (double)launches / p->tokens, (double)p->launches[LLM_PROJECTION] / p->tokens,
                (double)p->launches[LLM_ATTENTION] / p->tokens, (double)p->launches[LLM_OTHER] / p->tokens);
}

/* Prefills prompt[0..n) in chunks of `chunk` (0: one dense pass) and leaves the last logits in logits. */
static int prefill(struct llm_session *s, const int *prompt, int n, int chunk, float *logits, char *err, size_t err_size)
{
    if (chunk <= 0)
        return llm_forward(s, prompt, n, 1, logits, 1, err, err_size);
    for (int at = 0; at < n; at += chunk) {
        const int len = n - at < chunk ? n - at : chunk;
        if (llm_forward(s, prompt + at, len, at + len == n ? 1 : 0, logits, 0, err, err_size))
            return -1;
    }
    return 0;
}

/* Builds kernels (CLBlast's, flashcl's, ours) before anything is timed: a
 * two-token dense prefill and a one-token decode step, then an empty cache. */
static int warm_up(struct llm_session *s, float *logits, char *err, size_t err_size)
{
    const int tokens[2] = {0, 0};
    int st = llm_forward(s, tokens, 2, 1, logits, 1, err, err_size);
    if (!st)
        st = llm_forward(s, tokens, 1, 1, logits, 0, err, err_size);
    if (!st)
        st = llm_forward(s, tokens, 2, 1, logits, 0, err, err_size);
    llm_session_reset(s);
    llm_profile_clear(llm_session_profile(s));
    return st;
}

static void emit_token(const struct tokenizer *tok, int id)
{
    char piece[256];
    const size_t n = tokenizer_decode(tok, id, 0, piece, sizeof piece);
    fwrite(piece, 1, n, stdout);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int chat = 0, profiling = 1, n_generate = 64, chunk = 0, compare_chunk = 0, max_positions = -1, max_generations = -1;
    float min_agreement = 99;
    float temperature = 0, top_p = 1;
    int seed = 1;
    const char *model_path = NULL, *prompt_arg = NULL, *prompt_file = NULL, *check_path = NULL, *dump_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has_value = i + 1 < argc;
#define VALUE() (has_value ? argv[++i] : (usage(argv[0]), exit(2), ""))
        if (!strcmp(a, "--chat"))
            chat = 1;
        else if (!strcmp(a, "--no-profile"))
            profiling = 0;
        else if (!strcmp(a, "-n")) {
            if (parse_int(VALUE(), 0, 1 << 20, "-n", &n_generate))
                return 2;
        } else if (!strcmp(a, "--temp")) {
            if (parse_float(VALUE(), 0, 100, "--temp", &temperature))
                return 2;
        } else if (!strcmp(a, "--top-p")) {
            if (parse_float(VALUE(), 0, 1, "--top-p", &top_p))
                return 2;
        } else if (!strcmp(a, "--seed")) {
            if (parse_int(VALUE(), 0, 2147483647, "--seed", &seed))
                return 2;
        } else if (!strcmp(a, "--chunk")) {
            if (parse_int(VALUE(), 1, 1 << 20, "--chunk", &chunk))
                return 2;
        } else if (!strcmp(a, "--compare-chunked")) {
            if (parse_int(VALUE(), 1, 1 << 20, "--compare-chunked", &compare_chunk))
                return 2;
        } else if (!strcmp(a, "--max-positions")) {
            if (parse_int(VALUE(), 0, 1 << 30, "--max-positions", &max_positions))
                return 2;
        } else if (!strcmp(a, "--max-generations")) {
            if (parse_int(VALUE(), 0, 1 << 30, "--max-generations", &max_generations))
                return 2;
        } else if (!strcmp(a, "--min-agreement")) {
            if (parse_float(VALUE(), 0, 100, "--min-agreement", &min_agreement))
                return 2;
        } else if (!strcmp(a, "--check"))
            check_path = VALUE();
        else if (!strcmp(a, "--dump-logits"))
            dump_path = VALUE();
        else if (!strcmp(a, "-f"))
            prompt_file = VALUE();
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(argv[0]);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("flashcl-llm %s\n", flashcl_version());
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "flashcl-llm: unknown option %s\n", a);
            usage(argv[0]);
            return 2;
        } else if (!model_path)
            model_path = a;
        else if (!prompt_arg)
            prompt_arg = a;
        else {
            usage(argv[0]);
            return 2;
        }
#undef VALUE
    }
    if (!model_path || (!check_path && !prompt_arg == !prompt_file) || (check_path && (prompt_arg || prompt_file))) {
        usage(argv[0]);
        return 2;
    }

    struct app app;
    memset(&app, 0, sizeof app);
    char err[4096];
    int rc = 1;
    int *prompt = NULL;
    size_t n_prompt = 0;
    char *text = NULL;
    float *logits = NULL, *logits_one_pass = NULL;
    struct llm_session *session = NULL;
    struct sampler sampler = {0};

    /* Everything about the file is checked before a device is touched. */
    if (gguf_open(model_path, &app.file, err, sizeof err) || llm_config_read(&app.file, &app.cfg, err, sizeof err) ||
        tokenizer_load(&app.file, &app.tok, err, sizeof err)) {
        fprintf(stderr, "flashcl-llm: %s: %s\n", model_path, err);
        goto done;
    }
    if (app.cfg.n_vocab != tokenizer_vocab_size(app.tok)) {
        fprintf(stderr, "flashcl-llm: %s: %d tokens but the model's vocabulary has %d\n", model_path,
                tokenizer_vocab_size(app.tok), app.cfg.n_vocab);
        goto done;
    }
    if (!check_path) {
        size_t len = 0;
        if (prompt_file) {
            if (!(text = read_text_file(prompt_file, &len)))
                goto done;
        } else {
            len = strlen(prompt_arg);
            if (!(text = malloc(len + 1)))
                goto done;
            memcpy(text, prompt_arg, len + 1);
        }
        if (chat) {
            char *wrapped = chat_wrap(text, len, &len);
            free(text);
            if (!(text = wrapped))
                goto done;
        }
        if (tokenizer_add_bos(app.tok)) {
            prompt = malloc(sizeof *prompt);
            if (!prompt)
                goto done;
            prompt[n_prompt++] = tokenizer_bos(app.tok);
        }
        if (tokenizer_encode(app.tok, text, len, chat, &prompt, &n_prompt)) {
            fprintf(stderr, "flashcl-llm: out of memory tokenizing the prompt\n");
            goto done;
        }
        if (n_prompt == 0) {
            fprintf(stderr, "flashcl-llm: the prompt is empty\n");
            goto done;
        }
        if (n_prompt + (size_t)n_generate > (size_t)app.cfg.n_ctx) {
            fprintf(stderr, "flashcl-llm: the prompt of %zu tokens and %d to generate exceed the model's context of %d "
                    "tokens\n", n_prompt, n_generate, app.cfg.n_ctx);
            goto done;
        }
    }

    if (flashcl_context_create(NULL, &app.fa) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl-llm: flashcl: %s\n", flashcl_last_error());
        goto done;
    }
    const double t_load = now_seconds();
    if (llm_model_load(&app.file, flashcl_context_cl_context(app.fa), &app.model, err, sizeof err)) {
        fprintf(stderr, "flashcl-llm: %s: %s\n", model_path, err);
        goto done;
    }
    fprintf(stderr, "flashcl-llm: %s on \"%s\": %d layers, %d heads (%d K/V) of %d, vocabulary %d; loaded in %.2f s\n",
            model_path, flashcl_context_device_name(app.fa), app.cfg.n_layers, app.cfg.n_heads, app.cfg.n_heads_kv,
            app.cfg.head_dim, app.cfg.n_vocab, now_seconds() - t_load);

    if (check_path) {
        rc = run_reference_checks(&app, check_path, max_positions, max_generations, min_agreement, dump_path);
        rc = rc < 0 ? 1 : rc;
        goto done;
    }

    /* The cache holds the prompt and the generated tokens, rounded up to 16 rows. */
    const int needed = (int)n_prompt + n_generate + 1;
    int capacity = (needed + 15) / 16 * 16;
    if (capacity > app.cfg.n_ctx)
        capacity = app.cfg.n_ctx;
    const int prefill_chunk = compare_chunk ? compare_chunk : chunk;
    int max_tokens = prefill_chunk && prefill_chunk < (int)n_prompt ? prefill_chunk : (int)n_prompt;
    if (compare_chunk)
        max_tokens = (int)n_prompt;
    if (max_tokens < 2)
        max_tokens = 2;  /* the warm-up's two tokens */
    if (max_tokens > capacity)
        capacity = (max_tokens + 15) / 16 * 16;
    struct llm_session_params sp = {capacity, max_tokens, 1, profiling};
    if (llm_session_create(&app.model, app.fa, &sp, &session, err, sizeof err)) {
        fprintf(stderr, "flashcl-llm: %s\n", err);
        goto done;
    }
    logits = malloc((size_t)app.cfg.n_vocab * sizeof *logits);
    logits_one_pass = malloc((size_t)app.cfg.n_vocab * sizeof *logits_one_pass);
    if (!logits || !logits_one_pass || sampler_init(&sampler, app.cfg.n_vocab, temperature, top_p, (uint64_t)seed)) {
        fprintf(stderr, "flashcl-llm: out of host memory\n");
        goto done;
    }
    const double t_warm = now_seconds();
    if (warm_up(session, logits, err, sizeof err)) {
        fprintf(stderr, "flashcl-llm: %s\n", err);
        goto done;
    }
    fprintf(stderr, "flashcl-llm: kernels built and warmed up in %.2f s\n", now_seconds() - t_warm);
    {
        /* Which flashcl kernels the prompt and the decode steps run. */
        struct flashcl_tile prefill_tile, decode_tile;
        const int first = prefill_chunk && prefill_chunk < (int)n_prompt ? prefill_chunk : (int)n_prompt;
        if (!llm_session_attention_config(session, first, 0, !prefill_chunk, &prefill_tile) &&
            !llm_session_attention_config(session, 1, (int)n_prompt, 0, &decode_tile))
            fprintf(stderr, "flashcl-llm: attention: prefill (%d queries) %s %dx%d, %d split(s); decode after the "
                    "prompt %s %dx%d, %d split(s)\n", first, prefill_tile.kernel,
                    prefill_tile.block_m, prefill_tile.block_n, prefill_tile.splits,
                    decode_tile.kernel, decode_tile.block_m, decode_tile.block_n,
                    decode_tile.splits);
    }

    if (compare_chunk) {
        /* The same prompt through flashcl_forward in one pass, then through
         * flashcl_forward_kv_cache chunk by chunk: the next tokens must agree. */
        int *greedy[2] = {calloc((size_t)n_generate + 1, sizeof(int)), calloc((size_t)n_generate + 1, sizeof(int))};
        double max_diff = 0;
        int ok = greedy[0] && greedy[1];
        for (int pass = 0; pass < 2 && ok; pass++) {
            llm_session_reset(session);
            const double t0 = now_seconds();
            if (prefill(session, prompt, (int)n_prompt, pass ? compare_chunk : 0, logits, err, sizeof err)) {
                fprintf(stderr, "flashcl-llm: %s\n", err);
                ok = 0;
                break;
            }
            const double t1 = now_seconds();
            if (pass == 0)
                memcpy(logits_one_pass, logits, (size_t)app.cfg.n_vocab * sizeof *logits);
            else
                for (int i = 0; i < app.cfg.n_vocab; i++) {
                    const double d = logits[i] > logits_one_pass[i] ? logits[i] - logits_one_pass[i]
                                                                    : logits_one_pass[i] - logits[i];
                    max_diff = d > max_diff ? d : max_diff;
                }
            fprintf(stderr, "%s prefill of %zu tokens: %.2f s (%.1f tokens/s), next token %d\n",
                    pass ? "chunked" : "one-pass", n_prompt, t1 - t0, n_prompt / (t1 - t0), argmax(logits, app.cfg.n_vocab));
            greedy[pass][0] = argmax(logits, app.cfg.n_vocab);
            for (int g = 1; g <= n_generate && ok; g++) {
                if (llm_forward(session, &greedy[pass][g - 1], 1, 1, logits, 0, err, sizeof err)) {
                    fprintf(stderr, "flashcl-llm: %s\n", err);
                    ok = 0;
                }
                greedy[pass][g] = argmax(logits, app.cfg.n_vocab);
            }
            if (pass == 0)
                print_memory(&app, session);
        }
        int same = ok;
        for (int g = 0; ok && g <= n_generate; g++)
            same = same && greedy[0][g] == greedy[1][g];
        if (ok)
            printf("compare-chunked: %zu-token prompt, chunks of %d: last-position logits max |one-pass - chunked| "
                   "%.3g; %d greedy tokens %s\n", n_prompt, compare_chunk, max_diff, n_generate + 1,
                   same ? "identical" : "DIFFER");
        free(greedy[0]);
        free(greedy[1]);
        rc = same ? 0 : 1;
        goto done;
    }

    struct llm_profile *prof = llm_session_profile(session);
    const double t0 = now_seconds();
    if (prefill(session, prompt, (int)n_prompt, chunk, logits, err, sizeof err)) {
        fprintf(stderr, "flashcl-llm: %s\n", err);
        goto done;
    }
    const double t_prefill = now_seconds() - t0;
    struct llm_profile prefill_profile = *prof;
    llm_profile_clear(prof);

    int generated = 0, next = sampler_next(&sampler, logits);
    const double t1 = now_seconds();
    while (generated < n_generate && next != tokenizer_eos(app.tok)) {
        emit_token(app.tok, next);
        generated++;
        if (generated == n_generate)
            break;
        if (llm_forward(session, &next, 1, 1, logits, 0, err, sizeof err)) {
            fprintf(stderr, "\nflashcl-llm: %s\n", err);
            goto done;
        }
        next = sampler_next(&sampler, logits);
    }
    const double t_decode = now_seconds() - t1;
    printf("\n");
    fprintf(stderr, "prefill: %zu tokens in %.3f s = %.1f tokens/s%s\n", n_prompt, t_prefill, n_prompt / t_prefill,
            chunk ? " (chunked)" : "");
    print_profile("prefill", &prefill_profile, t_prefill);
    if (prof->tokens) {
        fprintf(stderr, "decode: %ld tokens in %.3f s = %.1f tokens/s\n", prof->tokens, t_decode,
                prof->tokens / t_decode);
        print_profile("decode", prof, t_decode);
    }
    print_memory(&app, session);
    rc = 0;
done:
    sampler_free(&sampler);
    free(logits);
    free(logits_one_pass);
    free(prompt);
    free(text);
    llm_session_free(&session);
    llm_model_free(&app.model);
    tokenizer_free(&app.tok);
    gguf_close(&app.file);
    flashcl_context_destroy(&app.fa);
    return rc;
}
