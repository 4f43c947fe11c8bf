// matmul_7_warptile: a third level of tiling between the block and the thread. Each warp
// owns a WM x WN tile of the block's tile and computes it as WMITER x WNITER sub-tiles;
// within a sub-tile each lane owns a TM x TN square. Lanes that share rows of A (or
// columns of B) sit in the same warp, so a float4 read from shared memory is either
// broadcast or part of one contiguous 128-byte row: no bank conflicts on the loads (the
// transposed stores of the A tile are 4-way conflicted; the chapter counts them with
// ncu), and every value a thread loads into a register is used in WNITER * TN (or
// WMITER * TM) FMAs.
// Limit: compute-bound by the roofline (32 FLOP/B per block tile, 0.25 shared loads per
// FMA); what remains is the latency of the tile loads, which each block waits for at the
// __syncthreads (kernel 8 hides it).
// Launch: block (NUM_THREADS) = (256), grid (ceil(N / BN), ceil(M / BM)) = (ceil(N /
// 128), ceil(M / 128)).
// Defaults tuned on an H100 (8 warps of 64 x 32; 4 warps of 64 x 64 leave too few warps
// to hide latency).
// The constants can be changed with -D options (cudl.load(..., options=("-DBK=8",))).

#ifndef BM
#define BM 128          // rows of C per block
#endif
#ifndef BN
#define BN 128          // columns of C per block
#endif
#ifndef BK
#define BK 16           // depth of the tiles staged in shared memory per step
#endif
#ifndef WM
#define WM 64           // rows of C per warp
#endif
#ifndef WN
#define WN 32           // columns of C per warp
#endif
#ifndef WNITER
#define WNITER 2        // sub-tiles per warp along N
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
matmul_7_warptile(int M, int N, int K, const float* __restrict__ A,
                  const float* __restrict__ B,
                  float* __restrict__ C) {
    __shared__ float4 As4[BK * BM / 4];
    __shared__ float4 Bs4[BK * BN / 4];
    float* As = reinterpret_cast<float*>(As4);  // transposed: As[k * BM + m]
    float* Bs = reinterpret_cast<float*>(Bs4);  // Bs[k * BN + n]
    const int tid = threadIdx.x;
    const int rowBlock = blockIdx.y * BM, colBlock = blockIdx.x * BN;
    // Which warp tile, and where the lane sits in a sub-tile.
    const int warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int laneRow = lane / (WSUBN / TN), laneCol = lane % (WSUBN / TN);
    // Offsets of this thread's first A row and B column inside the block tile.
    const int mBase = warpRow * WM + laneRow * TM, nBase = warpCol * WN + laneCol * TN;
    // Tile loads, as in matmul_6_vectorized.
    const int aRow = tid / (BK / 4), aCol = (tid % (BK / 4)) * 4;
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;
    constexpr int A_STRIDE = NUM_THREADS / (BK / 4), B_STRIDE = NUM_THREADS / (BN / 4);

    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;
    float regM[WMITER * TM], regN[WNITER * TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int r = 0; r < BM; r += A_STRIDE) {
            const float4 v = load_float4(A, rowBlock + aRow + r, k0 + aCol, M, K);
            As[(aCol + 0) * BM + aRow + r] = v.x;
            As[(aCol + 1) * BM + aRow + r] = v.y;
            As[(aCol + 2) * BM + aRow + r] = v.z;
            As[(aCol + 3) * BM + aRow + r] = v.w;
        }
#pragma unroll
        for (int r = 0; r < BK; r += B_STRIDE) {
            *reinterpret_cast<float4*>(&Bs[(bRow + r) * BN + bCol]) =
                load_float4(B, k0 + bRow + r, colBlock + bCol, K, N);
        }
        __syncthreads();
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
        __syncthreads();
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
