// sum, version 3: a tree in shared memory with sequential addressing. At step s the first
// s threads add element tid + s into element tid, so active threads are contiguous: whole
// warps are either busy or idle (no divergence inside a warp until s < 32), and
// consecutive threads touch consecutive words (no shared-memory bank conflicts).
// Multi-pass like version 2: the host relaunches it on the partials.
// Limit: one element per thread, so half the threads idle after the first step and each
// block does log2(blockDim) barriers for blockDim elements; closer to the copy bandwidth
// than version 2, not at it.
// Launch: blockDim.x a power of two <= 1024, shared_mem = blockDim.x * sizeof(float).
extern "C" __global__ void sum_sequential(const float* __restrict__ x,
                                          float* __restrict__ partials,
                                          long long n) {
    extern __shared__ float sh[];  // one float per thread
    const unsigned tid = threadIdx.x;
    const long long i = (long long)blockIdx.x * blockDim.x + tid;
    sh[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) {
            sh[tid] += sh[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        partials[blockIdx.x] = sh[0];
    }
}
