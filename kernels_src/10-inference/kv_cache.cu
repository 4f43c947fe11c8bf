// KV-cache append: copy the key and value heads of new tokens from the fused QKV rows
// into the cache, at their positions. The cache of each of k and v is [batch, heads,
// max_len, head_dim], so the keys a decode step reads for one (sequence, head) are one
// contiguous block of len x head_dim values.
// Row r = b * seq + t of qkv (fp32, [rows, 3, heads, head_dim]: q, k, v) is token t of
// sequence b and goes to position start[b] + t; positions >= max_len are dropped.
// T = float or __half (the cache's storage type; fp16 halves the bytes every decode step
// reads).
// Limit: memory-bound, 2 x (4 + sizeof(T)) bytes per element; a few KB per decode step,
// so at batch 1 it is one launch's latency, not bandwidth.
// Launch: block (256), grid (min(ceil(rows x heads x head_dim / 256), 32 x SM count)).
#include <cuda_fp16.h>

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}

template <typename T>
__global__ void kv_append(const float* __restrict__ qkv, T* __restrict__ k_cache,
                          T* __restrict__ v_cache, const int* __restrict__ start,
                          int batch, int seq, int heads, int head_dim, int max_len) {
    const int width = heads * head_dim;  // k (or v) values per token
    const long long n = static_cast<long long>(batch) * seq * width;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (long long e = first; e < n; e += stride) {
        const int r = static_cast<int>(e / width), c = static_cast<int>(e % width);
        const int b = r / seq, position = start[b] + r % seq;
        if (position < 0 || position >= max_len) continue;
        const int head = c / head_dim, d = c % head_dim;
        const long long slot =
            (static_cast<long long>(b) * heads + head) * max_len + position;
        const long long to = slot * head_dim + d;
        const float* row = qkv + static_cast<long long>(r) * 3 * width;
        k_cache[to] = from_float<T>(row[width + c]);
        v_cache[to] = from_float<T>(row[2 * width + c]);
    }
}
