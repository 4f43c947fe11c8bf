// Version 4 of the fused row kernels: the softmax, LayerNorm and RMSNorm of
// fused_rows.cu (whose machinery it includes), with more bytes in flight:
//   softmax_pipelined<T, N, D>(x, y, rows, cols)
//   layernorm_pipelined<T, N, D>(x, w, b, y, mean, rstd, rows, cols, eps)
//   rmsnorm_pipelined<T, N, D>(x, w, y, rstd, rows, cols, eps)
// Little's law (chapter 2): to stream B bytes/s from a memory whose latency is L,
// B * L bytes must be in flight at every moment; at 4.8 TB/s and about a microsecond,
// over 30 KB per SM. A block of fused_rows.cu has bytes in flight only between its loads
// and their arrival: during its reductions, its stores and the start of the next block,
// none. Here a block walks rows blockIdx.x, blockIdx.x + gridDim.x, ... and keeps the
// loads of its next D rows in flight while it reduces and stores the current one. Rows
// in flight wait in registers as raw 16-byte packs (half the registers of floats for
// 16-bit types); N values per thread, both template arguments so that every array has
// a size the compiler knows and stays in registers.
// LayerNorm and RMSNorm copy w (and b) to shared memory once per block, while the first
// row is in flight, instead of loading them after the reductions of every row.
// Launched with grid = rows, a block does one row: then only that change remains, which
// lets the chapter measure the two changes one at a time.
// Launch: blockDim.x a multiple of 32, at most ROW_THREADS (1024 unless the build sets
// it), with cols <= N * blockDim.x; grid =
// rows, or as many blocks as fit on the GPU at once; dynamic shared memory
// 2 * cols * sizeof(T) bytes for LayerNorm (w and b), cols * sizeof(T) for RMSNorm.
// Limit: the copy bandwidth, 2 * sizeof(T) bytes per element.
#include "07-fusion/fused_rows.cu"  // Pack, to_float, vectorizable, column, block_all

// The launch bounds of a build: blocks of at most ROW_THREADS threads, ROW_BLOCKS of them
// resident per SM, so the compiler keeps each thread within 65,536 / (ROW_THREADS *
// ROW_BLOCKS) registers. By default (1024, 1) it may use 64, and at 64 an SM holds 1,024
// threads: with 16-bit values that is half the bytes in flight of float rows. A build
// for 256-thread blocks, 8 per SM, gets 32 registers and 2,048 threads.
#ifndef ROW_THREADS
#define ROW_THREADS MAX_THREADS
#endif
#ifndef ROW_BLOCKS
#define ROW_BLOCKS 1
#endif

// Issue the loads of this thread's N values of row r into raw packs. Nothing waits here:
// the registers fill when the data arrives, and the first instruction that reads them
// waits.
// FULL: a full row (vectorized, cols == N * blockDim.x), whose every value is inside it:
// the kernels are compiled twice, and the full rows' copy has no column checks at all.
template <bool B>
struct Full {
    static constexpr bool value = B;
};

template <typename T, int N, bool FULL>
__device__ __forceinline__ void load_raw(const T* __restrict__ r, int cols, bool vec,
                                         Pack<T> (&raw)[N * sizeof(T) / 16]) {
    constexpr int V = 16 / sizeof(T);
    if (FULL || vec) {
#pragma unroll
        for (int p = 0; p < N / V; ++p) {
            const int c = (p * blockDim.x + threadIdx.x) * V;
            if (FULL || c < cols) {
                raw[p] = *reinterpret_cast<const Pack<T>*>(r + c);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int c = i * blockDim.x + threadIdx.x;
            if (c < cols) {
                raw[i / V].v[i % V] = r[c];
            }
        }
    }
}

// v[i] = value i as float, or `pad` past the end of the row (column() of fused_rows.cu).
template <typename T, int N, bool FULL>
__device__ __forceinline__ void unpack(const Pack<T> (&raw)[N * sizeof(T) / 16], int cols,
                                       bool vec, float (&v)[N], float pad) {
    constexpr int V = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        v[i] = FULL || column<T>(i, cols, vec) >= 0 ? to_float(raw[i / V].v[i % V]) : pad;
    }
}

// Whether value i of this thread is inside the row (always, in a full row).
template <typename T, bool FULL>
__device__ __forceinline__ bool inside(int i, int cols, bool vec) {
    return FULL || column<T>(i, cols, vec) >= 0;
}

