#define HEAD_DIM 64
#define WARPS 8
#define NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void decode_attention(const float* __restrict__ q,
                                            const float* __restrict__ k_cache,
                                            const float* __restrict__ v_cache,
                                            const int* __restrict__ lens, float* __restrict__ out,
                                            int heads, int max_len, float scale) {
    __shared__ float warp_m[WARPS], warp_l[WARPS], warp_o[WARPS][HEAD_DIM];
    const int head = blockIdx.x, b = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long bh = (long long)b * heads + head;
    const float q0 = q[bh * HEAD_DIM + lane] * scale, q1 = q[bh * HEAD_DIM + lane + 32] * scale;
    const float* k = k_cache + bh * max_len * HEAD_DIM;
    const float* v = v_cache + bh * max_len * HEAD_DIM;
    const int n = lens[b];
    float m = NEG_INF, l = 0.0f, a0 = 0.0f, a1 = 0.0f;
    // the 8 warps take turns over the keys: 8 keys' loads in flight per block
    for (int key = warp; key < n; key += WARPS) {
        float s = q0 * k[key * HEAD_DIM + lane] + q1 * k[key * HEAD_DIM + lane + 32];
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float m_new = fmaxf(m, s);
        const float c = expf(m - m_new), p = expf(s - m_new);
        l = l * c + p;
        a0 = a0 * c + p * v[key * HEAD_DIM + lane];
        a1 = a1 * c + p * v[key * HEAD_DIM + lane + 32];
        m = m_new;
    }
    if (lane == 0) {
        warp_m[warp] = m;
        warp_l[warp] = l;
    }
    warp_o[warp][lane] = a0;
    warp_o[warp][lane + 32] = a1;
    // BUG: no __syncthreads(): warp 0 and 1 read what other warps may not have written yet
    if (threadIdx.x < HEAD_DIM) {
        float M = NEG_INF;
        for (int w = 0; w < WARPS; ++w) M = fmaxf(M, warp_m[w]);
        float num = 0.0f, den = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            if (warp_l[w] > 0.0f) {  // a warp with no keys (n < 8) has m = -inf
                const float f = expf(warp_m[w] - M);
                num += warp_o[w][threadIdx.x] * f;
                den += warp_l[w] * f;
            }
        }
        out[bh * HEAD_DIM + threadIdx.x] = num / den;
    }
}
