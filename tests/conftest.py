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