template <typename T, int N, bool FULL>
__device__ __forceinline__ void store_values(T* __restrict__ r, int cols, bool vec,
                                             const float (&v)[N]) {
    constexpr int V = 16 / sizeof(T);
    if (FULL || vec) {
#pragma unroll
        for (int p = 0; p < N / V; ++p) {
            const int c = (p * blockDim.x + threadIdx.x) * V;
            if (FULL || c < cols) {
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
        for (int i = 0; i < N; ++i) {
            const int c = i * blockDim.x + threadIdx.x;
            if (c < cols) {
                r[c] = from_float<T>(v[i]);
            }
        }
    }
}

// The loop of the three kernels. Block b handles rows b, b + G, b + 2G, ... (G =
// gridDim.x). ahead[d] holds a row in flight; when row r is taken out of it, the loads
// of row r + D G go into it, before op(full, v, r) reduces and stores row r. setup()
// runs once, while the block's first rows are in flight.
template <typename T, int N, int D, bool FULL, class Setup, class RowOp>
__device__ __forceinline__ void walk(const T* __restrict__ x, int rows, int cols,
                                     bool vec, float pad, Setup setup, RowOp op) {
    Pack<T> ahead[D][N * sizeof(T) / 16];
    const long long step = gridDim.x;  // rows between a block's consecutive rows
#pragma unroll
    for (int d = 0; d < D; ++d) {
        const long long r = blockIdx.x + d * step;
        if (r < rows) {
            load_raw<T, N, FULL>(x + r * cols, cols, vec, ahead[d]);
        }
    }
    setup();
    for (long long row = blockIdx.x; row < rows; row += D * step) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
            const long long r = row + d * step;  // the same in the whole block
            if (r >= rows) {
                break;
            }
            float v[N];
            unpack<T, N, FULL>(ahead[d], cols, vec, v, pad);  // waits for row r's loads
            if (r + D * step < rows) {
                load_raw<T, N, FULL>(x + (r + D * step) * cols, cols, vec, ahead[d]);
            }
            op(Full<FULL>(), v, r);
        }
    }
}

// Full rows take the copy of the loop without column checks: every check costs
// instructions per value (an index, a compare, a select), in every row, although its
// answer is the same for every row (the chapter counts them with Nsight Compute).
#ifndef FULL_COPY  // 0: full rows take the checked copy too (the chapter times both)
#define FULL_COPY 1
#endif
template <typename T, int N, int D, class Setup, class RowOp>
__device__ __forceinline__ void walk_rows(const T* __restrict__ x, int rows, int cols,
                                          bool vec, float pad, Setup setup, RowOp op) {
    if (FULL_COPY && vec && cols == N * static_cast<int>(blockDim.x)) {
        walk<T, N, D, true>(x, rows, cols, vec, pad, setup, op);
    } else {
        walk<T, N, D, false>(x, rows, cols, vec, pad, setup, op);
    }
}

// ------------------------------------------------------------------ softmax, version 4

template <typename T, int N, int D>
__global__ void __launch_bounds__(ROW_THREADS, ROW_BLOCKS)
softmax_pipelined(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    __shared__ float scratch[WARP_SIZE];
    const bool vec = vectorizable<T>(x, cols) && vectorizable<T>(y, cols);
    const auto row_op = [&](auto full, float (&v)[N], long long row) {
        constexpr bool FULL = decltype(full)::value;
        float m = NEG_INF;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            m = fmaxf(m, v[i]);
        }
        m = block_all<Max>(m, scratch);
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            v[i] = expf(v[i] - m);
            d += v[i];
        }
        const float inv = 1.0f / block_all<Sum>(d, scratch);
#pragma unroll
        for (int i = 0; i < N; ++i) {
            v[i] *= inv;
        }
        store_values<T, N, FULL>(y + row * cols, cols, vec, v);
    };
    // padding: -inf, so exp() makes it 0
    walk_rows<T, N, D>(x, rows, cols, vec, NEG_INF, [] {}, row_op);
}

// ------------------------------------------------ LayerNorm and RMSNorm, version 4

