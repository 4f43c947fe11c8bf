// grid-stride loop with size_t indices (the "CUDA Pro Tip" style)
__global__ void saxpy(size_t n, float a, const float *__restrict__ x, float *__restrict__ y) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
