/* Loading a Llama GGUF: metadata checks, then one dequantise-and-upload per matrix. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dequant.h"

/* Dequantises the named tensors one after the other into one host array and uploads it. */
static cl_mem upload(const struct gguf_file *f, cl_context cl, const char *const *names, int count, size_t *bytes,
                     char *err, size_t err_size)
{
    uint64_t total = 0;
    for (int i = 0; i < count; i++)
        total += gguf_find_tensor(f, names[i])->elements;
    float *host = malloc((size_t)total * sizeof *host);
    if (!host) {
        snprintf(err, err_size, "out of host memory for %s", names[0]);
        return NULL;
    }
    uint64_t at = 0;
    for (int i = 0; i < count; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(f, names[i]);
        dequantise(t->type, t->data, t->elements, host + at);
        at += t->elements;
    }
    cl_int st;
    cl_mem mem = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)total * sizeof *host, host, &st);
    free(host);
    if (st != CL_SUCCESS) {
        snprintf(err, err_size, "clCreateBuffer for %s (%llu floats): OpenCL error %d", names[0],
                 (unsigned long long)total, st);
        return NULL;
    }
    *bytes += (size_t)total * sizeof(float);
    return mem;
}

int llm_model_load(const struct gguf_file *f, cl_context cl, struct llm_model *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    if (llm_config_read(f, &m->cfg, err, err_size))
        return -1;
    m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
    if (!m->layers) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    const char *embd[] = {"token_embd.weight"}, *norm[] = {"output_norm.weight"}, *out[] = {"output.weight"};
    if (!(m->token_embd = upload(f, cl, embd, 1, &m->device_bytes, err, err_size)) ||
        !(m->output_norm = upload(f, cl, norm, 1, &m->device_bytes, err, err_size)))
        goto fail;
    m->output = m->cfg.tied_output ? m->token_embd : upload(f, cl, out, 1, &m->device_bytes, err, err_size);
    if (!m->output)
        goto fail;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        char n[9][64];
        static const char *const parts[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++)
            snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", l, parts[i]);
        const char *attn_norm[] = {n[0]}, *qkv[] = {n[1], n[2], n[3]}, *wo[] = {n[4]}, *ffn_norm[] = {n[5]},
                   *gate_up[] = {n[6], n[7]}, *down[] = {n[8]};
        struct llm_layer *L = &m->layers[l];
        if (!(L->attn_norm = upload(f, cl, attn_norm, 1, &m->device_bytes, err, err_size)) ||
            !(L->qkv = upload(f, cl, qkv, 3, &m->device_bytes, err, err_size)) ||
            !(L->attn_output = upload(f, cl, wo, 1, &m->device_bytes, err, err_size)) ||
            !(L->ffn_norm = upload(f, cl, ffn_norm, 1, &m->device_bytes, err, err_size)) ||
            !(L->gate_up = upload(f, cl, gate_up, 2, &m->device_bytes, err, err_size)) ||
            !(L->ffn_down = upload(f, cl, down, 1, &m->device_bytes, err, err_size)))
            goto fail;
    }
    return 0;
fail:
    llm_model_free(m);
    return -1;
}

static void release(cl_mem *mem)
{
    if (*mem)
        clReleaseMemObject(*mem);
    *mem = NULL;
}

void llm_model_free(struct llm_model *m)
{
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++) {
            struct llm_layer *L = &m->layers[l];
            release(&L->attn_norm);
            release(&L->qkv);
            release(&L->attn_output);
            release(&L->ffn_norm);
            release(&L->gate_up);
            release(&L->ffn_down);
        }
    free(m->layers);
    if (m->output != m->token_embd)
        release(&m->output);
    release(&m->token_embd);
    release(&m->output_norm);
    memset(m, 0, sizeof *m);
}
