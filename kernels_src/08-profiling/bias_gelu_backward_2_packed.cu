// Backward of y = gelu(x + bias), version 2: the same dx and dbias as
// bias_gelu_backward.cu, with more bytes in flight per thread (Little's law):
//   dx[r, c] = dy[r, c] * gelu'(x[r, c] + bias[c]),   dbias[c] = sum over r of dx[r, c].
// Version 1 gives a thread one column and loads one value of dy and one of x per row:
// in bf16, 2-byte loads, four rows unrolled, so at most 16 bytes in flight per thread.
// Here a thread owns V = 16 / sizeof(T) neighbouring columns, one 16-byte pack, and
// walks its strip of rows ROWS_IN_FLIGHT at a time: it issues the loads of dy and x for
// all of them before it computes any, 2 * 16 * ROWS_IN_FLIGHT bytes in flight per
// thread (eight times version 1's in bf16 with four rows). It keeps V partial sums of
// dbias in registers and adds them with V atomicAdds at the end (dbias is fp32, zeroed
// before the launch). Rows whose length is not a multiple of V, or pointers not 16-byte
// aligned, take the same path one value at a time.
// Limit: memory-bound, 3 * sizeof(T) bytes per element: the copy bandwidth.
// Launch: block (256), grid (ceil(cols / (V * 256)), ceil(rows / rows_per_block)).
#include <cuda_fp16.h>

#ifndef ROWS_IN_FLIGHT
// rows whose loads a thread issues before it computes: 1, 2 or 4 (the chapter picks one
// by measurement: more rows in flight also take more registers, leaving fewer threads)
#define ROWS_IN_FLIGHT 4
#endif

// bf16 travels as its raw 16 bits, as in version 1.
struct bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) {
    return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
}

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v) {
    const unsigned u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{0x7fc0};  // NaN stays NaN
    // round to nearest, ties to even
    return bf16{static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// gelu(v) = v * Phi(v), so gelu'(v) = Phi(v) + v * phi(v), as in version 1.
__device__ __forceinline__ float gelu_erf_grad(float v) {
    const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));  // 1 / sqrt(2)
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);        // 1 / sqrt(2 pi)
    return cdf + v * pdf;
}

template <typename T>
struct alignas(16) Pack {  // 16 bytes: one load or store instruction
    T v[16 / sizeof(T)];
};

// The pack of row p (a row of `cols` values) that starts at column c: one 16-byte load,
// or up to V loads of one value where the row is not vectorizable (zeros past the end).
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* __restrict__ p, int cols, int c,
                                             bool vec) {
    constexpr int V = 16 / sizeof(T);
    Pack<T> pk;
    if (vec) {
        pk = *reinterpret_cast<const Pack<T>*>(p + c);
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            pk.v[k] = c + k < cols ? p[c + k] : from_f32<T>(0.0f);
        }
    }
    return pk;
}

template <typename T>
__global__ void bias_gelu_backward_packed(const T* __restrict__ dy,
                                          const T* __restrict__ x,
                                          const T* __restrict__ bias, T* __restrict__ dx,
                                          float* __restrict__ dbias, int rows, int cols,
                                          int rows_per_block) {
    constexpr int V = 16 / sizeof(T);
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * V;  // first of V columns
    if (c >= cols) return;
    const auto aligned = [](const void* p) {
        return reinterpret_cast<unsigned long long>(p) % 16 == 0;
    };
    // every row starts on a 16-byte boundary too
    const bool vec = cols % V == 0 && aligned(dy) && aligned(x) && aligned(dx) &&
                     aligned(bias);
    float b[V], sum[V];
    const Pack<T> bp = load_pack(bias, cols, c, vec);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        b[k] = to_f32(bp.v[k]);
        sum[k] = 0.0f;
    }
    const int r0 = blockIdx.y * rows_per_block;
    const int r1 = min(rows, r0 + rows_per_block);
    for (int r = r0; r < r1; r += ROWS_IN_FLIGHT) {
        Pack<T> g[ROWS_IN_FLIGHT], h[ROWS_IN_FLIGHT];
#pragma unroll
        for (int j = 0; j < ROWS_IN_FLIGHT; ++j) {  // all the loads first...
            if (r + j < r1) {
                const long long row = static_cast<long long>(r + j) * cols;
                g[j] = load_pack(dy + row, cols, c, vec);
                h[j] = load_pack(x + row, cols, c, vec);
            }
        }
        // ...then the arithmetic and the stores
#pragma unroll
        for (int j = 0; j < ROWS_IN_FLIGHT; ++j) {
            if (r + j < r1) {
                Pack<T> out;
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    const float v = to_f32(h[j].v[k]) + b[k];
                    const float d = to_f32(g[j].v[k]) * gelu_erf_grad(v);
                    out.v[k] = from_f32<T>(d);
                    sum[k] += d;  // unrounded, as in version 1
                }
                T* o = dx + static_cast<long long>(r + j) * cols + c;
                if (vec) {
                    *reinterpret_cast<Pack<T>*>(o) = out;
                } else {
#pragma unroll
                    for (int k = 0; k < V; ++k) {
                        if (c + k < cols) o[k] = out.v[k];
                    }
                }
            }
        }
    }
    if (r0 < r1) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (c + k < cols) atomicAdd(&dbias[c + k], sum[k]);
        }
    }
}
