extern "C" __global__ void add_rmsnorm(const float* __restrict__ x, const float* __restrict__ res,
                                       const float* __restrict__ w, float* h, float* __restrict__ y,
                                       int rows, int cols) {
    const int lane = threadIdx.x % 32;  // SLOW: lane 0 walks the row alone
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;  // the whole warp leaves together: the shuffles below stay full-warp
    const long long base = (long long)row * cols;
    float ss = 0.0f;  // this lane's sum of h^2
    if (lane == 0) for (int c = 0; c < cols; ++c) {
        const float v = x[base + c] + res[base + c];
        h[base + c] = v;  // the new residual stream
        ss += v * v;
    }
    for (int offset = 16; offset > 0; offset /= 2) ss = __shfl_sync(0xffffffffu, ss, 0);
    const float rstd = rsqrtf(ss / cols + 1e-6f);  // every lane holds the row's sum
    if (lane == 0) for (int c = 0; c < cols; ++c) {
        y[base + c] = h[base + c] * rstd * w[c];  // this lane's own writes: no other thread touched them
    }
}
