/*
 * flashcl-bench: times flashcl's attention on the default OpenCL device.
 *
 * For each (N, head_dim, dtype, causal) it builds Q, K, V with random values
 * (never zeros), runs the forward call, times it with OpenCL profiling events
 * (warm-up runs first, then the median of --reps runs; see time_one), checks sampled rows
 * against a double-precision reference, and prints a table. The shapes follow
 * FlashAttention's benchmark convention: batch·N = --tokens (16k) and
 * heads·d = --hidden (2048). TFLOP/s = 4·B·H·N²·d / t, halved when causal.
 *
 * --decode (bench_decode.c) and --varlen (bench_varlen.c) are modes of their
 * own instead of the sweep. Run with --help for the options.
 */
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_decode.h"
#include "bench_paths.h"
#include "bench_varlen.h"
#include "hostref.h"

#define MAX_LIST 16
#define MAX_DECODE 64  /* --decode shapes: a table's grid in one call */
#define MAX_DTYPES 5

struct options {
    int n[MAX_LIST], n_count;
    int d[MAX_LIST], d_count;
    flashcl_dtype dtype[MAX_DTYPES];
    enum flashcl_precision precision[MAX_DTYPES];
    int dtype_count;
    int causal[2], causal_count;
    int paths;   /* bit set of enum bench_path */
    struct decode_shape decode[MAX_DECODE];
    int decode_count;  /* > 0: the decode mode instead of the sweep */
    int page_size;     /* > 0: the decode mode also on a paged cache of such pages */
    enum decode_kv_layout kv_layout;  /* the decode mode's dense cache */
    struct varlen_batch varlen;  /* count > 0: the varlen mode instead of the sweep */
    bool heads_given;
    int passes;  /* bit set of enum bench_pass */
    long tokens, hidden;
    int warmup, reps, calls;
    const char *csv, *json;
    bool verbose;
    bool sinks;
    bool alibi;
    float softcap;
    int head_dim_v;  /* --head-dim-v: V's and O's head dim in the sweep (0: each d) */
    int window;      /* --window: a causal sliding window of this many keys (0: none) */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flashcl-bench [options]\n"
            "  --n LIST        sequence lengths (default 512,1024,2048,4096,8192,16384,32768)\n"
            "  --d LIST        head dims (default 64,128)\n"
            "  --dtype LIST    f32,f16,bf16,tf32,tf32x3,e4m3 (default f32,f16); e4m3: the forward\n"
            "                  of E4M3 inputs into f16 O (compute capability 9.0); tf32 and tf32x3:\n"
            "                  f32 data with that precision allowed (attn.precision)\n"
            "  --causal LIST   0,1 (default 0,1)\n"
            "  --paths LIST    %s (default %s)\n"
            "  --page-size P   with --decode: each shape also on a paged cache of P-key pages (P a\n"
            "                  multiple of 16; shuffled pages, device lengths and block table)\n"
            "  --decode LIST   B:Hq:Hkv:Nq:Nk,... decode / chunked-prefill shapes (causal when\n"
            "                  Nq > 1) instead of the sweep, with --d and --dtype; reports K+V GB/s;\n"
            "                  there e4m3 is an E4M3 cache with f16 Q and O\n"
            "  --kv-layout L   with --decode: the dense cache as bnhd ([B, Nk, Hkv, d], the default:\n"
            "                  flashcl's KV cache) or bhnd ([B, Hkv, Nk, d], PyTorch's usual)\n"
            "  --varlen LIST   L1,L2,... one packed batch of sequences of these lengths (queries =\n"
            "                  keys, flashcl_forward_varlen) instead of the sweep, with --heads,\n"
            "                  --d, --dtype, --causal; next to it one dense call of the same tokens\n"
            "                  (batch = the sequences, N = their mean length rounded)\n"
            "  --heads Hq:Hkv  query and K/V heads of --varlen (default 32:8)\n"
            "  --pass LIST     forward,backward,both (default forward): the backward alone\n"
            "                  (after one untimed forward), or forward then backward;\n"
            "                  FLOPs 2.5x (backward) and 3.5x (both) the forward's\n"
            "  --tokens T      batch*N (default 16384; batch = max(1, T/N))\n"
            "  --hidden C      heads*d (default 2048)\n"
            "  --warmup W      untimed runs first (default 2)\n"
            "  --reps R        timed runs, median reported (default 10)\n"
            "  --calls C       each timed run is C calls back to back, reported per call (the\n"
            "                  host's enqueueing overlapped, as in a serving loop; default 1:\n"
            "                  one call on an idle queue, its enqueueing inside the time)\n"
            "  --sinks         the sweep's flash calls with attention sinks (attn.sinks) of -30000 a\n"
            "                  head: the sinks' code runs, their weight is 0, so outputs and checks are\n"
            "                  the plain ones (what the sinks cost the forward; the backward is timed\n"
            "                  without grad.d_sinks)\n"
            "  --alibi         the sweep's flash calls with ALiBi slopes (attn.alibi_slopes) of 0 a head:\n"
            "                  the bias is computed and adds 0, so outputs and checks are the plain ones\n"
            "                  (what ALiBi costs)\n"
            "  --head-dim-v DV the sweep's flash calls with V, O, dO and dV of DV columns (attn.head_dim_v,\n"
            "                  DeepSeek's MLA: --d 192 --head-dim-v 128); FLOPs 2·B·H·N²·(d + DV) forward,\n"
            "                  2·B·H·N²·(3d + 2DV) backward\n"
            "  --window W      the sweep's calls causal with a sliding window of W keys before the\n"
            "                  diagonal (mask WINDOW, window_left W, window_right 0; --causal is then\n"
            "                  1): Mistral's and Gemma's local layers; FLOPs count the visible pairs\n"
            "  --softcap C     the sweep's flash calls with attn.softcap = C; a C far above the scores\n"
            "                  (1e4) bends none of them past f16's precision, so the checks are the plain\n"
            "                  ones: what the cap's tanh costs\n"
            "  --csv FILE      also write the results as CSV\n"
            "  --json FILE     also write the results as JSON\n"
            "  --verbose       the library's debug log on stderr (builds; with\n"
            "                  FLASHCL_BUILD_OPTIONS=-cl-nv-verbose, NVIDIA's register report)\n"
            "  --quick         a seconds-long sweep for CPU devices: N 256,512, d 64, f32,\n"
            "                  causal 0,1, tokens 1024, hidden 256, warmup 1, reps 3\n"
            "  --version       the library's version\n"
            "The device is chosen by FLASHCL_DEVICE (\"P:D\" or a name substring), else the\n"
            "first GPU, else the first device.\n",
            BENCH_PATH_NAMES, BENCH_PATH_DEFAULT_NAMES);
}

