// matmul_6_vectorized: the 2D-blocktile kernel with 16-byte memory operations. Global
// loads and stores move a float4 per instruction, and the A tile is stored transposed in
// shared memory (As[k][m]), so a thread's TM values of A for one k are contiguous and,
// like its TN values of B, arrive in float4 loads:
// 4 shared-memory instructions per k instead of 16. Fewer instructions per FMA leave more
// issue slots to the FMAs. Sizes that are not multiples of 4 (or tiles that stick out)
// fall back to scalar, zero-filled loads.
// Limit: compute-bound; what remains is bank conflicts on the B reads and the latency of
// the tile loads.
// Launch: block (BM * BN / (TM * TN)) = (256), grid (ceil(N / BN), ceil(M / BM)).

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#define NUM_THREADS (BM * BN / (TM * TN))
static_assert(BK % 4 == 0 && BN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0,
              "float4 granularity");
static_assert(NUM_THREADS % (BK / 4) == 0 && BM % (NUM_THREADS / (BK / 4)) == 0,
              "A tile in whole passes");
static_assert(NUM_THREADS % (BN / 4) == 0 && BK % (NUM_THREADS / (BN / 4)) == 0,
              "B tile in whole passes");

// p[row][col .. col + 3] of a rows x cols row-major matrix, zero outside it. One 16-byte
// load when all four are inside and the row is 16-byte aligned (cols % 4 == 0; the
// allocation itself is, as CuPy's and PyTorch's are); element by element otherwise.
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

// The matching store: the elements of v that fall inside the matrix.
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
matmul_6_vectorized(int M, int N, int K, const float* __restrict__ A,
                    const float* __restrict__ B,
                    float* __restrict__ C) {
    // Declared as float4 so that the arrays are 16-byte aligned for the float4 accesses
    // below.
    __shared__ float4 As4[BK * BM / 4];
    __shared__ float4 Bs4[BK * BN / 4];
    float* As = reinterpret_cast<float*>(As4);  // transposed: As[k * BM + m]
    float* Bs = reinterpret_cast<float*>(Bs4);  // Bs[k * BN + n]
    const int tid = threadIdx.x;
    const int rowBlock = blockIdx.y * BM, colBlock = blockIdx.x * BN;
    const int threadCol = tid % (BN / TN), threadRow = tid / (BN / TN);
    // Each thread loads float4s: 4 consecutive k of one row of A, 4 consecutive n of one
    // row of B.
    const int aRow = tid / (BK / 4), aCol = (tid % (BK / 4)) * 4;
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;
    constexpr int A_STRIDE = NUM_THREADS / (BK / 4), B_STRIDE = NUM_THREADS / (BN / 4);

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float regM[TM], regN[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int r = 0; r < BM; r += A_STRIDE) {
            const float4 v = load_float4(A, rowBlock + aRow + r, k0 + aCol, M, K);
            // transpose on the way into shared memory
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
            for (int i = 0; i < TM; i += 4) {
                const float4 a = *reinterpret_cast<const float4*>(
                    &As[k * BM + threadRow * TM + i]);
                regM[i] = a.x; regM[i + 1] = a.y; regM[i + 2] = a.z; regM[i + 3] = a.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 b = *reinterpret_cast<const float4*>(
                    &Bs[k * BN + threadCol * TN + j]);
                regN[j] = b.x; regN[j + 1] = b.y; regN[j + 2] = b.z; regN[j + 3] = b.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            store_float4(C, rowBlock + threadRow * TM + i, colBlock + threadCol * TN + j,
                         M, N,
                         make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2],
                                     acc[i][j + 3]));
        }
    }
}
