/*
 * wgmma_probe.cl: the sm_90a route's probe (src/nvidia.c). One warpgroup
 * computes the forward's two products with nv_wgmma.h's instructions on
 * exact small integers, through the same tiles, loaders and descriptors as
 * flash_forward_mma.cl with -DWGMMA=1:
 *     S[64 x 64]  = Q[64 x 128] Kᵀ   (K-major B, two 64-column panels along k), Q from registers,
 *                                    and again with Q read from local memory (past d = 128)
 *     O[64 x 128] = P[64 x 64] V     (N-major B, transposed, two panels along n)
 * s_out holds the two S, one after the other. The host compares all three with its own sums; only
 * then are the route's kernels planned.
 */
#define DTYPE 1
#define HEAD_DIM 128
#define BLOCK_N 64
#define WG 128
#define WGMMA 1

#include "nv_async.h"
#include "nv_mma16.h"
#include "nv_wgmma.h"

#define ROWS 64

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void wgmma_probe(__global const ushort *q, __global const ushort *k, __global const ushort *p,
                 __global const ushort *v, __global float *s_out, __global float *o_out)
{
    __local uint4 q_tile[ROWS * ROW_CHUNKS] __attribute__((aligned(1024)));
    __local uint4 k_tile[BLOCK_N * ROW_CHUNKS] __attribute__((aligned(1024)));
    __local uint4 v_tile[BLOCK_N * ROW_CHUNKS] __attribute__((aligned(1024)));
    const int tid = (int)get_local_id(0), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    load_tile(q_tile, ROWS, q, HEAD_DIM, 0, ROWS, tid);
    load_tile(k_tile, BLOCK_N, k, HEAD_DIM, 0, BLOCK_N, tid);
    load_tile(v_tile, BLOCK_N, v, HEAD_DIM, 0, BLOCK_N, tid);
    copy_async_commit();
    COPY_ASYNC_WAIT(0);
    fence_proxy_async();
    barrier(CLK_LOCAL_MEM_FENCE);

    const int q_lane_row = 8 * ((lane >> 3) & 1) + (lane & 7), q_lane_chunk = lane >> 4;
    uint qf[HEAD_DIM / 16][4];
NV_UNROLL
    for (int kk = 0; kk < HEAD_DIM / 16; kk++)
        ldmatrix_x4(local_address(&q_tile[tile_index(ROWS, warp * 16 + q_lane_row, kk * 2 + q_lane_chunk)]), qf[kk]);

    float s[BLOCK_N / 8][4];
    WGMMA_HOLD_A(&qf[0][0], HEAD_DIM / 4);
    wgmma_fence();
NV_UNROLL
    for (int kk = 0; kk < HEAD_DIM / 16; kk++)
        wgmma_n64_kmajor(&s[0][0], qf[kk],
                         wgmma_desc(k_tile, (kk >> 2) * BLOCK_N * 128 + (kk & 3) * 32, 16, 1024), kk);
    wgmma_commit();
    wgmma_wait_all();
    WGMMA_HOLD(&s[0][0], BLOCK_N / 2);
    WGMMA_HOLD_A(&qf[0][0], HEAD_DIM / 4);

    float s_ss[BLOCK_N / 8][4];
    wgmma_fence();
NV_UNROLL
    for (int kk = 0; kk < HEAD_DIM / 16; kk++)
        wgmma_n64_kmajor_ss(&s_ss[0][0], wgmma_desc(q_tile, (kk >> 2) * ROWS * 128 + (kk & 3) * 32, 16, 1024),
                            wgmma_desc(k_tile, (kk >> 2) * BLOCK_N * 128 + (kk & 3) * 32, 16, 1024), kk);
    wgmma_commit();
    wgmma_wait_all();
    WGMMA_HOLD(&s_ss[0][0], BLOCK_N / 2);

    /* P's A fragments straight from global memory (mma.sync's A layout). */
    __global const uint *p2 = (__global const uint *)p;
    const int row = warp * 16 + g;
    float o[HEAD_DIM / 8][4];
NV_UNROLL
    for (int n = 0; n < HEAD_DIM / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    wgmma_fence();
NV_UNROLL
    for (int kc = 0; kc < BLOCK_N / 16; kc++) {
        const uint a[4] = {p2[(row * BLOCK_N + 16 * kc + 2 * t) / 2], p2[((row + 8) * BLOCK_N + 16 * kc + 2 * t) / 2],
                           p2[(row * BLOCK_N + 16 * kc + 8 + 2 * t) / 2],
                           p2[((row + 8) * BLOCK_N + 16 * kc + 8 + 2 * t) / 2]};
        wgmma_n128_trans(&o[0][0], a, wgmma_desc(v_tile, kc * 2048, BLOCK_N * 128, 1024), 1);
    }
    wgmma_commit();
    wgmma_wait_all();
    WGMMA_HOLD(&o[0][0], HEAD_DIM / 2);

NV_UNROLL
    for (int n = 0; n < BLOCK_N / 8; n++)
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            s_out[(row + 8 * r) * BLOCK_N + 8 * n + 2 * t] = s[n][2 * r];
            s_out[(row + 8 * r) * BLOCK_N + 8 * n + 2 * t + 1] = s[n][2 * r + 1];
            s_out[(ROWS + row + 8 * r) * BLOCK_N + 8 * n + 2 * t] = s_ss[n][2 * r];
            s_out[(ROWS + row + 8 * r) * BLOCK_N + 8 * n + 2 * t + 1] = s_ss[n][2 * r + 1];
        }
NV_UNROLL
    for (int n = 0; n < HEAD_DIM / 8; n++)
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            o_out[(row + 8 * r) * HEAD_DIM + 8 * n + 2 * t] = o[n][2 * r];
            o_out[(row + 8 * r) * HEAD_DIM + 8 * n + 2 * t + 1] = o[n][2 * r + 1];
        }
}
