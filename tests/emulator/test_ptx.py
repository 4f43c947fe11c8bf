"""Inline PTX of the Tensor Core chapters (mma.sync, ldmatrix, movmatrix, cp.async) on the CPU emulator.

Written like tests/emulator/test_conformance.py (cudl.load / cudl.xp only), so the same file runs on a GPU with
CUDL_BACKEND=gpu (sm_80 or newer): the expected values come from NumPy and the fragment layouts of the PTX ISA.
Tests marked `emulator_only` check what only the emulator promises (refusals, caught mistakes).
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl

RNG = np.random.default_rng()
emulator_only = pytest.mark.skipif("cudl.on_gpu()", reason="checks the CPU emulator's own guarantees")


def dev(a: np.ndarray):
    return cudl.xp.array(a)


def host(a) -> np.ndarray:
    cudl.sync()
    return cudl.to_numpy(a)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


# ------------------------------------------------------------------------------ mma.sync, one tile
# Fragments are loaded straight from global memory with the PTX ISA's formulas (g = lane / 4, t = lane % 4),
# so these kernels test mma alone. A is m x k row-major, B is given as B^T (n x k, the ".col" operand).

MMA = r"""
#include <cuda_fp16.h>
typedef unsigned short u16;
__device__ unsigned pack2(const u16* p) { return p[0] | ((unsigned)p[1] << 16); }
__device__ unsigned pack4(const signed char* p) {
    return (unsigned char)p[0] | ((unsigned char)p[1] << 8) | ((unsigned char)p[2] << 16)
         | ((unsigned)(unsigned char)p[3] << 24);
}

// m16n8k16, f16 or bf16 inputs (as bits), f32 accumulators: D = A B + C
extern "C" __global__ void mma_k16(const u16* a, const u16* bt, const float* c, float* d, int bf16) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned ra[4], rb[2];
    float acc[4];
    for (int i = 0; i < 4; i++) ra[i] = pack2(a + (g + 8 * (i % 2)) * 16 + 2 * t + 8 * (i / 2));
    for (int i = 0; i < 2; i++) rb[i] = pack2(bt + g * 16 + 2 * t + 8 * i);
    for (int i = 0; i < 4; i++) acc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    if (bf16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
    for (int i = 0; i < 4; i++) d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[i];
}

// m16n8k8 (the sm_75 shape), f16 inputs, f32 accumulators, separate C and D registers
extern "C" __global__ void mma_k8(const u16* a, const u16* bt, const float* c, float* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned a0 = pack2(a + g * 8 + 2 * t), a1 = pack2(a + (g + 8) * 8 + 2 * t), b0 = pack2(bt + g * 8 + 2 * t);
    float c0 = c[g * 8 + 2 * t], c1 = c[g * 8 + 2 * t + 1], c2 = c[(g + 8) * 8 + 2 * t];
    float c3 = c[(g + 8) * 8 + 2 * t + 1], d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%8,%9,%10};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a0), "r"(a1), "r"(b0), "f"(c0), "f"(c1), "f"(c2), "f"(c3));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// m16n8k16 with f16 accumulators (C and D are two f16x2 registers)
extern "C" __global__ void mma_k16_f16acc(const u16* a, const u16* bt, const u16* c, u16* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned ra[4], rb[2], rc[2], rd[2];
    for (int i = 0; i < 4; i++) ra[i] = pack2(a + (g + 8 * (i % 2)) * 16 + 2 * t + 8 * (i / 2));
    for (int i = 0; i < 2; i++) rb[i] = pack2(bt + g * 16 + 2 * t + 8 * i);
    for (int i = 0; i < 2; i++) rc[i] = pack2(c + (g + 8 * i) * 8 + 2 * t);
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};"
                 : "=r"(rd[0]), "=r"(rd[1])
                 : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]),
                   "r"(rc[0]), "r"(rc[1]));
    for (int i = 0; i < 2; i++) {
        d[(g + 8 * i) * 8 + 2 * t] = (u16)rd[i];
        d[(g + 8 * i) * 8 + 2 * t + 1] = (u16)(rd[i] >> 16);
    }
}

