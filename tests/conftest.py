"""Test configuration: without a GPU, everything runs on the CPU emulator; GPU-only tests are not collected."""

import os

os.environ.setdefault("CUDL_BACKEND", "emulator")
os.environ.setdefault("MPLBACKEND", "Agg")

# tests/gpu needs a real GPU (`make gpu-test`); tests/mutants holds kernels, not tests.
collect_ignore = ["mutants"] + ([] if os.environ["CUDL_BACKEND"] == "gpu" else ["gpu"])

# Load NVRTC 13 (cuda-bindings) before tests/nvrtc12.py loads libnvrtc.so.12 through ctypes: cuda-pathfinder
# reuses an NVRTC that is already in the process, so the other order compiles CUDA 13 headers with NVRTC 12.
try:
    from cuda.bindings import nvrtc as _nvrtc

    _nvrtc.nvrtcVersion()
except ImportError:
    pass


import pytest  # noqa: E402


@pytest.fixture
def hopper():
    """Skips the test unless it runs on an sm_90 GPU (H100, H200): wgmma and TMA exist nowhere else, and the
    emulator does not run them."""
    import cudl

    if not cudl.on_gpu() or cudl.device_info()["cc"] != "9.0":
        pytest.skip("wgmma and TMA run on sm_90 GPUs only (not on the emulator)")


@pytest.fixture
def mutated_kernel(monkeypatch):
    """`mutated_kernel(slug, name, old, new, race=False, late_copy=False)`: the source of
    kernels_src/<slug>/<name>.cu with the one line `old` replaced by `new` (the line must still be there,
    once). A race mutant (a missing barrier) runs under the emulator's race check; a late-copy mutant (a
    missing cp.async wait_group) fails on the emulator, which lands cp.async data only at the wait. On a
    GPU both are skipped: a race, or a copy still in flight, shows there only by chance."""
    import cudl
    from cudl.compile import KERNELS_DIR

    def make(slug: str, name: str, old: str, new: str, race: bool = False, late_copy: bool = False) -> str:
        if late_copy and cudl.on_gpu():
            pytest.skip("a missing cp.async wait shows on a GPU only by chance (the copy may land in time)")
        if race:
            if cudl.on_gpu():
                pytest.skip("a missing barrier shows on a GPU only by chance")
            monkeypatch.setenv("CUDL_EMULATOR_RACECHECK", "1")
        src = (KERNELS_DIR / slug / f"{name}.cu").read_text()
        assert src.count(old) == 1, f"the line to edit is no longer once in {slug}/{name}.cu: {old!r}"
        return src.replace(old, new)

    return make
