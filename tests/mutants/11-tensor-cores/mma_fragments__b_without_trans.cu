// Mutant: B loaded without .trans: wrong fragment layout.
#include <cuda_fp16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// d += a b for one 16 x 8 x 16 tile (sm_75 has no m16n8k16: two m16n8k8 there)
__device__ __forceinline__ void mma_16x8x16(float* d, const unsigned* a, const unsigned* b) {
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

// C[t] = A[t] B[t]: A[t] is 16 x 16, B[t] 16 x 8, C[t] 16 x 8, row-major; one warp per t.
extern "C" __global__ void mma_fragments(int T, const __half* __restrict__ A,
                                         const __half* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(16) __half As[16][16];
    __shared__ __align__(16) __half Bs[16][8];
    const int t = blockIdx.x, lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) As[i / 16][i % 16] = A[t * 256 + i];
    for (int i = lane; i < 128; i += 32) Bs[i / 8][i % 8] = B[t * 128 + i];
    __syncwarp();
    unsigned a[4], b[2];
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(smem_addr(&As[lane % 16][(lane / 16) * 8])));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(&Bs[lane % 16][0])));
    mma_16x8x16(c, a, b);
    const int g = lane / 4, q = lane % 4;  // c: rows g and g + 8, columns 2q and 2q + 1
    float* out = C + t * 128;
    out[g * 8 + 2 * q] = c[0];
    out[g * 8 + 2 * q + 1] = c[1];
    out[(g + 8) * 8 + 2 * q] = c[2];
    out[(g + 8) * 8 + 2 * q + 1] = c[3];
}