static int parse_int_list(const char *arg, int *out, int max)
{
    int count = 0;
    char *copy = strdup(arg), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 0 || v > 1 << 30 || count == max) {
            free(copy);
            return -1;
        }
        out[count++] = (int)v;
    }
    free(copy);
    return count;
}

/* f32, f16, bf16, e4m3 (O f16; the forward only), and tf32 / tf32x3: f32 storage with that precision allowed. */
static int parse_dtypes(const char *arg, flashcl_dtype *out, enum flashcl_precision *precision)
{
    static const struct { const char *name; flashcl_dtype dtype; enum flashcl_precision precision; } known[] = {
        {"f32", FLASHCL_F32, FLASHCL_PRECISION_EXACT},   {"f16", FLASHCL_F16, FLASHCL_PRECISION_EXACT},
        {"bf16", FLASHCL_BF16, FLASHCL_PRECISION_EXACT}, {"tf32", FLASHCL_F32, FLASHCL_PRECISION_TF32},
        {"tf32x3", FLASHCL_F32, FLASHCL_PRECISION_TF32X3}, {"e4m3", FLASHCL_E4M3, FLASHCL_PRECISION_EXACT},
    };
    int count = 0;
    char *copy = strdup(arg), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < (int)(sizeof(known) / sizeof(known[0])); i++)
            if (strcmp(tok, known[i].name) == 0)
                found = i;
        if (found < 0 || count == MAX_DTYPES) {
            free(copy);
            return -1;
        }
        out[count] = known[found].dtype;
        precision[count++] = known[found].precision;
    }
    free(copy);
    return count;
}

static const char *dtype_name(flashcl_dtype t, enum flashcl_precision p)
{
    if (t == FLASHCL_F32 && p != FLASHCL_PRECISION_EXACT)
        return p == FLASHCL_PRECISION_TF32 ? "tf32" : "tf32x3";
    return flashcl_dtype_name(t);
}

