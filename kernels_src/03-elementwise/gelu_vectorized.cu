// GELU forward, version 2: every memory access moves 16 bytes, whatever the storage type:
// a Pack of 4 floats (a float4), 8 __half (four half2) or 8 bfloat16. Per byte, a quarter
// (fp32) or an eighth (fp16, bf16) of the load/store instructions and index arithmetic of
// the scalar version, and more bytes in flight per thread. The math is still fp32 (erf
// form, as PyTorch's default gelu).
// Limit: memory-bound, 2 * sizeof(T) bytes per element: target >= 90% of the measured
// copy bandwidth and >= 0.95x torch.nn.functional.gelu at 2^28 elements (fp16 moves half
// the bytes of fp32 for the same erf work, so it is the one that comes closest to being
// limited by arithmetic).
// Needs x and y 16-byte aligned (every CuPy/PyTorch allocation is); the last n % (16 /
// sizeof(T))
// elements are done one at a time. Launch: any grid (the chapter measures one wave, eight
// waves and one Pack per thread, and keeps the fastest).
// to_float/from_float and bfloat16 are the same as in activations.cu (each .cu file
// stands alone).
#include <cuda_fp16.h>

struct bfloat16 {
    unsigned short bits;  // the top half of an fp32 number
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(bfloat16 v) {
    return __uint_as_float((unsigned)v.bits << 16);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ bfloat16 from_float<bfloat16>(float v) {
    unsigned u = __float_as_uint(v);
    // NaN stays a (quiet) NaN
    if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{0x7fc0};
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return bfloat16{(unsigned short)(u >> 16)};
}

#define SQRT_HALF 0.70710678118654752f  // 1 / sqrt(2)

__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * SQRT_HALF));
}

// 16 bytes of T, aligned so that one copy is one 128-bit load or store instruction.
template <typename T>
struct alignas(16) Pack {
    T v[16 / sizeof(T)];
};

template <typename T>
__global__ void gelu_forward_vec(const T* __restrict__ x, T* __restrict__ y, int n) {
    constexpr int V = 16 / sizeof(T);  // elements per Pack: 4 (fp32) or 8 (fp16, bf16)
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long packs = n / V;
    const Pack<T>* xv = reinterpret_cast<const Pack<T>*>(x);
    Pack<T>* yv = reinterpret_cast<Pack<T>*>(y);
    for (long long i = first; i < packs; i += stride) {
        Pack<T> p = xv[i];  // one 16-byte load
#pragma unroll
        for (int k = 0; k < V; ++k) {
            p.v[k] = from_float<T>(gelu_erf(to_float(p.v[k])));
        }
        yv[i] = p;  // one 16-byte store
    }
    // the tail: fewer than V elements
    for (long long i = V * packs + first; i < n; i += stride) {
        y[i] = from_float<T>(gelu_erf(to_float(x[i])));
    }
}
