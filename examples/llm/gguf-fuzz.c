/*
 * gguf-fuzz: mutates GGUF files and feeds them to the reader, the model's
 * config check, the tokenizer and the dequantiser (plain C, no OpenCL; run
 * it in the ASan/UBSan build to catch any read out of bounds).
 *
 *     gguf-fuzz [-n ITERATIONS] [-s SEED] [FILE.gguf]
 *
 * The seed input is a small GGUF written here (every value type, a
 * tokenizer, tensors of each supported type), or the first 4 MB of FILE with
 * its tensor data cut off. Each iteration applies 1-8 mutations (bit flips,
 * interesting bytes, 8-byte fields set to 0/huge, truncation, insertion,
 * deletion) and must end in either a parsed file or a message; it exits 1
 * if a parse "succeeds" with a tensor outside the bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dequant.h"
#include "gguf.h"
#include "config.h"
#include "tokenizer.h"

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void kv_str(struct buf *b, const char *k, const char *v)
{
    put_str(b, k);
    put_u32(b, GGUF_TYPE_STRING);
    put_str(b, v);
}

static void kv_u32(struct buf *b, const char *k, uint32_t v)
{
    put_str(b, k);
    put_u32(b, GGUF_TYPE_UINT32);
    put_u32(b, v);
}

static void kv_f32(struct buf *b, const char *k, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_str(b, k);
    put_u32(b, GGUF_TYPE_FLOAT32);
    put_u32(b, bits);
}

/* A tiny llama: 1 layer, embd 32, 2 heads of 16 (1 K/V), ffn 32, vocab 8. */
static struct buf make_seed(void)
{
    struct buf b = {0};
    static const char *const tokens[] = {"<|endoftext|>", "<|im_start|>", "a", "b", "ab", "\xc4\xa0", "\xc4\xa0" "a", "c"};
    static const char *const merges[] = {"a b", "\xc4\xa0 a"};
    static const char *const tensors[] = {"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight",
                                          "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                                          "blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",
                                          "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};
    const uint64_t ne1[] = {8, 1, 1, 32, 16, 16, 32, 1, 32, 32, 32};
    const uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_F32, GGML_TYPE_F32, GGML_TYPE_Q4_1, GGML_TYPE_F16, GGML_TYPE_Q4_1,
                              GGML_TYPE_Q4_1, GGML_TYPE_F32, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_F16};
    const int n_tensors = 11, n_kv = 19;
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, (uint64_t)n_tensors);
    put_u64(&b, (uint64_t)n_kv);
    kv_str(&b, "general.architecture", "llama");
    kv_u32(&b, "general.alignment", 32);
    kv_u32(&b, "llama.block_count", 1);
    kv_u32(&b, "llama.context_length", 64);
    kv_u32(&b, "llama.embedding_length", 32);
    kv_u32(&b, "llama.feed_forward_length", 32);
    kv_u32(&b, "llama.attention.head_count", 2);
    kv_u32(&b, "llama.attention.head_count_kv", 1);
    kv_f32(&b, "llama.rope.freq_base", 10000.0f);
    kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    kv_str(&b, "tokenizer.ggml.pre", "smollm");
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", 0);
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_STRING);
    put_u64(&b, 8);
    for (int i = 0; i < 8; i++)
        put_str(&b, tokens[i]);
    put_str(&b, "tokenizer.ggml.merges");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_STRING);
    put_u64(&b, 2);
    put_str(&b, merges[0]);
    put_str(&b, merges[1]);
    put_str(&b, "tokenizer.ggml.token_type");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_INT32);
    put_u64(&b, 8);
    for (int i = 0; i < 8; i++)
        put_u32(&b, i < 2 ? 3 : 1);
    put_str(&b, "tokenizer.ggml.add_bos_token");
    put_u32(&b, GGUF_TYPE_BOOL);
    put(&b, "\0", 1);
    put_str(&b, "general.scores");  /* other value types, for the reader */
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_FLOAT64);
    put_u64(&b, 2);
    put_u64(&b, 0x3ff0000000000000ull);
    put_u64(&b, 0);
    uint64_t offset = 0;
    for (int i = 0; i < n_tensors; i++) {
        const uint64_t elements = 32 * ne1[i];
        const uint64_t bytes = types[i] == GGML_TYPE_F32 ? elements * 4 : types[i] == GGML_TYPE_F16 ? elements * 2
                             : types[i] == GGML_TYPE_Q4_1 ? elements / 32 * 20 : elements / 32 * 34;
        put_str(&b, tensors[i]);
        put_u32(&b, ne1[i] == 1 ? 1 : 2);
        put_u64(&b, 32);
        if (ne1[i] != 1)
            put_u64(&b, ne1[i]);
        put_u32(&b, types[i]);
        put_u64(&b, offset);
        offset += (bytes + 31) / 32 * 32;
    }
    while (b.n % 32)
        put(&b, "\0", 1);
    for (uint64_t i = 0; i < offset; i++) {
        const uint8_t x = (uint8_t)(i * 37 + 11);
        put(&b, &x, 1);
    }
    return b;
}

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void mutate(struct buf *b)
{
    static const uint8_t interesting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x20, 0x08, 0x09, 0x0c};
    if (b->n == 0)
        return;
    const size_t at = rnd() % b->n;
    switch (rnd() % 7) {
    case 0:
        b->p[at] ^= (uint8_t)(1u << (rnd() % 8));
        break;
    case 1:
        b->p[at] = interesting[rnd() % sizeof interesting];
        break;
    case 2: {  /* an 8-byte field (a length, count, dim or offset) set to something extreme */
        static const uint64_t values[] = {0, 1, 0xffffffffffffffffull, 0x7fffffffffffffffull, 0x100000000ull, 1u << 20,
                                          31, 33};
        const uint64_t v = values[rnd() % 8];
        for (int i = 0; i < 8 && at + (size_t)i < b->n; i++)
            b->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
        break;
    }
    case 3:
        b->n = at;  /* truncate */
        break;
    case 4: {  /* delete a run */
        const size_t len = 1 + rnd() % 16;
        if (at + len <= b->n) {
            memmove(b->p + at, b->p + at + len, b->n - at - len);
            b->n -= len;
        }
        break;
    }
    case 5: {  /* insert a run */
        const size_t len = 1 + rnd() % 16;
        uint8_t junk[16];
        for (size_t i = 0; i < len; i++)
            junk[i] = (uint8_t)rnd();
        put(b, junk, len);  /* grow, then shift the tail up */
        memmove(b->p + at + len, b->p + at, b->n - len - at);
        memcpy(b->p + at, junk, len);
        break;
    }
    default:  /* a 4-byte field (a type or a version) */
        b->p[at] = (uint8_t)(rnd() % 40);
        break;
    }
}

