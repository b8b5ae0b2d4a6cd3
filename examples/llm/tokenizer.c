/* Byte-level BPE: pre-tokenize, map bytes to GPT-2's printable code points,
 * then merge adjacent symbols lowest merge rank first (leftmost on ties), as
 * llama.cpp's llm_tokenizer_bpe_session does. */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pretokenize.h"
#include "unicode.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4 };

struct text {
    const char *bytes;
    size_t len;
};

/* Open addressing from a string to an int (token id or merge rank). */
struct table {
    struct text *keys;
    int *values;
    size_t mask;
};

struct tokenizer {
    int n_vocab;
    struct text *tokens;  /* byte-level text of each id */
    int *token_type;
    struct table vocab, merges;
    int *specials;        /* ids matched in raw text, longest first */
    int n_specials;
    int bos, eos, add_bos;
    char *arena;          /* the bytes every struct text points into */
    uint32_t byte_to_cp[256];
    int cp_to_byte[512];  /* GPT-2's map covers code points below 324 */
};

static uint64_t hash_text(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int table_init(struct table *t, size_t entries)
{
    size_t size = 16;
    while (size < 2 * entries)
        size *= 2;
    t->keys = calloc(size, sizeof *t->keys);
    t->values = malloc(size * sizeof *t->values);
    t->mask = size - 1;
    return t->keys && t->values ? 0 : -1;
}

/* Inserts unless present (the first id of a duplicated token text wins). */
static void table_put(struct table *t, struct text key, int value)
{
    for (size_t i = hash_text(key.bytes, key.len) & t->mask;; i = (i + 1) & t->mask) {
        if (!t->keys[i].bytes) {
            t->keys[i] = key;
            t->values[i] = value;
            return;
        }
        if (t->keys[i].len == key.len && !memcmp(t->keys[i].bytes, key.bytes, key.len))
            return;
    }
}

static int table_get(const struct table *t, const char *s, size_t n)
{
    for (size_t i = hash_text(s, n) & t->mask; t->keys[i].bytes; i = (i + 1) & t->mask)
        if (t->keys[i].len == n && !memcmp(t->keys[i].bytes, s, n))
            return t->values[i];
    return -1;
}

static void table_free(struct table *t)
{
    free(t->keys);
    free(t->values);
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others
 * for code points from 256 up. */
static void init_byte_map(struct tokenizer *t)
{
    int next = 256;
    for (int i = 0; i < 512; i++)
        t->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        const int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        t->byte_to_cp[b] = printable ? (uint32_t)b : (uint32_t)next++;
        t->cp_to_byte[t->byte_to_cp[b]] = b;
    }
}

static const struct tokenizer *sort_tok;  /* qsort has no context argument in C99 */

static int by_length_desc(const void *a, const void *b)
{
    const size_t la = sort_tok->tokens[*(const int *)a].len, lb = sort_tok->tokens[*(const int *)b].len;
    if (la != lb)
        return la > lb ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

int tokenizer_load(const struct gguf_file *f, struct tokenizer **out, char *err, size_t err_size)
{
    *out = NULL;
    struct gguf_str model, pre;
    if (gguf_get_string(f, "tokenizer.ggml.model", &model, err, err_size))
        return -1;
    if (!gguf_str_eq(model, "gpt2")) {
        snprintf(err, err_size, "tokenizer.ggml.model is \"%.*s\"; this example reads \"gpt2\" (byte-level BPE)",
                 (int)(model.len > 40 ? 40 : model.len), model.bytes);
        return -1;
    }
    if (gguf_get_string(f, "tokenizer.ggml.pre", &pre, err, err_size))
        return -1;
    if (!gguf_str_eq(pre, "smollm")) {
        snprintf(err, err_size, "tokenizer.ggml.pre is \"%.*s\"; this example implements \"smollm\"",
                 (int)(pre.len > 40 ? 40 : pre.len), pre.bytes);
        return -1;
    }
    const struct gguf_kv *tokens = gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, err, err_size);
    const struct gguf_kv *merges = gguf_get_array(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, err, err_size);
    const struct gguf_kv *types = gguf_get_array(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, err, err_size);
    if (!tokens || !merges || !types)
        return -1;
    if (tokens->array_len == 0 || tokens->array_len > (1u << 24) || types->array_len != tokens->array_len) {
        snprintf(err, err_size, "%llu tokens and %llu token types: need the same number, 1 to 2^24",
                 (unsigned long long)tokens->array_len, (unsigned long long)types->array_len);
        return -1;
    }
    uint64_t bos, eos, add_bos = 0;
    if (gguf_get_uint(f, "tokenizer.ggml.bos_token_id", tokens->array_len - 1, &bos, err, err_size) ||
        gguf_get_uint(f, "tokenizer.ggml.eos_token_id", tokens->array_len - 1, &eos, err, err_size))
        return -1;
    const struct gguf_kv *add = gguf_find(f, "tokenizer.ggml.add_bos_token");
    if (add && add->type == GGUF_TYPE_BOOL)
        add_bos = add->u64 != 0;

    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        goto oom;
    t->n_vocab = (int)tokens->array_len;
    t->bos = (int)bos;
    t->eos = (int)eos;
    t->add_bos = (int)add_bos;
    init_byte_map(t);
    size_t arena_bytes = 1;
    for (uint64_t i = 0; i < tokens->array_len; i++)
        arena_bytes += tokens->strs[i].len;
    for (uint64_t i = 0; i < merges->array_len; i++)
        arena_bytes += merges->strs[i].len;
    t->arena = malloc(arena_bytes);
    t->tokens = calloc((size_t)t->n_vocab, sizeof *t->tokens);
    t->token_type = calloc((size_t)t->n_vocab, sizeof *t->token_type);
    t->specials = calloc((size_t)t->n_vocab, sizeof *t->specials);
    if (!t->arena || !t->tokens || !t->token_type || !t->specials || table_init(&t->vocab, (size_t)t->n_vocab) ||
        table_init(&t->merges, (size_t)merges->array_len))
        goto oom;
    char *at = t->arena;
    for (int i = 0; i < t->n_vocab; i++) {
        const struct gguf_str s = tokens->strs[i];
        memcpy(at, s.bytes, (size_t)s.len);
        t->tokens[i] = (struct text){at, (size_t)s.len};
        at += s.len;
        t->token_type[i] = (int)gguf_array_int(types, (uint64_t)i);
        /* An empty text cannot be looked up or matched; it keeps its id for decoding only. */
        if (s.len)
            table_put(&t->vocab, t->tokens[i], i);
        const int type = t->token_type[i];
        if (s.len && (type == TOKEN_CONTROL || type == TOKEN_USER_DEFINED || type == TOKEN_UNKNOWN))
            t->specials[t->n_specials++] = i;
    }
    for (uint64_t i = 0; i < merges->array_len; i++) {
        const struct gguf_str s = merges->strs[i];
        memcpy(at, s.bytes, (size_t)s.len);
        table_put(&t->merges, (struct text){at, (size_t)s.len}, (int)i);
        at += s.len;
    }
    sort_tok = t;
    qsort(t->specials, (size_t)t->n_specials, sizeof *t->specials, by_length_desc);
    *out = t;
    return 0;
oom:
    tokenizer_free(&t);
    snprintf(err, err_size, "out of memory building the tokenizer");
    return -1;
}

void tokenizer_free(struct tokenizer **tok)
{
    struct tokenizer *t = tok ? *tok : NULL;
    if (!t)
        return;
    table_free(&t->vocab);
    table_free(&t->merges);
    free(t->tokens);
    free(t->token_type);
    free(t->specials);
    free(t->arena);
    free(t);
    *tok = NULL;
}

struct ids {
    int **data;
    size_t *count, cap;
};

static int push(struct ids *v, int id)
{
    if (*v->count == v->cap) {
        const size_t cap = v->cap ? v->cap * 2 : 64;
        int *d = realloc(*v->data, cap * sizeof *d);
        if (!d)
            return -1;
        *v->data = d;
        v->cap = cap;
    }
    (*v->data)[(*v->count)++] = id;
    return 0;
}

struct symbol {
    size_t start, n;  /* bytes of the encoded word */
    int prev, next;
};

struct bigram {
    int rank, left, right;
    size_t left_n, right_n;  /* the symbols' lengths when queued: stale once either changed */
};

struct heap {
    struct bigram *items;
    size_t n, cap;
};

static int bigram_before(const struct bigram *a, const struct bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int heap_push(struct heap *h, struct bigram b)
{
    if (h->n == h->cap) {
        const size_t cap = h->cap ? h->cap * 2 : 64;
        struct bigram *items = realloc(h->items, cap * sizeof *items);
        if (!items)
            return -1;
        h->items = items;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && bigram_before(&b, &h->items[(i - 1) / 2])) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = b;
    return 0;
}

static struct bigram heap_pop(struct heap *h)
{
    const struct bigram top = h->items[0], last = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && bigram_before(&h->items[child + 1], &h->items[child]))
            child++;
        if (!bigram_before(&h->items[child], &last))
            break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (h->n)
        h->items[i] = last;
    return top;
}

/* Queues the merge of symbols left and right if the merges table has it. */
static int queue_pair(const struct tokenizer *t, const char *word, const struct symbol *sym, int left, int right,
                      char *scratch, struct heap *h)
{
    if (left < 0 || right < 0)
        return 0;
    const struct symbol *l = &sym[left], *r = &sym[right];
    memcpy(scratch, word + l->start, l->n);
    scratch[l->n] = ' ';
    memcpy(scratch + l->n + 1, word + r->start, r->n);
    const int rank = table_get(&t->merges, scratch, l->n + 1 + r->n);
    if (rank < 0)
        return 0;
    return heap_push(h, (struct bigram){rank, left, right, l->n, r->n});
}

/* BPE over one pre-tokenized piece, already in byte-level text. */
static int encode_word(const struct tokenizer *t, const char *word, size_t len, struct ids *out)
{
    struct symbol *sym = malloc((len ? len : 1) * sizeof *sym);
    char *scratch = malloc(len + 2);
    struct heap h = {0};
    int st = -1, n = 0;
    if (!sym || !scratch)
        goto done;
    for (size_t at = 0; at < len;) {
        uint32_t cp;
        const size_t step = (size_t)utf8_decode((const unsigned char *)word + at, len - at, &cp);
        sym[n] = (struct symbol){at, step, n - 1, at + step < len ? n + 1 : -1};
        at += step;
        n++;
    }
    for (int i = 1; i < n; i++)
        if (queue_pair(t, word, sym, i - 1, i, scratch, &h))
            goto done;
    while (h.n) {
        const struct bigram b = heap_pop(&h);
        struct symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n != b.left_n || r->n != b.right_n || l->next != b.right)
            continue;  /* one side has merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        if (queue_pair(t, word, sym, l->prev, b.left, scratch, &h) ||
            queue_pair(t, word, sym, b.left, l->next, scratch, &h))
            goto done;
    }
    for (int i = 0; i >= 0 && i < n; i = sym[i].next) {
        const int id = table_get(&t->vocab, word + sym[i].start, sym[i].n);
        if (id >= 0) {
            if (push(out, id))
                goto done;
            continue;
        }
        /* Not in the vocabulary: llama.cpp falls back to one token per byte. */
        for (size_t j = 0; j < sym[i].n; j++) {
            const int byte_id = table_get(&t->vocab, word + sym[i].start + j, 1);
            if (byte_id >= 0 && push(out, byte_id))
                goto done;
        }
    }
    st = 0;
done:
    free(sym);
    free(scratch);
    free(h.items);
    return st;
}

