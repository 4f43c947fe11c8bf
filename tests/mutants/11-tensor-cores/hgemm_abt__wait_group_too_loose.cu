// Mutant: wait_group leaves the needed copy in flight.
#include <cuda_fp16.h>

#define BM 128  // C tile per block of 8 warps (2 x 4), each warp 64 x 32
#define BN 128
#define BK 32   // halves of K per stage: 64-byte rows, four 16-byte chunks
#define STAGES 3

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A and B tiles are both 128 rows x 32 halves; chunk c of row r sits at c ^ ((r / 2) % 4),
// so the 8 rows read by one ldmatrix matrix fall in 8 different 16-byte bank groups.
__device__ __forceinline__ int tile_off(int r, int k) {
    return r * BK + ((((k >> 3) ^ (r >> 1)) & 3) << 3) + (k & 7);
}
__device__ __forceinline__ void copy16(__half* dst, const __half* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_addr(dst)), "l"(src));
#else
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void wait_oldest() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 1) : "memory");
#endif
}
__device__ __forceinline__ void mma(float* d, const unsigned* a, const unsigned* b) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    for (int h = 0; h < 2; h++)
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[2 * h]), "r"(a[2 * h + 1]), "r"(b[h]));
#endif
}

// C = A B^T: A is M x K, B is N x K (row-major __half), C is M x N (float).
extern "C" __global__ void __launch_bounds__(256)
hgemm_abt(int M, int N, int K, const __half* __restrict__ A, const __half* __restrict__ B,
          float* __restrict__ C) {
    __shared__ __align__(128) __half As[STAGES][BM * BK];
    __shared__ __align__(128) __half Bs[STAGES][BN * BK];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN, steps = K / BK;
    float acc[4][4][4] = {};
    auto load = [&](int step) {  // 512 chunks of 16 bytes per tile: 2 + 2 per thread
        const int s = step % STAGES, k0 = step * BK;
        for (int c = tid; c < 512; c += 256) {
            int r = c / 4, k = (c % 4) * 8;
            copy16(&As[s][tile_off(r, k)], &A[(size_t)(row0 + r) * K + k0 + k]);
            copy16(&Bs[s][tile_off(r, k)], &B[(size_t)(col0 + r) * K + k0 + k]);
        }
    };
    for (int step = 0; step < STAGES - 1; step++) {
        if (step < steps) load(step);
        commit();
    }
    for (int step = 0; step < steps; step++) {
        wait_oldest();
        __syncthreads();  // the tiles of `step` are in; the slot of step - 1 is free
        if (step + STAGES - 1 < steps) load(step + STAGES - 1);
        commit();
        const __half* as = As[step % STAGES];
        const __half* bs = Bs[step % STAGES];
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[4][4], b[4][2];
            for (int i = 0; i < 4; i++)
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                             : "r"(smem_addr(&as[tile_off(wm + 16 * i + lane % 16,
                                                          kk + (lane / 16) * 8)])));
            for (int j = 0; j < 4; j += 2)  // rows n of B are columns of B^T: no .trans
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1])
                             : "r"(smem_addr(&bs[tile_off(wn + 8 * j + lane % 8 + (lane / 16) * 8,
                                                          kk + ((lane / 8) % 2) * 8)])));
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) mma(acc[i][j], a[i], b[j]);
        }
    }
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            size_t r = row0 + wm + 16 * i + g, n = col0 + wn + 8 * j + 2 * t;
            *reinterpret_cast<float2*>(&C[r * N + n]) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(&C[(r + 8) * N + n]) =
                make_float2(acc[i][j][2], acc[i][j][3]);
        }
}
