/* The Llama forward pass on the device: CLBlast for the projections, flashcl
 * for attention, llm_kernels.cl for the rest. */
#include "session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clblast_c.h>

extern const char flashcl_source_llm_kernels[];

enum { NORM_GROUP = 128 };

struct llm_session {
    const struct llm_model *model;
    struct llm_config cfg;
    flashcl_context *fa;
    cl_context cl;
    cl_command_queue queue;
    cl_program program;
    cl_kernel rms_norm, rope_store, swiglu, embed;
    struct llm_session_params params;
    int n_past;
    cl_mem *k_cache, *v_cache;  /* per layer, [capacity][heads_kv][head_dim] */
    cl_mem rope_cos, rope_sin;  /* [capacity][head_dim / 2] */
    cl_mem ids, x, h, qkv, q, attn, gate_up, act, logits;
    size_t cache_bytes, activation_bytes;
    struct llm_profile profile;
};

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); goto fail; } while (0)
#define CL_CHECK(call, what) do { cl_int st_ = (call); if (st_ != CL_SUCCESS) FAIL("%s: OpenCL error %d", what, st_); } while (0)

static cl_mem device_buffer(struct llm_session *s, size_t bytes, size_t *counter, cl_int *st)
{
    cl_mem mem = clCreateBuffer(s->cl, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, st);
    if (*st == CL_SUCCESS)
        *counter += bytes;
    return mem;
}

int llm_session_create(const struct llm_model *model, flashcl_context *fa, const struct llm_session_params *params,
                       struct llm_session **out, char *err, size_t err_size)
{
    struct llm_session *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    s->model = model;
    s->cfg = model->cfg;
    s->fa = fa;
    s->cl = flashcl_context_cl_context(fa);
    s->params = *params;
    const struct llm_config *c = &s->cfg;
    if (params->capacity < 1 || params->capacity > c->n_ctx || params->max_tokens < 1 ||
        params->max_tokens > params->capacity || params->max_logit_rows < 1 || params->max_logit_rows > params->max_tokens)
        FAIL("session of %d cache rows, %d tokens per call, %d logit rows: need 1 <= logit rows <= tokens <= "
             "rows <= the context of %d", params->capacity, params->max_tokens, params->max_logit_rows, c->n_ctx);
    /* flashcl's paged layout wants pages of 16 rows; the contiguous cache has
     * no such rule, but rounding keeps every view's rows 16-byte aligned. */
    cl_device_id dev = flashcl_context_device(fa);
    cl_int st;
    s->queue = clCreateCommandQueue(s->cl, dev, params->profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &st);
    CL_CHECK(st, "clCreateCommandQueue");
    const char *src = flashcl_source_llm_kernels;
    s->program = clCreateProgramWithSource(s->cl, 1, &src, NULL, &st);
    CL_CHECK(st, "clCreateProgramWithSource");
    char options[64];
    snprintf(options, sizeof options, "-DNORM_GROUP=%d", NORM_GROUP);
    st = clBuildProgram(s->program, 1, &dev, options, NULL, NULL);
    if (st != CL_SUCCESS) {
        char log[2048] = "";
        clGetProgramBuildInfo(s->program, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        FAIL("building llm_kernels.cl: OpenCL error %d\n%s", st, log);
    }
    s->rms_norm = clCreateKernel(s->program, "rms_norm", &st);
    CL_CHECK(st, "clCreateKernel rms_norm");
    s->rope_store = clCreateKernel(s->program, "rope_store", &st);
    CL_CHECK(st, "clCreateKernel rope_store");
    s->swiglu = clCreateKernel(s->program, "swiglu", &st);
    CL_CHECK(st, "clCreateKernel swiglu");
    s->embed = clCreateKernel(s->program, "embed", &st);
    CL_CHECK(st, "clCreateKernel embed");
    size_t wg = 0;
    CL_CHECK(clGetKernelWorkGroupInfo(s->rms_norm, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL),
             "clGetKernelWorkGroupInfo");
    if (wg < NORM_GROUP)
        FAIL("the device runs work-groups of %zu work-items for rms_norm; it needs %d", wg, NORM_GROUP);

    const size_t cap = (size_t)params->capacity, rows = (size_t)params->max_tokens, f = sizeof(float);
    const size_t kv_row = (size_t)c->n_heads_kv * c->head_dim, half = (size_t)c->head_dim / 2;
    s->k_cache = calloc((size_t)c->n_layers, sizeof *s->k_cache);
    s->v_cache = calloc((size_t)c->n_layers, sizeof *s->v_cache);
    if (!s->k_cache || !s->v_cache)
        FAIL("out of host memory");
    for (int l = 0; l < c->n_layers; l++) {
        s->k_cache[l] = device_buffer(s, cap * kv_row * f, &s->cache_bytes, &st);
        CL_CHECK(st, "allocating the K cache");
        s->v_cache[l] = device_buffer(s, cap * kv_row * f, &s->cache_bytes, &st);
        CL_CHECK(st, "allocating the V cache");
    }
    const size_t qkv_width = (size_t)(c->n_heads + 2 * c->n_heads_kv) * c->head_dim;
    struct { cl_mem *mem; size_t bytes; } buffers[] = {
        {&s->rope_cos, cap * half * f}, {&s->rope_sin, cap * half * f}, {&s->ids, rows * sizeof(cl_int)},
        {&s->x, rows * c->n_embd * f}, {&s->h, rows * c->n_embd * f}, {&s->qkv, rows * qkv_width * f},
        {&s->q, rows * c->n_embd * f}, {&s->attn, rows * c->n_embd * f}, {&s->gate_up, rows * 2 * c->n_ff * f},
        {&s->act, rows * c->n_ff * f}, {&s->logits, (size_t)params->max_logit_rows * c->n_vocab * f},
    };
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
        *buffers[i].mem = device_buffer(s, buffers[i].bytes, &s->activation_bytes, &st);
        CL_CHECK(st, "allocating activations");
    }

