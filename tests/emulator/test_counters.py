"""cudl.counters: global-memory sectors per warp request, shared-memory bank conflicts and per-thread work,
counted on the CPU emulator, against values computed by hand.

The counts come from the emulator on every backend; on a GPU the module compiles the kernel for the
emulator too, so these tests need only g++ (skipped where the emulator cannot run).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import cudl

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")

SRC = r"""
extern "C" __global__ void strided_copy(const float* x, float* y, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[(long long)i * stride % n];
}
extern "C" __global__ void copy4(const float4* x, float4* y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) y[i] = x[i];
}
extern "C" __global__ void copy_double(const double* x, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
extern "C" __global__ void shared_stride(float* out, int stride) {
    __shared__ float s[32 * 33];
    for (int k = threadIdx.x; k < 32 * 33; k += blockDim.x) s[k] = (float)k;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x * stride) % (32 * 33)];
}
extern "C" __global__ void one_thread_works(const float* x, float* out, int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float acc = 0.0f;
        for (int i = 0; i < n; i++) acc += x[i];
        out[0] = acc;
    }
}
"""


def _k(name: str):
    return cudl.load(SRC, name)


@pytest.fixture(scope="module")
def host():
    n = 1 << 12
    return n, np.ones(n, np.float32), np.zeros(n, np.float32)


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
@pytest.mark.parametrize("stride, sectors", [(1, 4.0), (2, 8.0), (8, 32.0), (32, 32.0)])
def test_global_sectors_per_request(host, stride, sectors):
    n, x, y = host
    c = cudl.counters(_k("strided_copy"), n // 256, 256, (x, y, n, stride))
    assert c.global_sectors_per_request("load") == sectors
    assert c.global_sectors_per_request("store") == 4.0  # y[i]: 32 lanes x 4 bytes = 4 sectors
    assert c.requests("global", "load") == n // 32
    assert c.global_efficiency("store") == 1.0
    assert c.global_efficiency("load") == pytest.approx(4.0 / sectors)


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
def test_wide_loads():
    n = 1 << 10
    x = np.ones(n, np.float32).view(np.float32)
    c = cudl.counters(_k("copy4"), 1, 256, (x, np.zeros_like(x), n // 4))
    assert c.global_sectors_per_request("load") == 16.0  # 32 lanes x 16 bytes = 512 bytes
    assert c.global_efficiency() == 1.0
    d = np.ones(1024, np.float64)
    c = cudl.counters(_k("copy_double"), 4, 256, (d, np.zeros_like(d), d.size))
    assert c.global_sectors_per_request("load") == 8.0


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
@pytest.mark.parametrize("stride, ways", [(1, 1.0), (2, 2.0), (4, 4.0), (32, 32.0), (33, 1.0)])
def test_shared_bank_conflicts(stride, ways):
    c = cudl.counters(_k("shared_stride"), 2, 64, (np.zeros(128, np.float32), stride))
    assert c.shared_ways("load") == ways
    assert c.shared_conflicts_per_request("load") == ways - 1
    assert c.shared_ways("store") == 1.0  # s[k], k = threadIdx.x + j * blockDim.x: consecutive words


SHARED_8 = r"""
// Lane i reads 8 bytes (a float2, or a double) at byte offset i * stride of a shared array.
extern "C" __global__ void shared_float2(float* out, int stride) {
    __shared__ __align__(16) float s[32 * 64];
    for (int k = threadIdx.x; k < 32 * 64; k += blockDim.x) s[k] = 1.0f;
    __syncthreads();
    float2 v = *reinterpret_cast<const float2*>(reinterpret_cast<const char*>(s) + threadIdx.x * stride);
    out[threadIdx.x] = v.x + v.y;
}
extern "C" __global__ void shared_double(double* out, int stride) {
    __shared__ double d[32 * 32];
    for (int k = threadIdx.x; k < 32 * 32; k += blockDim.x) d[k] = 1.0;
    __syncthreads();
    out[threadIdx.x] = *reinterpret_cast<const double*>(reinterpret_cast<const char*>(d) + threadIdx.x * stride);
}
"""


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
@pytest.mark.parametrize("name, dtype", [("shared_float2", np.float32), ("shared_double", np.float64)])
@pytest.mark.parametrize("stride, wavefronts, ways", [(8, 2.0, 1.0), (16, 4.0, 2.0), (256, 32.0, 16.0)])
def test_shared_8_byte_loads(name, dtype, stride, wavefronts, ways):
    """8-byte loads by a warp: 256 bytes, two wavefronts of 32 banks at best. Consecutive lanes, consecutive 8
    bytes: conflict-free (1-way, not 2-way); stride 16 bytes: lanes i and i + 8 share banks (2-way); stride 256:
    every lane on the same two banks (16-way)."""
    c = cudl.counters(cudl.load(SHARED_8, name), 1, 32, (np.zeros(32, dtype), stride))
    assert c.shared_wavefronts_per_request("load") == wavefronts
    assert c.shared_ways("load") == ways
    assert c.shared_conflicts_per_request("load") == wavefronts - 2.0


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
def test_work_balance_and_last(host):
    n, x, _ = host
    out = np.zeros(1, np.float32)
    c = cudl.counters(_k("one_thread_works"), 4, 128, (x, out, n))
    lo, med, hi = c.thread_accesses
    assert (lo, med, hi) == (0, 0.0, n + 1)
    assert out[0] == n  # the arguments are written as by a launch
    assert cudl.counters.last() is c
    md, html = c._repr_markdown_(), c._repr_html_()
    assert "| <kernel source>:" in md and "accesses per thread" in md
    assert html.startswith("<table>") and "counted on the CPU emulator" in html
    assert "min 0, median 0, max 4097" in str(c)


def test_book_kernel_counts_on_every_backend():
    """A kernel from kernels_src/ is counted on any backend (on a GPU the emulator builds it too)."""
    k = cudl.load("01-first-kernel/vector_add.cu", "vector_add")
    n = 1 << 10
    xp = cudl.xp
    a, b = xp.ones(n, dtype=xp.float32), xp.ones(n, dtype=xp.float32)
    out = xp.zeros(n, dtype=xp.float32)
    c = cudl.counters(k, n // 256, 256, (a, b, out, n))
    assert c.global_sectors_per_request("load") == 4.0
    assert c.global_sectors_per_request("store") == 4.0
    assert ("GPU" in c.note) == cudl.on_gpu()


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
def test_compare_table(host):
    n, x, y = host
    k = _k("strided_copy")
    t = cudl.counters.compare({f"stride {s}": cudl.counters(k, n // 256, 256, (x, y, n, s)) for s in (1, 32)})
    md = t._repr_markdown_()
    assert "| stride 1 | 4.0 | 4.0 |" in md and "| stride 32 | 32.0 | 4.0 |" in md
    assert "shared" not in md  # columns without data are left out


LDMATRIX_SRC = r"""
#include <cuda_fp16.h>
// Each lane supplies row lane % 8 of matrix lane / 8 at byte offset lane * stride of a shared tile.
extern "C" __global__ void ldmatrix_rows(unsigned* out, int stride) {
    __shared__ __align__(16) __half s[32 * 256];
    for (int k = threadIdx.x; k < 32 * 256; k += blockDim.x) s[k] = __float2half(1.0f);
    __syncthreads();
    unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s)) + threadIdx.x * stride;
    unsigned r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
    out[threadIdx.x] = r0 + r1 + r2 + r3;
}
// Lane i reads 16 bytes at byte offset i * stride.
extern "C" __global__ void shared_vec4(float* out, int stride) {
    __shared__ __align__(16) float s[32 * 256];
    for (int k = threadIdx.x; k < 32 * 256; k += blockDim.x) s[k] = 1.0f;
    __syncthreads();
    float4 v = *reinterpret_cast<const float4*>(reinterpret_cast<const char*>(s) + threadIdx.x * stride);
    out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
"""


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
@pytest.mark.parametrize("stride, ways", [(16, 1.0), (32, 2.0), (64, 4.0), (128, 8.0), (256, 8.0)])
def test_ldmatrix_rows_are_16_byte_reads(stride, ways):
    """ldmatrix counts one 16-byte read per row (per lane that supplies an address), 8 rows per phase:
    4 wavefronts for an .x4 whose rows fall on distinct banks, and 8 rows on the same 4 banks are an
    8-way conflict, as the hardware reports (not the 2-byte element reads that hand out the values)."""
    k = cudl.load(LDMATRIX_SRC, "ldmatrix_rows")
    c = cudl.counters(k, 1, 32, (np.zeros(32, np.uint32), stride))
    assert c.requests("shared", "load") == 1
    assert c.shared_wavefronts_per_request("load") == 4 * ways
    assert c.shared_ways("load") == ways


@pytest.mark.skipif(cudl.on_gpu(), reason="raw source kernels are counted on the emulator backend")
@pytest.mark.parametrize("stride, wavefronts", [(16, 4.0), (128, 32.0), (144, 4.0)])
def test_shared_16_byte_loads_by_quarter_warp(stride, wavefronts):
    """16-byte shared loads are served 8 lanes per phase: stride 16 is 4 conflict-free phases; stride 128
    puts the 8 lanes of a phase on the same 4 banks (8-way); stride 144 (128 + 16) is conflict-free."""
    k = cudl.load(LDMATRIX_SRC, "shared_vec4")
    c = cudl.counters(k, 1, 32, (np.zeros(32, np.float32), stride))
    assert c.shared_wavefronts_per_request("load") == wavefronts