// m16n8k32 s8 x s8 -> s32 (sm_80)
extern "C" __global__ void mma_s8_k32(const signed char* a, const signed char* bt, const int* c, int* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned ra[4], rb[2];
    int acc[4];
    for (int i = 0; i < 4; i++) ra[i] = pack4(a + (g + 8 * (i % 2)) * 32 + 4 * t + 16 * (i / 2));
    for (int i = 0; i < 2; i++) rb[i] = pack4(bt + g * 32 + 4 * t + 16 * i);
    for (int i = 0; i < 4; i++) acc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                 : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
    for (int i = 0; i < 4; i++) d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[i];
}

// m8n8k16 s8 x s8 -> s32 (the sm_75 int8 shape)
extern "C" __global__ void mma_s8_m8(const signed char* a, const signed char* bt, const int* c, int* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned ra = pack4(a + g * 16 + 4 * t), rb = pack4(bt + g * 16 + 4 * t);
    int d0, d1;
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%4,%5};"
                 : "=r"(d0), "=r"(d1) : "r"(ra), "r"(rb), "r"(c[g * 8 + 2 * t]), "r"(c[g * 8 + 2 * t + 1]));
    d[g * 8 + 2 * t] = d0;
    d[g * 8 + 2 * t + 1] = d1;
}
"""


def half_bits(shape, bf16=False):
    x = RNG.standard_normal(shape).astype(np.float32)
    bits = bf16_bits(x) if bf16 else x.astype(np.float16).view(np.uint16)
    vals = from_bf16(bits) if bf16 else bits.view(np.float16).astype(np.float32)
    return bits, vals.astype(np.float64)


@pytest.mark.parametrize("bf16", [False, True], ids=["f16", "bf16"])
def test_mma_m16n8k16_f32_accumulate(bf16):
    (a, af), (bt, bf) = half_bits((16, 16), bf16), half_bits((8, 16), bf16)
    c = RNG.standard_normal((16, 8)).astype(np.float32)
    d = dev(np.full((16, 8), np.nan, np.float32))
    cudl.load(MMA, "mma_k16")(1, 32, (dev(a), dev(bt), dev(c), d, int(bf16)))
    np.testing.assert_allclose(host(d), af @ bf.T + c, rtol=1e-5, atol=1e-4)


def test_mma_m16n8k8_separate_c_and_d():
    (a, af), (bt, bf) = half_bits((16, 8)), half_bits((8, 8))
    c = RNG.standard_normal((16, 8)).astype(np.float32)
    d = dev(np.full((16, 8), np.nan, np.float32))
    cudl.load(MMA, "mma_k8")(1, 32, (dev(a), dev(bt), dev(c), d))
    np.testing.assert_allclose(host(d), af @ bf.T + c, rtol=1e-5, atol=1e-4)


def test_mma_m16n8k16_f16_accumulate():
    (a, af), (bt, bf), (c, cf) = half_bits((16, 16)), half_bits((8, 16)), half_bits((16, 8))
    d = dev(np.full((16, 8), 0x7E00, np.uint16))  # NaN
    cudl.load(MMA, "mma_k16_f16acc")(1, 32, (dev(a), dev(bt), dev(c), d))
    got = host(d).view(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, af @ bf.T + cf, rtol=1e-2, atol=1e-2)  # f16 result: a few ulps


@pytest.mark.parametrize("kernel,m,k", [("mma_s8_k32", 16, 32), ("mma_s8_m8", 8, 16)])
def test_mma_int8_exact(kernel, m, k):
    a = RNG.integers(-128, 128, (m, k), dtype=np.int8)
    bt = RNG.integers(-128, 128, (8, k), dtype=np.int8)
    c = RNG.integers(-(2**20), 2**20, (m, 8), dtype=np.int32)
    d = dev(np.full((m, 8), -7, np.int32))
    cudl.load(MMA, kernel)(1, 32, (dev(a), dev(bt), dev(c), d))
    np.testing.assert_array_equal(host(d), a.astype(np.int64) @ bt.T.astype(np.int64) + c)


# ------------------------------------------------------------------------------ ldmatrix, movmatrix

LDMATRIX = r"""
#include <cuda_fp16.h>
typedef unsigned short u16;
// Lane l supplies the address of table row rows[l] (a 64 x 8 table of 16-bit values in shared memory);
// out[l * 4 + j] = register j of lane l.
extern "C" __global__ void ldsm(const u16* table, const int* rows, unsigned* out, int num, int trans) {
    __shared__ __align__(16) u16 s[64 * 8];
    int lane = threadIdx.x;
    for (int i = lane; i < 64 * 8; i += 32) s[i] = table[i];
    __syncwarp();
    unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&s[rows[lane] * 8]));
    unsigned r[4] = {0, 0, 0, 0};
    if (num == 1 && !trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                                         : "=r"(r[0]) : "r"(addr));
    if (num == 2 && !trans) asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                                         : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
    if (num == 4 && !trans) asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                                         : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    if (num == 1 && trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
                                        : "=r"(r[0]) : "r"(addr));
    if (num == 2 && trans) asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16 {%0, %1}, [%2];"
                                        : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
    if (num == 4 && trans) asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                                        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    for (int j = 0; j < 4; j++) out[lane * 4 + j] = r[j];
}
extern "C" __global__ void movm(const unsigned* x, unsigned* y) {
    unsigned v;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(v) : "r"(x[threadIdx.x]));
    y[threadIdx.x] = v;
}
"""


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [0, 1])
def test_ldmatrix_bit_exact(num, trans):
    table = RNG.integers(0, 2**16, (64, 8), dtype=np.uint16)
    rows = RNG.permutation(64)[:32].astype(np.int32)
    out = dev(np.full((32, 4), 0xDEADBEEF, np.uint32))
    cudl.load(LDMATRIX, "ldsm")(1, 32, (dev(table), dev(rows), out, num, trans))
    want = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        for j in range(num):
            mat = table[rows[8 * j:8 * j + 8]]  # matrix j: rows from lanes 8j..8j+7
            r, c = (2 * (lane % 4), lane // 4) if trans else (lane // 4, 2 * (lane % 4))
            e0, e1 = (mat[r, c], mat[r + 1, c]) if trans else (mat[r, c], mat[r, c + 1])
            want[lane, j] = int(e0) | (int(e1) << 16)
    np.testing.assert_array_equal(host(out), want)


def test_movmatrix_transposes():
    m = RNG.integers(0, 2**16, (8, 8), dtype=np.uint16)
    x = m.reshape(32, 2).copy().view(np.uint32).ravel()  # lane l: row l // 4, columns 2 (l % 4) + 0, 1
    y = dev(np.zeros(32, np.uint32))
    cudl.load(LDMATRIX, "movm")(1, 32, (dev(x), y))
    np.testing.assert_array_equal(host(y), np.ascontiguousarray(m.T).reshape(32, 2).view(np.uint32).ravel())


# ------------------------------------------------------------------------------ cp.async

CP_ASYNC = r"""
#include <cuda_pipeline.h>
// Each thread copies `bytes` (4, 8 or 16) of x into shared memory with cp.async (only src_bytes of them read
// from x, the rest zero-filled), waits, and writes the shared tile to y. Mode 1: __pipeline_* wrappers.
extern "C" __global__ void copy(const float* x, float* y, int bytes, int src_bytes, int mode) {
    __shared__ __align__(16) float s[64 * 4];
    int tid = threadIdx.x, per = bytes / 4;
    float* dst = &s[tid * per];
    const float* src = x + blockIdx.x * blockDim.x * per + tid * per;
    unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    if (mode == 1) {
        __pipeline_memcpy_async(dst, src, bytes, bytes - src_bytes);
        __pipeline_commit();
        __pipeline_wait_prior(0);
    } else {
        if (bytes == 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(sa), "l"(src), "r"(src_bytes));
        if (bytes == 8)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" :: "r"(sa), "l"(src), "r"(src_bytes));
        if (bytes == 4)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(sa), "l"(src), "r"(src_bytes));
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    for (int i = 0; i < per; i++) y[blockIdx.x * blockDim.x * per + tid * per + i] = dst[i];
}
// Two groups in flight; wait_group 1 retires the older one only. A predicated copy (ignore-src) zero-fills.
extern "C" __global__ void two_groups(const float4* x, float4* y, int skip) {
    __shared__ float4 s[2][32];
    int t = threadIdx.x;
    for (int g = 0; g < 2; g++) {
        unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(&s[g][t]));
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n"
                     " cp.async.cg.shared.global.L2::128B [%0], [%1], 16, p;\n}\n"
                     :: "r"(sa), "l"(x + g * 32 + t), "r"((int)(t == skip)));
        asm volatile("cp.async.commit_group;\n" ::);
    }
    asm volatile("cp.async.wait_group 1;\n" ::);
    y[t] = s[0][t];
    asm volatile("cp.async.wait_all;\n" ::);
    y[32 + t] = s[1][t];
}
"""


@pytest.mark.parametrize("bytes_,src_bytes,mode", [(16, 16, 0), (16, 12, 0), (16, 0, 0), (8, 8, 0), (8, 4, 0),
                                                   (4, 4, 0), (16, 16, 1), (16, 8, 1)])
def test_cp_async_bit_exact_with_zero_fill(bytes_, src_bytes, mode):
    per = bytes_ // 4
    x = RNG.standard_normal(2 * 64 * per).astype(np.float32)
    y = dev(np.full(x.size, np.nan, np.float32))
    cudl.load(CP_ASYNC, "copy")(2, 64, (dev(x), y, bytes_, src_bytes, mode))
    want = x.reshape(-1, per).copy()
    want[:, src_bytes // 4:] = 0
    np.testing.assert_array_equal(host(y), want.ravel())


def test_cp_async_groups_and_ignore_src():
    x = RNG.standard_normal((64, 4)).astype(np.float32)
    y = dev(np.full((64, 4), np.nan, np.float32))
    cudl.load(CP_ASYNC, "two_groups")(1, 32, (dev(x), y, 5))
    want = x.copy()
    want[[5, 37]] = 0
    np.testing.assert_array_equal(host(y), want)


OPERAND_FORMS = r"""
// Operand forms of public kernels: the shared address made inside the asm (cvta.to.shared + cvt.u32.u64),
// a 64-bit "l" shared address, and a copy guarded by a predicate (@p: no copy, the old contents stay).
extern "C" __global__ void forms(const int4* x, int4* y) {
    __shared__ int4 s[64];
    int t = threadIdx.x;
    s[32 + t] = make_int4(-1, -2, -3, -4);
    unsigned a;
    asm volatile("{ .reg .u64 u; cvta.to.shared.u64 u, %1; cvt.u32.u64 %0, u; }" : "=r"(a) : "l"(&s[t]));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(a), "l"(x + t));
    size_t b = __cvta_generic_to_shared(&s[32 + t]);
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p cp.async.cg.shared.global [%1], [%2], %3;\n}\n"
                 :: "r"((int)(t % 2)), "l"(b), "l"(x + 32 + t), "n"(16));
    asm volatile("cp.async.wait_all;" ::: "memory");
    y[t] = s[t];
    y[32 + t] = s[32 + t];
}
"""


def test_public_operand_forms():
    x = RNG.integers(0, 1000, (64, 4), dtype=np.int32)
    y = dev(np.zeros((64, 4), np.int32))
    cudl.load(OPERAND_FORMS, "forms")(1, 32, (dev(x), y))
    want = x.copy()
    want[32::2] = [-1, -2, -3, -4]  # even lanes: predicate false, no copy
    np.testing.assert_array_equal(host(y), want)


DYNAMIC = r"""
// cp.async into dynamic shared memory, then every thread reads another thread's copy after the barrier
extern "C" __global__ void dyn_reverse(const float4* x, float4* y) {
    extern __shared__ float4 buf[];
    unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(&buf[threadIdx.x]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(x + threadIdx.x));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    y[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}
"""


def test_cp_async_into_dynamic_shared_memory():
    x = RNG.standard_normal((96, 4)).astype(np.float32)
    y = dev(np.full((96, 4), np.nan, np.float32))
    cudl.load(DYNAMIC, "dyn_reverse")(1, 96, (dev(x), y), shared_mem=96 * 16)
    np.testing.assert_array_equal(host(y), x[::-1])


@emulator_only
def test_cp_async_out_of_bounds_source_is_a_fault():
    with pytest.raises(cudl.KernelFault, match=r"out-of-bounds read of x\["):
        cudl.load(DYNAMIC, "dyn_reverse")(1, 96, (np.zeros((95, 4), np.float32), np.zeros((96, 4), np.float32)),
                                          shared_mem=96 * 16)


# ------------------------------------------------------------------------------ a 64x64x64 GEMM

GEMM = r"""
#include <cuda_fp16.h>
// C = A B for 64 x 64 x 64 f16 matrices (row-major), f32 accumulate, one block of 4 warps (2 x 2, each warp a
// 32 x 32 tile = 2 x 4 mma tiles of 16 x 8). A and B reach shared memory with cp.async in two k-halves (two
// commit groups); ldmatrix.x4 loads A fragments, ldmatrix.x2.trans B fragments (B is row-major: k x n).
// mutant 1: a wrong A fragment layout (the two 8-column halves swapped); mutant 2: no cp.async.wait_group.
__device__ __forceinline__ unsigned smem(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
extern "C" __global__ void gemm64(const __half* A, const __half* B, float* C, int mutant) {
    __shared__ __align__(16) __half sa[64][64], sb[64][64];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    for (int half = 0; half < 2; half++) {  // k columns [32 half, 32 half + 32) of A, rows of B
        for (int c = tid; c < 256; c += blockDim.x) {  // 256 chunks of 16 bytes from each matrix
            int r = c / 4, k = 32 * half + (c % 4) * 8;       // A: 64 rows x 4 chunks
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                         :: "r"(smem(&sa[r][k])), "l"(A + r * 64 + k));
            int kb = 32 * half + c / 8, n = (c % 8) * 8;      // B: 32 rows x 8 chunks
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                         :: "r"(smem(&sb[kb][n])), "l"(B + kb * 64 + n));
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }
    float acc[2][4][4] = {};
    for (int half = 0; half < 2; half++) {
        if (mutant != 2) {
            if (half == 0) asm volatile("cp.async.wait_group 1;\n" ::);
            else asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        for (int k0 = 32 * half; k0 < 32 * half + 32; k0 += 16) {
            unsigned a[2][4], b[4][2];
            for (int i = 0; i < 2; i++) {
                int col = k0 + (lane / 16) * 8;
                if (mutant == 1) col = k0 + (1 - lane / 16) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                             : "r"(smem(&sa[wm + 16 * i + lane % 16][col])));
            }
            for (int j = 0; j < 4; j++)
                asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]) : "r"(smem(&sb[k0 + lane % 16][wn + 8 * j])));
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++)
                    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                                 : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]),
                                   "+f"(acc[i][j][3])
                                 : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]),
                                   "r"(b[j][0]), "r"(b[j][1]));
        }
    }
    int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int e = 0; e < 4; e++)
                C[(wm + 16 * i + g + 8 * (e / 2)) * 64 + wn + 8 * j + 2 * t + e % 2] = acc[i][j][e];
}
"""


def run_gemm(mutant: int):
    a = RNG.standard_normal((64, 64)).astype(np.float16)
    b = RNG.standard_normal((64, 64)).astype(np.float16)
    c = dev(np.full((64, 64), np.nan, np.float32))
    cudl.load(GEMM, "gemm64")(1, 128, (dev(a), dev(b), c, mutant))
    return host(c), a.astype(np.float64) @ b.astype(np.float64)


def test_gemm_ldmatrix_mma_cp_async():
    got, ref = run_gemm(0)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < 1e-4, err  # within fp32 rounding (the GPU adds in another order)


def test_gemm_wrong_fragment_layout_is_caught():
    got, ref = run_gemm(1)
    assert not np.allclose(got, ref, rtol=1e-3, atol=1e-3)


@emulator_only
def test_gemm_missing_wait_group_is_caught():
    got, ref = run_gemm(2)  # the copies land at wait_group: without it the tiles are still NaN poison
    assert np.isnan(got).all()


# ------------------------------------------------------------------------------ what stays on the GPU

@emulator_only
@pytest.mark.parametrize("ptx,name", [
    ("wgmma.fence.sync.aligned;", "wgmma"),
    ("setmaxnreg.inc.sync.aligned.u32 240;", "setmaxnreg.inc.sync.aligned.u32"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %2}], [%0];",
     "TMA"),
    ("mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f32 {%0}, {%0}, {%0}, {%0};", "m8n8k4"),
    ("mov.u32 %0, %%laneid;", "mov.u32"),
])
def test_unsupported_ptx_is_refused_by_name(ptx, name):
    src = f"""extern "C" __global__ void k(unsigned* p) {{
        unsigned v = 0;
        asm volatile("{ptx}" : "+r"(v) : "l"(p));
        p[threadIdx.x] = v;
    }}"""
    with pytest.raises(cudl.EmulatorUnsupported, match=name):
        cudl.load(src, "k")


@emulator_only
def test_asm_template_built_by_a_macro_is_refused():
    macro = ('#define LDSM(OP) asm volatile("ldmatrix.sync.aligned.m8n8." OP ".shared.b16 {%0}, [%1];" \\\n'
             '                                 : "=r"(r[0]) : "r"(addr))\n')
    src = macro + LDMATRIX.replace("void ldsm(", "void ldsm_macro(").replace(
        "    for (int j = 0; j < 4; j++) out", '    LDSM("x1");\n    for (int j = 0; j < 4; j++) out', 1)
    with pytest.raises(cudl.EmulatorUnsupported, match="string literals"):
        cudl.load(src, "ldsm_macro")


@emulator_only
def test_mma_by_part_of_a_warp_is_a_fault():
    a, bt = np.zeros((16, 16), np.uint16), np.zeros((8, 16), np.uint16)
    with pytest.raises(cudl.KernelFault, match="mma.sync executed by lanes"):
        cudl.load(MMA, "mma_k16")(1, 16, (a, bt, np.zeros((16, 8), np.float32), np.zeros((16, 8), np.float32), 0))


DIVERGENT = r"""
extern "C" __global__ void divergent(unsigned* y) {
    unsigned v = threadIdx.x, r;
    if (threadIdx.x < 16) asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(v));
    else asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(v + 1));
    y[threadIdx.x] = r;
}
"""


@emulator_only
def test_warp_collective_in_divergent_code_is_a_fault():
    with pytest.raises(cudl.KernelFault, match="different asm statements"):
        cudl.load(DIVERGENT, "divergent")(1, 32, (np.zeros(32, np.uint32),))


GUARDED = r"""
// A Hopper path behind an architecture guard: the emulator (sm_80) compiles the other branch.
extern "C" __global__ void guarded(float* y) {
#if __CUDA_ARCH__ >= 900
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    y[threadIdx.x] = 9.0f;
#else
    unsigned v = threadIdx.x, r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(v));
    y[threadIdx.x] = 8.0f;
