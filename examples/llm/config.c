/* A Llama GGUF's hyper-parameters and the tensors the forward pass reads, checked. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "dequant.h"

static int get_int(const struct gguf_file *f, const char *key, int max, int *out, char *err, size_t err_size)
{
    uint64_t v;
    if (gguf_get_uint(f, key, (uint64_t)max, &v, err, err_size))
        return -1;
    if (v == 0) {
        snprintf(err, err_size, "%s is 0", key);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Checks that tensor name exists with shape [ne0, ne1] (ne1 = 1: a vector) and a known type. */
static int check_tensor(const struct gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1, int required,
                        char *err, size_t err_size)
{
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (required)
            snprintf(err, err_size, "the file has no tensor %s", name);
        return required ? -1 : 1;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        snprintf(err, err_size, "tensor %s is [%llu, %llu, %llu, %llu]; the config says [%llu, %llu]", name,
                 (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                 (unsigned long long)t->ne[3], (unsigned long long)ne0, (unsigned long long)ne1);
        return -1;
    }
    if (!dequant_supported(t->type)) {
        snprintf(err, err_size, "tensor %s has type %s (%u); this example dequantises F32, F16, Q4_1 and Q8_0", name,
                 gguf_tensor_type_name(t->type), (unsigned)t->type);
        return -1;
    }
    return 0;
}

int llm_config_read(const struct gguf_file *f, struct llm_config *c, char *err, size_t err_size)
{
    struct gguf_str arch;
    memset(c, 0, sizeof *c);
    if (gguf_get_string(f, "general.architecture", &arch, err, err_size))
        return -1;
    if (!gguf_str_eq(arch, "llama")) {
        snprintf(err, err_size, "general.architecture is \"%.*s\"; this example runs \"llama\" models",
                 (int)(arch.len > 40 ? 40 : arch.len), arch.bytes);
        return -1;
    }
    double eps, base = 10000.0;
    int rope_dims = 0;
    if (get_int(f, "llama.block_count", 4096, &c->n_layers, err, err_size) ||
        get_int(f, "llama.embedding_length", 1 << 16, &c->n_embd, err, err_size) ||
        get_int(f, "llama.feed_forward_length", 1 << 18, &c->n_ff, err, err_size) ||
        get_int(f, "llama.attention.head_count", 1024, &c->n_heads, err, err_size) ||
        get_int(f, "llama.context_length", 1 << 24, &c->n_ctx, err, err_size) ||
        gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &eps, err, err_size))
        return -1;
    c->n_heads_kv = c->n_heads;
    if (gguf_find(f, "llama.attention.head_count_kv") &&
        get_int(f, "llama.attention.head_count_kv", 1024, &c->n_heads_kv, err, err_size))
        return -1;
    if (gguf_find(f, "llama.rope.freq_base") && gguf_get_float(f, "llama.rope.freq_base", &base, err, err_size))
        return -1;
    const struct gguf_kv *tokens = gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, err, err_size);
    if (!tokens)
        return -1;
    c->n_vocab = (int)tokens->array_len;
    if (c->n_embd % c->n_heads || c->n_heads % c->n_heads_kv) {
        snprintf(err, err_size, "%d heads (%d for K/V) do not divide the embedding of %d", c->n_heads,
                 c->n_heads_kv, c->n_embd);
        return -1;
    }
    c->head_dim = c->n_embd / c->n_heads;
    rope_dims = c->head_dim;
    if (gguf_find(f, "llama.rope.dimension_count") &&
        get_int(f, "llama.rope.dimension_count", 1 << 16, &rope_dims, err, err_size))
        return -1;
    if (rope_dims != c->head_dim || c->head_dim % 2 || c->head_dim > LLM_MAX_HEAD_DIM) {
        snprintf(err, err_size, "head dim %d with RoPE over %d dims: this example rotates whole heads of an even "
                 "size up to %d", c->head_dim, rope_dims, LLM_MAX_HEAD_DIM);
        return -1;
    }
    if (!(eps > 0 && eps < 1) || !(base > 1 && base < 1e12)) {
        snprintf(err, err_size, "RMSNorm eps %g or RoPE base %g out of range", eps, base);
        return -1;
    }
    if (gguf_find(f, "llama.rope.scaling.type") || gguf_find(f, "llama.rope.scaling.factor") ||
        gguf_find(f, "llama.expert_count")) {
        snprintf(err, err_size, "RoPE scaling and mixtures of experts are not implemented in this example");
        return -1;
    }
    c->norm_eps = (float)eps;
    c->rope_base = (float)base;

    const uint64_t e = (uint64_t)c->n_embd, kv = (uint64_t)c->n_heads_kv * c->head_dim;
    if (check_tensor(f, "token_embd.weight", e, (uint64_t)c->n_vocab, 1, err, err_size) ||
        check_tensor(f, "output_norm.weight", e, 1, 1, err, err_size))
        return -1;
    const int has_output = check_tensor(f, "output.weight", e, (uint64_t)c->n_vocab, 0, err, err_size);
    if (has_output < 0)
        return -1;
    c->tied_output = has_output == 1;
    for (int l = 0; l < c->n_layers; l++) {
        static const char *const names[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        const uint64_t shapes[][2] = {{e, 1}, {e, e}, {e, kv}, {e, kv}, {e, e},
                                      {e, 1}, {e, (uint64_t)c->n_ff}, {e, (uint64_t)c->n_ff}, {(uint64_t)c->n_ff, e}};
        for (int i = 0; i < 9; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, names[i]);
            if (check_tensor(f, name, shapes[i][0], shapes[i][1], 1, err, err_size))
                return -1;
        }
    }
    return 0;
}

