// Correct, another style: no ldmatrix; each lane packs its fragment registers from shared memory
// itself, following the m16n8k16 layout (g = lane / 4, t = lane % 4)
#include <cuda_fp16.h>

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

__device__ __forceinline__ unsigned pack(__half lo, __half hi) {
    return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
}

extern "C" __global__ void mma_fragments(int T, const __half* __restrict__ A,
                                         const __half* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(16) __half As[16][16];
    __shared__ __align__(16) __half Bs[16][8];
    const int t = blockIdx.x, lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) As[i / 16][i % 16] = A[t * 256 + i];
    for (int i = lane; i < 128; i += 32) Bs[i / 8][i % 8] = B[t * 128 + i];
    __syncwarp();
    const int g = lane / 4, q = lane % 4;
    unsigned a[4], b[2];
    for (int j = 0; j < 4; ++j) {  // a[j]: rows g (+ 8 if j is odd), columns 2q, 2q + 1 (+ 8 if j >= 2)
        const int r = g + 8 * (j % 2), c = 2 * q + 8 * (j / 2);
        a[j] = pack(As[r][c], As[r][c + 1]);
    }
    for (int j = 0; j < 2; ++j)  // b[j]: column g, rows 2q, 2q + 1 (+ 8 for j = 1)
        b[j] = pack(Bs[2 * q + 8 * j][g], Bs[2 * q + 1 + 8 * j][g]);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_16x8x16(c, a, b);
    float* out = C + t * 128;
    out[g * 8 + 2 * q] = c[0];
    out[g * 8 + 2 * q + 1] = c[1];
    out[(g + 8) * 8 + 2 * q] = c[2];
    out[(g + 8) * 8 + 2 * q + 1] = c[3];
}
