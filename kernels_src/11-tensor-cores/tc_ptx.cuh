// tc_ptx.cuh: the inline-PTX wrappers of the Tensor Core kernels of chapters 11-13,
// written once: `#include "11-tensor-cores/tc_ptx.cuh"` (cudl compiles every kernel with
// -I kernels_src). Each wrapper is one instruction (or the sm_75 sequence that stands in
// for it), so a kernel reads as the algorithm and the PTX operand lists live here.
// Guards, as in the kernels: TC_SM80 selects mma.sync m16n8k16 / m16n8k32 and cp.async on
// sm_80+ unless a kernel's switch (HGEMM_SM75, FLASH_SM75, IGEMM_SM75, or TC_SM75) forces
// the sm_75 (T4) path on any GPU, e.g. in an emulator test; TC_SM90A (sm_90a only) holds
// wgmma, mbarrier and TMA, which exist on no other target. HGEMM_BF16 (hgemm_2, hgemm_3)
// selects the bf16 mma, which needs the sm_80 path.
// PTX ISA: "Warp Level Matrix Multiply-Accumulate Instructions" (mma, ldmatrix),
// "cp.async", "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (wgmma),
// "mbarrier", "cp.async.bulk.tensor".

#pragma once
#include <cuda_fp16.h>

#if __CUDA_ARCH__ >= 800 && !defined(TC_SM75) && !defined(HGEMM_SM75) && \
    !defined(FLASH_SM75) && !defined(IGEMM_SM75)
#define TC_SM80 1
#endif
#if defined(HGEMM_BF16) && !defined(TC_SM80)
#error "HGEMM_BF16: bf16 mma.sync needs sm_80 or newer (and not HGEMM_SM75)"
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TC_SM90A 1
#endif

// ---------------------------------------------------------------- addresses and layouts

// PTX names shared memory by a 32-bit offset in the shared window, not a generic pointer.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The 128-byte swizzle on a byte offset from a 1 KiB-aligned base (bits 4-6 ^= bits 7-9):
// the layout wgmma descriptors and TMA's SWIZZLE_128B expect.
__device__ __forceinline__ unsigned swz(unsigned off) {
    return off ^ (((off >> 7) & 7) << 4);
}
// wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets
// (in 16-byte units, 14 bits each) and the 128-byte swizzle mode (bits 62-63 = 1).
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo,
                                                   unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4)
         | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16
         | (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32
         | 1ull << 62;
}
// Two floats as the fp16 pair of one mma fragment register (low half first).
__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}

// ---------------------------------------------------------------- mma.sync and ldmatrix

