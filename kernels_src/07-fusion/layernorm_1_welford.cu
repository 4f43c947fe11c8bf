// LayerNorm forward of each row of a rows x cols fp32 matrix, version 1: one block per
// row, the statistics in ONE streaming sweep with Welford's update, then a second sweep
// that normalizes:
//   y = (x - mean) * rstd * w + b,   rstd = 1 / sqrt(var + eps),
//   var = mean((x - mean)^2).
// Welford keeps (count, mean, M2 = sum of squared deviations) per thread and merges two
// such triples with Chan's formula, so it never forms the cancelling difference
// E[x^2] - E[x]^2.
// Writes mean[row] and rstd[row] for the backward pass (the same convention as PyTorch).
// Limit: 2 floats per element through DRAM if the second sweep finds the row in L1/L2,
// 3 if it misses, as most rereads will with thousands of rows in progress at once (see
// softmax versions 1 and 2); and a division per element in the Welford update.
// Launch: grid = rows, blockDim.x a multiple of 32, at most 1024.

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

struct Welford {
    float n, mean, m2;  // n as float: merging divides by it anyway
};

// Chan, Golub and LeVeque (1979)
__device__ __forceinline__ Welford merge(Welford a, Welford b) {
    const float n = a.n + b.n;
    if (n == 0.0f) {
        return a;
    }
    const float delta = b.mean - a.mean;
    const float wb = b.n / n;
    return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb};
}

__device__ __forceinline__ Welford warp_merge(Welford s) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        Welford o = {__shfl_xor_sync(FULL_MASK, s.n, offset),
                     __shfl_xor_sync(FULL_MASK, s.mean, offset),
                     __shfl_xor_sync(FULL_MASK, s.m2, offset)};
        s = merge(s, o);
    }
    return s;
}

extern "C" __global__ void layernorm_welford(const float* __restrict__ x,
                                             const float* __restrict__ w,
                                             const float* __restrict__ b,
                                             float* __restrict__ y,
                                             float* __restrict__ mean,
                                             float* __restrict__ rstd,
                                             int rows, int cols, float eps) {
    __shared__ Welford per_warp[32];
    const int row = blockIdx.x;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    Welford s = {0.0f, 0.0f, 0.0f};
    // sweep 1: Welford's update, value by value
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = xr[c];
        s.n += 1.0f;
        const float delta = v - s.mean;
        s.mean += delta / s.n;
        s.m2 += delta * (v - s.mean);
    }
    s = warp_merge(s);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) {
        per_warp[warp] = s;
    }
    __syncthreads();
    const int warps = (blockDim.x + WARP_SIZE - 1) / WARP_SIZE;
    s = lane < warps ? per_warp[lane] : Welford{0.0f, 0.0f, 0.0f};
    // every warp merges the per-warp triples: every thread gets the row's statistics
    s = warp_merge(s);
    const float r = rsqrtf(s.m2 / cols + eps);
    if (threadIdx.x == 0) {
        mean[row] = s.mean;
        rstd[row] = r;
    }
    // sweep 2: normalize, scale, shift
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        yr[c] = (xr[c] - s.mean) * r * w[c] + b[c];
    }
}
