// gemv_common.cuh: what the five GEMV kernels of chapter 13 (gemv_1 ... gemv_5) share,
// written once: their tuning options, the end of a row group (warp shuffle and KSPLIT
// sums), the loads of packed weights and scales, and the row loop of gemv_4 and gemv_5
// (x prepared in shared memory), and rows_ring, the persistent loop with a ring of loads
// in flight (-DRING=). A kernel defines GEMV_UNROLL and GEMV_KSPLIT (its defaults, from
// the H100 sweep of gpu_check.py --sweep), then includes
// "13-quantization/gemv_common.cuh"; -DROWS=, -DUNROLL=, -DKSPLIT= override them.

#pragma once
#include <cuda_fp16.h>

// Options (-DROWS=...): the same names in every kernel. UNROLL and KSPLIT default to the
// kernel's own GEMV_UNROLL and GEMV_KSPLIT, its best in the H100 sweep.
#ifndef RING
#define RING 0  // > 0: rows_ring, a ring of RING loads in flight per lane (see there)
#endif
#ifndef ROWS
#define ROWS 1  // rows per warp
#endif
#ifndef UNROLL
#define UNROLL GEMV_UNROLL  // 16-byte chunks per lane and row in flight at once
#endif
#ifndef KSPLIT
#if RING > 0
#define KSPLIT 1  // rows_ring: whole rows per warp unless asked
#else
#define KSPLIT GEMV_KSPLIT  // warps per row group, each on every KSPLIT-th 32 chunks
#endif
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

// The steps of gemv_4 and gemv_5, whose x is prepared in shared memory: U chunks (32 int4
// weights each) of each of the warp's rows from chunk c on, all loaded (load_chunks)
// before the first product; dot(w, c) is the kernel's dot product of chunk c's weights w
// with its prepared x.
template <int U, class Dot>
__device__ __forceinline__ void steps_prepared_x(const unsigned char* __restrict__ P,
                                                 const float* __restrict__ scale, int N,
                                                 int K, int group, int row0, int c,
                                                 float* acc, Dot dot) {
    const int groups = K / group, chunks = K / 32;
    uint4 wv[U][ROWS];
    float s[U][ROWS];
    load_chunks<U, 32>(P, scale, N, K, group, groups, row0, c, wv, s);
    for (int u = 0; u < U; u++)
        if (c + STRIDE * u < chunks)  // not past the end of the row (last step)
            for (int r = 0; r < ROWS; r++)
                acc[r] = fmaf(s[u][r], dot(wv[u][r], c + STRIDE * u), acc[r]);
}

// gemv_4's and gemv_5's work after x is prepared: every warp's rows, summed into y.
template <class Dot>
__device__ __forceinline__ void rows_prepared_x(const unsigned char* __restrict__ P,
                                                const float* __restrict__ scale, int N,
                                                int K, int group, __half* __restrict__ y,
                                                Dot dot) {
    // lane of the row group: KSPLIT warps act as one wide warp of 32 KSPLIT lanes
    const int lane = threadIdx.x % (32 * KSPLIT);
    const int row0 = (blockIdx.x * (blockDim.x / STRIDE) + threadIdx.x / STRIDE) * ROWS;
    float acc[ROWS] = {};
    if (row0 < N)  // a warp without rows only joins the shared sums of store_rows
        for (int c = lane; c < K / 32; c += STRIDE * UNROLL)
            steps_prepared_x<UNROLL>(P, scale, N, K, group, row0, c, acc, dot);
    store_rows(acc, row0, N, y);
}

