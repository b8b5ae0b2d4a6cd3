/*
 * seed-example: the seed chapter's worked example through flashcl's public
 * API — one query against four keys, scores [1, 3, 2, 5], values
 * [10, 20, 30, 40], blocks of 2 keys so the second block's larger max forces
 * the rescale. Prints O (the chapter: 36.8806) and the log-sum-exp.
 *
 *     cc seed-example.c $(pkg-config --cflags --libs flashcl) -o seed-example
 */
#include <stdio.h>
#include <stdlib.h>

#include <flashcl.h>

int main(void)
{
    /* Blocks of 2 keys: the online softmax meets the max 3, then 5. */
    struct flashcl_context_params params = {0};
    params.kernel_options = "portable:block_m=2,block_n=2";
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&params, &ctx) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl: %s\n", flashcl_last_error());
        return EXIT_FAILURE;
    }
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(cl, flashcl_context_device(ctx), 0, &err);

    /* d = 1 and scale 1: the scores are q * k. */
    float q[1] = {1}, k[4] = {1, 3, 2, 5}, v[4] = {10, 20, 30, 40}, o[1], lse[1];
    cl_mem mq = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(q), q, &err);
    cl_mem mk = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(k), k, &err);
    cl_mem mv = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(v), v, &err);
    cl_mem mo = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, sizeof(o), NULL, &err);
    cl_mem ml = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, sizeof(lse), NULL, &err);

    struct flashcl_attention attn = {0};
    attn.batch = attn.heads_q = attn.heads_kv = attn.head_dim = 1;
    attn.seq_q = 1;
    attn.seq_kv = 4;
    attn.q = flashcl_tensor_bnhd(mq, FLASHCL_F32, 1, 1, 1);
    attn.k = flashcl_tensor_bnhd(mk, FLASHCL_F32, 4, 1, 1);
    attn.v = flashcl_tensor_bnhd(mv, FLASHCL_F32, 4, 1, 1);
    attn.o = flashcl_tensor_bnhd(mo, FLASHCL_F32, 1, 1, 1);
    attn.lse = flashcl_tensor_lse(ml, 1, 1);

    flashcl_status st = flashcl_forward(ctx, &attn, queue, 0, NULL, NULL);
    if (st != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl_forward: %s: %s\n", flashcl_status_name(st), flashcl_last_error());
        return EXIT_FAILURE;
    }
    clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, sizeof(o), o, 0, NULL, NULL);
    clEnqueueReadBuffer(queue, ml, CL_TRUE, 0, sizeof(lse), lse, 0, NULL, NULL);
    printf("O = %.4f (the chapter: 36.8806), LSE = %.5f (5 + log(1.20345) = 5.18518) on %s\n", o[0], lse[0],
           flashcl_context_device_name(ctx));

    clReleaseMemObject(mq);
    clReleaseMemObject(mk);
    clReleaseMemObject(mv);
    clReleaseMemObject(mo);
    clReleaseMemObject(ml);
    clReleaseCommandQueue(queue);
    flashcl_context_destroy(&ctx);
    return EXIT_SUCCESS;
}
