// Clips against the right norm but never divides by the loss scale: the gradients stay S times
// too large.
extern "C" __global__ void grad_unscale_clip(float* __restrict__ g, long long n,
                                             const float* __restrict__ norm_sq,
                                             float inv_scale, float max_norm) {
    const float norm = sqrtf(*norm_sq) * inv_scale;
    const float factor = fminf(1.0f, max_norm / (norm + 1e-6f));
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        g[i] *= factor;
}
