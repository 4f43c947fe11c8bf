// Compares max_norm with the norm of the loss-scaled gradients (S times too large): clips far
// too much whenever the loss scale is not 1.
extern "C" __global__ void grad_unscale_clip(float* __restrict__ g, long long n,
                                             const float* __restrict__ norm_sq,
                                             float inv_scale, float max_norm) {
    const float norm = sqrtf(*norm_sq);
    const float factor = inv_scale * fminf(1.0f, max_norm / (norm + 1e-6f));
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        g[i] *= factor;
}
