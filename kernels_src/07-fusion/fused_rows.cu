// Fused row kernels for a rows x cols row-major matrix, the versions later chapters
// reuse:
//   softmax<T>(x, y, rows, cols)                                   softmax, version 3
//   layernorm_forward<T>(x, w, b, y, mean, rstd, rows, cols, eps)  LayerNorm, version 2
//   rmsnorm_forward<T>(x, w, y, rstd, rows, cols, eps)             RMSNorm
//   layernorm_backward<T>(dy, x, w, mean, rstd, dx, dw_part, db_part, rows, cols)
//   layernorm_backward_reduce<T>(dw_part, db_part, dw, db, parts, cols)
// The idea: one block per row, and the block holds its row in registers (up to PER_THREAD
// values per thread), so DRAM sees each element read once and written once, and the
// statistics (maximum and sum, mean and variance) cost block reductions over registers,
// not extra sweeps over memory.
// T = float, __half or bfloat16 (raw bits, passed from Python as uint16). w, b, dw, db
// have type T; the arithmetic and all statistics (mean, rstd) are fp32. Loads and stores
// move 16 bytes when cols is a multiple of 16 / sizeof(T) and the pointers are 16-byte
// aligned, else one value at a time.
// Limit: memory-bound, 2 * sizeof(T) bytes per element forward, 3 * sizeof(T) backward
// (read dy and x, write dx): target the copy bandwidth, >= PyTorch and >= the chapter's
// Triton kernels.
// Launch, forward: grid = rows, blockDim.x a multiple of 32 with
// cols <= PER_THREAD * blockDim.x.
// Backward: grid = P blocks (about one wave), same blockDim rule but at most 512 threads
// (so cols <= 8192); dw_part and db_part are fp32 [P, cols];
// then layernorm_backward_reduce with grid = ceil(cols / 32) blocks of (32, 8) threads.
// to_float/from_float and bfloat16 are the same as in 03-elementwise (each .cu file
// stands alone).
#include <cuda_fp16.h>

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
// row values per thread: 1024 threads hold rows of up to 16384 columns
#define PER_THREAD 16
// forward kernels: at most 64 registers per thread, so 1024 threads always launch
#define MAX_THREADS 1024
// backward keeps 5 rows of values: up to 128 registers, 512 threads
#define MAX_THREADS_BACKWARD 512
#define NEG_INF (-__int_as_float(0x7f800000))

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

// ------------------------------------------------------------------ a row in registers

template <typename T>
struct alignas(16) Pack {  // 16 bytes: one load or store instruction
    T v[16 / sizeof(T)];
};

// Can this row use 16-byte accesses? Every row then starts on a 16-byte boundary too.
template <typename T>
__device__ __forceinline__ bool vectorizable(const void* p, int cols) {
    return cols % (16 / sizeof(T)) == 0 &&
           reinterpret_cast<unsigned long long>(p) % 16 == 0;
}

// The column of value i (0 <= i < PER_THREAD) of this thread, or -1 past the end of the
// row. vec: packs of V values; pack p of thread t is pack number p * blockDim.x + t of
// the row, so the threads of a warp read 32 consecutive packs (coalesced). Otherwise
// value i is column i * blockDim.x + t.
template <typename T>
__device__ __forceinline__ int column(int i, int cols, bool vec) {
    constexpr int V = 16 / sizeof(T);
    const int c = vec ? ((i / V) * blockDim.x + threadIdx.x) * V + i % V
                      : i * blockDim.x + threadIdx.x;
    return c < cols ? c : -1;
}

