// Mutant: warp 0 reads the eight warp sums from shared memory with no __syncthreads() after they were
// written: a race on shared memory (read against write, no barrier between them). Warp 0 may read slots
// that other warps have not written yet.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float warp_sums[8];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[warp] = v;
    if (warp == 0) {
        v = lane < 8 ? warp_sums[lane] : 0.0f;
        for (int offset = 4; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0) partials[blockIdx.x] = v;
    }
}