    /* RoPE angles pos · base^(-2i/d) in double, rounded once to f32. */
    float *cos_host = malloc(cap * half * f), *sin_host = malloc(cap * half * f);
    if (!cos_host || !sin_host) {
        free(cos_host);
        free(sin_host);
        FAIL("out of host memory");
    }
    for (size_t p = 0; p < cap; p++)
        for (size_t i = 0; i < half; i++) {
            const double theta = (double)p * pow((double)c->rope_base, -2.0 * (double)i / (double)c->head_dim);
            cos_host[p * half + i] = (float)cos(theta);
            sin_host[p * half + i] = (float)sin(theta);
        }
    st = clEnqueueWriteBuffer(s->queue, s->rope_cos, CL_TRUE, 0, cap * half * f, cos_host, 0, NULL, NULL);
    if (st == CL_SUCCESS)
        st = clEnqueueWriteBuffer(s->queue, s->rope_sin, CL_TRUE, 0, cap * half * f, sin_host, 0, NULL, NULL);
    free(cos_host);
    free(sin_host);
    CL_CHECK(st, "writing the RoPE tables");
    *out = s;
    return 0;
fail:
    llm_session_free(&s);
    return -1;
}

void llm_session_free(struct llm_session **sp)
{
    struct llm_session *s = sp ? *sp : NULL;
    if (!s)
        return;
    if (s->queue)
        clFinish(s->queue);
    llm_profile_free(&s->profile);
    for (int l = 0; l < s->cfg.n_layers; l++) {
        if (s->k_cache && s->k_cache[l])
            clReleaseMemObject(s->k_cache[l]);
        if (s->v_cache && s->v_cache[l])
            clReleaseMemObject(s->v_cache[l]);
    }
    free(s->k_cache);
    free(s->v_cache);
    cl_mem mems[] = {s->rope_cos, s->rope_sin, s->ids, s->x, s->h, s->qkv, s->q, s->attn, s->gate_up, s->act, s->logits};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    cl_kernel kernels[] = {s->rms_norm, s->rope_store, s->swiglu, s->embed};
    for (size_t i = 0; i < 4; i++)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    if (s->program)
        clReleaseProgram(s->program);
    if (s->queue)
        clReleaseCommandQueue(s->queue);
    free(s);
    *sp = NULL;
}

