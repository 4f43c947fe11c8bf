// Mutant: threads past the end return before the __syncthreads() the others wait at (undefined behaviour;
// today's GPUs tolerate it, the emulator reports the divergent barrier and the shuffle missing lanes).
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float warp_sums[8];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (i >= n) return;
    float v = x[i];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < 8 && blockIdx.x * blockDim.x + lane * 32 < n ? warp_sums[lane] : 0.0f;
        for (int offset = 4; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0) partials[blockIdx.x] = v;
    }
}
