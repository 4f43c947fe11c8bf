"""GPU check of the shared header kernels_src/11-tensor-cores/tc_ptx.cuh: every kernel that includes it,
compiled on the GPU path (CuPy/NVRTC with -I kernels_src; -arch=sm_90a through cuda-bindings for wgmma and
TMA) and checked against float64 references, on each code path the header selects. Correctness only.

    python3 tests/gpu/tc_ptx_check.py      # from the repository root, on a GPU (sm_90 runs the wgmma kernels too)

It runs the existing kernel tests of chapters 11-13 that touch the header (fresh random inputs, NaN-poisoned
outputs, relative error by norm) and tests/emulator/test_includes.py (a tile through the header's wrappers on
its sm_80 and sm_75 paths; a missing header named; an edited header compiled anew, not taken from CuPy's cache).
The last line is pytest's count: all passed, or the failures above it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
K11, K12, K13 = (f"tests/kernels/test_{n}.py" for n in ("11_tensor_cores", "12_flash_attention", "13_quantization"))
# A subset of each parametrized test: every kernel and every path of the header once, so that it fits a minute.
WGMMA_CASES = [f"{name}-{bh}-{S}-{causal}-{warps}" for name, warps in (("flash_attn_4_wgmma", 8),
                                                                      ("flash_attn_5_overlap", 12))
               for bh, S in ((3, 1), (2, 300)) for causal in ("full", "causal")]
TESTS = [
    "tests/emulator/test_includes.py",
    *(f"{K11}::test_hgemm[{c}]" for c in ("hgemm_2_mma_ldmatrix-256x128x96", "hgemm_3_cp_async-128x256x160")),
    f"{K11}::test_hgemm_sm75_path",
    f"{K11}::test_hgemm_3_wide_tile_deeper_ring[256-2]",
    f"{K11}::test_wgmma_kernels_on_hopper",
    *(f"{K12}::test_flash_several_tiles[causal-{n}]" for n in ("flash_attn_2_mma", "flash_attn_3_32rows")),
    f"{K12}::test_flash_sm75_path",
    *(f"{K12}::test_flash_wgmma[{c}]" for c in WGMMA_CASES),
    f"{K13}::test_igemm_mma[256x128x192]",
    f"{K13}::test_igemm_mma_sm75_path",
    f"{K13}::test_igemm_mma_two_stages",
    f"{K13}::test_igemm_wgmma_on_hopper",
    f"{K13}::test_fp8_wgmma_on_hopper",
]

if __name__ == "__main__":
    os.environ.setdefault("CUDL_BACKEND", "gpu")
    os.chdir(ROOT)
    sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "--durations=5", *TESTS]))
