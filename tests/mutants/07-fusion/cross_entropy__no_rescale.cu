// Mutant: the running sum is not rescaled when the maximum grows: d counts old terms with the wrong exponent.
extern "C" __global__ void cross_entropy(const float* __restrict__ x, const int* __restrict__ target,
                                         float* __restrict__ loss, int rows, int cols) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) {
        return;  // the whole warp leaves together
    }
    const float* xr = x + (long long)row * cols;
    const float neg_inf = -__int_as_float(0x7f800000);
    float m = neg_inf, d = 0.0f;  // d = sum of exp(v - m) over the values this lane has seen
    for (int c = lane; c < cols; c += 32) {
        const float v = xr[c];
        if (v > m) {
            d = d + 1.0f;
            m = v;
        } else {
            d += expf(v - m);
        }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        const float d2 = __shfl_xor_sync(0xffffffffu, d, offset);
        const float mm = fmaxf(m, m2);
        if (mm != neg_inf) {  // both empty (lanes past a short row): nothing to merge
            d = d * expf(m - mm) + d2 * expf(m2 - mm);
            m = mm;
        }
    }
    if (lane == 0) {
        loss[row] = m + logf(d) - xr[target[row]];
    }
}
