// vector_add, version 1: one thread per element, out[i] = x[i] + y[i].
// Launch: ceil(n / threads) blocks of `threads` threads; the bounds check idles the extra
// threads.
// Limit: memory-bound, 3 x 4 bytes per element (two reads, one write) and 1 flop; expect
// ~90% of the measured copy bandwidth for large n. int indices: n up to 2^31 - 1.
extern "C" __global__ void vector_add(const float* __restrict__ x,
                                      const float* __restrict__ y,
                                      float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = x[i] + y[i];
    }
}
