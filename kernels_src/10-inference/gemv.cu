// The decode step's projections: y[b, n] = sum_k W[n, k] x[b, k] for a few rows x (the
// batch of new tokens), W fp16 [N, K] row-major (nn.Linear's layout), x and y fp32.
// At batch 1 every weight is used for one multiply-add: 2 flops per 2 bytes, far left of
// the ridge point, so the kernel is a copy of W at best, and the whole decode step is
// bounded by the bytes of all weights / DRAM bandwidth.
// A warp owns ROWS output rows. Its lanes read the rows in 16-byte chunks (8 fp16
// values; a warp reads 512 contiguous bytes of a row per load), and each lane issues the
// loads of UNROLL chunks of every one of its rows before it uses the first: ROWS x UNROLL
// x 16 bytes in flight per lane, which is what a memory-bound kernel needs to cover DRAM
// latency (Little's law). Each chunk of x (fp32, small, from L1/L2) is loaded once for
// the ROWS rows. KSPLIT warps of a block may share the same rows, each reading every
// KSPLIT-th chunk, and add their sums through shared memory: more warps per row when
// there are few rows. Up to MAX_BATCH tokens share one read of W (a larger batch reads W
// once per MAX_BATCH tokens); a butterfly sum finishes each dot product, and the
// epilogue is fused:
//   mode 0: y = Wx;   mode 1: y += Wx (the residual add);   mode 2: y = gelu_tanh(Wx).
// Limit: memory-bound, N x K x 2 bytes of W per launch; target the copy bandwidth when W
// does not fit in L2. ROWS, UNROLL and KSPLIT come from compile options (-DROWS=2 ...);
// gpt.py's GEMV holds the configuration the H100 sweep of gpu_check.py chose.
// Launch: block (32 x warps), warps a multiple of KSPLIT; grid ceil(N / (ROWS x warps /
// KSPLIT)). 16-byte loads need K % 8 == 0 and W and x 16-byte aligned; other cases take
// a path of one value per load.
#include <cuda_fp16.h>

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
#define MAX_BATCH 8     // tokens that share one read of W
#define MAX_WARPS 32    // warps in a block of 1024 threads
#ifndef ROWS
#define ROWS 1          // output rows per warp
#endif
#ifndef UNROLL
#define UNROLL 4        // 16-byte chunks per row and lane in flight
#endif
#ifndef KSPLIT
#define KSPLIT 1        // warps that share a group of rows
#endif

__device__ __forceinline__ float gelu_tanh(float v) {  // the GELU of GPT-2
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

// acc + the dot product of 8 fp16 weights with 8 fp32 values of x
__device__ __forceinline__ float dot8(uint4 w, float4 x0, float4 x1, float acc) {
    const __half2* h = reinterpret_cast<const __half2*>(&w);
    const float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
    const float2 c = __half22float2(h[2]), d = __half22float2(h[3]);
    acc = fmaf(a.x, x0.x, fmaf(a.y, x0.y, acc));
    acc = fmaf(b.x, x0.z, fmaf(b.y, x0.w, acc));
    acc = fmaf(c.x, x1.x, fmaf(c.y, x1.y, acc));
    return fmaf(d.x, x1.z, fmaf(d.y, x1.w, acc));
}

// U chunks of each of the warp's rows, from chunk c on at a stride of WARP_SIZE x KSPLIT
// chunks: all U x ROWS loads of W are issued before the first product.
template <int U>
__device__ __forceinline__ void chunks(const __half* __restrict__ W,
                                       const float* __restrict__ x, int N, int K, int n0,
                                       int c, int nb, float (&acc)[MAX_BATCH][ROWS]) {
    const int stride = WARP_SIZE * KSPLIT;
    uint4 w[U][ROWS];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {  // a row past N re-reads row N - 1, never stored
            const long long n = min(n0 + r, N - 1);
            w[u][r] = __ldg(reinterpret_cast<const uint4*>(W + n * K) + c + u * stride);
        }
    }
#pragma unroll
    for (int b = 0; b < MAX_BATCH; ++b) {
        if (b < nb) {
            const float4* xb =
                reinterpret_cast<const float4*>(x + static_cast<long long>(b) * K);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const float4 x0 = __ldg(xb + 2 * (c + u * stride));
                const float4 x1 = __ldg(xb + 2 * (c + u * stride) + 1);
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
                    acc[b][r] = dot8(w[u][r], x0, x1, acc[b][r]);
            }
        }
    }
}

