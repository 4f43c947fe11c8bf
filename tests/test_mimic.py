"""Mimic mode (CUDL_MIMIC=t4|a100, cudl.mimic): a T4's or an A100's build, limits and compute capability on a newer
GPU. There is no GPU here: the GPU is faked (cudl.backend.on_gpu, a fake `cupy` module whose RawModule records what
it loads), while NVRTC compiles the PTX for real. tests/gpu/test_mimic_gpu.py runs the same on a real GPU."""

import sys
import types

import numpy as np
import pytest

import cudl
from cudl import backend, env, kernel, mimicry, nbtools
from cudl.bench import Timing
from cudl.compile import ptx_for

KIB = 1024
H200 = {"backend": "gpu", "gpu": "NVIDIA H200", "cc": "9.0", "sms": 132, "memory_gib": 140.0, "l2_mib": 60.0,
        "smem_per_sm_kib": 228.0, "regs_per_sm": 65536, "max_threads_per_sm": 2048, "driver": "13.0",
        "runtime": "13.0", "cupy": "14.0.0", "nvrtc": "13.0", "kernel_format": "cubin", "torch": None,
        "numpy": np.__version__}
DYNAMIC = 'extern "C" __global__ void fill(int n) { extern __shared__ float s[]; if (threadIdx.x < n) s[0] = 1; }'
TEMPLATE = "template <typename T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }"


@pytest.fixture(autouse=True)
def _no_mimic(monkeypatch):
    """Every test starts outside the mode: no CUDL_MIMIC, no earlier cudl.mimic() call."""
    monkeypatch.delenv("CUDL_MIMIC", raising=False)
    monkeypatch.delenv("CUDL_EMULATOR_DEVICE", raising=False)
    monkeypatch.setattr(mimicry, "_chosen", [])


class FakeRawModule:
    """cupy.RawModule: from source (the real GPU's cubin, CuPy's path) or from a file (mimic mode's PTX)."""

    def __init__(self, code=None, path=None, options=(), name_expressions=None):
        self.code, self.path, self.options = code, path, options
        self.ptx = open(path).read() if path else None
        self.functions = {}

    def compile(self):
        pass

    def get_function(self, name):
        return self.functions.setdefault(name, FakeFunction(name))


