/*
 * decode-demo: a toy decode loop over a paged KV cache, as a serving engine
 * runs one — each step appends every sequence's new key and value to its
 * pages (growing to a new page when one fills), then decodes one new query
 * per sequence with flashcl_forward_kv_cache. The sequences start at
 * different lengths; every step's output is checked against a
 * double-precision reference computed from the cache's logical contents.
 *
 *     decode-demo [steps]        (default 40)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

enum { BATCH = 3, HEADS_Q = 4, HEADS_KV = 2, D = 32, PAGE = 16, PAGES_PER_SEQ = 8, POOL = BATCH * PAGES_PER_SEQ };

static float frand(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

int main(int argc, char **argv)
{
    const int steps = argc > 1 ? atoi(argv[1]) : 40;
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(NULL, &ctx) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl: %s\n", flashcl_last_error());
        return EXIT_FAILURE;
    }
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(cl, flashcl_context_device(ctx), 0, &err);

    /* The pool of pages on the device ([page][row][head][d]) and a host copy of what the cache logically holds. */
    const size_t row = (size_t)HEADS_KV * D, page_floats = (size_t)PAGE * row;
    cl_mem k_pool = clCreateBuffer(cl, CL_MEM_READ_WRITE, POOL * page_floats * sizeof(float), NULL, &err);
    cl_mem v_pool = clCreateBuffer(cl, CL_MEM_READ_WRITE, POOL * page_floats * sizeof(float), NULL, &err);
    cl_mem q_mem = clCreateBuffer(cl, CL_MEM_READ_WRITE, BATCH * HEADS_Q * D * sizeof(float), NULL, &err);
    cl_mem o_mem = clCreateBuffer(cl, CL_MEM_READ_WRITE, BATCH * HEADS_Q * D * sizeof(float), NULL, &err);
    static float k_log[BATCH][PAGES_PER_SEQ * PAGE][HEADS_KV * D], v_log[BATCH][PAGES_PER_SEQ * PAGE][HEADS_KV * D];
    int block_table[BATCH * PAGES_PER_SEQ], lengths[BATCH] = {5, 37, 60}, next_page = 0;
    unsigned seed = 12345;

    /* Pages are handed out as sequences grow, so a sequence's pages lie anywhere in the pool. */
    for (int b = 0; b < BATCH; b++)
        for (int p = 0; p < PAGES_PER_SEQ; p++)
            block_table[b * PAGES_PER_SEQ + p] = -1;
    double worst = 0;
    for (int step = 0; step < steps; step++) {
        /* Append one key and value per sequence (the prompt's, at step 0, all at once). */
        for (int b = 0; b < BATCH; b++) {
            const int first = step == 0 ? 0 : lengths[b], last = step == 0 ? lengths[b] : lengths[b] + 1;
            if (last > PAGES_PER_SEQ * PAGE) {
                fprintf(stderr, "sequence %d is full\n", b);
                return EXIT_FAILURE;
            }
            for (int j = first; j < last; j++) {
                int *page = &block_table[b * PAGES_PER_SEQ + j / PAGE];
                if (*page < 0)
                    *page = next_page++;
                float kr[HEADS_KV * D], vr[HEADS_KV * D];
                for (size_t x = 0; x < row; x++) {
                    kr[x] = k_log[b][j][x] = frand(&seed);
                    vr[x] = v_log[b][j][x] = frand(&seed);
                }
                const size_t at = ((size_t)*page * page_floats + (size_t)(j % PAGE) * row) * sizeof(float);
                clEnqueueWriteBuffer(queue, k_pool, CL_TRUE, at, sizeof(kr), kr, 0, NULL, NULL);
                clEnqueueWriteBuffer(queue, v_pool, CL_TRUE, at, sizeof(vr), vr, 0, NULL, NULL);
            }
            lengths[b] = last;
        }
        int table[BATCH * PAGES_PER_SEQ];  /* pages not handed out yet: any valid index (never read) */
        for (int e = 0; e < BATCH * PAGES_PER_SEQ; e++)
            table[e] = block_table[e] < 0 ? 0 : block_table[e];
        float q[BATCH][HEADS_Q * D], o[BATCH][HEADS_Q * D];
        for (int b = 0; b < BATCH; b++)
            for (int x = 0; x < HEADS_Q * D; x++)
                q[b][x] = frand(&seed);
        clEnqueueWriteBuffer(queue, q_mem, CL_TRUE, 0, sizeof(q), q, 0, NULL, NULL);

        struct flashcl_attention attn = {0};
        attn.batch = BATCH;
        attn.seq_q = 1;
        attn.seq_kv = PAGES_PER_SEQ * PAGE;
        attn.heads_q = HEADS_Q;
        attn.heads_kv = HEADS_KV;
        attn.head_dim = D;
        attn.q = flashcl_tensor_bnhd(q_mem, FLASHCL_F32, 1, HEADS_Q, D);
        attn.o = flashcl_tensor_bnhd(o_mem, FLASHCL_F32, 1, HEADS_Q, D);
        attn.k = flashcl_tensor_bnhd(k_pool, FLASHCL_F32, PAGE, HEADS_KV, D);  /* [page, row, head, d] */
        attn.v = flashcl_tensor_bnhd(v_pool, FLASHCL_F32, PAGE, HEADS_KV, D);
        struct flashcl_kv_lengths kv = {0};
        kv.cache_seqlens = lengths;
        struct flashcl_kv_pages pages = {0};
        pages.page_size = PAGE;
        pages.pages_per_seq = PAGES_PER_SEQ;
        pages.num_pages = POOL;
        pages.block_table = table;
        if (flashcl_forward_kv_cache(ctx, &attn, &kv, &pages, queue, 0, NULL, NULL) != FLASHCL_SUCCESS) {
            fprintf(stderr, "flashcl: %s\n", flashcl_last_error());
            return EXIT_FAILURE;
        }
        clEnqueueReadBuffer(queue, o_mem, CL_TRUE, 0, sizeof(o), o, 0, NULL, NULL);

        /* The reference: softmax(q k / sqrt(d)) v over each sequence's keys, in double. */
        for (int b = 0; b < BATCH; b++)
            for (int h = 0; h < HEADS_Q; h++) {
                const int g = h / (HEADS_Q / HEADS_KV);
                double s[PAGES_PER_SEQ * PAGE], m = -INFINITY, l = 0;
                for (int j = 0; j < lengths[b]; j++) {
                    s[j] = 0;
                    for (int x = 0; x < D; x++)
                        s[j] += (double)q[b][h * D + x] * k_log[b][j][g * D + x];
                    s[j] /= sqrt((double)D);
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < lengths[b]; j++)
                    l += exp(s[j] - m);
                for (int x = 0; x < D; x++) {
                    double want = 0;
                    for (int j = 0; j < lengths[b]; j++)
                        want += exp(s[j] - m) / l * v_log[b][j][g * D + x];
                    worst = fmax(worst, fabs(o[b][h * D + x] - want));
                }
            }
    }
    printf("decode-demo: %d steps, %d sequences now %d, %d and %d keys long in %d pages of %d; "
           "max |O - reference| %.2e on \"%s\"\n", steps, BATCH, lengths[0], lengths[1], lengths[2], next_page, PAGE,
           worst, flashcl_context_device_name(ctx));
    clReleaseMemObject(k_pool);
    clReleaseMemObject(v_pool);
    clReleaseMemObject(q_mem);
    clReleaseMemObject(o_mem);
    clReleaseCommandQueue(queue);
    flashcl_context_destroy(&ctx);
    return worst < 1e-4 ? EXIT_SUCCESS : EXIT_FAILURE;
}
