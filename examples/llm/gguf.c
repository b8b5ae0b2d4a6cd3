/* GGUF reader: every read goes through a cursor that knows the end of the file. */
#include "gguf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counts past these are refused as corrupt long before memory runs out. */
enum { MAX_DIMS = 4 };
#define MAX_COUNT ((uint64_t)1 << 24)
#define MAX_ELEMENTS ((uint64_t)1 << 40)

struct cursor {
    const uint8_t *bytes;
    size_t size, at;
    char *err;
    size_t err_size;
};

static int fail(struct cursor *c, const char *format, ...)
{
    if (c->err && c->err_size) {
        va_list ap;
        va_start(ap, format);
        vsnprintf(c->err, c->err_size, format, ap);
        va_end(ap);
    }
    return -1;
}

static int take(struct cursor *c, size_t n, const uint8_t **out, const char *what)
{
    if (n > c->size - c->at)
        return fail(c, "truncated file: %s at byte %zu needs %zu bytes, %zu left", what, c->at, n,
                    c->size - c->at);
    *out = c->bytes + c->at;
    c->at += n;
    return 0;
}

static uint64_t load_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int read_u32(struct cursor *c, uint32_t *out, const char *what)
{
    const uint8_t *p = NULL;
    if (take(c, 4, &p, what))
        return -1;
    *out = (uint32_t)load_le(p, 4);
    return 0;
}

static int read_u64(struct cursor *c, uint64_t *out, const char *what)
{
    const uint8_t *p = NULL;
    if (take(c, 8, &p, what))
        return -1;
    *out = load_le(p, 8);
    return 0;
}

static int read_str(struct cursor *c, struct gguf_str *out, const char *what)
{
    uint64_t len;
    const uint8_t *p = NULL;
    if (read_u64(c, &len, what))
        return -1;
    if (len > c->size - c->at)
        return fail(c, "%s at byte %zu claims %llu bytes, the file has %zu left", what, c->at,
                    (unsigned long long)len, c->size - c->at);
    if (take(c, (size_t)len, &p, what))
        return -1;
    out->bytes = (const char *)p;
    out->len = len;
    return 0;
}

static char *dup_str(struct gguf_str s)
{
    char *d = malloc((size_t)s.len + 1);
    if (d) {
        memcpy(d, s.bytes, (size_t)s.len);
        d[s.len] = '\0';
    }
    return d;
}

/* Bytes of one scalar of a value type; 0 for STRING, ARRAY and unknown types. */
static size_t scalar_size(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static void decode_scalar(uint32_t type, const uint8_t *p, struct gguf_kv *kv)
{
    const size_t n = scalar_size(type);
    const uint64_t raw = load_le(p, (int)n);
    switch (type) {
    case GGUF_TYPE_INT8: kv->i64 = (int8_t)raw; break;
    case GGUF_TYPE_INT16: kv->i64 = (int16_t)raw; break;
    case GGUF_TYPE_INT32: kv->i64 = (int32_t)raw; break;
    case GGUF_TYPE_INT64: kv->i64 = (int64_t)raw; break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, 4);
        kv->f64 = f;
        return;
    }
    case GGUF_TYPE_FLOAT64: memcpy(&kv->f64, &raw, 8); return;
    default: kv->u64 = raw; kv->i64 = raw <= INT64_MAX ? (int64_t)raw : -1; return;
    }
    kv->u64 = kv->i64 >= 0 ? (uint64_t)kv->i64 : 0;
}

