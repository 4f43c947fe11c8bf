extern "C" __global__ void attention_rows(const float* __restrict__ Q, const float* __restrict__ K,
                                          const float* __restrict__ V, float* __restrict__ O, int S,
                                          float scale, int causal) {
    const int lane = threadIdx.x % 32;  // SLOW: lane 0 does the whole row alone
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= S || lane != 0) {
        return;
    }
    const long long head = (long long)blockIdx.y * S * 64;
    const float* q = Q + head + (long long)row * 64;
    const int keys = causal ? row + 1 : S;
    float m = -__int_as_float(0x7f800000), l = 0.0f, o[64];
    for (int c = 0; c < 64; ++c) {
        o[c] = 0.0f;
    }
    for (int key = 0; key < keys; ++key) {
        const float* k = K + head + (long long)key * 64;
        float acc = 0.0f;
        for (int c = 0; c < 64; ++c) {
            acc += q[c] * k[c];
        }
        const float score = acc * scale;
        const float m_new = fmaxf(m, score);
        const float alpha = expf(m - m_new), p = expf(score - m_new);
        l = l * alpha + p;
        const float* vr = V + head + (long long)key * 64;
        for (int c = 0; c < 64; ++c) {
            o[c] = o[c] * alpha + p * vr[c];
        }
        m = m_new;
    }
    for (int c = 0; c < 64; ++c) {
        O[head + (long long)row * 64 + c] = o[c] / l;
    }
}
