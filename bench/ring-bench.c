/* ring-bench: the ring (libflashcl_mpi) on the ranks of mpirun against one rank alone, with the
 * communication cost model of docs/ring.md next to what was measured.
 *
 *   mpirun -n R ring-bench [--seq N] [--heads Hq:Hkv] [--d D] [--dtype f32|f16|bf16] [--causal 0|1]
 *                          [--pass forward|backward] [--reps K] [--chunks C]
 *
 * Rank 0 first runs the whole sequence as a one-rank ring (the others wait), then all ranks run the
 * ring; tokens/s = N / time, scaling efficiency = T(1) / (R x T(R)). The model: per ring step a rank
 * computes F_step FLOPs at the rate the one-rank run measured and moves B_step bytes through MPI (a
 * measured exchange) and pinned host memory to the device (a measured upload); the transfer is hidden
 * where T_transfer <= T_compute. On PoCL every figure is the CPU's, never a GPU's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl_mpi.h"
#include "hostref.h"

struct options {
    int seq, heads_q, heads_kv, dim, causal, reps, chunks, backward;
    flashcl_dtype dtype;
};

static int rank, ranks;

static double now(void)
{
    return MPI_Wtime();
}

static int parse(int argc, char **argv, struct options *o)
{
    *o = (struct options){.seq = 1536, .heads_q = 4, .heads_kv = 4, .dim = 64, .causal = 1, .reps = 3,
                          .dtype = FLASHCL_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return -1;
        if (!strcmp(a, "--seq"))
            o->seq = atoi(v);
        else if (!strcmp(a, "--heads") && sscanf(v, "%d:%d", &o->heads_q, &o->heads_kv) == 2)
            ;
        else if (!strcmp(a, "--d"))
            o->dim = atoi(v);
        else if (!strcmp(a, "--causal"))
            o->causal = atoi(v);
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v);
        else if (!strcmp(a, "--chunks"))
            o->chunks = atoi(v);
        else if (!strcmp(a, "--pass"))
            o->backward = !strcmp(v, "backward");
        else if (!strcmp(a, "--dtype"))
            o->dtype = !strcmp(v, "f16") ? FLASHCL_F16 : !strcmp(v, "bf16") ? FLASHCL_BF16 : FLASHCL_F32;
        else
            return -1;
        i++;
    }
    return o->reps > 0 && o->seq > 0 ? 0 : -1;
}

/* Buffers of one problem of `rows` rows a rank, random inputs. */
struct problem {
    cl_mem mem[9];
    struct flashcl_attention a;
    struct flashcl_attention_grad g;
};

static cl_mem random_buffer(flashcl_context *ctx, flashcl_dtype dtype, size_t n)
{
    const size_t es = flashcl_dtype_size(dtype);
    unsigned char *img = malloc(n * es);
    for (size_t i = 0; i < n; i++)
        hostref_store(img, dtype, i, (float)rng_uniform(-1.0, 1.0));
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * es, img,
                              &err);
    free(img);
    return m;
}

static void problem_create(flashcl_context *ctx, const struct options *o, int rows, struct problem *p)
{
    memset(p, 0, sizeof(*p));
    const size_t nq = (size_t)rows * o->heads_q * o->dim, nk = (size_t)rows * o->heads_kv * o->dim;
    const size_t sizes[9] = {nq, nk, nk, nq, 2 * (size_t)rows * o->heads_q, nq, nq, nk, nk};  /* lse as 2 f16s */
    for (int i = 0; i < 9; i++)
        p->mem[i] = random_buffer(ctx, i == 4 ? FLASHCL_F32 : o->dtype, i == 4 ? sizes[i] / 2 : sizes[i]);
    struct flashcl_attention *a = &p->a;
    a->batch = 1;
    a->seq_q = a->seq_kv = rows;
    a->heads_q = o->heads_q;
    a->heads_kv = o->heads_kv;
    a->head_dim = o->dim;
    a->q = flashcl_tensor_bnhd(p->mem[0], o->dtype, rows, o->heads_q, o->dim);
    a->k = flashcl_tensor_bnhd(p->mem[1], o->dtype, rows, o->heads_kv, o->dim);
    a->v = flashcl_tensor_bnhd(p->mem[2], o->dtype, rows, o->heads_kv, o->dim);
    a->o = flashcl_tensor_bnhd(p->mem[3], o->dtype, rows, o->heads_q, o->dim);
    a->lse = flashcl_tensor_lse(p->mem[4], rows, o->heads_q);
    a->mask = o->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    p->g.d_o = flashcl_tensor_bnhd(p->mem[5], o->dtype, rows, o->heads_q, o->dim);
    p->g.d_q = flashcl_tensor_bnhd(p->mem[6], o->dtype, rows, o->heads_q, o->dim);
    p->g.d_k = flashcl_tensor_bnhd(p->mem[7], o->dtype, rows, o->heads_kv, o->dim);
    p->g.d_v = flashcl_tensor_bnhd(p->mem[8], o->dtype, rows, o->heads_kv, o->dim);
}

