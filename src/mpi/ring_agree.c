/* Every rank's verdict on a call, agreed over the communicator: a rank that fails makes all fail, and
 * all must describe the same problem. One MPI_Allreduce a call (two where something failed). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ring_internal.h"

enum { F_FAILED, F_BATCH, F_ROWS, F_HEADS_Q, F_HEADS_KV, F_DIM, F_DTYPE, F_MASK, F_SCALE, F_SOFTCAP, F_PRECISION,
       F_COUNT };
static const char *const field_names[F_COUNT] = {
    "", "batch", "seq_q (rows per rank)", "heads_q", "heads_kv", "head_dim", "dtype", "mask", "scale",
    "softcap", "precision",
};

flashcl_status fcl_ring_check_attention(const struct flashcl_attention *attn)
{
    if (!attn)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "attn is NULL");
    if (attn->seq_q != attn->seq_kv)
        return fcl_ring_fail(FLASHCL_ERROR_INVALID_SHAPE,
                             "attn.seq_q (%d) differs from attn.seq_kv (%d): a rank holds the same rows of Q and K/V",
                             attn->seq_q, attn->seq_kv);
    if (attn->mask != FLASHCL_MASK_NONE && attn->mask != FLASHCL_MASK_CAUSAL)
        return fcl_ring_fail(FLASHCL_INVALID_VALUE, "attn.mask is %d: the ring takes FLASHCL_MASK_NONE or _CAUSAL",
                             (int)attn->mask);
    if (attn->window_left || attn->window_right)
        return fcl_ring_fail(FLASHCL_INVALID_VALUE, "attn.window_left/right are %d/%d: the ring takes no window",
                             attn->window_left, attn->window_right);
    if (attn->sinks.mem)
        return fcl_ring_fail(FLASHCL_INVALID_VALUE, "attn.sinks is set: the ring does not take sinks");
    /* A chunk pair's call measures ALiBi's distance from its own diagonal, not the sequence's. */
    if (attn->alibi_slopes.mem)
        return fcl_ring_fail(FLASHCL_INVALID_VALUE, "attn.alibi_slopes is set: the ring does not take ALiBi");
    if (attn->head_dim_v != 0 && attn->head_dim_v != attn->head_dim)
        return fcl_ring_fail(FLASHCL_INVALID_VALUE, "attn.head_dim_v = %d: the ring takes head_dim_v = head_dim (%d)",
                             attn->head_dim_v, attn->head_dim);
    return FLASHCL_SUCCESS;
}

/* Where any rank failed: every rank learns the first one's status and message. Its own status on a
 * failed rank, FLASHCL_RING_ERROR_PEER elsewhere. */
static flashcl_status share_failure(flashcl_ring *ring, flashcl_status local_status, int first_failed)
{
    struct {
        int status;
        char message[512];
    } report = {0};
    if (ring->rank == first_failed) {
        report.status = (int)local_status;
        snprintf(report.message, sizeof(report.message), "%s", flashcl_ring_last_error());
    }
    if (MPI_Bcast(&report, (int)sizeof(report), MPI_BYTE, first_failed, ring->comm) != MPI_SUCCESS)
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "MPI_Bcast of rank %d's failure failed", first_failed);
    if (local_status != FLASHCL_SUCCESS)
        return local_status;
    return fcl_ring_fail(FLASHCL_RING_ERROR_PEER, "rank %d failed with %s: %s", first_failed,
                         flashcl_ring_status_name((flashcl_status)report.status), report.message);
}

/* MAX over (value, -value) of each field: the largest and smallest of every rank's in one reduction. */
static flashcl_status reduce_fields(flashcl_ring *ring, const long long *mine, long long *max, long long *min)
{
    long long both[2 * F_COUNT], out[2 * F_COUNT];
    for (int i = 0; i < F_COUNT; i++) {
        both[i] = mine[i];
        both[F_COUNT + i] = -mine[i];
    }
    if (MPI_Allreduce(both, out, 2 * F_COUNT, MPI_LONG_LONG, MPI_MAX, ring->comm) != MPI_SUCCESS)
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "MPI_Allreduce of the call's shape failed");
    for (int i = 0; i < F_COUNT; i++) {
        max[i] = out[i];
        min[i] = -out[F_COUNT + i];
    }
    return FLASHCL_SUCCESS;
}

static long long float_bits(float f)
{
    unsigned int u;
    memcpy(&u, &f, sizeof(u));
    return (long long)u;
}

