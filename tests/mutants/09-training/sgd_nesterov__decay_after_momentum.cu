
extern "C" __global__ void sgd_nesterov(float* __restrict__ p, const float* __restrict__ g,
                                        float* __restrict__ buf, long long n, float lr,
                                        float momentum, float weight_decay, int first_step) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i];
        const float b = first_step ? gi : momentum * buf[i] + gi;
        buf[i] = b;
        p[i] -= lr * (gi + momentum * b);
    }
}