static void problem_free(struct problem *p)
{
    for (int i = 0; i < 9; i++)
        clReleaseMemObject(p->mem[i]);
}

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The median call of o->reps (after one warm-up), its statistics in *stats. */
static double time_calls(flashcl_ring *ring, const struct options *o, struct problem *p, struct flashcl_ring_stats *stats)
{
    double t[64];
    const int reps = o->reps < 64 ? o->reps : 64;
    for (int r = -1; r < reps; r++) {
        flashcl_status st = flashcl_ring_forward(ring, &p->a, 0, NULL);
        if (st == FLASHCL_SUCCESS && o->backward)
            st = flashcl_ring_backward(ring, &p->a, &p->g, 0, NULL);  /* timed alone: the last call's stats */
        if (st != FLASHCL_SUCCESS) {
            fprintf(stderr, "rank %d: %s: %s\n", rank, flashcl_ring_status_name(st), flashcl_ring_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        flashcl_ring_last_stats(ring, stats);
        if (r >= 0)
            t[r] = stats->wall_s;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    return t[reps / 2];
}

/* FLOPs this rank computes: its chunk pairs, FlashAttention's count (backward 2.5x the forward). */
static double rank_flops(const struct options *o, int chunks, int R, int r)
{
    const int G = chunks / R;
    const double c = (double)o->seq / chunks, pair = 4.0 * c * c * o->dim * o->heads_q;
    double f = 0.0;
    for (int i = 0; i < G; i++) {
        const int gi = flashcl_ring_global_chunk(chunks, R, r, o->causal, i);
        f += o->causal ? pair * (gi + 0.5) : pair * chunks;
    }
    return o->backward ? 2.5 * f : f;
}

/* Bytes of one block (K and V of a rank's rows) and of its f32 dK/dV sums. */
static double block_bytes(const struct options *o, int R)
{
    return 2.0 * (double)o->seq / R * o->heads_kv * o->dim * (double)flashcl_dtype_size(o->dtype);
}

/* Measured rates for the model: an MPI ring exchange of `bytes` and an upload from pinned host memory. */
static void measure_links(flashcl_context *ctx, size_t bytes, double *mpi_bw, double *h2d_bw)
{
    cl_int err;
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue q = clCreateCommandQueue(cl, flashcl_context_device(ctx), 0, &err);
    cl_mem pinned = clCreateBuffer(cl, CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
    cl_mem dev = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    void *host = clEnqueueMapBuffer(q, pinned, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err);
    void *in = malloc(bytes);
    memset(host, 1, bytes);
    double best_mpi = INFINITY, best_h2d = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = now();
        if (ranks > 1)
            MPI_Sendrecv(host, (int)bytes, MPI_BYTE, (rank + ranks - 1) % ranks, 7, in, (int)bytes, MPI_BYTE,
                         (rank + 1) % ranks, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        best_mpi = fmin(best_mpi, now() - t);
        t = now();
        clEnqueueWriteBuffer(q, dev, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
        best_h2d = fmin(best_h2d, now() - t);
    }
    *mpi_bw = ranks > 1 ? bytes / best_mpi : INFINITY;
    *h2d_bw = bytes / best_h2d;
    clEnqueueUnmapMemObject(q, pinned, host, 0, NULL, NULL);
    clFinish(q);
    free(in);
    clReleaseMemObject(pinned);
    clReleaseMemObject(dev);
    clReleaseCommandQueue(q);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    struct options o;
    if (parse(argc, argv, &o)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n R ring-bench [--seq N] [--heads Hq:Hkv] [--d D] [--dtype f32|f16|bf16] "
                            "[--causal 0|1] [--pass forward|backward] [--reps K] [--chunks C]\n");
        MPI_Finalize();
        return 2;
    }
    rng_seed(1 + (uint64_t)rank);
    flashcl_context *ctx = NULL;
    flashcl_ring *ring = NULL, *alone = NULL;
    const struct flashcl_ring_params params = {.chunks = o.chunks};
    if (flashcl_context_create(NULL, &ctx) != FLASHCL_SUCCESS ||
        flashcl_ring_create(ctx, MPI_COMM_WORLD, &params, &ring) != FLASHCL_SUCCESS ||
        flashcl_ring_create(ctx, MPI_COMM_SELF, &params, &alone) != FLASHCL_SUCCESS) {
        fprintf(stderr, "rank %d: set-up failed: %s\n", rank, flashcl_ring_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* One rank alone: the baseline, and the compute rate the model uses. */
    struct flashcl_ring_stats one = {0}, many = {0};
    double t1 = 0.0;
    if (rank == 0) {
        struct problem whole;
        problem_create(ctx, &o, o.seq, &whole);
        t1 = time_calls(alone, &o, &whole, &one);
        problem_free(&whole);
    }
    MPI_Bcast(&t1, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(&one, (int)sizeof(one), MPI_BYTE, 0, MPI_COMM_WORLD);
    struct problem part;
    problem_create(ctx, &o, o.seq / ranks, &part);
    const double tr = time_calls(ring, &o, &part, &many);
    problem_free(&part);

    const int chunks = many.chunks;
    const double rate = rank_flops(&o, chunks, 1, 0) / one.compute_s;  /* FLOP/s of the chunk-pair calls */
    double mpi_bw, h2d_bw;
    const double kv = block_bytes(&o, ranks);
    measure_links(ctx, (size_t)kv, &mpi_bw, &h2d_bw);
    /* Per step: compute of this rank's pairs; transfer of one K/V block (forward) and, backward, the f32
     * dK/dV sums too (twice K/V's bytes in f32 terms: 2 x 4 / esize). */
    const double step_compute = rank_flops(&o, chunks, ranks, rank) / ranks / rate;
    const double step_bytes = o.backward ? kv * (1.0 + 4.0 / (double)flashcl_dtype_size(o.dtype)) : kv;
    const double step_transfer = ranks > 1 ? step_bytes / mpi_bw + step_bytes / h2d_bw : 0.0;
    const double predicted_exposed = (ranks - 1) * fmax(0.0, step_transfer - step_compute);

    /* The slowest rank's figures. */
    double mine[4] = {many.compute_s, many.transfer_s, many.exposed_s, many.wall_s}, worst[4];
    MPI_Reduce(mine, worst, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        const int steps_moving = ranks > 1 ? ranks - 1 : 1;
        printf("ring-bench %s: N=%d H=%d:%d d=%d %s %s, %d chunks, %d rank(s), device %s (CPU figures on PoCL)\n",
               o.backward ? "backward" : "forward", o.seq, o.heads_q, o.heads_kv, o.dim, flashcl_dtype_name(o.dtype),
               o.causal ? "causal" : "full", chunks, ranks, flashcl_context_device_name(ctx));
        printf("  1 rank   %9.2f ms  %10.0f tokens/s  (pair calls %.1f GFLOP/s)\n", 1e3 * t1, o.seq / t1, 1e-9 * rate);
        printf("  %d ranks  %9.2f ms  %10.0f tokens/s  speed-up %.2fx  scaling efficiency %.0f%%\n", ranks, 1e3 * tr,
               o.seq / tr, t1 / tr, 100.0 * t1 / (ranks * tr));
        printf("  links: MPI exchange %.2f GB/s, pinned upload %.2f GB/s; %.0f bytes a step\n", 1e-9 * mpi_bw,
               1e-9 * h2d_bw, step_bytes);
        printf("  per step      model compute %8.3f ms  transfer %8.3f ms  -> %s\n", 1e3 * step_compute,
               1e3 * step_transfer, step_transfer <= step_compute ? "hidden" : "exposed");
        printf("  per step  measured compute %8.3f ms  transfer %8.3f ms\n", 1e3 * worst[0] / ranks,
               1e3 * worst[1] / steps_moving);
        printf("  exposed transfer: model %.3f ms, measured %.3f ms (device idle between steps, slowest rank)\n",
               1e3 * predicted_exposed, 1e3 * worst[2]);
    }
    flashcl_ring_destroy(&alone);
    flashcl_ring_destroy(&ring);
    flashcl_context_destroy(&ctx);
    MPI_Finalize();
    return 0;
}
