// Decode attention, split-K ("flash decoding", Dao et al. 2023): one new query per
// sequence attends over all len = pos[b] + 1 cached keys (positions 0 .. pos[b]). One
// block per (sequence, head) would leave an H100's 132 SMs idle at batch 1, so the keys
// are cut into chunks of `chunk` keys and every (chunk, head, sequence) gets a block:
//   decode_attention_partial: each block runs the online softmax (chapter 7) over its
//     chunk and writes the unnormalized output o_c = sum_j 2^(s_j - m_c) v_j, its maximum
//     m_c and its sum l_c = sum_j 2^(s_j - m_c) (scores s in log2 units);
//   decode_attention_combine: one block per (head, sequence) rescales the chunks to the
//     common maximum M:  out = sum_c 2^(m_c - M) o_c / sum_c 2^(m_c - M) l_c.
// Inside a block each warp takes KEYS keys per loop trip: the lanes hold head_dim / 32
// values of q, k and v each, a dot product is a butterfly sum, and the KEYS loads of a
// trip are independent, so they are in flight together.
// q: fp32, row b at q + b * q_stride (the q part of a QKV row); caches: T (float or
// __half), [batch, heads, max_len, head_dim]; out: fp32 [batch, heads * head_dim].
// head_dim <= 128. Scores are scaled by `scale` (1 / sqrt(head_dim)).
// Limit: memory-bound, the cache's 2 x len x head_dim x sizeof(T) bytes per (sequence,
// head); o_part and ml_part are chunks x (head_dim + 2) floats, small next to that.
// Launch: partial: grid (chunks, heads, batch), block (WARPS x 32) with
// chunks = ceil(max_len / chunk); o_part [batch, heads, chunks, head_dim], ml_part
// [batch, heads, chunks, 2]. Combine: grid (heads, batch), block (128).
#include <cuda_fp16.h>

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
#define WARPS 4
#define KEYS 4                                    // keys per warp per loop trip
#define MAX_HEAD_DIM 128
#define PER_LANE (MAX_HEAD_DIM / WARP_SIZE)      // head values per lane
#define LOG2E 1.4426950408889634f                // e^x = 2^(x log2 e)
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// butterfly: every lane gets the sum
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    }
    return v;
}

template <typename T>
__global__ void __launch_bounds__(WARPS * WARP_SIZE)
decode_attention_partial(const float* __restrict__ q, int q_stride,
                         const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                         const int* __restrict__ pos, float* __restrict__ o_part,
                         float* __restrict__ ml_part, int heads, int head_dim,
                         int max_len, int chunk, float scale) {
    __shared__ float warp_m[WARPS], warp_l[WARPS], warp_o[WARPS][MAX_HEAD_DIM];
    const int c = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int len = min(pos[b] + 1, max_len);
    const int first = c * chunk, last = min(first + chunk, len);  // keys [first, last)
    const float* qh = q + static_cast<long long>(b) * q_stride + head * head_dim;
    float qv[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const int d = lane + j * WARP_SIZE;
        qv[j] = d < head_dim ? qh[d] * (scale * LOG2E) : 0.0f;
        acc[j] = 0.0f;
    }
    const long long base =
        (static_cast<long long>(b) * heads + head) * max_len * head_dim;
    const T* kh = k_cache + base;
    const T* vh = v_cache + base;
    float m = NEG_INF, l = 0.0f;
    for (int t0 = first + warp * KEYS; t0 < last; t0 += WARPS * KEYS) {
        // The loads of all KEYS keys and values are unconditional and issued before any
        // is used: one memory latency per trip. A key past `last` re-reads key last - 1
        // (its score is masked below), a value past head_dim re-reads value head_dim - 1
        // (its q is 0 and it is never stored). Loads under an `if` would each wait for
        // the one before.
        float kf[KEYS][PER_LANE], vf[KEYS][PER_LANE];
#pragma unroll
        for (int kk = 0; kk < KEYS; ++kk) {
            const long long t = min(t0 + kk, last - 1);
#pragma unroll
            for (int j = 0; j < PER_LANE; ++j) {
                const int d = min(lane + j * WARP_SIZE, head_dim - 1);
                kf[kk][j] = to_float(kh[t * head_dim + d]);
                vf[kk][j] = to_float(vh[t * head_dim + d]);
            }
        }
        float s[KEYS];
        float mx = m;
#pragma unroll
        for (int kk = 0; kk < KEYS; ++kk) {
            s[kk] = 0.0f;
#pragma unroll
            for (int j = 0; j < PER_LANE; ++j) s[kk] += qv[j] * kf[kk][j];
            s[kk] = t0 + kk < last ? warp_sum(s[kk]) : NEG_INF;
            mx = fmaxf(mx, s[kk]);  // finite: key t0 < last is always there
        }
        const float corr = exp2f(m - mx);  // 0 on the first trip (m = -inf)
        l *= corr;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) acc[j] *= corr;
#pragma unroll
        for (int kk = 0; kk < KEYS; ++kk) {
            const float p = exp2f(s[kk] - mx);  // 0 for a masked key (s = -inf)
            l += p;
#pragma unroll
            for (int j = 0; j < PER_LANE; ++j) acc[j] += p * vf[kk][j];
        }
        m = mx;
    }
    // The warps hold partial softmaxes of their own keys: combine them the same way.
    if (lane == 0) {
        warp_m[warp] = m;
        warp_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const int d = lane + j * WARP_SIZE;
        if (d < head_dim) warp_o[warp][d] = acc[j];
    }
    __syncthreads();
    float M = NEG_INF;
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, warp_m[w]);
    const long long part = (static_cast<long long>(b) * heads + head) * gridDim.x + c;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            if (warp_l[w] > 0.0f) o += warp_o[w][d] * exp2f(warp_m[w] - M);
        }
        o_part[part * head_dim + d] = o;
    }
    if (threadIdx.x == 0) {
        float L = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            if (warp_l[w] > 0.0f) L += warp_l[w] * exp2f(warp_m[w] - M);
        }
        ml_part[2 * part] = M;  // -inf with L = 0: an empty chunk (past len)
        ml_part[2 * part + 1] = L;
    }
}

extern "C" __global__ void decode_attention_combine(const float* __restrict__ o_part,
                                                    const float* __restrict__ ml_part,
                                                    float* __restrict__ out, int heads,
                                                    int head_dim, int chunks) {
    const long long bh = static_cast<long long>(blockIdx.y) * heads + blockIdx.x;
    const float* ml = ml_part + bh * chunks * 2;
    float M = NEG_INF;
    for (int c = 0; c < chunks; ++c) M = fmaxf(M, ml[2 * c]);
    float L = 0.0f;
    for (int c = 0; c < chunks; ++c) {
        if (ml[2 * c + 1] > 0.0f) L += ml[2 * c + 1] * exp2f(ml[2 * c] - M);
    }
    const float* o = o_part + bh * chunks * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int c = 0; c < chunks; ++c) {
            if (ml[2 * c + 1] > 0.0f) sum += o[c * head_dim + d] * exp2f(ml[2 * c] - M);
        }
        out[bh * head_dim + d] = sum / L;
    }
}
