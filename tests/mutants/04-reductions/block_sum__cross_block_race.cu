// Mutant: every block zeroes all of partials before adding its warp sums atomically, so a late block
// erases the sums of blocks that finished earlier: a race between blocks on global memory (plain
// stores against atomics). Whether it shows depends on the order in which blocks run.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32;
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) partials[b] = 0.0f;
    __syncthreads();
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) atomicAdd(&partials[blockIdx.x], v);
}
