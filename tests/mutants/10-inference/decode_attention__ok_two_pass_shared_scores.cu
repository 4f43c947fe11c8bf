// Correct, another style: two passes over the keys with the scores kept in shared memory; each thread
// scores whole keys (a 64-term dot product), the block finds their maximum and sum, and thread d < 64
// adds p_j v[j][d] over all keys
#define HEAD_DIM 64
#define MAX_KEYS 4096
#define NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void decode_attention(const float* __restrict__ q,
                                            const float* __restrict__ k_cache,
                                            const float* __restrict__ v_cache,
                                            const int* __restrict__ lens,
                                            float* __restrict__ out,
                                            int heads, int max_len, float scale) {
    __shared__ float score[MAX_KEYS];
    __shared__ float red[256];
    const int head = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const long long bh = (long long)b * heads + head;
    const float* qv = q + bh * HEAD_DIM;
    const float* k = k_cache + bh * max_len * HEAD_DIM;
    const float* v = v_cache + bh * max_len * HEAD_DIM;
    const int n = lens[b];
    float mx = NEG_INF;
    for (int j = t; j < n; j += blockDim.x) {
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; ++d) s = fmaf(qv[d], k[(long long)j * HEAD_DIM + d], s);
        score[j] = s * scale;
        mx = fmaxf(mx, score[j]);
    }
    red[t] = mx;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) red[t] = fmaxf(red[t], red[t + half]);
        __syncthreads();
    }
    const float M = red[0];
    __syncthreads();  // everyone has read red[0] before it is reused
    float sum = 0.0f;
    for (int j = t; j < n; j += blockDim.x) {
        score[j] = expf(score[j] - M);
        sum += score[j];
    }
    red[t] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) red[t] += red[t + half];
        __syncthreads();
    }
    if (t < HEAD_DIM) {
        float acc = 0.0f;
        for (int j = 0; j < n; ++j) acc = fmaf(score[j], v[(long long)j * HEAD_DIM + t], acc);
        out[bh * HEAD_DIM + t] = acc / red[0];
    }
}