#if RING > 0
// rows_ring (RING > 0): persistent warps, each keeping RING loads in flight all the time.
// With UNROLL, a lane issues UNROLL loads, waits, computes, and only then issues the next
// ones: while it computes, and during the x preparation before its first loads, it has
// nothing in flight. At decode shapes a lane sees only a few chunks in all, so those gaps
// are a large part of the time. Here the G row groups of the grid (ROWS rows, each shared
// by KSPLIT warps) take row groups g, g + G, g + 2G, ... one after another, and each lane
// walks its chunks of those rows (chunks lane, lane + STRIDE, ... of one group, then of
// the next) as one sequence: the load of the chunk RING places ahead is issued as soon as
// a chunk is taken for its products, so RING loads (of each of the ROWS rows) stay in
// flight, across the ends of rows too. The first RING loads are issued before prep() (the
// block's x into shared memory), so their latency hides its cost. The grid is the host's
// choice: a few blocks per SM (all resident at once) make each warp loop over several
// row groups and read x into shared memory once per block.
// dot(w, c): chunk c's weights w (PER_CHUNK of them in 16 bytes) times x; scale null
// (fp16 weights) means 1.
template <int PER_CHUNK, class Prep, class Dot>
__device__ __forceinline__ void rows_ring(const void* __restrict__ Q,
                                          const float* __restrict__ scale, int N, int K,
                                          int group, __half* __restrict__ y, Prep prep,
                                          Dot dot) {
    const uint4* W = static_cast<const uint4*>(Q);
    const int lane = threadIdx.x % STRIDE, warp = threadIdx.x / 32;  // lane of the group
    const int local = threadIdx.x / STRIDE, per_block = blockDim.x / STRIDE;  // groups
    const int G = gridDim.x * per_block;
    const int chunks = K / PER_CHUNK, slots = (chunks + STRIDE - 1) / STRIDE;  // per row
    const int groups = K / group;
    uint4 w[RING][ROWS];
    float s[RING][ROWS];
    int g_in = blockIdx.x * per_block + local, slot_in = 0;  // the next chunk to load
    // load the next chunk of the sequence into place j (a constant once unrolled)
    auto issue = [&](int j) {
        const int c = lane + STRIDE * slot_in;
        for (int r = 0; r < ROWS; r++) {
            const int n = g_in * ROWS + r;
            if (n < N && c < chunks) {
                w[j][r] = ld_weights(W + (size_t)n * chunks + c);
                const size_t sc = (size_t)n * groups + PER_CHUNK * c / group;
                s[j][r] = scale ? __ldg(scale + sc) : 1.0f;
            }
        }
        if (++slot_in == slots) {  // the same for the whole warp: no divergence
            slot_in = 0;
            g_in += G;
        }
    };
#pragma unroll
    for (int j = 0; j < RING; j++) issue(j);
    prep();
    __syncthreads();
    int g = blockIdx.x * per_block + local, slot = 0;  // the chunk used next
    float acc[ROWS] = {};
#if KSPLIT > 1
    __shared__ float part[2][32][ROWS];  // a sum per warp and row; two rounds alternate
    int round = 0;
#endif
    // while the block has rows: the same for all its warps (the KSPLIT sums sync them)
    while ((g - local) * ROWS < N) {
#pragma unroll  // constant places j: the ring stays in registers
        for (int j = 0; j < RING; j++) {
            const int c = lane + STRIDE * slot;
            uint4 wj[ROWS];
            float sj[ROWS];
            for (int r = 0; r < ROWS; r++) {
                wj[r] = w[j][r];
                sj[r] = s[j][r];
            }
            issue(j);  // its replacement, RING chunks further on
            if (c < chunks && g * ROWS < N)  // x is read once for the ROWS rows (same c)
                for (int r = 0; r < ROWS; r++)
                    acc[r] = fmaf(sj[r], dot(wj[r], c), acc[r]);
            if (++slot == slots) {  // end of the rows: the sums, then the next group
                float v[ROWS];
                for (int r = 0; r < ROWS; r++) v[r] = warp_sum(acc[r]);
#if KSPLIT > 1  // add the KSPLIT warps' sums (store_rows' way, in the loop)
                if (threadIdx.x % 32 == 0)
                    for (int r = 0; r < ROWS; r++) part[round][warp][r] = v[r];
                __syncthreads();
                for (int r = 0; r < ROWS; r++) {
                    v[r] = 0.0f;
                    for (int p = 0; p < KSPLIT; p++)
                        v[r] += part[round][local * KSPLIT + p][r];
                }
                round ^= 1;  // the next round writes the other slots: no second barrier
#endif
                if (lane == 0)
                    for (int r = 0; r < ROWS; r++)
                        if (g * ROWS + r < N) y[g * ROWS + r] = __float2half_rn(v[r]);
                for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
                slot = 0;
                g += G;
                if ((g - local) * ROWS >= N) break;
            }
        }
    }
}
#endif
