// Correct, another style: two columns per lane and step, the sum of squares reduced with
// __shfl_down_sync and broadcast from lane 0, and 1 / sqrtf instead of rsqrtf
extern "C" __global__ void add_rmsnorm(const float* __restrict__ x, const float* __restrict__ res,
                                       const float* __restrict__ w, float* h, float* __restrict__ y,
                                       int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= rows) return;
    float* hr = h + (long long)row * cols;
    const float* xr = x + (long long)row * cols;
    const float* rr = res + (long long)row * cols;
    float ss = 0.0f;
    for (int c = 2 * lane; c < cols; c += 64) {
        const float a = xr[c] + rr[c];
        hr[c] = a;
        ss += a * a;
        if (c + 1 < cols) {
            const float b = xr[c + 1] + rr[c + 1];
            hr[c + 1] = b;
            ss += b * b;
        }
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_down_sync(0xffffffffu, ss, o);
    const float scale = 1.0f / sqrtf(__shfl_sync(0xffffffffu, ss, 0) / cols + 1e-6f);
    float* yr = y + (long long)row * cols;
    for (int c = 2 * lane; c < cols; c += 64) {
        yr[c] = hr[c] * scale * w[c];
        if (c + 1 < cols) yr[c + 1] = hr[c + 1] * scale * w[c + 1];
    }
}