/* Pre-tokenizes and encodes raw text that holds no special token. */
static int encode_raw(const struct tokenizer *t, const char *text, size_t len, struct ids *out)
{
    uint32_t *cps = malloc((len ? len : 1) * sizeof *cps);
    size_t *pieces = malloc((len ? len : 1) * sizeof *pieces);
    char *word = malloc(len * 8 + 1);  /* each byte of a piece becomes at most 2 bytes, each code point at most 4 */
    int st = -1;
    if (!cps || !pieces || !word)
        goto done;
    size_t n = 0;
    for (size_t at = 0; at < len;)
        at += (size_t)utf8_decode((const unsigned char *)text + at, len - at, &cps[n++]);
    const size_t n_pieces = pretokenize_smollm(cps, n, pieces);
    size_t cp_at = 0;
    for (size_t p = 0; p < n_pieces; p++) {
        size_t word_len = 0;
        for (size_t i = cp_at; i < cp_at + pieces[p]; i++) {
            char utf8[4];
            const int k = utf8_encode(cps[i], utf8);  /* invalid input re-encoded as U+FFFD, as llama.cpp does */
            for (int j = 0; j < k; j++)
                word_len += (size_t)utf8_encode(t->byte_to_cp[(unsigned char)utf8[j]], word + word_len);
        }
        cp_at += pieces[p];
        if (encode_word(t, word, word_len, out))
            goto done;
    }
    st = 0;
done:
    free(cps);
    free(pieces);
    free(word);
    return st;
}

