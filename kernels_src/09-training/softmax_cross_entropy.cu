// Fused softmax cross-entropy, forward and gradient in one kernel, for a batch x classes
// row-major matrix of fp32 logits and int32 targets:
// loss[r] = logsumexp(x[r, :]) - x[r, t[r]] and
// dlogits[r, j] = (softmax(x[r, :])[j] - (j == t[r])) / batch, the gradient of the mean
// loss.
// One warp per row: the lanes stride over the row once keeping an online (max, sum of
// exp(x - max)) pair, merge the 32 pairs with shuffles, then a second pass over the row
// writes the gradient. Unfused, softmax, log, gather and the gradient are four kernels
// that read and write the batch x classes matrix several times.
// A target outside [0, classes) gives loss NaN and the gradient softmax / batch.
// Limit: memory-bound: read the row twice (the second read usually hits L1/L2) and write
// it once: about 8-12 bytes per logit; at small batch the launch itself dominates.
// Launch: block (128), grid (ceil(batch / 4)): blockDim.x / 32 rows per block.

#define WARP_SIZE 32           // lanes per warp on every NVIDIA GPU
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle

// (m, s) with s = sum of exp(x - m) over the values seen; m = -inf means none seen yet.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    const float neg_inf = -__int_as_float(0x7f800000);
    if (m2 == neg_inf) return;
    if (m == neg_inf) {
        m = m2;
        s = s2;
        return;
    }
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

extern "C" __global__ void softmax_cross_entropy(const float* __restrict__ logits,
                                                 const int* __restrict__ targets,
                                                 float* __restrict__ loss,
                                                 float* __restrict__ dlogits,
                                                 int batch, int classes) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int r = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (r >= batch) return;  // the whole warp leaves together: the shuffles stay full
    const float* x = logits + static_cast<long long>(r) * classes;
    float* dx = dlogits + static_cast<long long>(r) * classes;

    float m = -__int_as_float(0x7f800000), s = 0.0f;  // pass 1: online max and sum
    for (int j = lane; j < classes; j += WARP_SIZE) online_merge(m, s, x[j], 1.0f);
    for (int off = WARP_SIZE / 2; off > 0; off /= 2) {
        const float m2 = __shfl_xor_sync(FULL_MASK, m, off);
        const float s2 = __shfl_xor_sync(FULL_MASK, s, off);
        online_merge(m, s, m2, s2);
    }
    const int t = targets[r];
    const bool valid = t >= 0 && t < classes;
    if (lane == 0) loss[r] = valid ? logf(s) + m - x[t] : __int_as_float(0x7fc00000);

    const float inv_sum = 1.0f / s, inv_batch = 1.0f / batch;  // pass 2: the gradient
    for (int j = lane; j < classes; j += WARP_SIZE) {
        const float p = expf(x[j] - m) * inv_sum;
        dx[j] = (p - (j == t ? 1.0f : 0.0f)) * inv_batch;
    }
}
