/*
 * A GGUF reader (the file format of llama.cpp's models), plain C99 with no
 * OpenCL, so the fuzzer links it alone.
 *
 * The whole file is read into memory; gguf_parse checks every count, length,
 * offset and size against the bytes it was given before anything points into
 * them, so a truncated or corrupted file gives a message, never a read out of
 * bounds. Format (v2 and v3, little-endian): "GGUF", version, tensor count,
 * key/value count, the key/value pairs, the tensor table, padding to the
 * alignment (general.alignment, default 32), then the tensor data.
 */
#ifndef LLM_GGUF_H
#define LLM_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_value_type {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12
};

/* ggml's tensor types that the reader knows the size of (others are refused). */
enum gguf_tensor_type {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_I8 = 24, GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26, GGML_TYPE_I64 = 27, GGML_TYPE_F64 = 28, GGML_TYPE_BF16 = 30
};

/* A string inside the file: not NUL-terminated. */
struct gguf_str {
    const char *bytes;
    uint64_t len;
};

struct gguf_kv {
    char *key;                  /* NUL-terminated copy */
    enum gguf_value_type type;
    /* Scalars (type not STRING/ARRAY): the value, widened. */
    uint64_t u64;               /* unsigned and bool types */
    int64_t i64;                /* signed types (and unsigned ones that fit) */
    double f64;                 /* float types */
    struct gguf_str str;        /* STRING */
    /* ARRAY: element type, count; raw points at the first element in the
     * file; strs holds each element of an array of strings. */
    enum gguf_value_type array_type;
    uint64_t array_len;
    const uint8_t *raw;
    struct gguf_str *strs;
};

struct gguf_tensor {
    char *name;                 /* NUL-terminated copy */
    uint32_t n_dims;            /* 1..4 */
    uint64_t ne[4];             /* elements per dimension, ne[0] contiguous; unused ones 1 */
    enum gguf_tensor_type type;
    uint64_t offset;            /* bytes from the start of the data section */
    uint64_t bytes;             /* size of its data */
    uint64_t elements;
    const uint8_t *data;        /* inside the file's bytes */
};

struct gguf_file {
    uint8_t *owned;             /* the file's bytes when gguf_open read them */
    const uint8_t *bytes;
    size_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;       /* where the data section starts */
};

/* Reads and parses a file. Returns 0, or -1 with a sentence in err. */
int gguf_open(const char *path, struct gguf_file *out, char *err, size_t err_size);
/* Parses bytes already in memory (kept by the caller while out lives). */
int gguf_parse(const uint8_t *bytes, size_t size, struct gguf_file *out, char *err, size_t err_size);
/* Frees what gguf_open / gguf_parse allocated; accepts a zeroed struct. */
void gguf_close(struct gguf_file *file);

const struct gguf_kv *gguf_find(const struct gguf_file *file, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *file, const char *name);

/* Typed look-ups: 0 on success; -1 (with a sentence in err) when the key is
 * missing, has another type or does not fit. */
int gguf_get_uint(const struct gguf_file *file, const char *key, uint64_t max, uint64_t *out, char *err,
                  size_t err_size);
int gguf_get_float(const struct gguf_file *file, const char *key, double *out, char *err, size_t err_size);
int gguf_get_string(const struct gguf_file *file, const char *key, struct gguf_str *out, char *err,
                    size_t err_size);
/* An array of strings (or of a numeric type: array_type) with its length. */
const struct gguf_kv *gguf_get_array(const struct gguf_file *file, const char *key, enum gguf_value_type type,
                                     char *err, size_t err_size);
/* Element i of a numeric array as int64 (the array's type and bounds checked by the caller). */
int64_t gguf_array_int(const struct gguf_kv *kv, uint64_t i);

int gguf_str_eq(struct gguf_str s, const char *text);
/* "Q4_1", "F32", ...; "unknown" for another value. */
const char *gguf_tensor_type_name(uint32_t type);

#endif