class FakeFunction:
    """A compiled kernel: records its launches; registers as `regs` says."""

    def __init__(self, name):
        self.name, self.launches, self.num_regs, self.shared_size_bytes, self.ptr = name, [], 32, 0, 0

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((grid, block, shared_mem))


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """A GPU that is an H200: on_gpu() is True, device_info's real facts are an H200's, cupy is a fake."""
    monkeypatch.setattr(backend, "on_gpu", lambda: True)
    monkeypatch.setattr(env, "_device_info", lambda: dict(H200))
    monkeypatch.setattr(env, "gpu_name", lambda: H200["gpu"])
    driver = types.SimpleNamespace(funcSetAttribute=lambda *a: None, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
    fake = types.SimpleNamespace(RawModule=FakeRawModule, cuda=types.SimpleNamespace(driver=driver))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.driver", driver)
    monkeypatch.setenv("CUDL_CACHE", str(tmp_path))
    kernel._gpu_module.cache_clear()
    yield
    kernel._gpu_module.cache_clear()  # it holds fake modules


# ------------------------------------------------------------------------------ choosing the card

def test_card_from_the_environment_and_from_cudl_mimic(monkeypatch):
    assert mimicry.card() is None
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    assert mimicry.card() == "T4"
    cudl.mimic("A100")  # the call wins over the variable
    assert mimicry.card() == "A100"
    cudl.mimic(None)
    assert mimicry.card() is None
    with pytest.raises(ValueError, match="cannot mimic 'v100'.*t4"):
        cudl.mimic("v100")


def test_mimic_mode_needs_a_gpu(monkeypatch):
    """On the emulator there is nothing to mimic on: the mode is off, the card names the emulated device."""
    monkeypatch.setattr(backend, "on_gpu", lambda: False)  # also where the suite runs on a GPU
    monkeypatch.setenv("CUDL_MIMIC", "a100")
    assert mimicry.active() is None
    from cudl.emulator import device

    assert device()["name"] == "NVIDIA A100"
    monkeypatch.setenv("CUDL_EMULATOR_DEVICE", "H100")  # the emulator's own variable wins
    assert device()["name"] == "NVIDIA H100"


# ------------------------------------------------------------------------------ the build: PTX for the card

def test_ptx_for_compute_75_targets_sm_75_and_lowers_template_names():
    ptx, lowered = ptx_for(TEMPLATE, "<src>", "compute_75", ("-arch=sm_90a",), ("scale<float>",))
    text = ptx.decode()
    assert ".target sm_75" in text and "sm_90" not in text  # the caller's -arch was replaced
    assert lowered["scale<float>"].startswith("_Z") and f".entry {lowered['scale<float>']}" in text
    assert not ptx.endswith(b"\0")


@pytest.mark.parametrize("card, arch", [("t4", "compute_75"), ("a100", "compute_80")])
def test_load_builds_ptx_for_the_mimicked_card(fake_gpu, monkeypatch, card, arch):
    monkeypatch.setenv("CUDL_MIMIC", card)
    k = cudl.load(TEMPLATE, "scale<float>")
    assert k.module.arch == arch and ".target sm_" + arch[-2:] in k.module.raw.ptx
    assert k._impl.name.startswith("_Z")  # found by its lowered name in the PTX
    assert k.mimics["cc"] == f"{arch[-2]}.{arch[-1]}"


def test_load_without_mimic_leaves_the_build_to_cupy(fake_gpu):
    k = cudl.load(DYNAMIC, "fill")
    assert isinstance(k.module, FakeRawModule) and k.module.code is not None and k.module.path is None
    assert not any(o.startswith("-arch") for o in k.module.options) and k.mimics is None


def test_an_arch_newer_than_the_card_is_refused(fake_gpu, monkeypatch):
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    with pytest.raises(cudl.CompileError, match="-arch=sm_90a builds for a newer GPU than the Tesla T4"):
        cudl.load(DYNAMIC, "fill", options=["-arch=sm_90a"])


# ------------------------------------------------------------------------------ the card's limits at launch

def test_t4_shared_memory_limit_at_launch(fake_gpu, monkeypatch):
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    k = cudl.load(DYNAMIC, "fill")
    k(1, 32, (1,), shared_mem=60 * KIB)
    assert k._impl.launches == [((1, 1, 1), (32, 1, 1), 60 * KIB)]
    with pytest.raises(ValueError, match=r"66560 bytes of shared memory.*Tesla T4 allows at most 65536.*CUDL_MIMIC"):
        k(1, 32, (1,), shared_mem=65 * KIB)
    assert len(k._impl.launches) == 1  # refused before the launch


def test_the_real_gpu_allows_what_the_t4_refuses(fake_gpu):
    k = cudl.load(DYNAMIC, "fill")
    k(1, 32, (1,), shared_mem=65 * KIB)
    assert k._impl.launches[-1][2] == 65 * KIB


def test_a100_shared_memory_limit_at_launch(fake_gpu, monkeypatch):
    cudl.mimic("a100")
    k = cudl.load(DYNAMIC, "fill")
    k(1, 32, (1,), shared_mem=163 * KIB)
    with pytest.raises(ValueError, match="NVIDIA A100 allows at most 166912"):
        k(1, 32, (1,), shared_mem=163 * KIB + 4)


def test_registers_per_block_limit_at_launch(fake_gpu, monkeypatch):
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    k = cudl.load(DYNAMIC, "fill")
    k._impl.num_regs = 64
    k(1, 1024, (1,))  # 64 x 1024 = 65536: exactly a T4's register file per block
    k._impl.num_regs = 65
    with pytest.raises(ValueError, match=r"65 registers x 1024 threads = 66560 .*Tesla T4 has 65536"):
        k(1, 1024, (1,))


# ------------------------------------------------------------------------------ what the chapters see

def test_device_info_reports_the_mimicked_card(fake_gpu, monkeypatch):
    assert cudl.device_info()["cc"] == "9.0"
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    info = cudl.device_info()
    assert info["cc"] == "7.5" and info["mimics"]["max_smem_per_block_optin"] == 64 * KIB  # chapter 12's tiles
    assert info["gpu"] == "NVIDIA H200" and info["real"] == {"gpu": "NVIDIA H200", "cc": "9.0"}
    # the Hopper tests of chapters 11-13 and of tests/conftest.py's `hopper` fixture
    assert not (cudl.on_gpu() and info["cc"] == "9.0") and not (info["cc"] or "").startswith("9")
    # what the measurements depend on stays the real GPU's (chapter 2 compares occupancy with the driver's API)
    assert (info["sms"], info["max_threads_per_sm"]) == (132, 2048)


def test_banner_says_what_is_mimicked_on_what(fake_gpu, monkeypatch):
    assert "mimicking" not in cudl.banner()
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    text = cudl.banner()
    assert "mimicking a Tesla T4 on NVIDIA H200: speed numbers are the real GPU's" in text
    assert "compute_75" in text and "unset CUDL_MIMIC" in text


# ------------------------------------------------------------------------------ numbers are not the card's

def test_record_refuses_in_mimic_mode(fake_gpu, monkeypatch, tmp_path):
    rec = sys.modules["cudl.record"]  # the module, which the function cudl.record hides
    monkeypatch.setattr(rec, "on_gpu", lambda: True)
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    path = tmp_path / "nvidia-h200.json"
    with pytest.warns(UserWarning, match="vector_add not recorded: this run mimics a Tesla T4"):
        got = cudl.record(Timing("vector_add", 1.0, 1.0, 1.0, 10), chapter="01-first-kernel", shape=1,
                          dtype="float32", path=path)
    assert got is None and not path.exists()


def test_ceilings_are_the_real_gpus_and_say_so(fake_gpu, monkeypatch, tmp_path):
    import json

    ceilings = sys.modules["cudl.ceilings"]  # the module, which the function cudl.ceilings hides
    monkeypatch.setattr(ceilings, "require_gpu", lambda what: None)
    cache = ceilings._cache_file("NVIDIA H200")
    cache.write_text(json.dumps({"gpu": "NVIDIA H200", "version": ceilings.VERSION, "copy_gbps": 4000.0}))
    assert "note" not in cudl.ceilings()
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    c = cudl.ceilings()
    assert c["copy_gbps"] == 4000.0 and c["note"] == "measured on NVIDIA H200, not on the Tesla T4 this run mimics"
    assert "note" not in json.loads(cache.read_text())  # the cache holds the measurement only


def test_notebooks_are_not_executed_in_mimic_mode(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDL_MIMIC", "t4")
    with pytest.raises(SystemExit, match="unset CUDL_MIMIC"):
        nbtools.execute([tmp_path / "missing.ipynb"])


def test_a_driver_too_old_for_the_ptx_is_explained(fake_gpu, monkeypatch):
    """NVRTC writes PTX of its own CUDA version; an older driver refuses it when the kernel is first fetched."""
    monkeypatch.setenv("CUDL_MIMIC", "t4")

    def refuse(self, name):
        raise RuntimeError("CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled with an unsupported "
                           "toolchain.")

    monkeypatch.setattr(FakeRawModule, "get_function", refuse)
    with pytest.raises(RuntimeError, match=r"cannot load the PTX that NVRTC \d+\.\d+ .*driver's CUDA version"):
        cudl.load(DYNAMIC, "fill")