// d += a b for one 16 x 8 tile, k = 16, fp16 in, fp32 accumulate: a is 4 registers (2
// halves each), b is 2. sm_75 has no m16n8k16: two m16n8k8 on the same registers.
__device__ __forceinline__ void mma_16x8x16(float* d, const unsigned* a,
                                            const unsigned* b) {
#ifdef TC_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else  // sm_75: k 0-7 are a[0], a[1], b[0]; k 8-15 are a[2], a[3], b[1]
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[2]), "r"(a[3]), "r"(b[1]));
#endif
}
// d += a b for one 16 x 8 tile, k = 32, int8 in, int32 accumulate: a is 4 registers (4
// int8 each), b is 2. sm_75 has no m16n8k32: four m8n8k16, two per 8-row half.
__device__ __forceinline__ void mma_16x8x32(int* d, const unsigned* a,
                                            const unsigned* b) {
#ifdef TC_SM80
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    // rows g (d0, d1) and g + 8 (d2, d3); k 0-15 (a0/a1, b0) and 16-31 (a2/a3, b1)
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 "
                 "{%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(b[0]));
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 "
                 "{%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(d[0]), "+r"(d[1]) : "r"(a[2]), "r"(b[1]));
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 "
                 "{%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(d[2]), "+r"(d[3]) : "r"(a[1]), "r"(b[0]));
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 "
                 "{%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(d[2]), "+r"(d[3]) : "r"(a[3]), "r"(b[1]));
#endif
}
// d += a b for one 16 x 8 tile, k = 16, bf16 in, fp32 accumulate: mma_16x8x16's fragment
// layout (two values per register, low half first). sm_80+ only: sm_75 has no bf16 mma.
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void mma_16x8x16_bf16(float* d, const unsigned* a,
                                                 const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
// The mma of hgemm_2 and hgemm_3: fp16 inputs, or bf16 under their switch HGEMM_BF16
// (ldmatrix and the copies move 16-bit values whatever they hold).
__device__ __forceinline__ void mma_16x8x16_in(float* d, const unsigned* a,
                                               const unsigned* b) {
#ifdef HGEMM_BF16
    mma_16x8x16_bf16(d, a, b);
#else
    mma_16x8x16(d, a, b);
#endif
}
// Four 8 x 8 matrices of 16-bit values from shared memory into the mma fragment layout:
// lanes 8 i ... 8 i + 7 give the row addresses of matrix i, which lands in r[i].
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// The same, each matrix transposed on the way: B fragments from a k-major tile.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// ---------------------------------------------------------------- cp.async (sm_80+)

#if __CUDA_ARCH__ >= 800
// 16 bytes global -> shared without a register stop; lands at the next wait on its group.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src));
}
// The same, reading only `bytes` (0 or 16) of src and filling the rest with zeros: rows
// past the end of a matrix become zeros without a branch around the copy.
__device__ __forceinline__ void cp_async16_zfill(unsigned dst, const void* src,
                                                 int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(bytes));
}
#endif
// 16 bytes global -> shared: cp.async on the sm_80 path, a plain uint4 copy on sm_75.
__device__ __forceinline__ void copy16(void* dst, const void* src) {
#ifdef TC_SM80
    cp_async16(smem_addr(dst), src);
#else
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
// copy16, or 16 zero bytes when !valid (src is then not read).
__device__ __forceinline__ void copy16_zfill(void* dst, const void* src, bool valid) {
#ifdef TC_SM80
    cp_async16_zfill(smem_addr(dst), src, valid ? 16 : 0);
#else
    *reinterpret_cast<uint4*>(dst) =
        valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}
// Close this thread's group of the copies issued since the last commit (no-op on sm_75,
// where copy16 has already landed).
__device__ __forceinline__ void cp_async_commit() {
#ifdef TC_SM80
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Wait until at most N of this thread's groups are in flight ("memory": no shared load
// moves above it).
template <int N> __device__ __forceinline__ void cp_async_wait() {
#ifdef TC_SM80
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

#ifdef TC_SM90A
// ---------------------------------------------------------------- wgmma (sm_90a)

// Order the register and shared-memory writes before it ahead of the next wgmma.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
// Close the group of the wgmma issued so far by this warpgroup.
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Wait until at most N wgmma groups are in flight; their accumulators are then final.
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// d (64 x 64 per warpgroup, 32 floats per thread) += A (64 x 16, K-major, at da)
// x B (16 x 64, K-major, at db): both operands from shared memory through descriptors.
__device__ __forceinline__ void wgmma_64x64x16(float* d, unsigned long long da,
                                               unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, %32, %33, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db));
}
// d = A x B, the same shape without accumulating (scale-d = 0): d is output only, so no
// instruction has to set it to zero first (such writes to a wgmma's registers between its
// fence and its wait make ptxas serialize the wgmma of a warpgroup).
__device__ __forceinline__ void wgmma_64x64x16_first(float* d, unsigned long long da,
                                                     unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, %32, %33, 0, 1, 1, 0, 0;\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]),
          "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]),
          "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]),
          "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
          "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]),
          "=f"(d[30]), "=f"(d[31])
        : "l"(da), "l"(db));
}
// d (64 x 48, 24 floats per thread) += A (64 x 16) x B (16 x 48), both K-major in shared
// memory: with two 64 x 64 products, the 176-key tiles of flash_attn_6_ws.
__device__ __forceinline__ void wgmma_64x48x16(float* d, unsigned long long da,
                                               unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,"
        "%20,%21,%22,%23}, "
        "%24, %25, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
        : "l"(da), "l"(db));
}
// The same, d = A x B (scale-d = 0).
__device__ __forceinline__ void wgmma_64x48x16_first(float* d, unsigned long long da,
                                                     unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,"
        "%20,%21,%22,%23}, "
        "%24, %25, 0, 1, 1, 0, 0;\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]),
          "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]),
          "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]),
          "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23])
        : "l"(da), "l"(db));
}
// d (64 x N, N / 2 floats per thread) += A (64 x 16) x B (16 x N), both K-major in shared
// memory (the _kk shapes; wgmma_64x64x16 is the N = 64 one), and d = A x B (_first,
// scale-d = 0). One wide wgmma reads its A tile once, where N / 64 of the 64-wide ones
// read it N / 64 times: less shared-memory traffic per product (flash_attn_6_ws's Q K^T).
__device__ __forceinline__ void wgmma_64x128x16_kk(float* d, unsigned long long da,
                                                   unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,"
        "%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"
        "%57,%58,%59,%60,%61,%62,%63}, "
        "%64, %65, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_64x128x16_kk_first(float* d, unsigned long long da,
                                                         unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,"
        "%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"
        "%57,%58,%59,%60,%61,%62,%63}, "
        "%64, %65, 0, 1, 1, 0, 0;\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]),
          "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]),
          "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]),
          "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
          "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]),
          "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]),
          "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]),
          "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]),
          "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]),
          "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]),
          "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
        : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_64x176x16_kk(float* d, unsigned long long da,
                                                   unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,"
        "%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"
        "%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,"
        "%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87}, "
        "%88, %89, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
        : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_64x176x16_kk_first(float* d, unsigned long long da,
                                                         unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,"
        "%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"
        "%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,"
        "%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87}, "
        "%88, %89, 0, 1, 1, 0, 0;\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]),
          "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]),
          "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]),
          "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
          "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]),
          "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]),
          "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]),
          "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]),
          "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]),
          "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]),
          "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63]), "=f"(d[64]), "=f"(d[65]),
          "=f"(d[66]), "=f"(d[67]), "=f"(d[68]), "=f"(d[69]), "=f"(d[70]), "=f"(d[71]),
          "=f"(d[72]), "=f"(d[73]), "=f"(d[74]), "=f"(d[75]), "=f"(d[76]), "=f"(d[77]),
          "=f"(d[78]), "=f"(d[79]), "=f"(d[80]), "=f"(d[81]), "=f"(d[82]), "=f"(d[83]),
          "=f"(d[84]), "=f"(d[85]), "=f"(d[86]), "=f"(d[87])
        : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_64x192x16_kk(float* d, unsigned long long da,
                                                   unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,"
        "%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"
        "%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,"
        "%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,"
        "%93,%94,%95}, "
        "%96, %97, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_64x192x16_kk_first(float* d, unsigned long long da,
                                                         unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,"
        "%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"
        "%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,"
        "%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,"
        "%93,%94,%95}, "
        "%96, %97, 0, 1, 1, 0, 0;\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]),
          "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]),
          "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]),
          "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
          "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]),
          "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]),
          "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]),
          "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]),
          "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]),
          "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]),
          "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63]), "=f"(d[64]), "=f"(d[65]),
          "=f"(d[66]), "=f"(d[67]), "=f"(d[68]), "=f"(d[69]), "=f"(d[70]), "=f"(d[71]),
          "=f"(d[72]), "=f"(d[73]), "=f"(d[74]), "=f"(d[75]), "=f"(d[76]), "=f"(d[77]),
          "=f"(d[78]), "=f"(d[79]), "=f"(d[80]), "=f"(d[81]), "=f"(d[82]), "=f"(d[83]),
          "=f"(d[84]), "=f"(d[85]), "=f"(d[86]), "=f"(d[87]), "=f"(d[88]), "=f"(d[89]),
          "=f"(d[90]), "=f"(d[91]), "=f"(d[92]), "=f"(d[93]), "=f"(d[94]), "=f"(d[95])
        : "l"(da), "l"(db));
}
// d (64 x 128, 64 floats per thread) += A (64 x 16, 4 registers per thread in the
// mma.sync A layout) x B (16 x 128, N-major: imm-trans-b = 1, at db).
__device__ __forceinline__ void wgmma_64x128x16_rs(float* d, const unsigned* a,
                                                   unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, {%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// The 128 accumulators of an N = 256 wgmma: "%0, ..., %127" in the instruction
// (TC_REGS128) and d[0] ... d[127] with constraint c ("+f" for fp32, "+r" for int32) in
// the operand list (TC_D128), written once for the fp16, int8 and fp8 forms below.
#define TC_REGS128                                                                   \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                         \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"               \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"               \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"               \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"               \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"               \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"  \
    "%112,%113,%114,%115,%116,%117,%118,%119,"                                       \
    "%120,%121,%122,%123,%124,%125,%126,%127"
#define TC_D8(c, i)                                                                  \
    c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), c(d[i + 5]),        \
        c(d[i + 6]), c(d[i + 7])
#define TC_D32(c, i) TC_D8(c, i), TC_D8(c, i + 8), TC_D8(c, i + 16), TC_D8(c, i + 24)
#define TC_D128(c) TC_D32(c, 0), TC_D32(c, 32), TC_D32(c, 64), TC_D32(c, 96)

// d (64 x 256 per warpgroup, 128 floats per thread) += A (64 x 16, K-major, at da)
// x B (16 x 256, N-major: imm-trans-b = 1, at db).
__device__ __forceinline__ void wgmma_64x256x16(float* d, unsigned long long da,
                                                unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
        TC_REGS128 "}, "
        "%128, %129, 1, 1, 1, 0, 1;\n"
        : TC_D128("+f")
        : "l"(da), "l"(db));
}
// d (64 x 256 per warpgroup, 128 int32 per thread) += A (64 x 32 int8, K-major, at da)
// x B (32 x 256 int8, at db): chapter 13's int8 GEMM. The integer forms have neither
// negation nor transposition: both operands must be K-major in shared memory.
__device__ __forceinline__ void wgmma_64x256x32_s8(int* d, unsigned long long da,
                                                   unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {"
        TC_REGS128 "}, "
        "%128, %129, 1;\n"
        : TC_D128("+r")
        : "l"(da), "l"(db));
}

// The same product in fp8 e4m3 (Hopper's 8-bit float, chapter 13) with fp32 accumulators;
// like the integer forms, the fp8 ones cannot transpose: both operands K-major.
__device__ __forceinline__ void wgmma_64x256x32_e4m3(float* d, unsigned long long da,
                                                     unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {"
        TC_REGS128 "}, "
        "%128, %129, 1, 1, 1;\n"
        : TC_D128("+f")
        : "l"(da), "l"(db));
}

// ---------------------------------------------------------- mbarrier and TMA (sm_90a)

// A barrier in shared memory (8 bytes at `bar`) that completes a phase after `count`
// arrivals and the transaction bytes announced for that phase.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count));
}
// One arrival on the barrier's current phase.
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// Arrive and announce the bytes the TMA copies will deliver to this barrier's phase.
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}
// Spin until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
// mbar_wait with the retry loop inside the asm: kernels that wait on a barrier between
// wgmma groups in flight use it, since ptxas, seeing a C++ loop around try_wait there,
// serializes all the wgmma of the kernel (its warning C7513).
__device__ __forceinline__ void mbar_wait_asm(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred p;\nWAIT:\n"  // a label in braces is local to them
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
// One 2-D tile of a tensor map into shared memory (TMA); x is the contiguous coordinate.
// The copy's bytes complete a transaction on barrier `bar`.
__device__ __forceinline__ void tma_load(unsigned dst, const void* map, int x, int y,
                                         unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                 ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}

// ------------------------------------------ named barriers and register moves (sm_90a)

// Named barrier `id` (1-15; 0 is __syncthreads) of `threads` threads: bar_sync waits for
// all of them, bar_arrive counts this thread's warp and goes on (a producer/consumer
// hand-off between warp groups).
__device__ __forceinline__ void bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
// Lower (dec) or raise (inc) this warpgroup's registers per thread to N (a multiple of 8,
// 24-256): a producer warpgroup gives registers back to the pool, consumers take them.
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N) : "memory");
}
#endif  // TC_SM90A