/* The event slot to pass to an enqueue: profiled sessions keep every event. */
#define EVENT_OUT (s->params.profiling ? &ev : NULL)
#define RECORD(phase) do { if (llm_profile_add(&s->profile, ev, phase)) FAIL("out of host memory"); ev = NULL; } while (0)

/* C = A · Wᵀ (+ C if accumulate): A [m][k] at row a_row, W [n][k], C [m][n]. */
static int project(struct llm_session *s, cl_mem a, size_t a_row, cl_mem w, cl_mem out, int m, int n, int k,
                   int accumulate, char *err, size_t err_size)
{
    cl_event ev = NULL;
    const float beta = accumulate ? 1.0f : 0.0f;
    CLBlastStatusCode st;
    if (m == 1)  /* decode: a GEMV over W's rows */
        st = CLBlastSgemv(CLBlastLayoutRowMajor, CLBlastTransposeNo, (size_t)n, (size_t)k, 1.0f, w, 0, (size_t)k, a,
                          a_row * (size_t)k, 1, beta, out, 0, 1, &s->queue, EVENT_OUT);
    else
        st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, (size_t)m, (size_t)n,
                          (size_t)k, 1.0f, a, a_row * (size_t)k, (size_t)k, w, 0, (size_t)k, beta, out, 0, (size_t)n,
                          &s->queue, EVENT_OUT);
    if (st != CLBlastSuccess)
        FAIL("CLBlast %s (%d x %d x %d): status %d", m == 1 ? "SGEMV" : "SGEMM", m, n, k, (int)st);
    RECORD(LLM_PROJECTION);
    return 0;
fail:
    return -1;
}

static int rms_norm(struct llm_session *s, cl_mem x, int first_row, cl_mem weight, cl_mem out, int rows, char *err,
                    size_t err_size)
{
    cl_event ev = NULL;
    const int width = s->cfg.n_embd;
    const float eps = s->cfg.norm_eps;
    const size_t global = (size_t)rows * NORM_GROUP, local = NORM_GROUP;
    cl_kernel k = s->rms_norm;
    CL_CHECK(clSetKernelArg(k, 0, sizeof x, &x) | clSetKernelArg(k, 1, sizeof first_row, &first_row) |
             clSetKernelArg(k, 2, sizeof weight, &weight) | clSetKernelArg(k, 3, sizeof out, &out) |
             clSetKernelArg(k, 4, sizeof width, &width) | clSetKernelArg(k, 5, sizeof eps, &eps),
             "rms_norm arguments");
    CL_CHECK(clEnqueueNDRangeKernel(s->queue, k, 1, NULL, &global, &local, 0, NULL, EVENT_OUT), "rms_norm");
    RECORD(LLM_OTHER);
    return 0;
fail:
    return -1;
}

/* The attention problem of n new queries of one layer against its cache:
 * dense (the prompt alone, the first n rows of the cache) or over the cache
 * of n_past + n keys (the queries being the last n). */
static void attention_problem(const struct llm_session *s, int layer, int n, int n_past, int dense,
                              struct flashcl_attention *attn, struct flashcl_kv_lengths *lengths, int *length)
{
    const struct llm_config *c = &s->cfg;
    const size_t rows = dense ? (size_t)n : (size_t)s->params.capacity;
    memset(attn, 0, sizeof *attn);
    memset(lengths, 0, sizeof *lengths);
    attn->batch = 1;
    attn->seq_q = n;
    attn->seq_kv = (int)rows;
    attn->heads_q = c->n_heads;
    attn->heads_kv = c->n_heads_kv;
    attn->head_dim = c->head_dim;
    attn->mask = FLASHCL_MASK_CAUSAL;  /* bottom-right aligned: the queries are the last n keys */
    attn->q = flashcl_tensor_bnhd(s->q, FLASHCL_F32, (size_t)n, (size_t)c->n_heads, (size_t)c->head_dim);
    attn->o = flashcl_tensor_bnhd(s->attn, FLASHCL_F32, (size_t)n, (size_t)c->n_heads, (size_t)c->head_dim);
    attn->k = flashcl_tensor_bnhd(s->k_cache[layer], FLASHCL_F32, rows, (size_t)c->n_heads_kv, (size_t)c->head_dim);
    attn->v = flashcl_tensor_bnhd(s->v_cache[layer], FLASHCL_F32, rows, (size_t)c->n_heads_kv, (size_t)c->head_dim);
    *length = n_past + n;
    lengths->cache_seqlens = length;
}

