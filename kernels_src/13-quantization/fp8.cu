// fp8: float32 -> fp8 (e4m3 or e5m2) with one per-tensor scale, and back (sm_89+, Ada and
// Hopper; cuda_fp8.h). e4m3 keeps 3 mantissa bits and reaches +-448; e5m2 keeps 2 and
// reaches +-57344. With s = amax / fmax (fmax = 448 or 57344), x / s fills the format's
// range and the conversion rounds to nearest even (saturating: the scale makes it moot).
// Two values per conversion instruction (__nv_cvt_float2_to_fp8x2), one thread per pair.
// Limit: memory-bound, 4 B in + 1 B out per value; expect ~85% of copy bandwidth.
// Launch: block 256, grid ceil(n / 512). n even.

#include <cuda_fp8.h>

template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ void quantize_pairs(int n, float inv_scale,
                                               const float* __restrict__ x,
                                               __nv_fp8x2_storage_t* __restrict__ q) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i >= n) return;
    float2 v = reinterpret_cast<const float2*>(x)[i];
    v.x *= inv_scale;
    v.y *= inv_scale;
    q[i] = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, FMT);
}

template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ void dequantize_pairs(
    int n, float scale, const __nv_fp8x2_storage_t* __restrict__ q,
    float* __restrict__ x) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i >= n) return;
    float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(q[i], FMT)));
    reinterpret_cast<float2*>(x)[i] = make_float2(f.x * scale, f.y * scale);
}

// q holds pairs of fp8 bytes (__nv_fp8x2_storage_t is an unsigned short)
extern "C" __global__ void quantize_e4m3(int n, float inv_scale, const float* x,
                                         unsigned short* q) {
    quantize_pairs<__NV_E4M3>(n, inv_scale, x, q);
}
extern "C" __global__ void quantize_e5m2(int n, float inv_scale, const float* x,
                                         unsigned short* q) {
    quantize_pairs<__NV_E5M2>(n, inv_scale, x, q);
}
extern "C" __global__ void dequantize_e4m3(int n, float scale, const unsigned short* q,
                                           float* x) {
    dequantize_pairs<__NV_E4M3>(n, scale, q, x);
}
extern "C" __global__ void dequantize_e5m2(int n, float scale, const unsigned short* q,
                                           float* x) {
    dequantize_pairs<__NV_E5M2>(n, scale, q, x);
}
