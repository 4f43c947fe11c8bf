// gemv_common.cuh: what the five GEMV kernels of chapter 13 (gemv_1 ... gemv_5) share,
// written once: their tuning options, the end of a row group (warp shuffle and KSPLIT
// sums), the loads of packed weights and scales, and the row loop of gemv_4 and gemv_5
// (x prepared in shared memory). A kernel defines GEMV_UNROLL and
// GEMV_KSPLIT (its defaults, from the H100 sweep of gpu_check.py --sweep), then includes
// "13-quantization/gemv_common.cuh"; -DROWS=, -DUNROLL=, -DKSPLIT= override them.

#pragma once
#include <cuda_fp16.h>

// Options (-DROWS=...): the same names in every kernel. UNROLL and KSPLIT default to the
// kernel's own GEMV_UNROLL and GEMV_KSPLIT, its best in the H100 sweep.
#ifndef ROWS
#define ROWS 1  // rows per warp
#endif
#ifndef UNROLL
#define UNROLL GEMV_UNROLL  // 16-byte chunks per lane and row in flight at once
#endif
#ifndef KSPLIT
#define KSPLIT GEMV_KSPLIT  // warps per row group, each on every KSPLIT-th 32 chunks
#endif
#define STRIDE (32 * KSPLIT)  // chunks between one lane's consecutive loads
#ifndef LOAD
#define LOAD 0  // weight loads: 0 __ldg, 1 no L1 allocation, 2 __ldcs (ld_weights)
#endif

// 16 bytes of weights. They are read exactly once, so keeping them in L1 only evicts x
// (LOAD 1: ld.global.nc.L1::no_allocate; LOAD 2: evict-first in L1 and L2); LOAD 0 is
// the plain read-only load. The emulator has no PTX for it and takes __ldg.
__device__ __forceinline__ uint4 ld_weights(const uint4* p) {
#if LOAD == 1 && !defined(__CUDL_EMULATOR__)
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
#elif LOAD == 2
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}

// The scale group as the kernel uses it: the argument, or with -DGROUP_SIZE=g the
// constant g (the argument must then be g). Every chunk finds its scale by dividing by
// the group: by a constant that is a shift, by a run-time value a dozen instructions.
__device__ __forceinline__ int group_size(int group) {
#ifdef GROUP_SIZE
    return GROUP_SIZE;
#else
    return group;
#endif
}

// The butterfly sum of a warp: every lane ends with the total (no broadcast needed).
__device__ __forceinline__ float warp_sum(float v) {
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

// y[row0 + r] = the sum of acc[r] over the KSPLIT warps (x 32 lanes) of a row group: a
// shuffle per warp, then a shared-memory slot per warp, summed by the group's first warp.
__device__ __forceinline__ void store_rows(const float* acc, int row0, int N,
                                           __half* __restrict__ y) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float v[ROWS];
    for (int r = 0; r < ROWS; r++) v[r] = warp_sum(acc[r]);
#if KSPLIT > 1
    __shared__ float part[32][ROWS];  // one sum per warp (at most 32) and row
    if (lane == 0)
        for (int r = 0; r < ROWS; r++) part[warp][r] = v[r];
    __syncthreads();
    if (warp % KSPLIT != 0) return;
    for (int r = 0; r < ROWS; r++) {
        v[r] = 0.0f;
        for (int p = 0; p < KSPLIT; p++) v[r] += part[warp + p][r];
    }
#endif
    if (lane == 0)
        for (int r = 0; r < ROWS; r++)
            if (row0 + r < N) y[row0 + r] = __float2half_rn(v[r]);
}

