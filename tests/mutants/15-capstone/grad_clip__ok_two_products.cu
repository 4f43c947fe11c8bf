// Correct, another way: unscale first, then clip, two products per element and the norm from
// the unscaled squared norm.
extern "C" __global__ void grad_unscale_clip(float* __restrict__ g, long long n,
                                             const float* __restrict__ norm_sq,
                                             float inv_scale, float max_norm) {
    const float norm = sqrtf(*norm_sq * inv_scale * inv_scale);
    const float clip = norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        g[i] = (g[i] * inv_scale) * clip;
}
