// Mutant: sums exp(score) without the running maximum (m stays 0): exp() of a score above 88.7 is
// infinity in fp32, and below -103 it is 0 for every key (O = 0 / 0)
extern "C" __global__ void attention_rows(const float* __restrict__ Q, const float* __restrict__ K,
                                          const float* __restrict__ V, float* __restrict__ O, int S,
                                          float scale, int causal) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= S) {
        return;  // the whole warp leaves together: the shuffles below stay full-warp
    }
    const long long head = (long long)blockIdx.y * S * 64;
    const float* q = Q + head + (long long)row * 64;
    const int keys = causal ? row + 1 : S;
    float m = 0.0f, l = 0.0f, o0 = 0.0f, o1 = 0.0f;
    for (int k0 = 0; k0 < keys; k0 += 32) {
        float score = -__int_as_float(0x7f800000);  // lanes past the last key add nothing
        if (k0 + lane < keys) {
            const float* k = K + head + (long long)(k0 + lane) * 64;
            float acc = 0.0f;
            for (int c = 0; c < 64; c += 4) {  // 16-byte loads; q is the same for all lanes
                const float4 a = *reinterpret_cast<const float4*>(q + c);
                const float4 b = *reinterpret_cast<const float4*>(k + c);
                acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
            score = acc * scale;
        }
        float mx = score;
        for (int offset = 16; offset > 0; offset /= 2) {
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
        }
        const float m_new = 0.0f;  // no running maximum
        const float alpha = expf(m - m_new);
        const float p = expf(score - m_new);
        float ps = p;
        for (int offset = 16; offset > 0; offset /= 2) {
            ps += __shfl_xor_sync(0xffffffffu, ps, offset);
        }
        l = l * alpha + ps;
        o0 *= alpha;
        o1 *= alpha;
        const int n = min(32, keys - k0);
        for (int j = 0; j < n; ++j) {  // lane j's weight times row k0 + j of V
            const float pj = __shfl_sync(0xffffffffu, p, j);
            const float* vr = V + head + (long long)(k0 + j) * 64;
            o0 += pj * vr[lane];
            o1 += pj * vr[lane + 32];
        }
        m = m_new;
    }
    float* out = O + head + (long long)row * 64;
    out[lane] = o0 / l;
    out[lane + 32] = o1 / l;
}