/* Attention of the n new queries of one layer: flashcl_forward for a dense
 * prefill, flashcl_forward_kv_cache (contiguous cache, one sequence) else. */
static int attention(struct llm_session *s, int layer, int n, int dense_prefill, char *err, size_t err_size)
{
    cl_event ev = NULL;
    struct flashcl_attention attn;
    struct flashcl_kv_lengths lengths;
    int length;
    attention_problem(s, layer, n, s->n_past, dense_prefill, &attn, &lengths, &length);
    const flashcl_status st = dense_prefill ? flashcl_forward(s->fa, &attn, s->queue, 0, NULL, EVENT_OUT)
                                            : flashcl_forward_kv_cache(s->fa, &attn, &lengths, NULL, s->queue, 0, NULL,
                                                                       EVENT_OUT);
    if (st != FLASHCL_SUCCESS)
        FAIL("flashcl (layer %d, %d queries, %d cached keys): %s: %s", layer, n, s->n_past, flashcl_status_name(st),
             flashcl_last_error());
    RECORD(LLM_ATTENTION);
    return 0;
fail:
    return -1;
}

int llm_session_attention_config(struct llm_session *s, int n, int n_past, int dense, struct flashcl_tile *tile)
{
    struct flashcl_attention attn;
    struct flashcl_kv_lengths lengths;
    int length;
    if (n < 1 || n > s->params.max_tokens || n_past < 0 || n_past + n > s->params.capacity || (dense && n_past))
        return -1;
    attention_problem(s, 0, n, n_past, dense, &attn, &lengths, &length);
    return (dense ? flashcl_forward_config(s->fa, &attn, tile)
                  : flashcl_forward_kv_cache_config(s->fa, &attn, &lengths, NULL, tile)) == FLASHCL_SUCCESS ? 0 : -1;
}