static int read_kv(struct cursor *c, struct gguf_kv *kv, uint64_t index)
{
    struct gguf_str key;
    uint32_t type;
    if (read_str(c, &key, "a key"))
        return -1;
    if (!(kv->key = dup_str(key)))
        return fail(c, "out of memory");
    if (read_u32(c, &type, "a value type"))
        return -1;
    kv->type = (enum gguf_value_type)type;
    if (type == GGUF_TYPE_STRING)
        return read_str(c, &kv->str, kv->key);
    if (type == GGUF_TYPE_ARRAY) {
        uint32_t elem;
        if (read_u32(c, &elem, "an array's element type") || read_u64(c, &kv->array_len, "an array's length"))
            return -1;
        kv->array_type = (enum gguf_value_type)elem;
        if (kv->array_len > MAX_COUNT)
            return fail(c, "key %s: array of %llu elements (at most %llu)", kv->key,
                        (unsigned long long)kv->array_len, (unsigned long long)MAX_COUNT);
        kv->raw = c->bytes + c->at;
        if (elem == GGUF_TYPE_STRING) {
            /* Each string needs at least its 8-byte length: refuse counts the file cannot hold. */
            if (kv->array_len > (c->size - c->at) / 8)
                return fail(c, "key %s: %llu strings cannot fit in the %zu bytes left", kv->key,
                            (unsigned long long)kv->array_len, c->size - c->at);
            kv->strs = calloc((size_t)kv->array_len + 1, sizeof *kv->strs);
            if (!kv->strs)
                return fail(c, "out of memory");
            for (uint64_t i = 0; i < kv->array_len; i++)
                if (read_str(c, &kv->strs[i], kv->key))
                    return -1;
            return 0;
        }
        const size_t n = scalar_size(elem);
        const uint8_t *p = NULL;
        if (n == 0)
            return fail(c, "key %s: arrays of value type %u are not supported", kv->key, elem);
        if (kv->array_len > (c->size - c->at) / n)
            return fail(c, "truncated file: key %s's array of %llu elements runs past the end", kv->key,
                        (unsigned long long)kv->array_len);
        return take(c, (size_t)(kv->array_len * n), &p, kv->key);
    }
    const size_t n = scalar_size(type);
    const uint8_t *p = NULL;
    if (n == 0)
        return fail(c, "key %s (pair %llu): unknown value type %u", kv->key, (unsigned long long)index, type);
    if (take(c, n, &p, kv->key))
        return -1;
    decode_scalar(type, p, kv);
    return 0;
}

/* Block size (elements) and bytes per block of a tensor type; 0 if unknown. */
static int type_layout(uint32_t type, uint64_t *block, uint64_t *block_bytes)
{
    static const struct { uint32_t type; uint32_t block, bytes; } table[] = {
        {GGML_TYPE_F32, 1, 4}, {GGML_TYPE_F16, 1, 2}, {GGML_TYPE_BF16, 1, 2},
        {GGML_TYPE_Q4_0, 32, 18}, {GGML_TYPE_Q4_1, 32, 20}, {GGML_TYPE_Q5_0, 32, 22},
        {GGML_TYPE_Q5_1, 32, 24}, {GGML_TYPE_Q8_0, 32, 34}, {GGML_TYPE_Q8_1, 32, 36},
        {GGML_TYPE_Q2_K, 256, 84}, {GGML_TYPE_Q3_K, 256, 110}, {GGML_TYPE_Q4_K, 256, 144},
        {GGML_TYPE_Q5_K, 256, 176}, {GGML_TYPE_Q6_K, 256, 210}, {GGML_TYPE_Q8_K, 256, 292},
        {GGML_TYPE_I8, 1, 1}, {GGML_TYPE_I16, 1, 2}, {GGML_TYPE_I32, 1, 4}, {GGML_TYPE_I64, 1, 8},
        {GGML_TYPE_F64, 1, 8},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].type == type) {
            *block = table[i].block;
            *block_bytes = table[i].bytes;
            return 1;
        }
    return 0;
}