// A thread's columns of w (or b) are the same in every row. Holding them in registers
// would take registers from the rows in flight, so they wait in shared memory instead:
// each thread copies its own columns there once, and it alone reads them back (so no
// barrier is needed).
template <typename T, int N>
__device__ __forceinline__ void stash(const T* __restrict__ g, T* s, int cols, bool vec) {
    constexpr int V = 16 / sizeof(T);
    if (vec) {
#pragma unroll
        for (int p = 0; p < N / V; ++p) {
            const int c = (p * blockDim.x + threadIdx.x) * V;
            if (c < cols) {
                const Pack<T> pk = *reinterpret_cast<const Pack<T>*>(g + c);
                *reinterpret_cast<Pack<T>*>(s + c) = pk;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int c = i * blockDim.x + threadIdx.x;
            if (c < cols) {
                s[c] = g[c];
            }
        }
    }
}

// v[i] = v[i] * w[column] (+ b[column] when b is not null), w and b in shared memory.
template <typename T, int N, bool FULL>
__device__ __forceinline__ void scale_shift_shared(float (&v)[N], const T* w, const T* b,
                                                   int cols, bool vec) {
    constexpr int V = 16 / sizeof(T);
    if (FULL || vec) {
#pragma unroll
        for (int p = 0; p < N / V; ++p) {
            const int c = (p * blockDim.x + threadIdx.x) * V;
            if (FULL || c < cols) {
                const Pack<T> wp = *reinterpret_cast<const Pack<T>*>(w + c);
                Pack<T> bp = wp;
                if (b != nullptr) {
                    bp = *reinterpret_cast<const Pack<T>*>(b + c);
                }
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    v[p * V + k] = v[p * V + k] * to_float(wp.v[k]) +
                                   (b != nullptr ? to_float(bp.v[k]) : 0.0f);
                }
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int c = i * blockDim.x + threadIdx.x;
            if (c < cols) {
                v[i] = v[i] * to_float(w[c]) + (b != nullptr ? to_float(b[c]) : 0.0f);
            }
        }
    }
}

template <typename T, int N, int D>
__global__ void __launch_bounds__(ROW_THREADS, ROW_BLOCKS)
layernorm_pipelined(const T* __restrict__ x, const T* __restrict__ w,
                    const T* __restrict__ b, T* __restrict__ y,
                    float* __restrict__ mean, float* __restrict__ rstd,
                    int rows, int cols, float eps) {
    __shared__ float scratch[WARP_SIZE];
    extern __shared__ __align__(16) unsigned char smem[];
    T* ws = reinterpret_cast<T*>(smem);
    T* bs = ws + cols;
    const bool vec = vectorizable<T>(x, cols) && vectorizable<T>(y, cols) &&
                     vectorizable<T>(w, cols) && vectorizable<T>(b, cols);
    const auto setup = [&] {
        stash<T, N>(w, ws, cols, vec);
        stash<T, N>(b, bs, cols, vec);
    };
    const auto row_op = [&](auto full, float (&v)[N], long long row) {
        constexpr bool FULL = decltype(full)::value;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            s += v[i];
        }
        const float mu = block_all<Sum>(s, scratch) / cols;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            // padding is not part of the row
            const float d = inside<T, FULL>(i, cols, vec) ? v[i] - mu : 0.0f;
            q += d * d;
        }
        const float r = rsqrtf(block_all<Sum>(q, scratch) / cols + eps);
#pragma unroll
        for (int i = 0; i < N; ++i) {
            v[i] = (v[i] - mu) * r;
        }
        scale_shift_shared<T, N, FULL>(v, ws, bs, cols, vec);
        store_values<T, N, FULL>(y + row * cols, cols, vec, v);
        if (threadIdx.x == 0) {
            mean[row] = mu;
            rstd[row] = r;
        }
    };
    walk_rows<T, N, D>(x, rows, cols, vec, 0.0f, setup, row_op);
}

template <typename T, int N, int D>
__global__ void __launch_bounds__(ROW_THREADS, ROW_BLOCKS)
rmsnorm_pipelined(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                  float* __restrict__ rstd, int rows, int cols, float eps) {
    __shared__ float scratch[WARP_SIZE];
    extern __shared__ __align__(16) unsigned char smem[];
    T* ws = reinterpret_cast<T*>(smem);
    const bool vec = vectorizable<T>(x, cols) && vectorizable<T>(y, cols) &&
                     vectorizable<T>(w, cols);
    const auto setup = [&] { stash<T, N>(w, ws, cols, vec); };
    const auto row_op = [&](auto full, float (&v)[N], long long row) {
        constexpr bool FULL = decltype(full)::value;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            q += v[i] * v[i];
        }
        const float r = rsqrtf(block_all<Sum>(q, scratch) / cols + eps);
#pragma unroll
        for (int i = 0; i < N; ++i) {
            v[i] *= r;
        }
        scale_shift_shared<T, N, FULL>(v, ws, static_cast<const T*>(nullptr), cols, vec);
        store_values<T, N, FULL>(y + row * cols, cols, vec, v);
        if (threadIdx.x == 0) {
            rstd[row] = r;
        }
    };
    // padding 0 adds nothing to the sum of squares
    walk_rows<T, N, D>(x, rows, cols, vec, 0.0f, setup, row_op);
}
