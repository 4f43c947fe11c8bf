"""`#include "NN-slug/file.cuh"`: headers shared by kernels, found under kernels_src/ by every compiler.

The GPU path passes -I kernels_src to NVRTC; the emulator checks and translates each included header (inline PTX
-> emulator calls) into a cached copy of the folder. Like test_ptx.py, the tests that do not say `emulator_only`
run on a GPU too (CUDL_BACKEND=gpu, sm_80 or newer).
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl import compile as cc

emulator_only = pytest.mark.skipif("cudl.on_gpu()", reason="checks the CPU emulator's own guarantees")

# One 16 x 8 x 16 tile through the wrappers of tc_ptx.cuh: A (16 x 16) by cp.async into shared memory and
# ldmatrix.x4, B^T (8 x 16) straight from global memory in the mma B layout, D = A B in fp32.
MMA_TILE = r"""
#include "11-tensor-cores/tc_ptx.cuh"

extern "C" __global__ void tile_mma(const __half* __restrict__ A, const __half* __restrict__ Bt,
                                    float* __restrict__ D) {
    __shared__ __align__(16) __half As[16 * 16];
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    copy16(&As[lane * 8], &A[lane * 8]);  // 32 lanes x 16 bytes = the whole tile
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();
    unsigned a[4], b[2];
    ldmatrix_x4(a, &As[(lane % 16) * 16 + (lane / 16) * 8]);
    b[0] = *reinterpret_cast<const unsigned*>(&Bt[g * 16 + 2 * t]);
    b[1] = *reinterpret_cast<const unsigned*>(&Bt[g * 16 + 2 * t + 8]);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    mma_16x8x16(d, a, b);
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}
"""


@pytest.mark.parametrize("options", [(), ("-DTC_SM75",)], ids=["sm80-path", "sm75-path"])
def test_kernel_with_include_runs(options):
    rng = np.random.default_rng()
    a = rng.standard_normal((16, 16)).astype(np.float16)
    bt = rng.standard_normal((8, 16)).astype(np.float16)
    d = cudl.poisoned((16, 8), np.float32)
    k = cudl.load(MMA_TILE, "tile_mma", options=options)
    k((1,), (32,), (cudl.xp.asarray(a), cudl.xp.asarray(bt), d))
    ref = a.astype(np.float64) @ bt.astype(np.float64).T
    cudl.check(d, ref, rtol=1e-5)


def test_kernel_file_with_include_loads():
    k = cudl.load("12-flash-attention/flash_attn_2_mma.cu", "flash_attn_2_mma")
    assert k.name == "flash_attn_2_mma"


def test_missing_include_names_the_file():
    src = '#include "11-tensor-cores/no_such_header.cuh"\nextern "C" __global__ void k(float* x) { x[0] = 1.f; }\n'
    with pytest.raises(cudl.CompileError, match=r"<kernel source>:1: #include \"11-tensor-cores/no_such_header"
                                                r"\.cuh\": no file"):
        cudl.load(src, "k")


def test_missing_include_inside_a_header_names_the_header(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "KERNELS_DIR", tmp_path)
    (tmp_path / "98-inc").mkdir()
    (tmp_path / "98-inc" / "outer.cuh").write_text('// outer\n#include "gone.cuh"\n')
    src = '#include "98-inc/outer.cuh"\nextern "C" __global__ void k(float* x) { x[0] = 1.f; }\n'
    with pytest.raises(cudl.CompileError, match=r"98-inc/outer\.cuh:2: #include \"gone\.cuh\""):
        cudl.load(src, "k")


def _value_of(src: str) -> float:
    out = cudl.poisoned((1,), np.float32)
    cudl.load(src, "k")((1,), (1,), (out,))
    return float(cudl.to_numpy(out)[0])


def test_nested_include_and_an_edited_header_builds_anew(tmp_path, monkeypatch):
    """A header includes its neighbour by a path relative to its own folder; editing the neighbour changes
    what the same kernel source computes (no stale cache, in memory or on disk)."""
    monkeypatch.setattr(cc, "KERNELS_DIR", tmp_path)
    (tmp_path / "98-inc").mkdir()
    (tmp_path / "98-inc" / "outer.cuh").write_text('#pragma once\n#include "inner.cuh"\n')
    inner = tmp_path / "98-inc" / "inner.cuh"
    src = '#include "98-inc/outer.cuh"\nextern "C" __global__ void k(float* x) { x[0] = value(); }\n'
    inner.write_text("__device__ float value() { return 1.5f; }\n")
    assert _value_of(src) == 1.5
    inner.write_text("__device__ float value() { return 2.5f; }\n")
    assert _value_of(src) == 2.5


@emulator_only
def test_error_inside_a_header_names_the_header(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "KERNELS_DIR", tmp_path)
    monkeypatch.setenv("CUDL_EMULATOR_NVRTC", "0")  # g++'s message, not NVRTC's
    (tmp_path / "98-inc").mkdir()
    (tmp_path / "98-inc" / "bad.cuh").write_text("// a header\n__device__ float broken() { return undeclared; }\n")
    src = '#include "98-inc/bad.cuh"\nextern "C" __global__ void k(float* x) { x[0] = broken(); }\n'
    with pytest.raises(cudl.CompileError, match=r"98-inc/bad\.cuh:2: .*undeclared"):
        cudl.load(src, "k")


@emulator_only
def test_unsupported_ptx_in_a_header_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "KERNELS_DIR", tmp_path)
    (tmp_path / "98-inc").mkdir()
    (tmp_path / "98-inc" / "fence.cuh").write_text(
        '__device__ void fence() {\n    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");\n}\n')
    src = '#include "98-inc/fence.cuh"\nextern "C" __global__ void k(float* x) { fence(); x[0] = 1.f; }\n'
    with pytest.raises(cudl.EmulatorUnsupported, match=r"wgmma \(98-inc/fence\.cuh:2\)"):
        cudl.load(src, "k")


# A quoted #include of a CUDA toolkit header: not under kernels_src/, so compilers find it on their include path
# (NVRTC: -I of the toolkit; the emulator: its own cuda_fp16.h). It used to fail as a missing kernels_src/ file.
QUOTED_TOOLKIT = r"""
#include "cuda_fp16.h"
#include "cuda_bf16.h"
extern "C" __global__ void halve(const __half* x, __half* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(0.5f * __half2float(x[i]));
}
"""


def test_quoted_toolkit_header_is_found():
    x = np.arange(100, dtype=np.float16)
    y = cudl.poisoned((100,), np.float16)
    cudl.load(QUOTED_TOOLKIT, "halve")((1,), (128,), (cudl.xp.asarray(x), y, 100))
    np.testing.assert_array_equal(cudl.to_numpy(y), x / 2)


def test_quoted_toolkit_header_inside_a_shared_header(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "KERNELS_DIR", tmp_path)
    (tmp_path / "98-inc").mkdir()
    (tmp_path / "98-inc" / "half_ops.cuh").write_text(
        '#pragma once\n#include "cuda_fp16.h"\n__device__ float twice(__half h) { return 2.0f * __half2float(h); }\n')
    src = ('#include "98-inc/half_ops.cuh"\n'
           'extern "C" __global__ void k(float* x) { x[0] = twice(__float2half(1.25f)); }\n')
    assert [name for name, _ in cc.local_includes(src, "<kernel source>")] == ["98-inc/half_ops.cuh"]
    assert _value_of(src) == 2.5


def test_toolkit_headers_are_not_local_files_but_typos_still_fail():
    assert cc.local_includes(QUOTED_TOOLKIT, "<kernel source>") == []
    assert cc.includes_digest(QUOTED_TOOLKIT, "<kernel source>") == ""
    with pytest.raises(cudl.CompileError, match=r'<kernel source>:2: #include "cuda_fp16\.hh": no file'):
        cc.local_includes('\n#include "cuda_fp16.hh"\n', "<kernel source>")


def test_nvrtc_compiles_the_quoted_toolkit_header():
    """The NVRTC of the GPU path (cuda-bindings, -I of the toolkit's headers) and NVRTC 12 (Colab's CuPy, the
    compile tests) both take it: the emulator does not accept what a GPU would refuse."""
    import sys
    from pathlib import Path

    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        pytest.skip("cuda-bindings (NVRTC) is not installed")
    if not cc.cuda_include_dirs():
        pytest.skip("no CUDA toolkit headers for NVRTC")
    assert "halve" in cc.nvrtc_resources(QUOTED_TOOLKIT, "<kernel source>", "sm_80")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import nvrtc12

    if nvrtc12.library() is None:
        pytest.skip("nvidia-cuda-nvrtc-cu12 is not installed")
    nvrtc12.compile_cubin(QUOTED_TOOLKIT, "<kernel source>", "sm_75")