const char *gguf_tensor_type_name(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32: return "F32";
    case GGML_TYPE_F16: return "F16";
    case GGML_TYPE_BF16: return "BF16";
    case GGML_TYPE_Q4_0: return "Q4_0";
    case GGML_TYPE_Q4_1: return "Q4_1";
    case GGML_TYPE_Q5_0: return "Q5_0";
    case GGML_TYPE_Q5_1: return "Q5_1";
    case GGML_TYPE_Q8_0: return "Q8_0";
    case GGML_TYPE_Q8_1: return "Q8_1";
    case GGML_TYPE_Q2_K: return "Q2_K";
    case GGML_TYPE_Q3_K: return "Q3_K";
    case GGML_TYPE_Q4_K: return "Q4_K";
    case GGML_TYPE_Q5_K: return "Q5_K";
    case GGML_TYPE_Q6_K: return "Q6_K";
    case GGML_TYPE_Q8_K: return "Q8_K";
    case GGML_TYPE_I8: return "I8";
    case GGML_TYPE_I16: return "I16";
    case GGML_TYPE_I32: return "I32";
    case GGML_TYPE_I64: return "I64";
    case GGML_TYPE_F64: return "F64";
    default: return "unknown";
    }
}

static int read_tensor(struct cursor *c, struct gguf_tensor *t)
{
    struct gguf_str name;
    uint32_t type;
    if (read_str(c, &name, "a tensor name"))
        return -1;
    if (!(t->name = dup_str(name)))
        return fail(c, "out of memory");
    if (read_u32(c, &t->n_dims, t->name))
        return -1;
    if (t->n_dims < 1 || t->n_dims > MAX_DIMS)
        return fail(c, "tensor %s has %u dimensions (1 to %d)", t->name, t->n_dims, MAX_DIMS);
    t->elements = 1;
    for (int d = 0; d < MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d < t->n_dims && read_u64(c, &t->ne[d], t->name))
            return -1;
        if (t->ne[d] == 0 || t->ne[d] > MAX_ELEMENTS || t->elements > MAX_ELEMENTS / t->ne[d])
            return fail(c, "tensor %s: dimension %d of %llu elements (a size from 1 to 2^40 in all)", t->name, d,
                        (unsigned long long)t->ne[d]);
        t->elements *= t->ne[d];
    }
    if (read_u32(c, &type, t->name) || read_u64(c, &t->offset, t->name))
        return -1;
    t->type = (enum gguf_tensor_type)type;
    uint64_t block, block_bytes;
    if (!type_layout(type, &block, &block_bytes))
        return fail(c, "tensor %s has unknown tensor type %u", t->name, type);
    if (t->ne[0] % block)
        return fail(c, "tensor %s: a row of %llu elements is not a whole number of %s blocks of %llu", t->name,
                    (unsigned long long)t->ne[0], gguf_tensor_type_name(type), (unsigned long long)block);
    t->bytes = t->elements / block * block_bytes;
    return 0;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Keys and tensor names must be unique (llama.cpp refuses duplicates too). */
static int check_unique(struct cursor *c, char **names, uint64_t n, const char *what)
{
    qsort(names, (size_t)n, sizeof *names, compare_names);
    for (uint64_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i]))
            return fail(c, "duplicate %s \"%s\"", what, names[i]);
    return 0;
}

struct span { uint64_t begin, end; const char *name; };

static int compare_spans(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int check_tensors(struct cursor *c, struct gguf_file *f)
{
    const uint64_t data_size = f->size - f->data_offset;
    struct span *spans = malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *spans);
    if (!spans)
        return fail(c, "out of memory");
    int st = 0;
    for (uint64_t i = 0; i < f->n_tensors && !st; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment)
            st = fail(c, "tensor %s: offset %llu is not a multiple of the alignment %llu", t->name,
                      (unsigned long long)t->offset, (unsigned long long)f->alignment);
        else if (t->offset > data_size || t->bytes > data_size - t->offset)
            st = fail(c, "tensor %s: bytes %llu..%llu of the data section, which holds %llu (truncated file?)",
                      t->name, (unsigned long long)t->offset, (unsigned long long)(t->offset + t->bytes),
                      (unsigned long long)data_size);
        else {
            t->data = f->bytes + f->data_offset + t->offset;
            spans[i] = (struct span){t->offset, t->offset + t->bytes, t->name};
        }
    }
    if (!st) {
        qsort(spans, (size_t)f->n_tensors, sizeof *spans, compare_spans);
        for (uint64_t i = 1; i < f->n_tensors && !st; i++)
            if (spans[i].begin < spans[i - 1].end)
                st = fail(c, "tensors %s and %s overlap in the file", spans[i - 1].name, spans[i].name);
    }
    free(spans);
    return st;
}

