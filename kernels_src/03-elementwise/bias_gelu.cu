// Fused bias + GELU, the epilogue of a linear layer: y[r, c] = gelu(x[r, c] + bias[c])
// for a rows x cols row-major matrix. Unfused (x + b, then gelu) the intermediate makes a
// round trip through memory:
// 4 passes over the matrix instead of 2, so fusing should approach 2x the unfused pair.
// One block per row at a time (a grid-stride loop over rows), its threads stride over the
// row's columns in 16-byte Packs as in gelu_vectorized.cu; the bias row is read by every
// block and stays in L1/L2. When cols % (16 / sizeof(T)) != 0 the rows are not 16-byte
// aligned, and one element per access is used instead. fp32 math, erf-form GELU.
// Limit: memory-bound, 2 * sizeof(T) bytes per element (+ the bias once): the copy
// bandwidth, and >= 1.7x the unfused PyTorch pair. Launch: blockDim.x a multiple of 32;
// any grid up to one block per row (the chapter measures eight waves and one block per
// row, and keeps the faster).
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

template <typename T>
struct alignas(16) Pack {
    T v[16 / sizeof(T)];
};

template <typename T>
__global__ void bias_gelu_forward(const T* __restrict__ x, const T* __restrict__ bias,
                                  T* __restrict__ y,
                                  int rows, int cols) {
    constexpr int V = 16 / sizeof(T);
    if (cols % V == 0) {  // every row starts on a 16-byte boundary: Packs
        const int packs = cols / V;
        const Pack<T>* bv = reinterpret_cast<const Pack<T>*>(bias);
        for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
            const Pack<T>* xr = reinterpret_cast<const Pack<T>*>(x + r * cols);
            Pack<T>* yr = reinterpret_cast<Pack<T>*>(y + r * cols);
            for (int c = threadIdx.x; c < packs; c += blockDim.x) {
                Pack<T> p = xr[c];
                const Pack<T> b = bv[c];
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    p.v[k] = from_float<T>(gelu_erf(to_float(p.v[k]) + to_float(b.v[k])));
                }
                yr[c] = p;
            }
        }
    } else {  // odd widths: one element per access
        for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
            for (int c = threadIdx.x; c < cols; c += blockDim.x) {
                y[r * cols + c] = from_float<T>(gelu_erf(to_float(x[r * cols + c]) +
                                                         to_float(bias[c])));
            }
        }
    }
}
