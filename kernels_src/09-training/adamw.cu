// One AdamW step (Loshchilov & Hutter; the update of torch.optim.AdamW) over every
// parameter of a model in one launch: the model keeps all its parameters in one flat fp32
// buffer (and its gradients in another of the same layout), so the optimizer is a single
// elementwise kernel over n floats instead of one launch per tensor. For each i:
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2,
//   p = p - lr wd p                         (decoupled weight decay, applied first)
//   p = p - lr (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
// step counts from 1. Weight decay applies to every element; a model that exempts biases
// launches once per decay group (two offsets into the same buffers).
// Limit: memory-bound: read p, g, m, v and write p, m, v: 28 bytes per parameter, a
// handful of flops each; target the copy bandwidth.
// adamw_step_capturable reads the step number from device memory (what PyTorch's
// capturable=True does), so the launch can be captured once in a CUDA graph and replayed
// at every step: the data loader's next_batch kernel advances the counter.
// Launch: block (256), grid-stride: grid (min(ceil(n / 256), 32 x SM count)).

__device__ __forceinline__ void adamw_update(float* __restrict__ p,
                                             const float* __restrict__ g,
                                             float* __restrict__ m, float* __restrict__ v,
                                             long long n, float lr, float beta1,
                                             float beta2, float eps, float weight_decay,
                                             int step) {
    // The bias corrections are the same for every element: each thread computes them
    // once.
    const float bc1 = 1.0f - powf(beta1, static_cast<float>(step));
    const float bc2_sqrt = sqrtf(1.0f - powf(beta2, static_cast<float>(step)));
    const float step_size = lr / bc1;
    const float decay = 1.0f - lr * weight_decay;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (long long i = first; i < n; i += stride) {
        const float gi = g[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        // sqrt(v_hat) + eps as sqrt(v) / sqrt(1 - beta2^step) + eps, as PyTorch does
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

extern "C" __global__ void adamw_step(float* __restrict__ p, const float* __restrict__ g,
                                      float* __restrict__ m, float* __restrict__ v,
                                      long long n, float lr, float beta1, float beta2,
                                      float eps, float weight_decay, int step) {
    adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
}

extern "C" __global__ void adamw_step_capturable(float* __restrict__ p,
                                                 const float* __restrict__ g,
                                                 float* __restrict__ m,
                                                 float* __restrict__ v, long long n,
                                                 float lr, float beta1, float beta2,
                                                 float eps, float weight_decay,
                                                 const int* __restrict__ step) {
    adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, *step);
}