static void parse_options(int argc, char **argv, struct options *o)
{
    memset(o, 0, sizeof(*o));
    o->n_count = parse_int_list("512,1024,2048,4096,8192,16384,32768", o->n, MAX_LIST);
    o->d_count = parse_int_list("64,128", o->d, MAX_LIST);
    o->dtype_count = parse_dtypes("f32,f16", o->dtype, o->precision);
    o->causal_count = parse_int_list("0,1", o->causal, 2);
    o->paths = bench_parse_paths(BENCH_PATH_DEFAULT_NAMES);
    o->passes = bench_parse_passes("forward");
    o->tokens = 16384;
    o->hidden = 2048;
    o->warmup = 2;
    o->reps = 10;
    o->calls = 1;
    o->varlen.heads_q = 32;
    o->varlen.heads_kv = 8;

    static const struct option longopts[] = {
        {"n", required_argument, 0, 'n'},      {"d", required_argument, 0, 'd'},
        {"dtype", required_argument, 0, 't'},  {"causal", required_argument, 0, 'c'},
        {"paths", required_argument, 0, 'p'},  {"tokens", required_argument, 0, 'T'},
        {"hidden", required_argument, 0, 'H'}, {"warmup", required_argument, 0, 'w'},
        {"reps", required_argument, 0, 'r'},   {"csv", required_argument, 0, 'C'},
        {"json", required_argument, 0, 'J'},   {"quick", no_argument, 0, 'q'},
        {"verbose", no_argument, 0, 'v'},       {"pass", required_argument, 0, 'P'},
        {"decode", required_argument, 0, 'D'}, {"page-size", required_argument, 0, 'S'},
        {"kv-layout", required_argument, 0, 'Y'},
        {"varlen", required_argument, 0, 'L'}, {"heads", required_argument, 0, 'K'},
        {"calls", required_argument, 0, 'N'},  {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'},
        {"sinks", no_argument, 0, 's'},
        {"alibi", no_argument, 0, 'A'},
        {"softcap", required_argument, 0, 'X'},
        {"head-dim-v", required_argument, 0, 'W'},
        {"window", required_argument, 0, 'O'},
        {0, 0, 0, 0},
    };
    int opt, li = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, &li)) != -1) {
        bool bad = false;
        const char *why = NULL;  /* what is wrong with the value, where the parser says */
        switch (opt) {
        case 'n': bad = (o->n_count = parse_int_list(optarg, o->n, MAX_LIST)) <= 0; break;
        case 'd': bad = (o->d_count = parse_int_list(optarg, o->d, MAX_LIST)) <= 0; break;
        case 't': bad = (o->dtype_count = parse_dtypes(optarg, o->dtype, o->precision)) <= 0; break;
        case 'c': bad = (o->causal_count = parse_int_list(optarg, o->causal, 2)) <= 0; break;
        case 'p': bad = (o->paths = bench_parse_paths(optarg)) <= 0; break;
        case 'P': bad = (o->passes = bench_parse_passes(optarg)) <= 0; break;
        case 'D': bad = (o->decode_count = bench_parse_decode(optarg, o->decode, MAX_DECODE)) <= 0; break;
        case 'S': bad = (o->page_size = atoi(optarg)) < 16 || o->page_size % 16; break;
        case 'Y':
            o->kv_layout = strcmp(optarg, "bhnd") == 0 ? DECODE_KV_BHND : DECODE_KV_BNHD;
            bad = strcmp(optarg, "bhnd") != 0 && strcmp(optarg, "bnhd") != 0;
            break;
        case 'L':
            free(o->varlen.lengths);
            bad = (o->varlen.count = bench_parse_lengths(optarg, &o->varlen.lengths, &why)) <= 0;
            break;
        case 'K':
            bad = bench_parse_heads(optarg, &o->varlen.heads_q, &o->varlen.heads_kv, &why) != 0;
            o->heads_given = true;
            break;
        case 'T': bad = (o->tokens = atol(optarg)) <= 0; break;
        case 'H': bad = (o->hidden = atol(optarg)) <= 0; break;
        case 'w': bad = (o->warmup = atoi(optarg)) < 0; break;
        case 'r': bad = (o->reps = atoi(optarg)) <= 0; break;
        case 'N': bad = (o->calls = atoi(optarg)) <= 0; break;
        case 'C': o->csv = optarg; break;
        case 's': o->sinks = true; break;
        case 'A': o->alibi = true; break;
        case 'X': {
            char *end = NULL;
            o->softcap = strtof(optarg, &end);
            if (!end || *end || !(o->softcap > 0.0f)) {
                fprintf(stderr, "flashcl-bench: --softcap takes a number > 0\n");
                exit(EXIT_FAILURE);
            }
            break;
        }
        case 'W':
            bad = (o->head_dim_v = atoi(optarg)) < 1 || o->head_dim_v > FLASHCL_MAX_HEAD_DIM;
            why = "1..256";
            break;
        case 'O':
            bad = (o->window = atoi(optarg)) < 1;
            why = "a number of keys >= 1";
            break;
        case 'J': o->json = optarg; break;
        case 'q':
            o->n_count = parse_int_list("256,512", o->n, MAX_LIST);
            o->d_count = parse_int_list("64", o->d, MAX_LIST);
            o->dtype_count = parse_dtypes("f32", o->dtype, o->precision);
            o->tokens = 1024;
            o->hidden = 256;
            o->warmup = 1;
            o->reps = 3;
            break;
        case 'v': o->verbose = true; break;
        case 'h': usage(stdout); exit(EXIT_SUCCESS);
        case 'V': printf("flashcl-bench %s\n", flashcl_version()); exit(EXIT_SUCCESS);
        default: usage(stderr); exit(EXIT_FAILURE);
        }
        if (bad) {
            fprintf(stderr, "flashcl-bench: bad value \"%s\" for --%s%s%s\n", optarg, longopts[li].name,
                    why ? ": " : "", why ? why : "");
            usage(stderr);
            exit(EXIT_FAILURE);
        }
    }
    if (o->varlen.count > 0 && o->decode_count > 0) {
        fprintf(stderr, "flashcl-bench: --varlen and --decode are separate modes; give one\n");
        exit(EXIT_FAILURE);
    }
    if (o->window > 0) {  /* a window here is causal */
        o->causal[0] = 1;
        o->causal_count = 1;
    }
    const bool variant = o->sinks || o->alibi || o->softcap > 0.0f || o->head_dim_v > 0 || o->window > 0;
    if (variant && (o->varlen.count > 0 || o->decode_count > 0)) {
        fprintf(stderr, "flashcl-bench: --sinks, --alibi, --softcap, --head-dim-v and --window are for the sweep (not --varlen or "
                        "--decode)\n");
        exit(EXIT_FAILURE);
    }
    if (variant)  /* the standard path refuses them: the flash path only */
        o->paths &= 1 << BENCH_FLASH;
    if (o->heads_given && o->varlen.count == 0) {
        fprintf(stderr, "flashcl-bench: --heads is for --varlen (--decode shapes name their heads)\n");
        exit(EXIT_FAILURE);
    }
    /* --varlen takes its heads from --heads, so --hidden does not constrain d there. */
    const bool heads_from_hidden = o->varlen.count == 0;
    for (int i = 0; i < o->d_count; i++)
        if (o->d[i] < 1 || o->d[i] > FLASHCL_MAX_HEAD_DIM || (heads_from_hidden && o->hidden % o->d[i])) {
            if (heads_from_hidden)
                fprintf(stderr, "flashcl-bench: head dim %d must be 1..256 and divide --hidden %ld\n", o->d[i],
                        o->hidden);
            else
                fprintf(stderr, "flashcl-bench: head dim %d must be 1..256\n", o->d[i]);
            exit(EXIT_FAILURE);
        }
    for (int i = 0; i < o->n_count; i++)
        if (o->n[i] < 1) {
            fprintf(stderr, "flashcl-bench: N must be >= 1\n");
            exit(EXIT_FAILURE);
        }
}

