extern "C" __global__ void silu_forward(const float* __restrict__ x, float* __restrict__ y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= n; i += gridDim.x * blockDim.x) {  // bug: <=
        y[i] = x[i] / (1.0f + expf(-x[i]));
    }
}
