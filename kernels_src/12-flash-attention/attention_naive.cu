// attention_naive: the two products of attention with the S x S matrix in memory, for
// BH = batch x heads independent heads, Q, K, V, O row-major [BH, S, D] __half:
//   attention_scores: P = scale Q K^T as float [BH, S, S], -inf if causal and key > query
//   attention_pv:     O = P V (P float [BH, S, S], already softmaxed row by row)
// Between the two, 07-fusion/fused_rows.cu's softmax<float> normalises the BH S rows of
// the scores into a second S x S buffer. One thread per output element, fp32 accumulate.
// Limit: scores and probabilities cost 8 S^2 bytes per head, each written once and read
// once: at S = 4096 that is 128 MiB per head, the memory FlashAttention never allocates;
// the products are CUDA-core loops without shared-memory reuse, far below Tensor Cores.
// Launch: attention_scores block (32, 8), grid (ceil(S / 32), ceil(S / 8), BH);
// attention_pv block (32, 8), grid (ceil(D / 32), ceil(S / 8), BH).

#include <cuda_fp16.h>

#define NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void attention_scores(int S, int D, float scale, int causal,
                                            const __half* __restrict__ Q,
                                            const __half* __restrict__ K,
                                            float* __restrict__ P) {
    const int key = blockIdx.x * blockDim.x + threadIdx.x;  // a warp: 32 keys of one row
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (key >= S || row >= S) return;
    const size_t head = (size_t)blockIdx.z * S;
    const __half* q = Q + (head + row) * D;
    const __half* k = K + (head + key) * D;
    float acc = 0.f;
    for (int d = 0; d < D; d++) acc += __half2float(q[d]) * __half2float(k[d]);
    P[(head + row) * S + key] = causal && key > row ? NEG_INF : acc * scale;
}

extern "C" __global__ void attention_pv(int S, int D, const float* __restrict__ P,
                                        const __half* __restrict__ V,
                                        __half* __restrict__ O) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col >= D || row >= S) return;
    const size_t head = (size_t)blockIdx.z * S;
    const float* p = P + (head + row) * S;
    float acc = 0.f;
    for (int key = 0; key < S; key++)
        acc += p[key] * __half2float(V[(head + key) * D + col]);
    O[(head + row) * D + col] = __float2half_rn(acc);
}