#endif
}
"""


@emulator_only
def test_gpu_only_ptx_behind_an_arch_guard_is_fine():
    y = np.zeros(32, np.float32)
    cudl.load(GUARDED, "guarded")(1, 32, (y,))
    assert (y == 8.0).all()


@emulator_only
def test_asm_keeps_line_numbers():
    src = ('extern "C" __global__ void k(float* x) {\n'
           '    asm volatile("cp.async.commit_group;\\n"\n'
           '                 ::);\n'
           '    x[threadIdx.x + 32] = 1.0f;\n'
           '}\n')
    # Just past the end, into the emulator's guard page: a write far beyond it would land in whatever memory
    # the process has there (it did, 4 MB past the end, and a later garbage collection crashed pytest).
    with pytest.raises(cudl.KernelFault):
        cudl.load(src, "k")(1, 32, (np.zeros(32, np.float32),))
    with pytest.raises(cudl.CompileError, match=r":4"):
        cudl.load(src.replace("1.0f", "undefined_name"), "k")


@emulator_only
def test_asm_template_built_by_a_macro_in_an_inactive_branch_is_accepted():
    """A GPU-only wrapper whose instruction template is built by a macro (a register list written once), in a
    branch the emulator's compiler does not see, must not stop the rest of the file from running here."""
    src = ('#define REGS "%0"\n'
           '#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n'
           '__device__ void gpu_only(unsigned* r) { asm volatile("mov.u32 " REGS ", 7;" : "=r"(r[0])); }\n'
           '#endif\n'
           'extern "C" __global__ void k(unsigned* y) { y[threadIdx.x] = threadIdx.x; }\n')
    y = np.zeros(4, np.uint32)
    cudl.load(src, "k")(1, 4, (y,))
    assert list(y) == [0, 1, 2, 3]