flashcl_status fcl_ring_agree_outcome(flashcl_ring *ring, flashcl_status local_status)
{
    long long mine[F_COUNT] = {0}, max[F_COUNT], min[F_COUNT];
    /* ranks - rank: the largest marks the lowest failed rank. */
    mine[F_FAILED] = local_status != FLASHCL_SUCCESS ? ring->ranks - ring->rank : 0;
    flashcl_status st = reduce_fields(ring, mine, max, min);
    if (st != FLASHCL_SUCCESS)
        return st;
    return max[F_FAILED] ? share_failure(ring, local_status, ring->ranks - (int)max[F_FAILED]) : FLASHCL_SUCCESS;
}

static flashcl_status derive_shape(flashcl_ring *ring, const struct flashcl_attention *attn,
                                   struct fcl_ring_shape *s)
{
    const int R = ring->ranks;
    s->batch = attn->batch;
    s->rows = attn->seq_q;
    s->heads_q = attn->heads_q;
    s->heads_kv = attn->heads_kv;
    s->dim = attn->head_dim;
    s->dtype = attn->q.dtype;
    s->esize = flashcl_dtype_size(s->dtype);
    s->causal = attn->mask == FLASHCL_MASK_CAUSAL;
    if ((long long)s->rows * R > INT_MAX)
        return fcl_ring_fail(FLASHCL_ERROR_INVALID_SHAPE, "%d ranks x %d rows do not fit an int", R, s->rows);
    s->seq = s->rows * R;
    const struct flashcl_ring_params p = {.chunks = ring->chunks};
    s->chunks = flashcl_ring_chunks(&p, s->seq);
    const int need = s->causal ? 2 * R : R;
    if (s->chunks == 0)
        return fcl_ring_fail(FLASHCL_ERROR_INVALID_SHAPE,
                             "the sequence (%d rows on %d ranks) is no multiple of 24 or 16: set params.chunks",
                             s->seq, R);
    if (s->seq % s->chunks || s->chunks % need)
        return fcl_ring_fail(FLASHCL_ERROR_INVALID_SHAPE,
                             "%d chunks must divide the sequence (%d rows) and be a multiple of %d (%s%d ranks)",
                             s->chunks, s->seq, need, s->causal ? "causal: 2 x " : "", R);
    s->chunk_rows = s->seq / s->chunks;
    s->local_chunks = s->chunks / R;
    s->q_chunk_elems = (size_t)s->batch * (size_t)s->chunk_rows * (size_t)s->heads_q * (size_t)s->dim;
    s->kv_chunk_elems = (size_t)s->batch * (size_t)s->chunk_rows * (size_t)s->heads_kv * (size_t)s->dim;
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_ring_agree(flashcl_ring *ring, flashcl_status local_status, const struct flashcl_attention *attn,
                              struct fcl_ring_shape *shape)
{
    long long mine[F_COUNT] = {0}, max[F_COUNT], min[F_COUNT];
    mine[F_FAILED] = local_status != FLASHCL_SUCCESS ? ring->ranks - ring->rank : 0;
    if (local_status == FLASHCL_SUCCESS) {
        mine[F_BATCH] = attn->batch;
        mine[F_ROWS] = attn->seq_q;
        mine[F_HEADS_Q] = attn->heads_q;
        mine[F_HEADS_KV] = attn->heads_kv;
        mine[F_DIM] = attn->head_dim;
        mine[F_DTYPE] = attn->q.dtype;
        mine[F_MASK] = attn->mask;
        mine[F_SCALE] = float_bits(attn->scale);
        mine[F_SOFTCAP] = float_bits(attn->softcap);
        mine[F_PRECISION] = attn->precision;
    }
    flashcl_status st = reduce_fields(ring, mine, max, min);
    if (st != FLASHCL_SUCCESS)
        return st;
    if (max[F_FAILED])
        return share_failure(ring, local_status, ring->ranks - (int)max[F_FAILED]);
    for (int i = 1; i < F_COUNT; i++)
        if (max[i] != min[i])
            return fcl_ring_fail(FLASHCL_ERROR_INVALID_SHAPE,
                                 "the ranks disagree on attn.%s (from %lld to %lld; rank %d has %lld): every rank "
                                 "must describe the same problem",
                                 field_names[i], min[i], max[i], ring->rank, mine[i]);
    return derive_shape(ring, attn, shape);
}