// v[i] = r[column(i)] as float, or `pad` where column(i) is past the end.
template <typename T>
__device__ __forceinline__ void load_row(const T* __restrict__ r, int cols, bool vec,
                                         float (&v)[PER_THREAD], float pad) {
    constexpr int V = 16 / sizeof(T);
    if (vec) {
#pragma unroll
        for (int p = 0; p < PER_THREAD / V; ++p) {
            const int c = (p * blockDim.x + threadIdx.x) * V;
            Pack<T> pk;
            if (c < cols) {
                pk = *reinterpret_cast<const Pack<T>*>(r + c);
            }
#pragma unroll
            for (int k = 0; k < V; ++k) {
                v[p * V + k] = c < cols ? to_float(pk.v[k]) : pad;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int c = i * blockDim.x + threadIdx.x;
            v[i] = c < cols ? to_float(r[c]) : pad;
        }
    }
}

template <typename T>
__device__ __forceinline__ void store_row(T* __restrict__ r, int cols, bool vec,
                                          const float (&v)[PER_THREAD]) {
    constexpr int V = 16 / sizeof(T);
    if (vec) {
#pragma unroll
        for (int p = 0; p < PER_THREAD / V; ++p) {
            const int c = (p * blockDim.x + threadIdx.x) * V;
            if (c < cols) {
                Pack<T> pk;
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    pk.v[k] = from_float<T>(v[p * V + k]);
                }
                *reinterpret_cast<Pack<T>*>(r + c) = pk;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int c = i * blockDim.x + threadIdx.x;
            if (c < cols) {
                r[c] = from_float<T>(v[i]);
            }
        }
    }
}

// ------------------------------------------------------------------ block reductions

struct Sum {
    __device__ static float identity() { return 0.0f; }
    __device__ static float combine(float a, float b) { return a + b; }
};

struct Max {
    __device__ static float identity() { return NEG_INF; }
    __device__ static float combine(float a, float b) { return fmaxf(a, b); }
};

// Butterfly: every lane gets the result.
template <class Op>
__device__ __forceinline__ float warp_all(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v = Op::combine(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    return v;
}

// Every thread of the block gets the reduction of v over the block.
// `scratch`: 32 floats of shared memory.
template <class Op>
__device__ __forceinline__ float block_all(float v, float* scratch) {
    v = warp_all<Op>(v);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    __syncthreads();  // the previous reduction's reads of scratch are done
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    v = lane < blockDim.x / WARP_SIZE ? scratch[lane] : Op::identity();
    // every warp reduces the warp results itself: no third barrier
    return warp_all<Op>(v);
}

// ------------------------------------------------------------------ softmax

template <typename T>
__global__ void __launch_bounds__(MAX_THREADS)
softmax(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    __shared__ float scratch[WARP_SIZE];
    const long long row = blockIdx.x;
    const bool vec = vectorizable<T>(x, cols) && vectorizable<T>(y, cols);
    float v[PER_THREAD];
    // padding: -inf, so exp() makes it 0
    load_row(x + row * cols, cols, vec, v, NEG_INF);
    float m = NEG_INF;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        m = fmaxf(m, v[i]);
    }
    m = block_all<Max>(m, scratch);
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        v[i] = expf(v[i] - m);
        d += v[i];
    }
    const float inv = 1.0f / block_all<Sum>(d, scratch);
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        v[i] *= inv;
    }
    store_row(y + row * cols, cols, vec, v);
}

// --------------------------------------------------------- LayerNorm and RMSNorm forward

// v[i] = v[i] * w[column] (+ b[column]): the elementwise tail of both norms, fused in.
template <typename T>
__device__ __forceinline__ void scale_shift(float (&v)[PER_THREAD],
                                            const T* __restrict__ w,
                                            const T* __restrict__ b, int cols, bool vec) {
    float p[PER_THREAD];
    load_row(w, cols, vec, p, 0.0f);
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        v[i] *= p[i];
    }
    if (b != nullptr) {
        load_row(b, cols, vec, p, 0.0f);
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            v[i] += p[i];
        }
    }
}

// Two-pass statistics, both passes over registers: mean first, then the squared
// deviations from it.
template <typename T>
__global__ void __launch_bounds__(MAX_THREADS)
layernorm_forward(const T* __restrict__ x, const T* __restrict__ w,
                  const T* __restrict__ b, T* __restrict__ y,
                  float* __restrict__ mean, float* __restrict__ rstd,
                  int rows, int cols, float eps) {
    __shared__ float scratch[WARP_SIZE];
    const long long row = blockIdx.x;
    const bool vec = vectorizable<T>(x, cols) && vectorizable<T>(y, cols) &&
                     vectorizable<T>(w, cols) && vectorizable<T>(b, cols);
    float v[PER_THREAD];
    load_row(x + row * cols, cols, vec, v, 0.0f);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        s += v[i];
    }
    const float mu = block_all<Sum>(s, scratch) / cols;
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        // padding is not part of the row
        const float d = column<T>(i, cols, vec) >= 0 ? v[i] - mu : 0.0f;
        q += d * d;
    }
    const float r = rsqrtf(block_all<Sum>(q, scratch) / cols + eps);
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        v[i] = (v[i] - mu) * r;
    }
    scale_shift(v, w, b, cols, vec);
    store_row(y + row * cols, cols, vec, v);
    if (threadIdx.x == 0) {
        mean[row] = mu;
        rstd[row] = r;
    }
}

