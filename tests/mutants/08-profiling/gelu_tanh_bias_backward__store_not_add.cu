extern "C" __global__ void gelu_tanh_bias_backward(const float* __restrict__ dy, const float* __restrict__ x,
                                                   const float* __restrict__ bias, float* __restrict__ dx,
                                                   float* __restrict__ dbias, int rows, int cols,
                                                   int rows_per_block) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    const float b = bias[c];
    const int r0 = blockIdx.y * rows_per_block;
    const int r1 = min(rows, r0 + rows_per_block);
    float sum = 0.0f;
    for (int r = r0; r < r1; ++r) {
        const long long i = (long long)r * cols + c;
        const float v = x[i] + b;
        const float t = tanhf(k * (v + 0.044715f * v * v * v));
        const float grad = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * v * v);
        const float g = dy[i] * grad;
        dx[i] = g;
        sum += g;
    }
    if (r0 < r1) dbias[c] = sum;  // blocks of other strips add to the same column
}
