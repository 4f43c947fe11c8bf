// The decode step's projections: y[b, n] = sum_k W[n, k] x[b, k] for a few rows x (the
// batch of new tokens), W fp16 [N, K] row-major (nn.Linear's layout), x and y fp32.
// At batch 1 every weight is used for one multiply-add: 2 flops per 2 bytes, far left of
// the ridge point, so the kernel is a copy of W at best, and the whole decode step is
// bounded by the bytes of all weights / DRAM bandwidth. One warp per output row: the
// lanes read the row in 16-byte loads (8 fp16 values each, coalesced), keep up to
// MAX_BATCH dot products in registers (W is read once for up to MAX_BATCH tokens: a
// larger batch reads it once per MAX_BATCH rows), and a butterfly sum finishes each. Each
// lane issues UNROLL loads before it uses the first, so enough bytes are in flight to
// cover DRAM latency. The epilogue is fused:
//   mode 0: y = Wx;   mode 1: y += Wx (the residual add);   mode 2: y = gelu_tanh(Wx).
// x is read by every warp: it is small (batch x K x 4 bytes) and stays in L1 and L2.
// Limit: memory-bound, N x K x 2 bytes of W per launch; target the copy bandwidth when W
// does not fit in L2 (when it does, consecutive decode steps read it from L2).
// Launch: block (ROWS x 32), grid (ceil(N / ROWS)); 16-byte loads need K % 8 == 0 and W
// and x 16-byte aligned, else every load is one value.
#include <cuda_fp16.h>

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
#define ROWS 8          // output rows per block, one per warp
#define MAX_BATCH 8     // tokens that share one read of W
#define UNROLL 4        // 16-byte loads in flight per lane

__device__ __forceinline__ float gelu_tanh(float v) {  // the GELU of GPT-2
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

extern "C" __global__ void __launch_bounds__(ROWS * WARP_SIZE)
gemv_f16(const __half* __restrict__ W, const float* __restrict__ x, float* __restrict__ y,
         int N, int K, int batch, int mode) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int n = blockIdx.x * ROWS + threadIdx.x / WARP_SIZE;
    if (n >= N) return;  // no barriers below: a warp past the end may leave
    const __half* w = W + static_cast<long long>(n) * K;
    const bool vec = K % 8 == 0 && reinterpret_cast<unsigned long long>(W) % 16 == 0 &&
                     reinterpret_cast<unsigned long long>(x) % 16 == 0;
    for (int b0 = 0; b0 < batch; b0 += MAX_BATCH) {
        const int nb = min(MAX_BATCH, batch - b0);
        float acc[MAX_BATCH];
#pragma unroll
        for (int b = 0; b < MAX_BATCH; ++b) acc[b] = 0.0f;
        if (vec) {
            // UNROLL 16-byte loads of W per lane are issued before any is used: that many
            // loads in flight per lane, which a memory-bound kernel needs (Little's law)
            for (int k0 = lane * 8; k0 < K; k0 += WARP_SIZE * 8 * UNROLL) {
                uint4 raw[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const int k = k0 + u * WARP_SIZE * 8;
                    raw[u] = k < K ? *reinterpret_cast<const uint4*>(w + k)
                                   : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const int k = k0 + u * WARP_SIZE * 8;
                    if (k >= K) break;
                    const __half* h = reinterpret_cast<const __half*>(&raw[u]);
                    float wf[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) wf[j] = __half2float(h[j]);
#pragma unroll
                    for (int b = 0; b < MAX_BATCH; ++b) {
                        if (b < nb) {
                            const float* xb = x + static_cast<long long>(b0 + b) * K + k;
                            const float4 x0 = *reinterpret_cast<const float4*>(xb);
                            const float4 x1 = *reinterpret_cast<const float4*>(xb + 4);
                            acc[b] += wf[0] * x0.x + wf[1] * x0.y + wf[2] * x0.z +
                                      wf[3] * x0.w + wf[4] * x1.x + wf[5] * x1.y +
                                      wf[6] * x1.z + wf[7] * x1.w;
                        }
                    }
                }
            }
        } else {
            for (int k = lane; k < K; k += WARP_SIZE) {
                const float wf = __half2float(w[k]);
#pragma unroll
                for (int b = 0; b < MAX_BATCH; ++b) {
                    if (b < nb) acc[b] += wf * x[static_cast<long long>(b0 + b) * K + k];
                }
            }
        }
#pragma unroll
        for (int b = 0; b < MAX_BATCH; ++b) {
            if (b < nb) {
                float v = acc[b];
                for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
                    v += __shfl_xor_sync(FULL_MASK, v, offset);
                }
                if (lane == 0) {
                    float* yb = y + static_cast<long long>(b0 + b) * N + n;
                    *yb = mode == 1 ? *yb + v : mode == 2 ? gelu_tanh(v) : v;
                }
            }
        }
    }
}
