// gemv_1_fp16: y = W x for decode at batch 1 (W N x K row-major __half, x K __half, y N
// __half; fp32 accumulation). One warp per ROWS rows: in each step every lane loads 16
// bytes (8 halves) of x once and 16 bytes of each of its ROWS rows, so the warp reads 512
// contiguous bytes of a row per load instruction and x is reused ROWS times from
// registers; UNROLL steps' loads are issued before their arithmetic (more bytes in flight
// per warp); a shuffle reduction ends each row. W is read exactly once, so a GEMV is a
// copy of W with arithmetic on the side: 2 flops per 2 bytes, far below any ridge point.
// Limit: memory-bound, 2 B per weight (+ x): copy bandwidth at best; the chapter's target
// is 1.2x cuBLAS's fp16 GEMV (torch.matmul) at decode shapes on the H100.
// Launch: block 32 * WARPS, grid ceil(N KSPLIT / (ROWS * WARPS)): KSPLIT warps (a
// divisor of WARPS <= 32) share each group of ROWS rows and add their sums in shared
// memory. K % 8 == 0 takes the 16-byte path (row starts 16-byte aligned); other K fall
// back to one half per lane per step.

#define GEMV_UNROLL 2  // this kernel's default UNROLL and KSPLIT (gemv_common.cuh)
#define GEMV_KSPLIT 8
#include "13-quantization/gemv_common.cuh"

// acc += the dot product of 8 halves of w and 8 floats of x
__device__ __forceinline__ float dot8(uint4 w, const float* xf, float acc) {
    const __half2* h = reinterpret_cast<const __half2*>(&w);
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        acc = fmaf(f.x, xf[2 * i], acc);
        acc = fmaf(f.y, xf[2 * i + 1], acc);
    }
    return acc;
}

// U chunks (16 bytes each) of each of the warp's rows from chunk c on, every lane at
// stride STRIDE chunks: all U x ROWS loads are issued before the first product, so a warp
// waits for memory once per U chunks instead of once per chunk. Chunks past the end of
// the row (the last step) are neither loaded nor used.
template <int U>
__device__ __forceinline__ void steps(const __half* __restrict__ W,
                                      const __half* __restrict__ x, int N, int K,
                                      int row0, int c, float* acc) {
    const int chunks = K / 8;
    uint4 wv[U][ROWS];
    for (int u = 0; u < U; u++)
        for (int r = 0; r < ROWS; r++)  // rows past N read row 0 and are never stored
            if (c + STRIDE * u < chunks)
                wv[u][r] = ld_weights(reinterpret_cast<const uint4*>(
                                        W + (size_t)(row0 + r < N ? row0 + r : 0) * K)
                                    + c + STRIDE * u);
    for (int u = 0; u < U; u++) {
        if (c + STRIDE * u >= chunks) break;
        uint4 xv = __ldg(reinterpret_cast<const uint4*>(x) + c + STRIDE * u);
        float xf[8];
        const __half2* xh = reinterpret_cast<const __half2*>(&xv);
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(xh[i]);
            xf[2 * i] = f.x;
            xf[2 * i + 1] = f.y;
        }
        for (int r = 0; r < ROWS; r++) acc[r] = dot8(wv[u][r], xf, acc[r]);
    }
}

extern "C" __global__ void gemv_1_fp16(int N, int K, const __half* __restrict__ W,
                                       const __half* __restrict__ x,
                                       __half* __restrict__ y) {
    // lane of the row group: KSPLIT warps act as one wide warp of 32 KSPLIT lanes
    const int lane = threadIdx.x % (32 * KSPLIT);
    const int row0 = (blockIdx.x * (blockDim.x / STRIDE) + threadIdx.x / STRIDE) * ROWS;
    float acc[ROWS] = {};
    if (row0 >= N) {  // no rows: only the shared sums of store_rows wait for this warp
    } else if (K % 8 == 0) {
        for (int c = lane; c < K / 8; c += STRIDE * UNROLL)
            steps<UNROLL>(W, x, N, K, row0, c, acc);
    } else {
        for (int k = lane; k < K; k += STRIDE) {
            float xk = __half2float(x[k]);
            for (int r = 0; r < ROWS; r++)
                if (row0 + r < N)
                    acc[r] = fmaf(__half2float(W[(size_t)(row0 + r) * K + k]), xk,
                                  acc[r]);
        }
    }
    store_rows(acc, row0, N, y);
}
