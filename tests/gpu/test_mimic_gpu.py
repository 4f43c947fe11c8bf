"""Mimic mode on a real GPU (`make gpu-test`, or `CUDL_BACKEND=gpu pytest tests/gpu/test_mimic_gpu.py`): a T4's (or an
A100's) build runs on a newer GPU as PTX the driver compiles, held to that card's limits, reported as that card."""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl import mimicry

cupy = pytest.importorskip("cupy")

SCALE = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
# Which architecture the code was compiled for, as the kernel sees it (0 would mean host code).
ARCH = r"""extern "C" __global__ void arch(int* out) { out[0] = __CUDA_ARCH__; }"""
# Writes every float of its dynamic shared memory, then copies it out: the whole allocation is usable.
SHARED = r"""
extern "C" __global__ void through_shared(const float* __restrict__ x, float* __restrict__ y, int n) {
    extern __shared__ float s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = 2.0f * x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = s[n - 1 - i];
}
"""
CONST = r"""
__constant__ float w[4];
extern "C" __global__ void weigh(float* y) { y[threadIdx.x] = w[threadIdx.x]; }
"""


@pytest.fixture
def mimic(monkeypatch):
    """`mimic("t4")`: the mode for this test only."""
    monkeypatch.delenv("CUDL_MIMIC", raising=False)
    monkeypatch.setattr(mimicry, "_chosen", [])
    return cudl.mimic


def test_t4_build_is_compute_75_ptx_and_runs_correctly(mimic):
    mimic("t4")
    k = cudl.load(SCALE, "scale")
    assert k.module.arch == "compute_75" and k.mimics["name"] == "Tesla T4"
    n = 10_000
    x, y = cudl.randn(n), cudl.poisoned(n)
    k(((n + 255) // 256,), (256,), (x, y, 2.5, n))
    cudl.check(y, 2.5 * cudl.to_numpy(x).astype(np.float64))


def test_the_driver_runs_the_t4_code_path(mimic):
    """__CUDA_ARCH__ is 750 in T4 mode (the PTX's), the real GPU's own without the mode."""
    out = cudl.poisoned(1, np.int32)
    cudl.load(ARCH, "arch")(1, 1, (out,))
    assert int(cudl.to_numpy(out)[0]) == 10 * int(cupy.cuda.Device().compute_capability)  # "90" -> 900
    mimic("t4")
    cudl.load(ARCH, "arch")(1, 1, (out,))
    assert int(cudl.to_numpy(out)[0]) == 750
    mimic("a100")
    cudl.load(ARCH, "arch")(1, 1, (out,))
    assert int(cudl.to_numpy(out)[0]) == 800


def test_template_and_constant_memory_in_t4_mode(mimic):
    mimic("t4")
    src = "template <typename T> __global__ void fill(T* x, T v, int n) { int i = threadIdx.x; if (i < n) x[i] = v; }"
    x = cudl.poisoned(10, np.float64)
    cudl.load(src, "fill<double>")((1,), (32,), (x, 3.0, 10))
    assert (cudl.to_numpy(x) == 3.0).all()
    k = cudl.load(CONST, "weigh")
    k.set_global("w", np.arange(4, dtype=np.float32))
    y = cudl.poisoned(4)
    k(1, 4, (y,))
    assert (cudl.to_numpy(y) == np.arange(4)).all()


@pytest.mark.parametrize("card, kib, name", [("t4", 64, "Tesla T4"), ("a100", 163, "NVIDIA A100")])
def test_shared_memory_limit(mimic, card, kib, name):
    """A card's most dynamic shared memory per block (after opting in: 64 KiB on a T4, 163 KiB on an A100) works
    in its mode; 4 bytes more fail, though the real GPU (an H100/H200: 227 KiB) runs them once the mode is left."""
    mimic(card)
    k = cudl.load(SHARED, "through_shared")
    n = kib * 1024 // 4
    x, y = cudl.randn(n), cudl.poisoned(n)
    k(1, 256, (x, y, n), shared_mem=4 * n)
    cudl.check(y, 2.0 * cudl.to_numpy(x).astype(np.float64)[::-1])
    with pytest.raises(ValueError, match=f"{name} allows at most {kib * 1024}.*CUDL_MIMIC"):
        k(1, 256, (x, y, n), shared_mem=4 * n + 4)
    mimic(None)
    k = cudl.load(SHARED, "through_shared")
    y = cudl.poisoned(n)
    k(1, 256, (x, y, n), shared_mem=4 * n + 4)
    cudl.check(y, 2.0 * cudl.to_numpy(x).astype(np.float64)[::-1])


def test_device_info_reports_7_5_and_hopper_cells_skip(mimic):
    real = cudl.device_info()
    mimic("t4")
    info = cudl.device_info()
    assert info["cc"] == "7.5" and info["mimics"]["max_smem_per_block_optin"] == 65536
    assert info["gpu"] == real["gpu"] and info["real"]["cc"] == real["cc"] and info["sms"] == real["sms"]
    assert "mimicking a Tesla T4 on " + real["gpu"] in cudl.banner()
    with pytest.raises(cudl.CompileError, match="newer GPU than the Tesla T4"):
        cudl.load(ARCH, "arch", options=["-arch=sm_90a"])


def test_record_refuses_in_t4_mode(mimic, tmp_path):
    mimic("t4")
    path = tmp_path / "gpu.json"
    k, n = cudl.load(SCALE, "scale"), 1 << 20
    x, y = cudl.randn(n), cudl.poisoned(n)
    t = cudl.bench(lambda: k(((n + 255) // 256,), (256,), (x, y, 2.0, n)), name="scale")  # no ceiling needed
    with pytest.warns(UserWarning, match="not recorded"):
        assert cudl.record(t, chapter="01-first-kernel", shape=1, dtype="float32", path=path) is None
    assert not path.exists()
