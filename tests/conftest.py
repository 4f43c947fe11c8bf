"""Test configuration: without a GPU, everything runs on the CPU emulator; GPU-only tests are not collected."""

import os

os.environ.setdefault("CUDL_BACKEND", "emulator")
os.environ.setdefault("MPLBACKEND", "Agg")

# tests/gpu needs a real GPU (`make gpu-test`); tests/mutants holds kernels, not tests.
collect_ignore = ["mutants"] + ([] if os.environ["CUDL_BACKEND"] == "gpu" else ["gpu"])