struct result {
    struct bench_case c;
    enum bench_path path;
    flashcl_status status;
    double median_ms, min_ms, tflops, err_ref, err_vs_flash;
    size_t device_bytes;
    const char *kernel;  /* what ran: portable, tensor-core or clblast */
};

static void run_case(struct bench_env *env, const struct options *opt, const struct bench_case *c,
                     struct result *results, int *n_results)
{
    const size_t esize = flashcl_dtype_size(c->dtype);
    const size_t elems = (size_t)c->batch * (size_t)c->n * (size_t)c->heads * (size_t)c->d;
    const size_t elems_v = elems / (size_t)c->d * (size_t)bench_dv(c);  /* V's, O's and dO's */
    /* What is read back: O (dv columns) or, after a backward, dQ (d). */
    const size_t out_elems = c->pass == BENCH_PASS_FORWARD ? elems_v : elems;
    const flashcl_dtype out_dtype = c->pass == BENCH_PASS_FORWARD ? bench_o_dtype(c) : c->dtype;
    const size_t out_bytes = out_elems * flashcl_dtype_size(out_dtype);
    void *q = malloc(elems * esize), *k = malloc(elems * esize), *v = malloc(elems_v * esize);
    void *o = malloc(out_bytes), *o_flash = malloc(out_bytes);
    void *d_o = c->pass != BENCH_PASS_FORWARD ? malloc(elems_v * esize) : NULL;
    if (!q || !k || !v || !o || !o_flash || (c->pass != BENCH_PASS_FORWARD && !d_o)) {
        fprintf(stderr, "flashcl-bench: out of host memory\n");
        exit(EXIT_FAILURE);
    }
    rng_seed((uint64_t)c->n * 131 + (uint64_t)c->d);
    bench_fill_random(q, c->dtype, elems);
    bench_fill_random(k, c->dtype, elems);
    bench_fill_random(v, c->dtype, elems_v);
    if (d_o)
        bench_fill_random(d_o, c->dtype, elems_v);
    /* The products' FLOPs, 2 B H N² a column of their inner or outer dim: the forward's QKᵀ over d and PV over dv,
     * the backward's S, dQ and dK over d, dP and dV over dv (4 B H N² d and 2.5 times that where d = dv). */
    double pairs = (double)c->n * c->n * (c->causal ? 0.5 : 1.0);  /* causal: the convention's half */
    if (c->window > 0) {  /* the visible pairs: min(row, W) + 1 keys a row */
        const double w = c->window < c->n ? c->window : c->n - 1;
        pairs = (double)c->n * (w + 1) - w * (w + 1) / 2;
    }
    const double per_column = 2.0 * c->batch * c->heads * pairs;
    const double forward_flops = per_column * (c->d + bench_dv(c)), backward_flops = per_column * (3 * c->d + 2 * bench_dv(c));
    const double flops = c->pass == BENCH_PASS_FORWARD ? forward_flops
                         : c->pass == BENCH_PASS_BACKWARD ? backward_flops : forward_flops + backward_flops;

