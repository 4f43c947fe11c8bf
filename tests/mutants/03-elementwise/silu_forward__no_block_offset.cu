extern "C" __global__ void silu_forward(const float* __restrict__ x, float* __restrict__ y, int n) {
    for (int i = threadIdx.x; i < n; i += gridDim.x * blockDim.x) {  // bug: every block starts at element 0
        y[i] = x[i] / (1.0f + expf(-x[i]));
    }
}
