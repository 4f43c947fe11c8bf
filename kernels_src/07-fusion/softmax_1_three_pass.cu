// Softmax of each row of a rows x cols row-major fp32 matrix, version 1: fused into one
// kernel, one warp per row, three sweeps over the row: (1) its maximum m, (2) the sum d
// of exp(x - m), (3) write exp(x - m) / d. Subtracting the maximum keeps exp() from
// overflowing: every exponent is <= 0.
// Limit: memory-bound. The five separate PyTorch ops (amax, subtract, exp, sum, divide)
// move 8 floats per element through DRAM; reading x once and writing y once moves 2.
// This kernel moves 2 only if the second and third sweeps find the row in L1/L2. With
// thousands of rows in progress at once, far more than the caches hold, expect most
// rereads to miss: up to 4 floats per element (three reads and a write), so at most half
// of the copy bandwidth, and half the traffic of the five ops.
// Launch: blockDim.x a multiple of 32 (blockDim.x / 32 rows per block),
// grid = ceil(rows / warps).

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle

// Every lane gets the result: a butterfly (xor) exchange instead of shfl_down's tree to
// lane 0.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    }
    return v;
}

extern "C" __global__ void softmax_three_pass(const float* __restrict__ x,
                                              float* __restrict__ y, int rows, int cols) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= rows) {
        return;  // the whole warp leaves together
    }
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    float m = -__int_as_float(0x7f800000);  // -infinity
    for (int c = lane; c < cols; c += WARP_SIZE) {  // sweep 1: the maximum
        m = fmaxf(m, xr[c]);
    }
    m = warp_max(m);
    float d = 0.0f;
    for (int c = lane; c < cols; c += WARP_SIZE) {  // sweep 2: the denominator
        d += expf(xr[c] - m);
    }
    const float inv = 1.0f / warp_sum(d);
    for (int c = lane; c < cols; c += WARP_SIZE) {  // sweep 3: normalize and write
        yr[c] = expf(xr[c] - m) * inv;
    }
}