    struct bench_buffers bufs;
    flashcl_status st = bench_buffers_create(env, c, q, k, v, &bufs);
    if (st == FLASHCL_SUCCESS && d_o)
        st = bench_buffers_add_grads(env, c, d_o, &bufs);
    bool have_flash = false;
    for (int p = 0; p < BENCH_PATH_COUNT; p++) {
        if (!(opt->paths & (1 << p)))
            continue;
        struct result *r = &results[(*n_results)++];
        memset(r, 0, sizeof(*r));
        r->c = *c;
        r->path = (enum bench_path)p;
        r->err_ref = r->err_vs_flash = NAN;
        r->status = st;
        if (st != FLASHCL_SUCCESS)
            continue;
        r->status = bench_prepare_path(env, r->path, &bufs, c, &r->device_bytes);
        r->kernel = bench_kernel_name(env, r->path, &bufs);
        if (r->status == FLASHCL_SUCCESS)
            r->status = bench_time(env, r->path, &bufs, c, opt->warmup, opt->reps, &r->median_ms, &r->min_ms, NULL);
        if (r->status == FLASHCL_SUCCESS)
            r->status = bench_read_output(env, c, &bufs, o, out_bytes);
        if (r->status == FLASHCL_SUCCESS) {
            r->tflops = flops / (r->median_ms * 1e-3) / 1e12;
            r->err_ref = d_o ? bench_sampled_dq_error(c, q, k, v, d_o, o) : bench_sampled_error(c, q, k, v, o);
            if (r->path == BENCH_FLASH) {
                memcpy(o_flash, o, out_bytes);
                have_flash = true;
            } else if (have_flash) {
                double m = 0;
                for (size_t i = 0; i < out_elems; i++) {
                    const double e = fabs(hostref_load(o, out_dtype, i) - hostref_load(o_flash, out_dtype, i));
                    m = e > m || e != e ? e : m;
                }
                r->err_vs_flash = m;
            }
        } else {
            fprintf(stderr, "\n%s N=%d d=%d: %s: %s\n", bench_path_name(r->path), c->n, c->d,
                    flashcl_status_name(r->status), flashcl_last_error());
        }
        bench_release_path(env, r->path, &bufs);
    }
    bench_buffers_release(&bufs);
    free(q);
    free(k);
    free(v);
    free(o);
    free(o_flash);
    free(d_o);
}

static void print_table(FILE *f, const struct result *r, int n, const char *device)
{
    fprintf(f, "\nflashcl-bench on %s (times: median of the timed runs, OpenCL profiling events)\n", device);
    fprintf(f, "%-9s %-8s %-11s %6s %4s %5s %6s %5s %6s %10s %9s %10s %8s %10s %10s\n", "path", "pass", "kernel", "N",
            "d", "dtype", "causal", "batch", "heads", "ms", "TFLOP/s", "dev MiB", "flash x", "err(ref)", "err(flash)");
    for (int i = 0; i < n; i++) {
        const struct result *x = &r[i];
        fprintf(f, "%-9s %-8s %-11s %6d %4d %5s %6d %5d %6d ", bench_path_name(x->path), bench_pass_name(x->c.pass),
                x->kernel ? x->kernel : "-", x->c.n, x->c.d,
                dtype_name(x->c.dtype, x->c.precision), x->c.causal, x->c.batch, x->c.heads);
        if (x->status != FLASHCL_SUCCESS) {
            fprintf(f, "%s", flashcl_status_name(x->status));
            if (x->device_bytes)
                fprintf(f, " (needs %.1f MiB)", x->device_bytes / 1048576.0);
            fprintf(f, "\n");
            continue;
        }
        /* 'flash x': this path's time over flash's on the same case (flash's speed-up). */
        double speedup = NAN;
        for (int j = 0; j < n; j++)
            if (r[j].path == BENCH_FLASH && r[j].status == FLASHCL_SUCCESS &&
                memcmp(&r[j].c, &x->c, sizeof(x->c)) == 0)
                speedup = x->median_ms / r[j].median_ms;
        fprintf(f, "%10.3f %9.2f %10.1f %8.2f %10.2e %10.2e\n", x->median_ms, x->tflops,
                x->device_bytes / 1048576.0, speedup, x->err_ref, x->err_vs_flash);
    }
}

static void csv_header(FILE *f)
{
    fprintf(f, "device,path,pass,N,d,dtype,causal,batch,heads,status,median_ms,min_ms,tflops,device_bytes,"
               "err_ref,err_vs_flash,kernel,dv\n");
}

/* One row per result, written as soon as it exists so a cut-short sweep
 * still leaves its finished rows. */
static void csv_row(FILE *f, const struct result *r, const char *device)
{
    fprintf(f, "\"%s\",%s,%s,%d,%d,%s,%d,%d,%d,%s,%.6f,%.6f,%.4f,%zu,%.3e,%.3e,%s,%d\n", device,
            bench_path_name(r->path), bench_pass_name(r->c.pass), r->c.n, r->c.d, dtype_name(r->c.dtype, r->c.precision), r->c.causal, r->c.batch,
            r->c.heads, flashcl_status_name(r->status), r->median_ms, r->min_ms, r->tflops,
            r->device_bytes, r->err_ref, r->err_vs_flash, r->kernel ? r->kernel : "", bench_dv(&r->c));
    fflush(f);
}

