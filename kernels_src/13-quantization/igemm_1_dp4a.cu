// igemm_1_dp4a: C = A B^T in int8 with int32 accumulation (A M x K, B N x K, both
// row-major int8, so both are read along K; C M x N int32). dp4a (sm_61+) multiplies the
// four bytes of two 32-bit words and adds the four products to an int32: 4 multiply-adds
// per instruction where fp32 does 1. A block of 16 x 16 threads computes a 64 x 64 tile
// of C, each thread 4 x 4 outputs at stride 16; per step of 32 values of K the block
// stages a 64 x 8-word tile of A and of B in shared memory (stored k-major, padded).
// Limit: the CUDA cores: 4 ops x 2 (mul + add) per dp4a per lane, about 4x an fp32 FMA
// kernel's rate at best; the shared-memory loads (2 per 16 dp4a) and this small tile keep
// it well below that. Tensor Cores (igemm_2) are the real int8 path.
// Launch: block (16, 16), grid (ceil(N / 64), ceil(M / 64)). Any M, N; K % 4 == 0.


#define TILE 64
#define KW 8  // 32-bit words of K per step (32 int8 values)

extern "C" __global__ void igemm_1_dp4a(int M, int N, int K,
                                        const signed char* __restrict__ A,
                                        const signed char* __restrict__ B,
                                        int* __restrict__ C) {
    __shared__ int As[KW][TILE + 1];  // +1: the k-major stores hit different banks
    __shared__ int Bs[KW][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    const int words = K / 4;
    const int* A4 = reinterpret_cast<const int*>(A);
    const int* B4 = reinterpret_cast<const int*>(B);
    int acc[4][4] = {};
    for (int k0 = 0; k0 < words; k0 += KW) {
        for (int e = tid; e < TILE * KW; e += 256) {  // 2 words of A and of B per thread
            int r = e / KW, k = e % KW;
            const bool in_k = k0 + k < words;
            As[k][r] = row0 + r < M && in_k ? A4[(size_t)(row0 + r) * words + k0 + k] : 0;
            Bs[k][r] = col0 + r < N && in_k ? B4[(size_t)(col0 + r) * words + k0 + k] : 0;
        }
        __syncthreads();
        for (int k = 0; k < KW; k++) {
            int a[4], b[4];
            for (int i = 0; i < 4; i++) a[i] = As[k][ty + 16 * i];
            for (int j = 0; j < 4; j++) b[j] = Bs[k][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = __dp4a(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < M && c < N) C[(size_t)r * N + c] = acc[i][j];
        }
}
