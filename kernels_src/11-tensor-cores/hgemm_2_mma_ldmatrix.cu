// hgemm_2_mma_ldmatrix: C = A B (A M x K, B K x N, C M x N, row-major; __half in, float
// out, fp32 accumulate) with the PTX Tensor Core instruction mma.sync instead of WMMA, so
// the register layout of every fragment is ours. A block of 8 warps (2 x 4) computes a
// 128 x 128 tile of C; each warp a 64 x 32 tile = 4 x 4 mma tiles of 16 x 8 (64 fp32
// accumulators per thread). Per 32-wide step of K the block copies a 128 x 32 tile of A
// and a 32 x 128 tile of B into shared memory (16-byte vectors), and each warp loads its
// fragments with ldmatrix.x4 (A) and ldmatrix.x4.trans (B, stored k-major). Shared tiles
// are XOR-swizzled by 16-byte chunk: A chunk c of row r sits at c ^ ((r / 2) % 4), B
// chunk c of row k at c ^ (k % 8), so the 8 rows that one ldmatrix matrix reads hit 8
// different groups of 4 banks (no bank conflicts, no padding).
// sm_80+: mma.sync.m16n8k16; sm_75 (T4): two mma.sync.m16n8k8 per k16 step on the same
// registers (define HGEMM_SM75 to force that path on any GPU, e.g. in a test).
// -DHGEMM_BF16: A and B in bf16 (__nv_bfloat16, sm_80+ only), the same tiles and
// fragments with the bf16 mma (fp32 accumulate): bf16's range, 8 bits of precision.
// Limit: loads and math still alternate (one stage, two barriers per step, copies through
// registers), so every step waits for global memory; the gain over WMMA is the 128 x 128
// tile (twice the reuse) and conflict-free fragment loads.
// Launch: block 256, grid (N / 128, M / 128). Requires M, N multiples of 128 and K a
// multiple of 32 (no bounds checks); A, B, C 16-byte aligned.

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async, wgmma wrappers
#ifdef HGEMM_BF16  // A and B in bf16 (sm_80+): the same tiles, fragments and copies
#include <cuda_bf16.h>
typedef __nv_bfloat16 in_t;
#else
typedef __half in_t;  // A and B in fp16
#endif

#define BM 128
#define BN 128
#define BK 32

// Offsets (in halves) of element (r, k) of the A tile and (k, n) of the B tile.
__device__ __forceinline__ int a_off(int r, int k) {
    return r * BK + ((((k >> 3) ^ (r >> 1)) & 3) << 3) + (k & 7);
}
__device__ __forceinline__ int b_off(int k, int n) {
    return k * BN + ((((n >> 3) ^ k) & 7) | ((n >> 3) & ~7)) * 8 + (n & 7);
}

extern "C" __global__ void __launch_bounds__(256)
hgemm_2_mma_ldmatrix(int M, int N, int K, const in_t* __restrict__ A,
                     const in_t* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(128) in_t As[BM * BK];
    __shared__ __align__(128) in_t Bs[BK * BN];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;  // the warp's 64 x 32 tile
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[4][4][4] = {};

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int c = tid; c < 512; c += 256) {  // 512 chunks of 8 halves per tile
            int r = c / 4, k = (c % 4) * 8;
            *reinterpret_cast<uint4*>(&As[a_off(r, k)]) =
                *reinterpret_cast<const uint4*>(&A[(size_t)(row0 + r) * K + k0 + k]);
            int kb = c / 16, n = (c % 16) * 8;
            *reinterpret_cast<uint4*>(&Bs[b_off(kb, n)]) =
                *reinterpret_cast<const uint4*>(&B[(size_t)(k0 + kb) * N + col0 + n]);
        }
        __syncthreads();
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[4][4], b[4][2];
            for (int i = 0; i < 4; i++) {  // lanes 0-15: rows at k, lanes 16-31: at k + 8
                int r = wm + 16 * i + lane % 16, k = kk + (lane / 16) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                             : "r"(smem_addr(&As[a_off(r, k)])));
            }
            for (int j = 0; j < 4; j += 2) {  // two 8-wide column tiles per ldmatrix.x4
                int k = kk + lane % 16, n = wn + 8 * j + (lane / 16) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]),
                               "=r"(b[j + 1][1])
                             : "r"(smem_addr(&Bs[b_off(k, n)])));
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) mma_16x8x16_in(acc[i][j], a[i], b[j]);
        }
        __syncthreads();  // before the next step overwrites the tiles
    }
    // accumulator layout: rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            size_t r = row0 + wm + 16 * i + g, n = col0 + wn + 8 * j + 2 * t;
            *reinterpret_cast<float2*>(&C[r * N + n]) =
                make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(&C[(r + 8) * N + n]) =
                make_float2(acc[i][j][2], acc[i][j][3]);
        }
}
