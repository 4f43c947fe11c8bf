// Rotary position embedding (RoPE, Su et al. 2021), in place on the query and key heads
// of a fused QKV buffer. Each head of head_dim values is split in halves,
// (x1, x2) = (x[i], x[i + h]) with h = head_dim / 2, and pair i is rotated by the angle
// pos * base^(-2i / head_dim):
//   x[i] = x1 cos - x2 sin,   x[i + h] = x2 cos + x1 sin   (the "rotate half" layout).
// Rows: row r = b * seq + t is token t of sequence b, at position start[b] + t, and holds
// `heads` heads of head_dim values starting at x + r * row_stride (q and k are adjacent
// in a [3, heads, head_dim] QKV row, so one launch with 2 * heads rotates both).
// T = float or __half; the angle and the rotation are computed in fp32.
// Limit: memory-bound, 2 * 2 * sizeof(T) bytes per pair (read and write two values); the
// sincosf costs a few dozen instructions per pair and hides under the memory time.
// Launch: block (256), grid (min(ceil(pairs / 256), 32 x SM count)),
// pairs = rows x heads x h.
#include <cuda_fp16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}

template <typename T>
__global__ void rope(T* __restrict__ x, const int* __restrict__ start, int rows, int seq,
                     int heads, int head_dim, int row_stride, float log2_base) {
    const int half = head_dim / 2;
    const long long pairs = static_cast<long long>(rows) * heads * half;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long p = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         p < pairs; p += stride) {
        const int i = static_cast<int>(p % half);
        const long long rh = p / half;  // row * heads + head
        const int r = static_cast<int>(rh / heads), head = static_cast<int>(rh % heads);
        const int position = start[r / seq] + r % seq;
        // base^(-2i / head_dim) = 2^(-(2i / head_dim) * log2(base))
        const float inv_freq = exp2f(-(2.0f * i / head_dim) * log2_base);
        float s, c;
        sincosf(position * inv_freq, &s, &c);
        T* h = x + static_cast<long long>(r) * row_stride +
               static_cast<long long>(head) * head_dim;
        const float x1 = to_float(h[i]), x2 = to_float(h[i + half]);
        h[i] = from_float<T>(x1 * c - x2 * s);
        h[i + half] = from_float<T>(x2 * c + x1 * s);
    }
}