int llm_forward(struct llm_session *s, const int *tokens, int n, int logit_rows, float *logits, int dense_prefill,
                char *err, size_t err_size)
{
    const struct llm_config *c = &s->cfg;
    const struct llm_model *m = s->model;
    cl_event ev = NULL;
    if (n < 1 || n > s->params.max_tokens || logit_rows < 0 || logit_rows > n || logit_rows > s->params.max_logit_rows)
        FAIL("a call of %d tokens with %d logit rows (at most %d and %d)", n, logit_rows, s->params.max_tokens,
             s->params.max_logit_rows);
    if (s->n_past + n > s->params.capacity)
        FAIL("%d cached and %d new tokens exceed the cache of %d rows", s->n_past, n, s->params.capacity);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            FAIL("token id %d at %d is outside the vocabulary of %d", tokens[t], t, c->n_vocab);
    dense_prefill = dense_prefill && s->n_past == 0;

    CL_CHECK(clEnqueueWriteBuffer(s->queue, s->ids, CL_TRUE, 0, (size_t)n * sizeof(cl_int), tokens, 0, NULL, NULL),
             "writing token ids");
    {
        const size_t global[2] = {(size_t)c->n_embd, (size_t)n};
        cl_kernel k = s->embed;
        CL_CHECK(clSetKernelArg(k, 0, sizeof s->ids, &s->ids) | clSetKernelArg(k, 1, sizeof m->token_embd, &m->token_embd) |
                 clSetKernelArg(k, 2, sizeof s->x, &s->x) | clSetKernelArg(k, 3, sizeof c->n_embd, &c->n_embd),
                 "embed arguments");
        CL_CHECK(clEnqueueNDRangeKernel(s->queue, k, 2, NULL, global, NULL, 0, NULL, EVENT_OUT), "embed");
        RECORD(LLM_OTHER);
    }
    const int qkv_width = (c->n_heads + 2 * c->n_heads_kv) * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        const struct llm_layer *L = &m->layers[l];
        if (rms_norm(s, s->x, 0, L->attn_norm, s->h, n, err, err_size) ||
            project(s, s->h, 0, L->qkv, s->qkv, n, qkv_width, c->n_embd, 0, err, err_size))
            goto fail;
        {
            const size_t global[3] = {(size_t)c->head_dim / 2, (size_t)(c->n_heads + 2 * c->n_heads_kv), (size_t)n};
            cl_kernel k = s->rope_store;
            CL_CHECK(clSetKernelArg(k, 0, sizeof s->qkv, &s->qkv) | clSetKernelArg(k, 1, sizeof s->rope_cos, &s->rope_cos) |
                     clSetKernelArg(k, 2, sizeof s->rope_sin, &s->rope_sin) | clSetKernelArg(k, 3, sizeof s->q, &s->q) |
                     clSetKernelArg(k, 4, sizeof s->k_cache[l], &s->k_cache[l]) |
                     clSetKernelArg(k, 5, sizeof s->v_cache[l], &s->v_cache[l]) |
                     clSetKernelArg(k, 6, sizeof c->n_heads, &c->n_heads) |
                     clSetKernelArg(k, 7, sizeof c->n_heads_kv, &c->n_heads_kv) |
                     clSetKernelArg(k, 8, sizeof c->head_dim, &c->head_dim) |
                     clSetKernelArg(k, 9, sizeof s->n_past, &s->n_past), "rope_store arguments");
            CL_CHECK(clEnqueueNDRangeKernel(s->queue, k, 3, NULL, global, NULL, 0, NULL, EVENT_OUT), "rope_store");
            RECORD(LLM_OTHER);
        }
        if (attention(s, l, n, dense_prefill, err, err_size) ||
            project(s, s->attn, 0, L->attn_output, s->x, n, c->n_embd, c->n_embd, 1, err, err_size) ||
            rms_norm(s, s->x, 0, L->ffn_norm, s->h, n, err, err_size) ||
            project(s, s->h, 0, L->gate_up, s->gate_up, n, 2 * c->n_ff, c->n_embd, 0, err, err_size))
            goto fail;
        {
            const size_t global[2] = {(size_t)c->n_ff, (size_t)n};
            cl_kernel k = s->swiglu;
            CL_CHECK(clSetKernelArg(k, 0, sizeof s->gate_up, &s->gate_up) | clSetKernelArg(k, 1, sizeof s->act, &s->act) |
                     clSetKernelArg(k, 2, sizeof c->n_ff, &c->n_ff), "swiglu arguments");
            CL_CHECK(clEnqueueNDRangeKernel(s->queue, k, 2, NULL, global, NULL, 0, NULL, EVENT_OUT), "swiglu");
            RECORD(LLM_OTHER);
        }
        if (project(s, s->act, 0, L->ffn_down, s->x, n, c->n_embd, c->n_ff, 1, err, err_size))
            goto fail;
    }
    if (logit_rows > 0) {
        if (rms_norm(s, s->x, n - logit_rows, m->output_norm, s->h, logit_rows, err, err_size) ||
            project(s, s->h, 0, m->output, s->logits, logit_rows, c->n_vocab, c->n_embd, 0, err, err_size))
            goto fail;
        CL_CHECK(clEnqueueReadBuffer(s->queue, s->logits, CL_TRUE, 0, (size_t)logit_rows * c->n_vocab * sizeof(float),
                                     logits, 0, NULL, NULL), "reading the logits");
    }
    CL_CHECK(clFinish(s->queue), "clFinish");
    s->n_past += n;
    s->profile.tokens += n;
    if (s->params.profiling && llm_profile_collect(&s->profile))
        FAIL("reading profiling events");
    return 0;
fail:
    if (ev)
        clReleaseEvent(ev);
    clFinish(s->queue);
    llm_profile_collect(&s->profile);
    return -1;
}

void llm_session_reset(struct llm_session *s) { s->n_past = 0; }
int llm_session_n_past(const struct llm_session *s) { return s->n_past; }
size_t llm_session_cache_bytes(const struct llm_session *s) { return s->cache_bytes; }
size_t llm_session_activation_bytes(const struct llm_session *s) { return s->activation_bytes; }
struct llm_profile *llm_session_profile(struct llm_session *s) { return &s->profile; }
