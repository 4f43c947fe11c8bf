// Correct, another style: two passes over the keys, the row's maximum first (each lane scores its
// keys, a warp maximum), then the weights exp(s - max) and the weighted values without rescaling;
// each lane keeps two of the 64 output columns
extern "C" __global__ void attention_rows(const float* __restrict__ Q, const float* __restrict__ K,
                                          const float* __restrict__ V, float* __restrict__ O, int S,
                                          float scale, int causal) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= S) return;
    const long long head = (long long)blockIdx.y * S * 64;
    const float* q = Q + head + (long long)row * 64;
    const int keys = causal ? row + 1 : S;
    float mx = -__int_as_float(0x7f800000);
    for (int j = lane; j < keys; j += 32) {
        const float* k = K + head + (long long)j * 64;
        float dot = 0.0f;
        for (int c = 0; c < 64; ++c) dot = fmaf(q[c], k[c], dot);
        mx = fmaxf(mx, dot * scale);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float l = 0.0f, o0 = 0.0f, o1 = 0.0f;
    for (int j0 = 0; j0 < keys; j0 += 32) {
        float p = 0.0f;
        if (j0 + lane < keys) {
            const float* k = K + head + (long long)(j0 + lane) * 64;
            float dot = 0.0f;
            for (int c = 0; c < 64; ++c) dot = fmaf(q[c], k[c], dot);
            p = expf(dot * scale - mx);
        }
        l += p;
        for (int j = 0; j < 32 && j0 + j < keys; ++j) {
            const float pj = __shfl_sync(0xffffffffu, p, j);
            o0 += pj * V[head + (long long)(j0 + j) * 64 + lane];
            o1 += pj * V[head + (long long)(j0 + j) * 64 + lane + 32];
        }
    }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    O[head + (long long)row * 64 + lane] = o0 / l;
    O[head + (long long)row * 64 + lane + 32] = o1 / l;
}