struct fragment {
    size_t start, len;
    int token;  /* -1: raw text */
};

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int parse_special, int **ids,
                     size_t *count)
{
    struct ids out = {ids, count, *count};
    /* Special tokens split the text first, longest token first over the
     * whole text (llama.cpp's tokenizer_st_partition). Each match adds at
     * most two fragments; a text of len bytes has at most len + 1 matches
     * of a non-empty token. */
    struct fragment *frags = malloc((2 * len + 2) * sizeof *frags), *next = malloc((2 * len + 2) * sizeof *next);
    int st = -1;
    size_t n = 1;
    if (!frags || !next)
        goto done;
    frags[0] = (struct fragment){0, len, -1};
    for (int s = 0; s < t->n_specials; s++) {
        const int id = t->specials[s];
        if (!parse_special && t->token_type[id] != TOKEN_USER_DEFINED)
            continue;
        const struct text sp = t->tokens[id];
        size_t m = 0;
        for (size_t f = 0; f < n; f++) {
            struct fragment fr = frags[f];
            if (fr.token >= 0) {
                next[m++] = fr;
                continue;
            }
            while (fr.len >= sp.len) {
                const char *found = NULL;
                for (size_t i = 0; i + sp.len <= fr.len; i++)
                    if (text[fr.start + i] == sp.bytes[0] && !memcmp(text + fr.start + i, sp.bytes, sp.len)) {
                        found = text + fr.start + i;
                        break;
                    }
                if (!found)
                    break;
                const size_t before = (size_t)(found - (text + fr.start));
                if (before)
                    next[m++] = (struct fragment){fr.start, before, -1};
                next[m++] = (struct fragment){fr.start + before, sp.len, id};
                fr.start += before + sp.len;
                fr.len -= before + sp.len;
            }
            if (fr.len)
                next[m++] = fr;
        }
        struct fragment *swap = frags;
        frags = next;
        next = swap;
        n = m;
    }
    for (size_t f = 0; f < n; f++)
        if (frags[f].token >= 0 ? push(&out, frags[f].token) : encode_raw(t, text + frags[f].start, frags[f].len, &out))
            goto done;
    st = 0;
done:
    free(frags);
    free(next);
    return st;
}