int gguf_parse(const uint8_t *bytes, size_t size, struct gguf_file *f, char *err, size_t err_size)
{
    struct cursor c = {bytes, size, 0, err, err_size};
    const uint8_t *magic = NULL;
    memset(f, 0, sizeof *f);
    f->bytes = bytes;
    f->size = size;
    if (err && err_size)
        err[0] = '\0';
    if (take(&c, 4, &magic, "the magic") || memcmp(magic, "GGUF", 4))
        return fail(&c, "not a GGUF file (no \"GGUF\" magic)");
    if (read_u32(&c, &f->version, "the version"))
        goto bad;
    if (f->version != 2 && f->version != 3) {
        fail(&c, "GGUF version %u (this reader knows 2 and 3)", f->version);
        goto bad;
    }
    if (read_u64(&c, &f->n_tensors, "the tensor count") || read_u64(&c, &f->n_kv, "the key count"))
        goto bad;
    /* A key takes at least 12 bytes and a tensor 24: counts the file cannot hold are corrupt. */
    if (f->n_kv > size / 12 || f->n_tensors > size / 24 || f->n_kv > MAX_COUNT || f->n_tensors > MAX_COUNT) {
        fail(&c, "%llu keys and %llu tensors cannot fit in a file of %zu bytes", (unsigned long long)f->n_kv,
             (unsigned long long)f->n_tensors, size);
        goto bad;
    }
    f->kv = calloc((size_t)f->n_kv + 1, sizeof *f->kv);
    f->tensors = calloc((size_t)f->n_tensors + 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        fail(&c, "out of memory");
        goto bad;
    }
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (read_kv(&c, &f->kv[i], i))
            goto bad;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (read_tensor(&c, &f->tensors[i]))
            goto bad;

    f->alignment = 32;
    const struct gguf_kv *align = gguf_find(f, "general.alignment");
    if (align) {
        if (align->type != GGUF_TYPE_UINT32 || align->u64 == 0 || (align->u64 & (align->u64 - 1))) {
            fail(&c, "general.alignment must be a power of two as uint32");
            goto bad;
        }
        f->alignment = align->u64;
    }
    f->data_offset = (c.at + f->alignment - 1) / f->alignment * f->alignment;
    if (f->data_offset > size) {
        fail(&c, "truncated file: the data section would start at byte %llu of %zu",
             (unsigned long long)f->data_offset, size);
        goto bad;
    }

    char **names = malloc((size_t)(f->n_kv + f->n_tensors + 1) * sizeof *names);
    if (!names) {
        fail(&c, "out of memory");
        goto bad;
    }
    for (uint64_t i = 0; i < f->n_kv; i++)
        names[i] = f->kv[i].key;
    int dup = check_unique(&c, names, f->n_kv, "key");
    for (uint64_t i = 0; i < f->n_tensors && !dup; i++)
        names[i] = f->tensors[i].name;
    if (!dup)
        dup = check_unique(&c, names, f->n_tensors, "tensor name");
    free(names);
    if (dup || check_tensors(&c, f))
        goto bad;
    return 0;
bad:
    gguf_close(f);
    return -1;
}

