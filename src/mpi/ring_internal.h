/* The ring's internal types and helpers, shared by src/mpi/'s files. */
#ifndef FLASHCL_RING_INTERNAL_H
#define FLASHCL_RING_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "flashcl_mpi.h"

enum fcl_ring_kernel { RK_GATHER, RK_GATHER_LSE, RK_MERGE, RK_ACCUMULATE, RK_ADD, RK_STORE, RK_COUNT };

struct flashcl_ring {
    flashcl_context *ctx;
    cl_context cl;
    cl_device_id device;
    MPI_Comm comm;  /* the caller's, duplicated; errors returned, never fatal */
    int rank, ranks;
    int chunks;     /* params.chunks (0: by the sequence) */
    cl_command_queue compute, transfer;  /* in-order, profiling; transfers overlap the compute */
    cl_program program[4];               /* by flashcl_dtype, built on first use */
    cl_kernel kernel[4][RK_COUNT];
    struct flashcl_ring_stats stats;
};

/* A call's agreed shape: what every rank checked and the ring derived from it. */
struct fcl_ring_shape {
    int batch, rows, heads_q, heads_kv, dim;  /* rows: this rank's (seq_q = seq_kv) */
    flashcl_dtype dtype;
    size_t esize;
    bool causal;
    int seq, chunks, chunk_rows, local_chunks;  /* the whole sequence; chunks of chunk_rows; per rank */
    size_t q_chunk_elems, kv_chunk_elems;       /* one chunk of Q (heads_q) and of K (heads_kv) */
};

/* Test hook (tests/test_ring.c): rank `fail_rank` fails its enqueue at ring step `fail_step` as a
 * kernel launch would (-1: never). Not exported. */
extern int fcl_ring_test_fail_rank, fcl_ring_test_fail_step;

/* ring_error.c: the thread's last message; returns status. */
flashcl_status fcl_ring_fail(flashcl_status status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* The core's last message under ours ("what: core message"). */
flashcl_status fcl_ring_fail_core(flashcl_status status, const char *what);
void fcl_ring_clear_error(void);
double fcl_ring_now(void);

/* ring_agree.c: local validation already done (local_status), every rank learns every rank's outcome
 * and that the shapes agree; fills the derived fields of *shape. Returns the same verdict on every rank. */
flashcl_status fcl_ring_agree(flashcl_ring *ring, flashcl_status local_status, const struct flashcl_attention *attn,
                              struct fcl_ring_shape *shape);
/* The end of a call: every rank's outcome of its work, agreed. */
flashcl_status fcl_ring_agree_outcome(flashcl_ring *ring, flashcl_status local_status);
/* The ring-specific checks of one rank's attention description (mask, sinks, rows). */
flashcl_status fcl_ring_check_attention(const struct flashcl_attention *attn);

/* ring_program.c: the ring's kernels for a dtype, built on first use. */
flashcl_status fcl_ring_kernels(flashcl_ring *ring, flashcl_dtype dtype, cl_kernel **out);
/* Enqueues a 1-D kernel over `total` items. */
flashcl_status fcl_ring_enqueue_1d(cl_command_queue queue, cl_kernel kernel, size_t total, cl_uint n_wait,
                                   const cl_event *wait, cl_event *event, const char *what);
/* Sets the kernel's arguments from a list of (size, pointer) pairs. */
flashcl_status fcl_ring_set_args(cl_kernel kernel, int n, const size_t *sizes, const void *const *values,
                                 const char *what);

/* ring_views.c: copies between the caller's views and chunk-major buffers. */
flashcl_status fcl_ring_gather(flashcl_ring *ring, const struct fcl_ring_shape *s, const flashcl_tensor *view,
                               int heads, cl_mem dst, size_t dst_off, size_t chunk_stride, cl_event *event);
flashcl_status fcl_ring_gather_lse(flashcl_ring *ring, const struct fcl_ring_shape *s, const flashcl_tensor *lse,
                                   cl_mem dst, cl_event *event);
flashcl_status fcl_ring_store(flashcl_ring *ring, const struct fcl_ring_shape *s, cl_mem src, size_t src_off,
                              size_t chunk_stride, const flashcl_tensor *view, int heads, cl_uint n_wait,
                              const cl_event *wait, cl_event *event);
/* acc (f32, from element acc_off) += part (storage type), n elements. */
flashcl_status fcl_ring_accumulate(flashcl_ring *ring, const struct fcl_ring_shape *s, cl_mem acc, size_t acc_off,
                                   cl_mem part, size_t n);

/* ring_staging.c: the double-buffered ring of blocks (device buffers, pinned host staging, MPI). */
struct fcl_ring_stage {
    cl_mem device[2];  /* the block computed on, and the next one arriving */
    cl_mem pinned[2];  /* CL_MEM_ALLOC_HOST_PTR, mapped for the whole call */
    void *host[2];
    size_t bytes;
    cl_event uploaded[2];  /* the block is on the device */
    cl_event consumed[2];  /* the last command reading device[i] */
    MPI_Request send, recv;
    int tag;
};
flashcl_status fcl_ring_stage_create(flashcl_ring *ring, struct fcl_ring_stage *st, size_t bytes, int tag);
void fcl_ring_stage_destroy(flashcl_ring *ring, struct fcl_ring_stage *st);
/* Posts the send of host[slot] (send_bytes) to the previous rank and the receive of recv_bytes from the
 * next into host[1 - slot]. */
flashcl_status fcl_ring_stage_post(flashcl_ring *ring, struct fcl_ring_stage *st, int slot, size_t send_bytes,
                                   size_t recv_bytes);
/* Waits for both, then (upload) uploads host[1 - slot] (bytes) to device[1 - slot] after its last reader. */
flashcl_status fcl_ring_stage_complete(flashcl_ring *ring, struct fcl_ring_stage *st, int slot, size_t bytes,
                                       bool upload);
/* Step statistics from each step's first and last chunk-pair events (released). */
void fcl_ring_step_stats(flashcl_ring *ring, cl_event *first, cl_event *last, int steps);
/* Releases an event slot and sets it to NULL. */
void fcl_ring_release(cl_event *event);
/* Device time between two profiled events' start and end (0 if not profiled). */
double fcl_ring_event_span(cl_event first, cl_event last);

#endif