size_t tokenizer_decode(const struct tokenizer *t, int id, int show_special, char *out, size_t cap)
{
    if (id < 0 || id >= t->n_vocab)
        return 0;
    const struct text s = t->tokens[id];
    const int type = t->token_type[id];
    size_t n = 0;
    if (type == TOKEN_CONTROL || type == TOKEN_UNKNOWN) {
        if (!show_special)
            return 0;
    }
    if (type != TOKEN_NORMAL) {
        n = s.len < cap ? s.len : cap;
        memcpy(out, s.bytes, n);
        return n;
    }
    for (size_t at = 0; at < s.len && n < cap;) {
        uint32_t cp;
        at += (size_t)utf8_decode((const unsigned char *)s.bytes + at, s.len - at, &cp);
        if (cp < 512 && t->cp_to_byte[cp] >= 0) {
            out[n++] = (char)t->cp_to_byte[cp];
        } else {
            char utf8[4];
            const int k = utf8_encode(cp, utf8);
            for (int j = 0; j < k && n < cap; j++)
                out[n++] = utf8[j];
        }
    }
    return n;
}

int tokenizer_vocab_size(const struct tokenizer *t) { return t->n_vocab; }
int tokenizer_bos(const struct tokenizer *t) { return t->bos; }
int tokenizer_eos(const struct tokenizer *t) { return t->eos; }
int tokenizer_add_bos(const struct tokenizer *t) { return t->add_bos; }

int tokenizer_find(const struct tokenizer *t, const char *text)
{
    return table_get(&t->vocab, text, strlen(text));
}
