/*
 * A Llama model (GGUF arch "llama", e.g. SmolLM2-135M) in device memory:
 * its hyper-parameters from the metadata and its weights dequantised to f32
 * once, at load. Q, K and V are stored as one [q + k + v rows][embd] matrix
 * and gate/up as one [2 · ffn][embd] matrix, so each takes one GEMM.
 */
#ifndef LLM_MODEL_H
#define LLM_MODEL_H

#include <stddef.h>

#include <flashcl.h>

#include "config.h"
#include "gguf.h"

struct llm_layer {
    cl_mem attn_norm, qkv, attn_output, ffn_norm, gate_up, ffn_down;
};

struct llm_model {
    struct llm_config cfg;
    cl_mem token_embd;    /* [n_vocab][n_embd] */
    cl_mem output_norm;   /* [n_embd] */
    cl_mem output;        /* [n_vocab][n_embd]: token_embd itself when tied (not released twice) */
    struct llm_layer *layers;
    size_t device_bytes;  /* weights on the device */
};

/* Dequantises the weights and uploads them to cl. 0, or -1 with a sentence in err. */
int llm_model_load(const struct gguf_file *file, cl_context cl, struct llm_model *model, char *err,
                   size_t err_size);
void llm_model_free(struct llm_model *model);

#endif
