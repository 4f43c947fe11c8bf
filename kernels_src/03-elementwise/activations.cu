// Activations of a network, forward and backward, one element per loop trip of a
// grid-stride loop:
// y  = f(x)            relu_forward, gelu_erf_forward, gelu_tanh_forward, silu_forward
// dx = dy * f'(x)      relu_backward, gelu_erf_backward, gelu_tanh_backward,
// silu_backward Templated on the storage type T: float, __half or bfloat16 (raw bits,
// below). Whatever T is, the math is done in fp32: load, convert to float, compute, round
// once to T, store.
// Limit: memory-bound. Forward moves 2 * sizeof(T) bytes per element, backward 3 *
// sizeof(T). In fp32 the arithmetic (a few dozen instructions for erf or tanh) hides
// under the memory time: expect most of the copy bandwidth. In 16 bits each access moves
// only 2 bytes, and the per-access instructions plus the erf compete for issue slots:
// expect well below it (gelu_vectorized.cu fixes the accesses).
// Launch: any grid; one wave of blocks (SMs * 2048 / blockDim.x) is enough for any n.
#include <cuda_fp16.h>

// bfloat16: the top 16 bits of an fp32 number (same exponent range, 8 bits of
// significand). CUDA's cuda_bf16.h calls it __nv_bfloat16; we spell out its two
// conversions, which is all this chapter needs and works with every runtime compiler.
// Arrays of it are passed from Python as uint16.
struct bfloat16 {
    unsigned short bits;
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
    // round to nearest, ties to even: add half an ulp of bf16, then cut
    u += 0x7fffu + ((u >> 16) & 1u);
    return bfloat16{(unsigned short)(u >> 16)};
}

#define SQRT_HALF 0.70710678118654752f      // 1 / sqrt(2)
#define INV_SQRT_2PI 0.39894228040143268f   // 1 / sqrt(2 pi)
#define SQRT_2_OVER_PI 0.79788456080286536f // sqrt(2 / pi)
// the cubic coefficient of Hendrycks & Gimpel's tanh approximation
#define GELU_TANH_C 0.044715f

struct Relu {
    __device__ static float f(float x) { return x > 0.0f ? x : 0.0f; }
    __device__ static float df(float x) { return x > 0.0f ? 1.0f : 0.0f; }
};

// GELU(x) = x * Phi(x), Phi the standard normal CDF = (1 + erf(x / sqrt 2)) / 2.
// PyTorch's default.
struct GeluErf {
    __device__ static float f(float x) { return 0.5f * x * (1.0f + erff(x * SQRT_HALF)); }
    __device__ static float df(float x) {  // Phi(x) + x * phi(x), phi the normal density
        return 0.5f * (1.0f + erff(x * SQRT_HALF))
               + x * INV_SQRT_2PI * expf(-0.5f * x * x);
    }
};

// GELU(x) ~ x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))): PyTorch's
// approximate="tanh".
struct GeluTanh {
    __device__ static float f(float x) {
        float t = tanhf(SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x));
        return 0.5f * x * (1.0f + t);
    }
    __device__ static float df(float x) {
        float t = tanhf(SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x));
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_C * x * x);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
};

// SiLU (swish): x * sigmoid(x). For x -> -inf, expf(-x) overflows to inf and s = 0: the
// right limit.
struct Silu {
    __device__ static float f(float x) { return x / (1.0f + expf(-x)); }
    __device__ static float df(float x) {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
};

template <class Op, typename T>
__device__ __forceinline__ void forward(const T* __restrict__ x, T* __restrict__ y,
                                        int n) {
    // threads in the whole grid
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        y[i] = from_float<T>(Op::f(to_float(x[i])));
    }
}

template <class Op, typename T>
__device__ __forceinline__ void backward(const T* __restrict__ dy,
                                         const T* __restrict__ x,
                                         T* __restrict__ dx, int n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        dx[i] = from_float<T>(to_float(dy[i]) * Op::df(to_float(x[i])));
    }
}

// The kernels: cudl.load("03-elementwise/activations.cu", "gelu_erf_forward<__half>") and
// so on.
template <typename T>
__global__ void relu_forward(const T* __restrict__ x, T* __restrict__ y, int n) {
    forward<Relu>(x, y, n);
}
template <typename T>
__global__ void gelu_erf_forward(const T* __restrict__ x, T* __restrict__ y, int n) {
    forward<GeluErf>(x, y, n);
}
template <typename T>
__global__ void gelu_tanh_forward(const T* __restrict__ x, T* __restrict__ y, int n) {
    forward<GeluTanh>(x, y, n);
}
template <typename T>
__global__ void silu_forward(const T* __restrict__ x, T* __restrict__ y, int n) {
    forward<Silu>(x, y, n);
}

template <typename T>
__global__ void relu_backward(const T* __restrict__ dy, const T* __restrict__ x,
                              T* __restrict__ dx, int n) {
    backward<Relu>(dy, x, dx, n);
}
template <typename T>
__global__ void gelu_erf_backward(const T* __restrict__ dy, const T* __restrict__ x,
                                  T* __restrict__ dx, int n) {
    backward<GeluErf>(dy, x, dx, n);
}
template <typename T>
__global__ void gelu_tanh_backward(const T* __restrict__ dy, const T* __restrict__ x,
                                   T* __restrict__ dx, int n) {
    backward<GeluTanh>(dy, x, dx, n);
}
template <typename T>
__global__ void silu_backward(const T* __restrict__ dy, const T* __restrict__ x,
                              T* __restrict__ dx, int n) {
    backward<Silu>(dy, x, dx, n);
}
