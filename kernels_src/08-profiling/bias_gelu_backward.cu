// Backward of y = gelu(x + bias) for a rows x cols row-major matrix
// (forward: 03-elementwise/bias_gelu.cu), in one pass:
//   dx[r, c] = dy[r, c] * gelu'(x[r, c] + bias[c]),   dbias[c] = sum over r of dx[r, c].
// PyTorch's autograd does this as two kernels (gelu_backward, then a column sum of its
// output), which reads the matrix-sized gradient once more; here each thread owns one
// column of a strip of rows_per_block rows, keeps its column's partial sum in a register
// and adds it to dbias with one atomicAdd (dbias is fp32 and must be zeroed before the
// launch).
// Limit: memory-bound, 3 * sizeof(T) bytes per element (read dy and x, write dx): the
// copy bandwidth.
// Launch: block (256), grid (ceil(cols / 256), ceil(rows / rows_per_block));
// rows_per_block = 32 gives thousands of blocks for transformer shapes and a few thousand
// atomics per column at most.
#include <cuda_fp16.h>

// bf16 travels as its raw 16 bits (uint16 in NumPy and CuPy; PyTorch views
// torch.bfloat16 as int16).
struct bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float load_f32(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float load_f32(const bf16* p, long long i) {
    // bf16 = the high half of an fp32
    return __uint_as_float(static_cast<unsigned>(p[i].bits) << 16);
}
__device__ __forceinline__ void store_f32(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f32(bf16* p, long long i, float v) {
    const unsigned u = __float_as_uint(v);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    // Round to nearest even: add 0x7fff plus the lowest kept bit, then drop the low
    // 16 bits.
    const unsigned rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    p[i].bits = nan ? 0x7fc0 : static_cast<unsigned short>(rounded);
}

// gelu(v) = v * Phi(v) with Phi the normal CDF, so gelu'(v) = Phi(v) + v * phi(v), phi
// the normal density.
__device__ __forceinline__ float gelu_erf_grad(float v) {
    const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));  // 1 / sqrt(2)
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);        // 1 / sqrt(2 pi)
    return cdf + v * pdf;
}

template <typename T>
__global__ void bias_gelu_backward(const T* __restrict__ dy, const T* __restrict__ x,
                                   const T* __restrict__ bias, T* __restrict__ dx,
                                   float* __restrict__ dbias, int rows, int cols,
                                   int rows_per_block) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const float b = load_f32(bias, c);
    const int r0 = blockIdx.y * rows_per_block;
    const int r1 = min(rows, r0 + rows_per_block);
    float sum = 0.0f;
#pragma unroll 4
    for (int r = r0; r < r1; ++r) {
        const long long i = static_cast<long long>(r) * cols + c;
        const float g = load_f32(dy, i) * gelu_erf_grad(load_f32(x, i) + b);
        store_f32(dx, i, g);
        sum += g;  // the unrounded fp32 value: dbias is as accurate as fp32 allows
    }
    if (r0 < r1) atomicAdd(&dbias[c], sum);
}
