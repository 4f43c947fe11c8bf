// matmul_8_double_buffered: the warp-tiled kernel with two shared-memory buffers. While
// the block computes on one buffer, each thread's global loads of the next tiles are
// already in flight into registers; they are written to the other buffer after the FMAs,
// so one __syncthreads per step suffices and the load latency hides behind the math (the
// "register prefetch" form of double buffering, which every GPU here supports; sm_80+
// could use cp.async instead).
// Limit: the FP32 pipes; the cost is registers (the staged float4s) and twice the shared
// memory.
// Launch: block (NUM_THREADS) = (256), grid (ceil(N / BN), ceil(M / BM)) = (ceil(N /
// 256), ceil(M / 128)).
// Defaults tuned on an H100: a 128 x 256 block tile, 8 warps of 64 x 64; 48 KiB of shared
// memory (the static limit) and ~240 registers per thread, so one block per SM, which the
// double buffering keeps busy.
// The constants can be changed with -D options (cudl.load(..., options=("-DBK=8",))).

#ifndef BM
#define BM 128          // rows of C per block
#endif
#ifndef BN
#define BN 256          // columns of C per block
#endif
#ifndef BK
#define BK 16           // depth of the tiles staged in shared memory per step
#endif
#ifndef WM
#define WM 64           // rows of C per warp
#endif
#ifndef WN
#define WN 64           // columns of C per warp
#endif
#ifndef WNITER
#define WNITER 4        // sub-tiles per warp along N
#endif
#ifndef TM
#define TM 8            // rows of C per thread per sub-tile
#endif
#ifndef TN
#define TN 4            // columns of C per thread per sub-tile
#endif
#ifndef NUM_THREADS
#define NUM_THREADS 256 // = 32 * (BM / WM) * (BN / WN): one warp per warp tile
#endif

constexpr int WARP_SIZE = 32;
// sub-tiles per warp along M
constexpr int WMITER = (WM * WN) / (WARP_SIZE * TM * TN * WNITER);
constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;              // sub-tile shape
static_assert((BM / WM) * (BN / WN) * WARP_SIZE == NUM_THREADS, "one warp per warp tile");
static_assert(WMITER >= 1 && (WSUBM / TM) * (WSUBN / TN) == WARP_SIZE,
              "32 lanes cover a sub-tile");
static_assert(BK % 4 == 0 && BN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0,
              "float4 granularity");
static_assert(NUM_THREADS % (BK / 4) == 0 && BM % (NUM_THREADS / (BK / 4)) == 0,
              "A tile in whole passes");
static_assert(NUM_THREADS % (BN / 4) == 0 && BK % (NUM_THREADS / (BN / 4)) == 0,
              "B tile in whole passes");

// p[row][col .. col + 3] of a rows x cols row-major matrix, zero outside it (see
// matmul_6_vectorized.cu).
__device__ __forceinline__ float4 load_float4(const float* __restrict__ p, int row,
                                              int col, int rows, int cols) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row >= rows) return v;
    const float* r = p + row * cols;
    if ((cols & 3) == 0 && col + 3 < cols)
        return *reinterpret_cast<const float4*>(r + col);
    if (col < cols) v.x = r[col];
    if (col + 1 < cols) v.y = r[col + 1];
    if (col + 2 < cols) v.z = r[col + 2];
    if (col + 3 < cols) v.w = r[col + 3];
    return v;
}

__device__ __forceinline__ void store_float4(float* __restrict__ p, int row, int col,
                                             int rows, int cols, float4 v) {
    if (row >= rows) return;
    float* r = p + row * cols;
    if ((cols & 3) == 0 && col + 3 < cols) {
        *reinterpret_cast<float4*>(r + col) = v;
        return;
    }
    if (col < cols) r[col] = v.x;
    if (col + 1 < cols) r[col + 1] = v.y;
    if (col + 2 < cols) r[col + 2] = v.z;
    if (col + 3 < cols) r[col + 3] = v.w;
}

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
matmul_8_double_buffered(int M, int N, int K, const float* __restrict__ A,
                         const float* __restrict__ B,
                         float* __restrict__ C) {
    __shared__ float4 As4[2][BK * BM / 4];
    __shared__ float4 Bs4[2][BK * BN / 4];
    const int tid = threadIdx.x;
    const int rowBlock = blockIdx.y * BM, colBlock = blockIdx.x * BN;
    const int warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int laneRow = lane / (WSUBN / TN), laneCol = lane % (WSUBN / TN);
    const int mBase = warpRow * WM + laneRow * TM, nBase = warpCol * WN + laneCol * TN;
    const int aRow = tid / (BK / 4), aCol = (tid % (BK / 4)) * 4;
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;
    constexpr int A_STRIDE = NUM_THREADS / (BK / 4), B_STRIDE = NUM_THREADS / (BN / 4);
    // float4s per thread per tile
    constexpr int A_LOADS = BM / A_STRIDE, B_LOADS = BK / B_STRIDE;

    // the next tiles, in flight from global memory
    float4 aStage[A_LOADS], bStage[B_LOADS];
    auto load_tiles = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) aStage[l] = load_float4(A,
                rowBlock + aRow + l * A_STRIDE, k0 + aCol, M, K);
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) bStage[l] = load_float4(B,
                k0 + bRow + l * B_STRIDE, colBlock + bCol, K, N);
    };
    auto store_tiles = [&](int buf) {
        float* As = reinterpret_cast<float*>(As4[buf]);  // transposed: As[k * BM + m]
        float* Bs = reinterpret_cast<float*>(Bs4[buf]);  // Bs[k * BN + n]
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int m = aRow + l * A_STRIDE;
            As[(aCol + 0) * BM + m] = aStage[l].x;
            As[(aCol + 1) * BM + m] = aStage[l].y;
            As[(aCol + 2) * BM + m] = aStage[l].z;
            As[(aCol + 3) * BM + m] = aStage[l].w;
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            *reinterpret_cast<float4*>(&Bs[(bRow + l * B_STRIDE) * BN + bCol]) =
                bStage[l];
        }
    };

    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;
    float regM[WMITER * TM], regN[WNITER * TN];

    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) load_tiles(k0 + BK);  // issued now, used only after the FMAs below
        const float* As = reinterpret_cast<const float*>(As4[buf]);
        const float* Bs = reinterpret_cast<const float*>(Bs4[buf]);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 a = *reinterpret_cast<const float4*>(
                        &As[k * BM + mBase + wm * WSUBM + i]);
                    regM[wm * TM + i] = a.x; regM[wm * TM + i + 1] = a.y;
                    regM[wm * TM + i + 2] = a.z; regM[wm * TM + i + 3] = a.w;
                }
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 b = *reinterpret_cast<const float4*>(
                        &Bs[k * BN + nBase + wn * WSUBN + j]);
                    regN[wn * TN + j] = b.x; regN[wn * TN + j + 1] = b.y;
                    regN[wn * TN + j + 2] = b.z; regN[wn * TN + j + 3] = b.w;
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        // The other buffer was last read before the previous __syncthreads, so it is free
        // to fill.
        if (has_next) store_tiles(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float* a = &acc[wm * TM + i][wn * TN + j];
                    store_float4(C, rowBlock + mBase + wm * WSUBM + i,
                                 colBlock + nBase + wn * WSUBN + j, M, N,
                                 make_float4(a[0], a[1], a[2], a[3]));
                }
}
