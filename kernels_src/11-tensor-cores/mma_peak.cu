// mma_peak: the rate of mma.sync m16n8k16 (fp16 in, fp32 accumulate) alone, with no
// memory traffic: the ceiling that kernels 2 and 3 can approach on a GPU, to compare with
// the datasheet's Tensor Core peak (which Hopper reaches only through wgmma). Each warp
// runs CHAINS independent accumulator tiles `iters` times over the same fragments, so
// no mma waits for the previous one (one 16 x 8 x 16 mma is 4096 flops).
// Launch: any grid of whole warps; out has one float per thread (keeps the sums alive).

#include "11-tensor-cores/tc_ptx.cuh"

#ifndef CHAINS
#define CHAINS 8  // independent accumulators per warp: enough to cover the mma latency
#endif

extern "C" __global__ void mma_peak(int iters, float* __restrict__ out) {
    const float x = (threadIdx.x % 32) * 1e-3f;  // small values: the sums stay finite
    unsigned a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = pack_half2(x, i * 1e-3f);
    for (int i = 0; i < 2; i++) b[i] = pack_half2(i * 1e-3f, x);
    float acc[CHAINS][4] = {};
    for (int it = 0; it < iters; it++)
#pragma unroll
        for (int c = 0; c < CHAINS; c++) mma_16x8x16(acc[c], a, b);
    float s = 0.0f;
    for (int c = 0; c < CHAINS; c++) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
