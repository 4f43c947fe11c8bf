// Mutant: the shuffle mask names lanes 0-15 only, yet all 32 lanes shuffle and lane 0 reads lane 16
// (undefined behaviour: every calling lane must be in the mask; an H100 happens to give the right sum).
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float warp_sums[8];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0x0000ffffu, v, offset);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < 8 ? warp_sums[lane] : 0.0f;
        for (int offset = 4; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0) partials[blockIdx.x] = v;
    }
}
