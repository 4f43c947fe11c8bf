// sum, version 4: warp shuffles. The 32 lanes of a warp add their values through
// registers with __shfl_down_sync (5 steps, no shared memory, no barrier); one shared
// slot per warp and a single __syncthreads then let the first warp add the warp sums.
// Multi-pass like versions 2 and 3.
// Limit: still one element per thread, so every block pays its reduction for only
// blockDim elements and each thread has a single 4-byte load in flight; expect a step
// closer to, but short of, the copy bandwidth.
// Launch: blockDim.x a multiple of 32, at most 1024.

#define WARP_SIZE 32           // lanes per warp on every NVIDIA GPU
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle

// Lane 0 returns the sum of v over the warp: after the steps 16, 8, 4, 2, 1, lane 0 has
// added all 32 values.
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(FULL_MASK, v, offset);
    }
    return v;
}

// Thread 0 returns the sum of v over the block.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[WARP_SIZE];  // 1024 threads / 32 lanes = at most 32 warps
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    v = warp_sum(v);
    if (lane == 0) {
        warp_sums[warp] = v;
    }
    __syncthreads();  // the first warp reads what every warp wrote
    if (warp == 0) {
        v = lane < blockDim.x / WARP_SIZE ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
    }
    return v;
}

extern "C" __global__ void sum_shuffle(const float* __restrict__ x,
                                       float* __restrict__ partials, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float v = block_sum(i < n ? x[i] : 0.0f);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = v;
    }
}