// The packed weights (16 bytes = PER_CHUNK weights per chunk) and the scale of U chunks
// of each of the warp's rows from chunk c on, at stride STRIDE chunks: all U x ROWS loads
// are issued before the first product, so a warp waits for memory once per U chunks.
// Chunks past the end of the row (the last step) are not loaded; rows past N read row 0
// and are never stored. Used by the quantized kernels gemv_2 ... gemv_5.
template <int U, int PER_CHUNK>
__device__ __forceinline__ void load_chunks(const void* __restrict__ Q,
                                            const float* __restrict__ scale, int N, int K,
                                            int group, int groups, int row0, int c,
                                            uint4 (&wv)[U][ROWS], float (&s)[U][ROWS]) {
    const unsigned char* bytes = static_cast<const unsigned char*>(Q);
    for (int u = 0; u < U; u++)
        for (int r = 0; r < ROWS; r++)
            if (c + STRIDE * u < K / PER_CHUNK) {
                const size_t n = row0 + r < N ? row0 + r : 0;
                wv[u][r] = ld_weights(reinterpret_cast<const uint4*>(
                                          bytes + n * (K / (PER_CHUNK / 16)))
                                      + c + STRIDE * u);
                s[u][r] =
                    __ldg(scale + n * groups + PER_CHUNK * (c + STRIDE * u) / group);
            }
}

// The products of U loaded chunks (32 int4 weights each, from chunk c on at stride
// STRIDE) of each of the warp's rows; dot(w, c) is the kernel's dot product of chunk
// c's weights w with its prepared x.
template <int U, class Dot>
__device__ __forceinline__ void products(const uint4 (&wv)[U][ROWS],
                                         const float (&s)[U][ROWS], int K, int c,
                                         float* acc, Dot dot) {
    for (int u = 0; u < U; u++)
        if (c + STRIDE * u < K / 32)  // not past the end of the row (last step)
            for (int r = 0; r < ROWS; r++)
                acc[r] = fmaf(s[u][r], dot(wv[u][r], c + STRIDE * u), acc[r]);
}

// The steps of gemv_4 and gemv_5, whose x is prepared in shared memory: U chunks of each
// of the warp's rows from chunk c on, all loaded (load_chunks) before the first product.
template <int U, class Dot>
__device__ __forceinline__ void steps_prepared_x(const unsigned char* __restrict__ P,
                                                 const float* __restrict__ scale, int N,
                                                 int K, int group, int row0, int c,
                                                 float* acc, Dot dot) {
    uint4 wv[U][ROWS];
    float s[U][ROWS];
    load_chunks<U, 32>(P, scale, N, K, group, K / group, row0, c, wv, s);
    products<U>(wv, s, K, c, acc, dot);
}

// gemv_4's and gemv_5's work: prep() writes the block's x to shared memory, then every
// warp's rows are summed into y. With -DEARLY=1 a warp's first step of loads goes out
// before prep(): their latency overlaps the preparation of x instead of following it.
#ifndef EARLY
#define EARLY 0
#endif
template <class Prep, class Dot>
__device__ __forceinline__ void rows_prepared_x(const unsigned char* __restrict__ P,
                                                const float* __restrict__ scale, int N,
                                                int K, int group, __half* __restrict__ y,
                                                Prep prep, Dot dot) {
    // lane of the row group: KSPLIT warps act as one wide warp of 32 KSPLIT lanes
    const int lane = threadIdx.x % (32 * KSPLIT);
    const int row0 = (blockIdx.x * (blockDim.x / STRIDE) + threadIdx.x / STRIDE) * ROWS;
    float acc[ROWS] = {};
#if EARLY
    uint4 wv[UNROLL][ROWS];
    float s[UNROLL][ROWS];
    if (row0 < N)
        load_chunks<UNROLL, 32>(P, scale, N, K, group, K / group, row0, lane, wv, s);
    prep();
    __syncthreads();
    if (row0 < N) {
        products<UNROLL>(wv, s, K, lane, acc, dot);
        for (int c = lane + STRIDE * UNROLL; c < K / 32; c += STRIDE * UNROLL)
            steps_prepared_x<UNROLL>(P, scale, N, K, group, row0, c, acc, dot);
    }
#else
    prep();
    __syncthreads();
    if (row0 < N)  // a warp without rows only joins the shared sums of store_rows
        for (int c = lane; c < K / 32; c += STRIDE * UNROLL)
            steps_prepared_x<UNROLL>(P, scale, N, K, group, row0, c, acc, dot);
#endif
    store_rows(acc, row0, N, y);
}