extern "C" __global__ void gemv_f16(const __half* __restrict__ W,
                                    const float* __restrict__ x, float* __restrict__ y,
                                    int N, int K, int batch, int mode) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int part = warp % KSPLIT;  // which share of the chunks this warp reads
    const int groups = blockDim.x / (WARP_SIZE * KSPLIT);
    const int n0 = (blockIdx.x * groups + warp / KSPLIT) * ROWS;
    const bool vec = K % 8 == 0 && reinterpret_cast<unsigned long long>(W) % 16 == 0 &&
                     reinterpret_cast<unsigned long long>(x) % 16 == 0;
#if KSPLIT > 1
    __shared__ float sums[MAX_WARPS][MAX_BATCH][ROWS];
#endif
    for (int b0 = 0; b0 < batch; b0 += MAX_BATCH) {
        const int nb = min(MAX_BATCH, batch - b0);
        const float* xb = x + static_cast<long long>(b0) * K;
        float acc[MAX_BATCH][ROWS];
#pragma unroll
        for (int b = 0; b < MAX_BATCH; ++b) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) acc[b][r] = 0.0f;
        }
        // no early return past N: the warps of a row group meet at barriers below
        if (n0 < N && vec) {
            const int stride = WARP_SIZE * KSPLIT, n_chunks = K / 8;
            int c = part * WARP_SIZE + lane;
            for (; c + (UNROLL - 1) * stride < n_chunks; c += UNROLL * stride)
                chunks<UNROLL>(W, xb, N, K, n0, c, nb, acc);
            for (; c < n_chunks; c += stride) chunks<1>(W, xb, N, K, n0, c, nb, acc);
        } else if (n0 < N) {
            for (int k = part * WARP_SIZE + lane; k < K; k += WARP_SIZE * KSPLIT) {
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const long long n = min(n0 + r, N - 1);
                    const float wf = __half2float(W[n * K + k]);
#pragma unroll
                    for (int b = 0; b < MAX_BATCH; ++b) {
                        if (b < nb) acc[b][r] += wf * xb[b * (long long)K + k];
                    }
                }
            }
        }
#pragma unroll
        for (int b = 0; b < MAX_BATCH; ++b) {
            if (b >= nb) break;  // the same nb in every lane: the shuffles stay converged
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                float v = acc[b][r];
                for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2)
                    v += __shfl_xor_sync(FULL_MASK, v, offset);
                acc[b][r] = v;  // every lane holds the warp's sum
            }
        }
#if KSPLIT > 1
        if (lane == 0) {
            for (int b = 0; b < nb; ++b)
                for (int r = 0; r < ROWS; ++r) sums[warp][b][r] = acc[b][r];
        }
        __syncthreads();
        if (part == 0) {
            for (int b = 0; b < nb; ++b) {
                for (int r = 0; r < ROWS; ++r) {
                    float v = 0.0f;
                    for (int p = 0; p < KSPLIT; ++p) v += sums[warp + p][b][r];
                    acc[b][r] = v;
                }
            }
        }
        __syncthreads();  // sums is reused by the next MAX_BATCH tokens
#endif
        // lane b x ROWS + r stores output (b, r): one store instruction for all of them
        if (part == 0 && n0 < N) {
#pragma unroll
            for (int b = 0; b < MAX_BATCH; ++b) {
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    if (lane == (b * ROWS + r) % WARP_SIZE && b < nb && n0 + r < N) {
                        float* out = y + static_cast<long long>(b0 + b) * N + n0 + r;
                        const float v = acc[b][r];
                        *out = mode == 1 ? *out + v : mode == 2 ? gelu_tanh(v) : v;
                    }
                }
            }
        }
    }
}
