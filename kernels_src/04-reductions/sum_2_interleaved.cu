// sum, version 2: a tree in shared memory with interleaved addressing (Harris's first
// kernel). Each block sums blockDim.x consecutive elements and writes one partial sum;
// the host launches it again on the partials until one number is left (a multi-pass,
// multi-kernel reduction).
// At step s only threads whose index is a multiple of 2s work: they are spread over every
// warp, so all warps stay busy with a few active lanes (divergence), and `tid % (2 * s)`
// is a slow integer modulo.
// Limit: the loads are coalesced, but the tree's log2(blockDim) barrier steps with mostly
// idle lanes cost more than the 4 bytes/element of DRAM traffic: expect well below the
// copy bandwidth.
// Launch: blockDim.x a power of two <= 1024, shared_mem = blockDim.x * sizeof(float).
extern "C" __global__ void sum_interleaved(const float* __restrict__ x,
                                           float* __restrict__ partials,
                                           long long n) {
    extern __shared__ float sh[];  // one float per thread
    const unsigned tid = threadIdx.x;
    const long long i = (long long)blockIdx.x * blockDim.x + tid;
    sh[tid] = i < n ? x[i] : 0.0f;  // threads past the end add 0, the identity of +
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) {
            sh[tid] += sh[tid + s];
        }
        // every thread must see this step's sums before the next step reads them
        __syncthreads();
    }
    if (tid == 0) {
        partials[blockIdx.x] = sh[0];
    }
}
