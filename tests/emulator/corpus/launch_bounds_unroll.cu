// __launch_bounds__ with two arguments, #pragma unroll and a per-thread strip of four elements.
constexpr int kPerThread = 4;

__global__ void __launch_bounds__(256, 2) scale_strip(const float* __restrict__ x, float* __restrict__ y,
                                                     const float alpha, const int n) {
    const int base = (blockIdx.x * blockDim.x + threadIdx.x) * kPerThread;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        if (base + k < n) y[base + k] = alpha * x[base + k];
    }
}
