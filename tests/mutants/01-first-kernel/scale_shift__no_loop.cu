// Mutant: one element per thread, as in SAXPY; with 512 threads, elements from 512 on are never updated.
extern "C" __global__ void scale_shift(float* __restrict__ x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}
