/*
 * flashcl_mpi: context parallelism over MPI (ring attention), forward and
 * backward, on top of the public flashcl API (libflashcl_mpi, built where MPI
 * is found; docs/ring.md).
 *
 * Each rank of an MPI communicator holds a slice of one long sequence (its
 * rows of Q, K, V, O and the gradients). K and V travel the ring rank by
 * rank while every rank computes its queries against the block it holds;
 * the partial results are merged by their LSE. Causal attention is
 * load-balanced by zigzag sharding (flashcl_ring_global_chunk).
 *
 * The sequence of `seq` rows is cut into `chunks` chunks of seq / chunks
 * rows, and every flashcl call is one (query chunk, key chunk) pair of the
 * same shape whatever the rank count; a query chunk's partials are merged in
 * ascending key-chunk order. So the forward gives the same bits on any rank
 * count that divides the chunks (causal: 2 x ranks divides them), given the
 * same chunk count and device. The backward's gradients equal a single
 * device's to rounding (their sums run in ring order).
 *
 * Calls are collective over the ring's communicator and block: every rank
 * calls them with the same shape, and they return when the outputs are
 * written (the ring needs the host to drive MPI). A rank whose input is
 * invalid or whose work fails makes every rank return an error (its own
 * status there, FLASHCL_RING_ERROR_PEER on the others); none hangs.
 *
 * Thread safety: a flashcl_ring is used by one thread at a time.
 */
#ifndef FLASHCL_MPI_H
#define FLASHCL_MPI_H

#include <mpi.h>

#include "flashcl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes of the ring's own (the core's flashcl_status codes pass through). */
#define FLASHCL_RING_ERROR_PEER ((flashcl_status)-3100) /* another rank failed; the message names it and why */
#define FLASHCL_RING_ERROR_MPI ((flashcl_status)-3101)  /* an MPI call returned an error */

typedef struct flashcl_ring flashcl_ring;

/* Parameters of flashcl_ring_create; zero in any field is its default. */
struct flashcl_ring_params {
    /* Chunks the whole sequence is cut into; every rank count used with the
     * same value gives the same bits. 0: 24 where it divides the sequence,
     * else 16 (a choice by the sequence alone, never by the rank count). It
     * must divide the sequence, and the ranks must divide it (causal: twice
     * the ranks). */
    int chunks;
    unsigned char reserved[60]; /* zero */
};

/* Creates a ring over comm (duplicated: the ring's messages never meet the
 * caller's) running on ctx, which must outlive it. Collective over comm. */
FLASHCL_API flashcl_status flashcl_ring_create(flashcl_context *ctx, MPI_Comm comm,
                                               const struct flashcl_ring_params *params, flashcl_ring **out);
/* Releases the ring and sets *ring to NULL; accepts NULL and &NULL. Collective. */
FLASHCL_API void flashcl_ring_destroy(flashcl_ring **ring);

/* The global chunk (0 .. chunks - 1) of this rank's local chunk `local`
 * (0 .. chunks / ranks - 1): its rows are local rows local * c .. local * c
 * + c - 1, global rows chunk * c .. chunk * c + c - 1, c = seq / chunks.
 * Non-causal: rank r holds chunks r * chunks / ranks onwards, in order.
 * Causal (zigzag): the chunks form 2 * ranks groups of consecutive chunks,
 * and rank r holds group r and then group 2 * ranks - 1 - r, so every rank
 * gets the same share of the triangle. -1 for arguments out of range. */
FLASHCL_API int flashcl_ring_global_chunk(int chunks, int ranks, int rank, int causal, int local);

/* The chunk count a call on a sequence of `seq` rows uses with these
 * parameters (params NULL: defaults); 0 where none applies. */
FLASHCL_API int flashcl_ring_chunks(const struct flashcl_ring_params *params, int seq);

/* Ring forward. attn describes this rank's shard: seq_q = seq_kv = its rows
 * (the whole sequence is ranks x that), q, k, v, o views of its rows in
 * the order flashcl_ring_global_chunk gives, lse (optional; the backward
 * needs it) its rows' log-sum-exp; mask FLASHCL_MASK_NONE or
 * FLASHCL_MASK_CAUSAL (over the whole sequence); GQA, scale, precision and
 * softcap as flashcl_forward; no window, sinks, ALiBi or head_dim_v. Waits for wait_list
 * (the writes of the inputs) first; returns with O and LSE written. */
FLASHCL_API flashcl_status flashcl_ring_forward(flashcl_ring *ring, const struct flashcl_attention *attn,
                                                cl_uint num_wait_events, const cl_event *wait_list);

/* Ring backward: the exact dQ, dK, dV of this rank's rows for the whole
 * sequence's loss, from the forward's O and LSE (attn.lse required) and
 * dO (grad.d_o). dK and dV travel the ring with K and V and return to
 * their rank; dQ accumulates locally. No d_sinks. As the forward
 * otherwise. */
FLASHCL_API flashcl_status flashcl_ring_backward(flashcl_ring *ring, const struct flashcl_attention *attn,
                                                 const struct flashcl_attention_grad *grad,
                                                 cl_uint num_wait_events, const cl_event *wait_list);

/* What the last call on this rank measured (the bench's figures; docs/ring.md). */
struct flashcl_ring_stats {
    int steps;              /* ring steps (= ranks) */
    int chunks;             /* chunk count used */
    double wall_s;          /* the whole call, on the host */
    double compute_s;       /* device time of the chunk-pair calls, summed over steps */
    double transfer_s;      /* per step from posting the messages to the next block on the device, summed */
    double exposed_s;       /* time the host waited for a transfer after its step's compute had ended, summed */
    double merge_s;         /* device time of the merges and the final stores */
    double bytes_sent;      /* bytes this rank sent */
    long long pair_calls;   /* flashcl_forward / flashcl_backward calls */
    unsigned char reserved[64];
};
FLASHCL_API flashcl_status flashcl_ring_last_stats(const flashcl_ring *ring, struct flashcl_ring_stats *out);

/* Name of a status, the ring's own codes included. */
FLASHCL_API const char *flashcl_ring_status_name(flashcl_status status);
/* The detail of the calling thread's last ring failure ("" if none). */
FLASHCL_API const char *flashcl_ring_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCL_MPI_H */
