// Mutant: the sum is not rescaled when the maximum grows.
#define WARP 32
#define ROWS_PER_BLOCK 8  // 256 threads = 8 warps, one row each

extern "C" __global__ void row_logsumexp(const float* __restrict__ x, float* __restrict__ out,
                                         int rows, int cols) {
    const float NEG_INF = -__int_as_float(0x7f800000);
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= rows) return;  // the whole warp leaves together: the shuffles below stay full-warp
    const float* xr = x + (long long)row * cols;
    float m = NEG_INF, s = 0.0f;  // this lane's maximum and its sum of exp(v - m)
    for (int c = lane; c < cols; c += WARP) {
        float v = xr[c];
        if (v > m) {
            s = s + 1.0f;  // rescale the old sum to the new maximum
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    for (int offset = WARP / 2; offset > 0; offset /= 2) {
        float m2 = __shfl_down_sync(0xffffffff, m, offset);
        float s2 = __shfl_down_sync(0xffffffff, s, offset);
        float big = fmaxf(m, m2);
        if (big != NEG_INF) s = s * expf(m - big) + s2 * expf(m2 - big);  // two empty lanes stay empty
        m = big;
    }
    if (lane == 0) out[row] = m + logf(s);
}