int gguf_open(const char *path, struct gguf_file *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, err_size, "cannot open %s", path);
        return -1;
    }
    uint8_t *bytes = NULL;
    long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0)
        size = ftell(fp);
    if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        snprintf(err, err_size, "cannot find the size of %s", path);
        fclose(fp);
        return -1;
    }
    bytes = malloc(size ? (size_t)size : 1);
    if (!bytes || fread(bytes, 1, (size_t)size, fp) != (size_t)size) {
        snprintf(err, err_size, bytes ? "cannot read %s" : "out of memory reading %s", path);
        free(bytes);
        fclose(fp);
        return -1;
    }
    fclose(fp);
    if (gguf_parse(bytes, (size_t)size, out, err, err_size)) {
        free(bytes);
        return -1;
    }
    out->owned = bytes;
    return 0;
}

void gguf_close(struct gguf_file *f)
{
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) {
            free(f->kv[i].key);
            free(f->kv[i].strs);
        }
    if (f->tensors)
        for (uint64_t i = 0; i < f->n_tensors; i++)
            free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    free(f->owned);
    memset(f, 0, sizeof *f);
}

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && !strcmp(f->kv[i].key, key))
            return &f->kv[i];
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name && !strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

static const struct gguf_kv *find_or_fail(const struct gguf_file *f, const char *key, char *err, size_t err_size)
{
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv)
        snprintf(err, err_size, "the file has no %s", key);
    return kv;
}

int gguf_get_uint(const struct gguf_file *f, const char *key, uint64_t max, uint64_t *out, char *err,
                  size_t err_size)
{
    const struct gguf_kv *kv = find_or_fail(f, key, err, err_size);
    if (!kv)
        return -1;
    const int is_int = kv->type <= GGUF_TYPE_INT32 || kv->type == GGUF_TYPE_UINT64 || kv->type == GGUF_TYPE_INT64;
    const int negative = (kv->type == GGUF_TYPE_INT8 || kv->type == GGUF_TYPE_INT16 || kv->type == GGUF_TYPE_INT32 ||
                          kv->type == GGUF_TYPE_INT64) && kv->i64 < 0;
    if (!is_int || negative || kv->u64 > max) {
        snprintf(err, err_size, "%s must be an integer from 0 to %llu", key, (unsigned long long)max);
        return -1;
    }
    *out = kv->u64;
    return 0;
}

int gguf_get_float(const struct gguf_file *f, const char *key, double *out, char *err, size_t err_size)
{
    const struct gguf_kv *kv = find_or_fail(f, key, err, err_size);
    if (!kv)
        return -1;
    if (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64) {
        snprintf(err, err_size, "%s must be a float", key);
        return -1;
    }
    *out = kv->f64;
    return 0;
}

int gguf_get_string(const struct gguf_file *f, const char *key, struct gguf_str *out, char *err, size_t err_size)
{
    const struct gguf_kv *kv = find_or_fail(f, key, err, err_size);
    if (!kv)
        return -1;
    if (kv->type != GGUF_TYPE_STRING) {
        snprintf(err, err_size, "%s must be a string", key);
        return -1;
    }
    *out = kv->str;
    return 0;
}

const struct gguf_kv *gguf_get_array(const struct gguf_file *f, const char *key, enum gguf_value_type type,
                                     char *err, size_t err_size)
{
    const struct gguf_kv *kv = find_or_fail(f, key, err, err_size);
    if (kv && (kv->type != GGUF_TYPE_ARRAY || kv->array_type != type)) {
        snprintf(err, err_size, "%s must be an array of value type %d", key, (int)type);
        return NULL;
    }
    return kv;
}

int64_t gguf_array_int(const struct gguf_kv *kv, uint64_t i)
{
    struct gguf_kv one = {0};
    decode_scalar(kv->array_type, kv->raw + i * scalar_size(kv->array_type), &one);
    return one.i64;
}

int gguf_str_eq(struct gguf_str s, const char *text)
{
    return strlen(text) == s.len && !memcmp(s.bytes, text, (size_t)s.len);
}
