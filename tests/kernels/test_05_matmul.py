"""Chapter 5 kernels against float64 NumPy references: fresh random inputs, poisoned outputs, odd sizes.

Runs on the CPU emulator by default (tests/conftest.py) and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl

GUARD = 64  # NaN elements after each input and output


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# kernel: (threads per block, rows x columns of C per block), as in each file's header.
LAUNCH = {
    "matmul_1_naive": ((32, 32), (32, 32)),
    "matmul_2_coalesced": ((32, 32), (32, 32)),
    "matmul_3_smem_tiles": ((32, 32), (32, 32)),
    "matmul_4_1d_blocktile": ((512,), (64, 64)),
    "matmul_5_2d_blocktile": ((256,), (128, 128)),
    "matmul_6_vectorized": ((256,), (128, 128)),
    "matmul_7_warptile": ((256,), (128, 128)),
    "matmul_8_double_buffered": ((256,), (128, 256)),
}
# Not multiples of any tile or of 4 (the float4 fallback), one element, thin K, and one aligned size.
SIZES = [(127, 1000, 513), (1000, 127, 513), (513, 127, 1000), (1, 1, 1), (33, 65, 4), (130, 257, 3),
         (128, 256, 64)]
# Tile shapes of kernels 7 and 8 (BM, BN, BK, WM, WN, WNITER, TM, TN): every shape of the chapter's autotune
# space, each file's default in the other file included (the emulator checks only the default of each), and two more.
TUNE = [(128, 128, 16, 64, 64, 4, 8, 4), (128, 128, 16, 64, 32, 2, 8, 4), (128, 128, 8, 64, 64, 4, 8, 4),
        (256, 128, 8, 128, 32, 2, 8, 4), (128, 256, 16, 64, 64, 4, 8, 4),
        (128, 128, 16, 32, 64, 4, 4, 4), (128, 128, 16, 64, 64, 2, 8, 8)]


def guarded(data: np.ndarray):
    """`data` on the backend followed by GUARD NaNs: a kernel that reads past the end gets NaN."""
    buf = cudl.poisoned(data.size + GUARD)
    buf[: data.size] = cudl.xp.asarray(data.ravel())
    return buf[: data.size], buf


def run_and_check(kernel, grid, block, M: int, N: int, K: int) -> None:
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    A, _ = guarded(a)
    B, _ = guarded(b)
    C, c_buf = guarded(np.full(M * N, np.nan, np.float32))
    kernel(grid, block, (M, N, K, A, B, C))
    cudl.sync()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    c = cudl.compare(C, ref.ravel())
    assert c.ok, f"{kernel.name} {M}x{N}x{K}: {c}"
    assert np.isnan(cudl.to_numpy(c_buf)[M * N:]).all(), f"{kernel.name} wrote past the end of C"


@pytest.mark.parametrize("M,N,K", SIZES, ids=lambda v: str(v))
@pytest.mark.parametrize("name", list(LAUNCH))
def test_matmul(name, M, N, K):
    block, (bm, bn) = LAUNCH[name]
    k = cudl.load(f"05-matmul/{name}.cu", name)
    grid = (cdiv(M, bm), cdiv(N, bn)) if name == "matmul_1_naive" else (cdiv(N, bn), cdiv(M, bm))
    run_and_check(k, grid, block, M, N, K)


@pytest.mark.parametrize("cfg", TUNE, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("name", ["matmul_7_warptile", "matmul_8_double_buffered"])
def test_warptile_shapes(name, cfg):
    BM, BN, BK, WM, WN, WNITER, TM, TN = cfg
    threads = 32 * (BM // WM) * (BN // WN)
    consts = dict(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, WNITER=WNITER, TM=TM, TN=TN, NUM_THREADS=threads)
    k = cudl.load(f"05-matmul/{name}.cu", name, options=[f"-D{key}={v}" for key, v in consts.items()])
    for M, N, K in [(127, 300, 67), (1, 1, 1), (BM, BN, 2 * BK)]:
        run_and_check(k, (cdiv(N, BN), cdiv(M, BM)), (threads,), M, N, K)