// RMSNorm (Zhang and Sennrich, 2019): y = x * rstd * w
// with rstd = 1 / sqrt(mean(x^2) + eps).
template <typename T>
__global__ void __launch_bounds__(MAX_THREADS)
rmsnorm_forward(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                float* __restrict__ rstd, int rows, int cols, float eps) {
    __shared__ float scratch[WARP_SIZE];
    const long long row = blockIdx.x;
    const bool vec = vectorizable<T>(x, cols) && vectorizable<T>(y, cols) &&
                     vectorizable<T>(w, cols);
    float v[PER_THREAD];
    // padding 0 adds nothing to the sum of squares
    load_row(x + row * cols, cols, vec, v, 0.0f);
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        q += v[i] * v[i];
    }
    const float r = rsqrtf(block_all<Sum>(q, scratch) / cols + eps);
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        v[i] *= r;
    }
    scale_shift(v, w, static_cast<const T*>(nullptr), cols, vec);
    store_row(y + row * cols, cols, vec, v);
    if (threadIdx.x == 0) {
        rstd[row] = r;
    }
}

// ------------------------------------------------------------------ LayerNorm backward

// With xhat = (x - mean) * rstd and g = w * dy:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dw = sum over rows of dy * xhat,   db = sum of dy.
// Each block walks rows blockIdx.x, blockIdx.x + gridDim.x, ...; a
// thread owns the same columns in every row, so it adds its share of
// dw and db in registers and writes one partial per block at the end.
template <typename T>
__global__ void __launch_bounds__(MAX_THREADS_BACKWARD)
layernorm_backward(const T* __restrict__ dy, const T* __restrict__ x,
                   const T* __restrict__ w,
                   const float* __restrict__ mean, const float* __restrict__ rstd,
                   T* __restrict__ dx, float* __restrict__ dw_part,
                   float* __restrict__ db_part, int rows, int cols) {
    // two reductions per row share each pair of barriers
    __shared__ float scratch[2][WARP_SIZE];
    const bool vec = vectorizable<T>(dy, cols) && vectorizable<T>(x, cols) &&
                     vectorizable<T>(w, cols) && vectorizable<T>(dx, cols);
    float wv[PER_THREAD], dw[PER_THREAD], db[PER_THREAD];
    load_row(w, cols, vec, wv, 0.0f);
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        dw[i] = db[i] = 0.0f;
    }
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        float xh[PER_THREAD], g[PER_THREAD];
        load_row(x + row * cols, cols, vec, xh, 0.0f);
        // padding dy = 0: padding adds 0 to every sum
        load_row(dy + row * cols, cols, vec, g, 0.0f);
        const float mu = mean[row], r = rstd[row];
        float sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            xh[i] = (xh[i] - mu) * r;
            db[i] += g[i];
            dw[i] += g[i] * xh[i];
            g[i] *= wv[i];
            sg += g[i];
            sgx += g[i] * xh[i];
        }
        sg = warp_all<Sum>(sg);
        sgx = warp_all<Sum>(sgx);
        __syncthreads();  // the previous row's reads of scratch are done
        if (lane == 0) {
            scratch[0][warp] = sg;
            scratch[1][warp] = sgx;
        }
        __syncthreads();
        const bool has = lane < blockDim.x / WARP_SIZE;
        const float mg = warp_all<Sum>(has ? scratch[0][lane] : 0.0f) / cols;
        const float mgx = warp_all<Sum>(has ? scratch[1][lane] : 0.0f) / cols;
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            xh[i] = r * (g[i] - mg - xh[i] * mgx);
        }
        store_row(dx + row * cols, cols, vec, xh);
    }
    float* dwp = dw_part + (long long)blockIdx.x * cols;
    float* dbp = db_part + (long long)blockIdx.x * cols;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        const int c = column<T>(i, cols, vec);
        if (c >= 0) {
            dwp[c] = dw[i];
            dbp[c] = db[i];
        }
    }
}

// dw[c] = sum over p of dw_part[p, c] (and db): 32 columns per block, blockDim.y threads
// share the parts.
template <typename T>
__global__ void layernorm_backward_reduce(const float* __restrict__ dw_part,
                                          const float* __restrict__ db_part,
                                          T* __restrict__ dw, T* __restrict__ db,
                                          int parts, int cols) {
    // +1: the column-wise reads below hit 32 banks
    __shared__ float sums[2][32][WARP_SIZE + 1];
    const int c = blockIdx.x * WARP_SIZE + threadIdx.x;
    float sw = 0.0f, sb = 0.0f;
    if (c < cols) {
        for (int p = threadIdx.y; p < parts; p += blockDim.y) {
            sw += dw_part[(long long)p * cols + c];
            sb += db_part[(long long)p * cols + c];
        }
    }
    sums[0][threadIdx.y][threadIdx.x] = sw;
    sums[1][threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        for (int k = 1; k < blockDim.y; ++k) {
            sw += sums[0][k][threadIdx.x];
            sb += sums[1][k][threadIdx.x];
        }
        dw[c] = from_float<T>(sw);
        db[c] = from_float<T>(sb);
    }
}
