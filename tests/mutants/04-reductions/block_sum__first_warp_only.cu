// Mutant: the warp sums are never combined; the block writes the sum of its first warp only.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float warp_sums[8];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (threadIdx.x == 0) partials[blockIdx.x] = v;
}
