// Softmax of each row, version 2: online softmax (Milakov and Gimelshein, 2018). One
// sweep finds the maximum m and the denominator d together: when a larger value arrives,
// the sum so far is rescaled by exp(m_old - m_new). Two (m, d) pairs merge the same way,
// so the lanes combine theirs with shuffles.
// A second sweep writes exp(x - m) / d. One warp per row, fp32.
// Limit: two sweeps over the row instead of three. DRAM sees 2 floats per element if the
// second sweep finds the row in L1/L2, 3 if it misses (two reads and a write), which most
// rereads will with thousands of rows in progress at once; version 1 then moves 4. So
// expect at most two thirds of the copy bandwidth.
// Launch: blockDim.x a multiple of 32 (blockDim.x / 32 rows per block),
// grid = ceil(rows / warps).

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

// The running state of a softmax denominator: d = sum of exp(x - m) over the values seen
// so far.
struct MaxSum {
    float m, d;
};

// Merge two states: rescale both sums to the larger maximum. An empty state has m = -inf,
// d = 0; the test keeps exp(-inf - (-inf)) = NaN out when both are empty.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -__int_as_float(0x7f800000)) {
        return a;
    }
    return {m, a.d * expf(a.m - m) + b.d * expf(b.m - m)};
}

extern "C" __global__ void softmax_online(const float* __restrict__ x,
                                          float* __restrict__ y, int rows, int cols) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= rows) {
        return;
    }
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    MaxSum s = {-__int_as_float(0x7f800000), 0.0f};
    for (int c = lane; c < cols; c += WARP_SIZE) {  // sweep 1: m and d together
        const float v = xr[c];
        if (v > s.m) {
            // the old sum, rescaled to the new maximum, plus exp(0)
            s.d = s.d * expf(s.m - v) + 1.0f;
            s.m = v;
        } else {
            s.d += expf(v - s.m);
        }
    }
    // butterfly: every lane gets the row's (m, d)
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        MaxSum other = {__shfl_xor_sync(FULL_MASK, s.m, offset),
                        __shfl_xor_sync(FULL_MASK, s.d, offset)};
        s = merge(s, other);
    }
    const float inv = 1.0f / s.d;
    for (int c = lane; c < cols; c += WARP_SIZE) {  // sweep 2: normalize and write
        yr[c] = expf(xr[c] - s.m) * inv;
    }
}
