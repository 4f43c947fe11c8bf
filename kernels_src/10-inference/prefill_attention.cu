// Causal attention for the prompt (prefill): query t of sequence b sits at position
// start[b] + t and attends over the cached keys 0 .. start[b] + t (the prompt's keys were
// appended to the cache first, so the same kernel serves a prompt that continues a
// cache). A block takes QUERIES consecutive queries of one (sequence, head), one warp
// each, and walks the keys in tiles of 32: the block stages a tile of K and V in shared
// memory once and all its warps use it, so each key is read from DRAM seq / QUERIES times
// instead of seq times. In a tile lane j scores key j (a dot product over the padded K
// row: no bank conflicts), the warp updates its online softmax (chapter 7) once per tile,
// and each lane accumulates head_dim / 32 output values, taking the 32 probabilities by
// shuffles.
// q: fp32, row r = b * seq + t at q + r * q_stride; caches: T (float or __half),
// [batch, heads, max_len, head_dim]; out: fp32 [batch * seq, heads * head_dim].
// head_dim <= 128; scores scaled by `scale`.
// Limit: compute-bound at long prompts (2 x 2 x head_dim flops per query-key pair, on
// fp32 CUDA cores, half of them masked in the last tile); Flash Attention (chapter 12)
// does this on tensor cores.
// Launch: grid (ceil(seq / QUERIES), heads, batch), block (QUERIES x 32).
#include <cuda_fp16.h>

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
#define QUERIES 8                                // warps per block, one query each
#define TILE 32                                  // keys per tile: one per lane
#define MAX_HEAD_DIM 128
#define PER_LANE (MAX_HEAD_DIM / WARP_SIZE)
#define LOG2E 1.4426950408889634f
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__global__ void __launch_bounds__(QUERIES * WARP_SIZE)
prefill_attention(const float* __restrict__ q, int q_stride,
                  const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                  const int* __restrict__ start, float* __restrict__ out, int seq,
                  int heads, int head_dim, int max_len, float scale) {
    __shared__ float qs[QUERIES][MAX_HEAD_DIM];
    // +1: lane j reads row j, 32 banks apart
    __shared__ float ks[TILE][MAX_HEAD_DIM + 1];
    __shared__ float vs[TILE][MAX_HEAD_DIM];
    const int head = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int t = blockIdx.x * QUERIES + warp;
    const bool valid = t < seq;
    const int s0 = start[b], qpos = s0 + t;
    const int block_last = s0 + min(static_cast<int>(blockIdx.x + 1) * QUERIES, seq) - 1;
    const int n_keys = min(block_last + 1, max_len);
    if (valid) {
        const long long row = static_cast<long long>(b) * seq + t;
        const float* qr = q + row * q_stride + head * head_dim;
        for (int d = lane; d < head_dim; d += WARP_SIZE) {
            qs[warp][d] = qr[d] * (scale * LOG2E);  // scores in log2 units: exp2f below
        }
    }
    const long long base =
        (static_cast<long long>(b) * heads + head) * max_len * head_dim;
    float m = NEG_INF, l = 0.0f, acc[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) acc[j] = 0.0f;
    for (int tile = 0; tile < n_keys; tile += TILE) {
        // the previous tile is used up (and, the first time, qs written)
        __syncthreads();
        for (int e = threadIdx.x; e < TILE * head_dim; e += blockDim.x) {
            const int kk = e / head_dim, d = e % head_dim, key = tile + kk;
            const long long at = base + static_cast<long long>(key) * head_dim + d;
            ks[kk][d] = key < n_keys ? to_float(k_cache[at]) : 0.0f;
            vs[kk][d] = key < n_keys ? to_float(v_cache[at]) : 0.0f;
        }
        __syncthreads();
        // warp-uniform; the barriers above are shared
        if (!valid || tile > qpos) continue;
        const int key = tile + lane;
        float s = NEG_INF;
        if (key <= qpos && key < n_keys) {
            s = 0.0f;
            for (int d = 0; d < head_dim; ++d) s += qs[warp][d] * ks[lane][d];
        }
        float mx = fmaxf(m, s);
        for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, offset));
        }
        const float corr = exp2f(m - mx), p = exp2f(s - mx);  // key 0 makes mx finite
        float psum = p;
        for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
            psum += __shfl_xor_sync(FULL_MASK, psum, offset);
        }
        l = l * corr + psum;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) acc[j] *= corr;
        for (int kk = 0; kk < TILE; ++kk) {
            const float pk = __shfl_sync(FULL_MASK, p, kk);
#pragma unroll
            for (int j = 0; j < PER_LANE; ++j) {
                const int d = lane + j * WARP_SIZE;
                if (d < head_dim) acc[j] += pk * vs[kk][d];
            }
        }
        m = mx;
    }
    if (valid) {
        const long long row = static_cast<long long>(b) * seq + t;
        float* o = out + (row * heads + head) * head_dim;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            const int d = lane + j * WARP_SIZE;
            if (d < head_dim) o[d] = acc[j] / l;
        }
    }
}