static void json_number(FILE *f, const char *key, double x, const char *tail)
{
    if (isfinite(x))
        fprintf(f, "\"%s\": %.6g%s", key, x, tail);
    else
        fprintf(f, "\"%s\": null%s", key, tail);
}

static void write_json(const char *path, const struct result *r, int n, const char *device)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return;
    }
    fprintf(f, "{\n  \"device\": \"%s\",\n  \"flashcl_version\": \"%s\",\n  \"results\": [\n", device,
            FLASHCL_VERSION_STRING);
    for (int i = 0; i < n; i++) {
        fprintf(f, "    {\"path\": \"%s\", \"pass\": \"%s\", \"N\": %d, \"d\": %d, \"dv\": %d, \"dtype\": \"%s\", "
                   "\"causal\": %s, \"batch\": %d, \"heads\": %d, \"status\": \"%s\", \"kernel\": \"%s\", "
                   "\"device_bytes\": %zu, ",
                bench_path_name(r[i].path), bench_pass_name(r[i].c.pass), r[i].c.n, r[i].c.d, bench_dv(&r[i].c),
                dtype_name(r[i].c.dtype, r[i].c.precision),
                r[i].c.causal ? "true" : "false", r[i].c.batch, r[i].c.heads,
                flashcl_status_name(r[i].status), r[i].kernel ? r[i].kernel : "", r[i].device_bytes);
        json_number(f, "median_ms", r[i].status ? NAN : r[i].median_ms, ", ");
        json_number(f, "min_ms", r[i].status ? NAN : r[i].min_ms, ", ");
        json_number(f, "tflops", r[i].status ? NAN : r[i].tflops, ", ");
        json_number(f, "err_ref", r[i].err_ref, ", ");
        json_number(f, "err_vs_flash", r[i].err_vs_flash, "}");
        fprintf(f, "%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
}

/* The decode mode: each shape, head dim and dtype; a table, and CSV rows. */
static int run_decode(struct bench_env *env, const struct options *opt)
{
    FILE *csv = opt->csv ? fopen(opt->csv, "w") : NULL;
    if (opt->csv && !csv) {
        perror(opt->csv);
        return EXIT_FAILURE;
    }
    if (csv)
        fprintf(csv, "device,mode,batch,heads_q,heads_kv,Nq,Nk,d,dtype,status,kernel,splits,median_ms,kv_gb_s,err_ref,"
                     "last_ms,kv_layout\n");
    printf("\nflashcl-bench --decode on %s (median of the timed runs, OpenCL profiling events; K+V GB/s: the\n"
           "cache's K and V read once per call; last ms: the last command's own time, the merge of a split\n"
           "call); a dense cache as %s\n", env->device_name,
           opt->kv_layout == DECODE_KV_BHND ? "[B, Hkv, Nk, d]" : "[B, Nk, Hkv, d]");
    printf("%5s %4s %4s %5s %7s %4s %5s %-15s %6s %10s %9s %10s %8s\n", "batch", "Hq", "Hkv", "Nq", "Nk", "d", "dtype",
           "kernel", "splits", "ms", "K+V GB/s", "err(ref)", "last ms");
    int failures = 0;
    for (int i = 0; i < opt->decode_count; i++)
        for (int a = 0; a < opt->d_count; a++)
            for (int t = 0; t < opt->dtype_count; t++)
              for (int paged = 0; paged <= (opt->page_size > 0); paged++) {
                struct decode_result r;
                const flashcl_dtype dtype = opt->dtype[t];
                const enum decode_kv_layout layout = paged ? DECODE_KV_BNHD : opt->kv_layout;
                bench_decode(env, &opt->decode[i], opt->d[a], dtype, paged ? opt->page_size : 0, layout,
                             opt->warmup, opt->reps, &r);
                char kernel[48];
                snprintf(kernel, sizeof(kernel), "%s%s", r.kernel ? r.kernel : "", paged ? " paged" : "");
                const struct decode_shape *s = &r.shape;
                /* an E4M3 cache (f16 Q and O) is bounded as f16: its values are exact in f16 */
                const flashcl_dtype bound_dtype = dtype == FLASHCL_E4M3 ? FLASHCL_F16 : dtype;
                const struct bench_case c = {s->seq_kv, r.d, s->batch, s->heads_q, s->seq_q > 1, bound_dtype,
                                             FLASHCL_PRECISION_EXACT, BENCH_PASS_FORWARD, s->heads_kv, false, false, 0.0f, 0, 0};
                printf("%5d %4d %4d %5d %7d %4d %5s ", s->batch, s->heads_q, s->heads_kv, s->seq_q, s->seq_kv, r.d,
                       flashcl_dtype_name(dtype));
                if (r.status != FLASHCL_SUCCESS) {
                    printf("%s: %s\n", flashcl_status_name(r.status), flashcl_last_error());
                    failures++;
                } else {
                    printf("%-15s %6d %10.4f %9.1f %10.2e %8.4f\n", kernel, r.splits, r.median_ms, r.kv_gb_s, r.err_ref,
                           r.last_ms);
                    failures += !(r.err_ref <= bench_tolerance(&c));
                }
                if (csv)
                    fprintf(csv, "\"%s\",%s,%d,%d,%d,%d,%d,%d,%s,%s,%s,%d,%.6f,%.2f,%.3e,%.6f,%s\n", env->device_name,
                            paged ? "decode-paged" : "decode", s->batch, s->heads_q, s->heads_kv, s->seq_q, s->seq_kv,
                            r.d, flashcl_dtype_name(dtype), flashcl_status_name(r.status), kernel, r.splits,
                            r.median_ms, r.kv_gb_s, r.err_ref, r.last_ms, layout == DECODE_KV_BHND ? "bhnd" : "bnhd");
                fflush(stdout);  /* the rows so far survive a later shape that takes the process down */
                if (csv)
                    fflush(csv);
              }
    if (csv)
        fclose(csv);
    if (failures)
        printf("%d decode result(s) failed or exceed the error tolerance of their dtype\n", failures);
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* One varlen result; mode "varlen", joined with torch_varlen.py's rows by
 * (sequences, total_tokens, heads_q, heads_kv, d, dtype, causal) in compare.py. */
static void csv_varlen_row(FILE *f, const char *device, const struct varlen_batch *batch,
                           const struct varlen_result *r, double ratio)
{
    fprintf(f, "\"%s\",varlen,%d,%d,%d,%d,%d,%d,%d,%s,%d,", device, batch->count, r->total_tokens, r->shortest,
            r->longest, batch->heads_q, batch->heads_kv, r->d, dtype_name(r->dtype, r->precision), r->causal);
    fprintf(f, "%s,%s,%.6f,%.6f,%.4f,", flashcl_status_name(r->status), r->kernel ? r->kernel : "", r->median_ms,
            r->min_ms, r->tflops);
    fprintf(f, "%d,%d,%s,%s,%.6f,%.6f,%.4f,%.4f\n", r->dense_batch, r->dense_n, flashcl_status_name(r->dense_status),
            r->dense_kernel ? r->dense_kernel : "", r->dense_ms, r->dense_min_ms, r->dense_tflops, ratio);
    fflush(f);
}

/* The varlen mode: the packed batch at each head dim, dtype and mask, next
 * to a dense call of the same tokens; a table, and CSV rows. */
static int run_varlen(struct bench_env *env, const struct options *opt)
{
    const struct varlen_batch *batch = &opt->varlen;
    FILE *csv = opt->csv ? fopen(opt->csv, "w") : NULL;
    if (opt->csv && !csv) {
        perror(opt->csv);
        return EXIT_FAILURE;
    }
    if (csv)
        fprintf(csv, "device,mode,sequences,total_tokens,min_len,max_len,heads_q,heads_kv,d,dtype,causal,status,"
                     "kernel,median_ms,min_ms,tflops,dense_batch,dense_N,dense_status,dense_kernel,dense_ms,"
                     "dense_min_ms,dense_tflops,varlen_over_dense\n");
    long long total = 0;
    int shortest = batch->lengths[0], longest = batch->lengths[0];
    for (int i = 0; i < batch->count; i++) {
        total += batch->lengths[i];
        shortest = batch->lengths[i] < shortest ? batch->lengths[i] : shortest;
        longest = batch->lengths[i] > longest ? batch->lengths[i] : longest;
    }
    printf("\nflashcl-bench --varlen on %s: %d sequences, %lld tokens (%d..%d, mean %.1f), heads %d:%d\n"
           "(median of the timed runs, OpenCL profiling events; TFLOP/s: 4·L²·d·Hq summed over the sequences,\n"
           "halved when causal; dense: one flashcl_forward of batch = sequences, N = the mean length rounded)\n",
           env->device_name, batch->count, total, shortest, longest, (double)total / batch->count, batch->heads_q,
           batch->heads_kv);
    printf("%4s %6s %6s %-15s %10s %9s %11s %-15s %10s %9s %8s\n", "d", "dtype", "causal", "kernel", "ms", "TFLOP/s",
           "dense BxN", "dense kernel", "dense ms", "TFLOP/s", "vl/dense");
    int failures = 0;
    for (int a = 0; a < opt->d_count; a++)
        for (int t = 0; t < opt->dtype_count; t++)
            for (int cz = 0; cz < opt->causal_count; cz++) {
                struct varlen_result r;
                bench_varlen(env, batch, opt->d[a], opt->dtype[t], opt->precision[t], opt->causal[cz], opt->warmup,
                             opt->reps, &r);
                const char *dtype = dtype_name(r.dtype, r.precision);
                const bool ok = r.status == FLASHCL_SUCCESS, dense_ok = r.dense_status == FLASHCL_SUCCESS;
                const double ratio = ok && dense_ok ? r.tflops / r.dense_tflops : NAN;
                char dense_shape[24];
                snprintf(dense_shape, sizeof(dense_shape), "%dx%d", r.dense_batch, r.dense_n);
                printf("%4d %6s %6d ", r.d, dtype, r.causal);
                if (ok)
                    printf("%-15s %10.3f %9.2f ", r.kernel, r.median_ms, r.tflops);
                else
                    printf("%-36s ", flashcl_status_name(r.status));
                if (dense_ok && ok)
                    printf("%11s %-15s %10.3f %9.2f %7.2fx\n", dense_shape, r.dense_kernel, r.dense_ms, r.dense_tflops,
                           ratio);
                else if (dense_ok)
                    printf("%11s %-15s %10.3f %9.2f %8s\n", dense_shape, r.dense_kernel, r.dense_ms, r.dense_tflops, "-");
                else
                    printf("%11s %s\n", dense_shape, flashcl_status_name(r.dense_status));
                if (!ok || !dense_ok) {
                    printf("     %s\n", r.error);
                    failures++;
                }
                if (csv)
                    csv_varlen_row(csv, env->device_name, batch, &r, ratio);
            }
    if (csv)
        fclose(csv);
    if (failures)
        printf("%d varlen case(s) failed\n", failures);
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}

static bool pass_wanted(const struct options *o, int pass)
{
    return (o->passes >> pass) & 1;
}

int main(int argc, char **argv)
{
    struct options opt;
    parse_options(argc, argv, &opt);

    struct bench_env env;
    if (bench_env_create(&env, opt.verbose) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl-bench: %s\n", flashcl_last_error());
        return EXIT_FAILURE;
    }
    env.calls = opt.calls;
    if (opt.decode_count > 0 || opt.varlen.count > 0) {
        const int status = opt.decode_count > 0 ? run_decode(&env, &opt) : run_varlen(&env, &opt);
        bench_env_release(&env);
        free(opt.varlen.lengths);
        return status;
    }
    int n_passes = 0;
    for (int p = 0; p < BENCH_PASS_COUNT; p++)
        n_passes += (opt.passes >> p) & 1;
    const int total = opt.n_count * opt.d_count * opt.dtype_count * opt.causal_count * n_passes;
    struct result *results = calloc((size_t)total * BENCH_PATH_COUNT, sizeof(*results));
    int n_results = 0, done = 0, failures = 0;
    FILE *csv = NULL;
    if (opt.csv) {
        csv = fopen(opt.csv, "w");
        if (!csv) {
            perror(opt.csv);
            return EXIT_FAILURE;
        }
        csv_header(csv);
    }
    for (int pass = 0; pass < BENCH_PASS_COUNT; pass++)
    for (int a = 0; pass_wanted(&opt, pass) && a < opt.d_count; a++)
        for (int b = 0; b < opt.dtype_count; b++)
            for (int cz = 0; cz < opt.causal_count; cz++)
                for (int i = 0; i < opt.n_count; i++) {
                    struct bench_case c = {0};
                    c.n = opt.n[i];
                    c.d = opt.d[a];
                    c.dtype = opt.dtype[b];
                    c.precision = opt.precision[b];
                    c.causal = opt.causal[cz];
                    c.batch = opt.tokens / c.n > 0 ? (int)(opt.tokens / c.n) : 1;
                    c.heads = (int)(opt.hidden / c.d);
                    c.pass = (enum bench_pass)pass;
                    c.sinks = opt.sinks;
                    c.alibi = opt.alibi;
                    c.softcap = opt.softcap;
                    c.dv = opt.head_dim_v;
                    c.window = opt.window;
                    if (c.window > 0)
                        c.causal = 1;
                    fprintf(stderr, "\r[%d/%d] %s N=%d d=%d %s %s          ", ++done, total, bench_pass_name(c.pass),
                            c.n, c.d, dtype_name(c.dtype, c.precision), c.causal ? "causal" : "full");
                    const int first = n_results;
                    run_case(&env, &opt, &c, results, &n_results);
                    for (int r = first; csv && r < n_results; r++)
                        csv_row(csv, &results[r], env.device_name);
                }
    fprintf(stderr, "\n");
    for (int i = 0; i < n_results; i++)
        if (results[i].status == FLASHCL_SUCCESS && !(results[i].err_ref <= bench_tolerance(&results[i].c)))
            failures++;
    print_table(stdout, results, n_results, env.device_name);
    if (csv)
        fclose(csv);
    if (opt.json)
        write_json(opt.json, results, n_results, env.device_name);
    if (failures)
        printf("%d result(s) exceed the error tolerance of their dtype\n", failures);
    free(results);
    bench_env_release(&env);
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
