// flash_attn_bwd_prep: the two small kernels around the attention backward pass
// (flash_attn_bwd_1_smem.cu), for BH = batch x heads heads of S rows of D columns,
// O and dO row-major [BH, S, D] __half, the other arrays float:
//   flash_attn_bwd_prep:    Dl[i] = rowsum(dO_i * O_i) ([BH, S] float), the term that
//                           dS = P (dP - D) subtracts (it equals sum_j P_ij dP_ij, got
//                           here from D products instead of S), and dQ's fp32
//                           accumulator zeroed ([BH, S, D] float), ready for atomicAdd;
//   flash_attn_bwd_dq_half: dQ (float) rounded to __half once every key tile has added.
// One warp per row, fp32 sums; lanes read consecutive halves of the row (coalesced).
// Limit: memory-bound, 2 x 2 B read and 4 B written per element: expect ~90% of copy
// bandwidth; both kernels move a few percent of what the main kernel reads.
// Launch: flash_attn_bwd_prep block 256, grid ceil(BH S / 8) (8 rows per block);
// flash_attn_bwd_dq_half block 256, grid ceil(n / 256), n = BH S D.

#include <cuda_fp16.h>

extern "C" __global__ void flash_attn_bwd_prep(int rows, int D,
                                               const __half* __restrict__ O,
                                               const __half* __restrict__ dO,
                                               float* __restrict__ Dl,
                                               float* __restrict__ dQ) {
    const int lane = threadIdx.x % 32;  // 32 = warp size: one warp per row
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;  // a whole warp leaves: the shuffles below see full warps
    const size_t base = (size_t)row * D;
    float acc = 0.f;
    for (int d = lane; d < D; d += 32) {
        acc += __half2float(O[base + d]) * __half2float(dO[base + d]);
        dQ[base + d] = 0.f;
    }
    for (int w = 16; w > 0; w /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, w);
    if (lane == 0) Dl[row] = acc;
}

extern "C" __global__ void flash_attn_bwd_dq_half(long long n,
                                                  const float* __restrict__ dQ,
                                                  __half* __restrict__ out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2half_rn(dQ[i]);
}