/* Everything a loader would touch, on a parsed file. Returns -1 if the parse let something out of bounds. */
static int exercise(const struct gguf_file *f, const uint8_t *bytes, size_t size, long *loaded)
{
    char err[512];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->data < bytes || t->bytes > size || t->data + t->bytes > bytes + size)
            return -1;
        if (dequant_supported(t->type) && t->elements <= (1u << 20)) {
            float *out = malloc((size_t)t->elements * sizeof *out);
            if (out)
                dequantise(t->type, t->data, t->elements, out);
            free(out);
        }
    }
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].type == GGUF_TYPE_ARRAY && f->kv[i].array_type != GGUF_TYPE_STRING)
            for (uint64_t j = 0; j < f->kv[i].array_len && j < 64; j++)
                (void)gguf_array_int(&f->kv[i], j);
    struct llm_config cfg;
    struct tokenizer *tok = NULL;
    if (llm_config_read(f, &cfg, err, sizeof err) == 0)
        ++*loaded;
    if (tokenizer_load(f, &tok, err, sizeof err) == 0) {
        static const char text[] = "ab a\xc4 c<|im_start|>b  \n 12\xff";
        int *ids = NULL;
        size_t n = 0;
        tokenizer_encode(tok, text, sizeof text - 1, 1, &ids, &n);
        char piece[64];
        for (size_t i = 0; i < n; i++)
            tokenizer_decode(tok, ids[i], 1, piece, sizeof piece);
        free(ids);
        tokenizer_free(&tok);
    }
    return 0;
}

int main(int argc, char **argv)
{
    long iterations = 2000;
    unsigned long long seed = 1;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            iterations = atol(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (argv[i][0] != '-')
            path = argv[i];
        else {
            fprintf(stderr, "usage: %s [-n ITERATIONS] [-s SEED] [FILE.gguf]\n", argv[0]);
            return 2;
        }
    }
    struct buf seed_file = {0};
    if (path) {
        /* A real file's metadata: its first 4 MB (the tensor table and the tokenizer of SmolLM2 fit). */
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            fprintf(stderr, "gguf-fuzz: cannot open %s\n", path);
            return 2;
        }
        seed_file.cap = 4 << 20;
        seed_file.p = malloc(seed_file.cap);
        seed_file.n = seed_file.p ? fread(seed_file.p, 1, seed_file.cap, fp) : 0;
        fclose(fp);
    } else {
        seed_file = make_seed();
    }
    char err[512];
    struct gguf_file f;
    const int seed_parses = gguf_parse(seed_file.p, seed_file.n, &f, err, sizeof err) == 0;
    long loaded = 0;
    if (seed_parses) {
        exercise(&f, seed_file.p, seed_file.n, &loaded);
        gguf_close(&f);
    }
    printf("gguf-fuzz: seed input of %zu bytes %s%s%s\n", seed_file.n, seed_parses ? "parses" : "is refused: ",
           seed_parses ? "" : err, seed_parses && loaded ? " and passes the model's checks" : "");
    rng_state = seed;
    long parsed = 0, refused = 0;
    struct buf work = {0};
    for (long it = 0; it < iterations; it++) {
        work.n = 0;
        put(&work, seed_file.p, seed_file.n);
        const int mutations = 1 + (int)(rnd() % 8);
        for (int m = 0; m < mutations; m++)
            mutate(&work);
        /* An exact-size copy, so ASan sees any read past the end. */
        uint8_t *exact = malloc(work.n ? work.n : 1);
        memcpy(exact, work.p, work.n);
        if (gguf_parse(exact, work.n, &f, err, sizeof err) == 0) {
            parsed++;
            if (exercise(&f, exact, work.n, &loaded)) {
                fprintf(stderr, "gguf-fuzz: iteration %ld (seed %llu): a tensor outside the file was accepted\n", it, seed);
                return 1;
            }
            gguf_close(&f);
        } else {
            refused++;
            if (!err[0]) {
                fprintf(stderr, "gguf-fuzz: iteration %ld (seed %llu): refused without a message\n", it, seed);
                return 1;
            }
        }
        free(exact);
    }
    printf("gguf-fuzz: %ld iterations (seed %llu): %ld parsed (%ld passed the model's checks), %ld refused with a "
           "message\n", iterations, seed, parsed, loaded, refused);
    free(work.p);
    free(seed_file.p);
    return 0;
}
