// sum, version 5: several elements per thread. The grid is sized to fill the GPU once
// (not to the data);
// each thread walks a grid-stride loop accumulating in a register, so the shuffle
// reduction and its barrier are paid once per thread instead of once per element. Two
// kernels in one file:
// sum_grid_stride:        one float per load;
// sum_grid_stride_float4: 16-byte float4 loads, four of them in flight per thread per
// iteration.
// Both write one partial per block; a second launch of the same kernel with ONE block
// sums the partials (the two-kernel version; version 6 folds the second launch into the
// first).
// Limit: 4 bytes/element read once from DRAM; the float4 version should reach ~90% of the
// copy bandwidth.
// Launch: blockDim.x a multiple of 32, at most 1024; float4 loads need x 16-byte aligned
// (every CuPy allocation is), otherwise the kernel falls back to one float at a time.

#define WARP_SIZE 32           // lanes per warp on every NVIDIA GPU
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(FULL_MASK, v, offset);
    }
    return v;
}

// Thread 0 returns the sum of v over the block.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[WARP_SIZE];  // at most 1024 / 32 = 32 warps
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    v = warp_sum(v);
    if (lane == 0) {
        warp_sums[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / WARP_SIZE ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
    }
    return v;
}

extern "C" __global__ void sum_grid_stride(const float* __restrict__ x,
                                           float* __restrict__ partials,
                                           long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;  // this thread's running sum, in a register
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        acc += x[i];
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = acc;
    }
}

__device__ __forceinline__ float sum4(float4 a) { return (a.x + a.y) + (a.z + a.w); }

extern "C" __global__ void sum_grid_stride_float4(const float* __restrict__ x,
                                                  float* __restrict__ partials,
                                                  long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = (reinterpret_cast<unsigned long long>(x) % sizeof(float4)) == 0;
    // whole float4s; the rest goes one float at a time below
    const long long n4 = aligned ? n / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float acc = 0.0f;
    long long i = first;
    // Four independent 16-byte loads per iteration: 64 bytes in flight per thread hide
    // the DRAM latency.
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 a = x4[i], b = x4[i + stride], c = x4[i + 2 * stride],
                d = x4[i + 3 * stride];
        acc += (sum4(a) + sum4(b)) + (sum4(c) + sum4(d));
    }
    for (; i < n4; i += stride) {  // fewer than 4 float4s left for this thread
        acc += sum4(x4[i]);
    }
    // the last n % 4 floats (all of them if unaligned)
    for (long long j = 4 * n4 + first; j < n; j += stride) {
        acc += x[j];
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = acc;
    }
}
