// fa_common.cuh: what the mma.sync kernels of chapter 12 (flash_attn_2_mma and
// flash_attn_3_32rows) share, written once: their compile-time options, the swizzled
// layout of a shared tile, the cp.async copy of a tile, the lanes' ldmatrix offsets into
// such a tile, and the exponential of the softmax. A kernel includes
// "12-flash-attention/fa_common.cuh"; -DHEAD_DIM= (64 or 128), -DWARPS=, -DBC=,
// -DSTAGES=, -DMIN_BLOCKS= and -DSLACK= override the defaults below.

#pragma once
#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async wrappers

// Options
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef BC  // keys per tile
#define BC 64
#endif
#ifndef STAGES  // K/V tiles in shared memory: 2 (double buffer) or 3
#define STAGES 2
#endif
#ifndef MIN_BLOCKS  // blocks per SM that the registers must allow (__launch_bounds__)
#define MIN_BLOCKS 1
#endif
#ifndef SLACK  // log2 units: the running maximum m is raised only past m + SLACK
#define SLACK 8.f
#endif
#define D HEAD_DIM
#define THREADS (32 * WARPS)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define NEG_INF (-__int_as_float(0x7f800000))

#if __CUDA_ARCH__ >= 800 && !defined(FLASH_SM75)
#define FLASH_SM80 1
#endif

static_assert(D % 64 == 0 && BC % 16 == 0, "tile shape");
static_assert(STAGES == 2 || STAGES == 3, "STAGES");

// Offset (in halves) of element (r, c) of a tile with D columns: 16-byte chunks swizzled,
// chunk c / 8 of row r stored at (c / 8) ^ (r % 8) within its group of 8 chunks.
__device__ __forceinline__ int off(int r, int c) {
    return r * D + ((((c >> 3) ^ r) & 7) | ((c >> 3) & ~7)) * 8 + (c & 7);
}

// Copy ROWS rows from row0 of an [S, D] matrix into a swizzled tile; rows past S become
// zeros (cp.async with source size 0 reads nothing and fills the 16 bytes with 0). Thread
// i copies chunks i, i + THREADS, ...: all in one column, STEP rows apart, so with STEP a
// multiple of 8 they share one swizzle and each copy is a constant offset from the first.
template <int ROWS>
__device__ __forceinline__ void load_tile(__half* tile, const __half* __restrict__ src,
                                          int row0, int S) {
    constexpr int PER_ROW = D / 8, N = ROWS * PER_ROW, STEP = THREADS / PER_ROW;
    constexpr int COPIES = (N + THREADS - 1) / THREADS;  // per thread
    static_assert(THREADS % PER_ROW == 0, "a thread's chunks share a column");
    const int r = threadIdx.x / PER_ROW, col = (threadIdx.x % PER_ROW) * 8;
    __half* dst = tile + off(r, col);
    const __half* g = src + (size_t)(row0 + r) * D + col;
    if (row0 + ROWS <= S) {  // every row exists: no test per copy
#pragma unroll
        for (int i = 0; i < COPIES; i++) {
            const int ri = r + i * STEP;
            if (N % THREADS != 0 && ri >= ROWS) break;
            __half* d = STEP % 8 == 0 ? dst + i * STEP * D : tile + off(ri, col);
            copy16_zfill(d, g + i * STEP * D, true);
        }
    } else {  // the last tile: rows past S read nothing (row 0's address) and become 0
#pragma unroll
        for (int i = 0; i < COPIES; i++) {
            const int ri = r + i * STEP;
            if (N % THREADS != 0 && ri >= ROWS) break;
            const bool valid = row0 + ri < S;
            __half* d = STEP % 8 == 0 ? dst + i * STEP * D : tile + off(ri, col);
            copy16_zfill(d, valid ? g + i * STEP * D : src, valid);
        }
    }
}

// The prologue's K/V copies: tile 0 into slot 0 as one commit group and, with 3 stages,
// tile 1 into slot 1 as a second group (empty when there is no tile 1), so the loop's
// wait_group counts are the same for every S.
__device__ __forceinline__ void load_first_kv(__half* tiles, const __half* Kh,
                                              const __half* Vh, int tiles_n, int S) {
    load_tile<BC>(tiles, Kh, 0, S);
    load_tile<BC>(tiles + BC * D, Vh, 0, S);
    cp_async_commit();
#if STAGES == 3
    if (tiles_n > 1) {
        load_tile<BC>(tiles + 2 * BC * D, Kh, BC, S);
        load_tile<BC>(tiles + 3 * BC * D, Vh, BC, S);
    }
    cp_async_commit();
#endif
}

// The lane's ldmatrix_x4 offsets (halves) into a swizzled tile, for the 16 x 16 blocks at
// columns 16 k, k = 0 ... 3: lane l gives the address of row `row` (its row within the
// block, the same modulo 8 for every block it visits), column half `half` (0 or 1).
// Block (16 R, 16 k + 64 G) is then o[k] + 16 R D + 64 G: every address is one of four
// registers plus a constant, with no swizzle to compute in the loop.
//   A fragments (Q; P V's V^T through .trans): row lane % 16, half lane / 16;
//   B fragments of two 8-key tiles of K:       row 8 (lane / 16) + lane % 8,
//                                               half (lane / 8) % 2.
__device__ __forceinline__ void frag_offsets(int* o, int row, int half) {
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = off(row, 16 * k + 8 * half);
}

// 2^x for the softmax: one MUFU.EX2 instruction, results below 2^-126 flushed to 0 (an
// fp16 P cannot hold them anyway); exp2f without --use_fast_math adds a range test and
// two multiplies around it to keep such results. The emulator computes exp2f.
__device__ __forceinline__ float exp2_ftz(float x) {
#ifdef __CUDL_EMULATOR__
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}
