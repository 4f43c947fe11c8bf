"""Graders of chapter 5 (matrix multiplication): a shared-memory tiled matmul for any size, a matrix-vector product.

Inputs are followed in memory by NaN (a kernel that reads past the end gets NaN into its result) and
outputs by a poisoned guard zone (a kernel that writes past the end is caught).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.guard import check_guard, guarded, guarded_output

TILE = 16  # matmul_tiled: blocks of TILE x TILE threads, one element of C each
BLOCK = 256  # matvec: threads per block, one warp per row
WARPS = BLOCK // 32
GUARD = 64  # poisoned elements after each input and output
# fp32 dot products of up to 1024 terms: rounding error grows like sqrt(K) ulp; wrong kernels are off by O(1).
RTOL = 4e-5


def _randn(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------------------ matmul_tiled

@grader("matmul_tiled", kernels=["matmul_tiled"], rtol=RTOL,
        cases=[dict(M=1, N=1, K=1), dict(M=17, N=33, K=5), dict(M=16, N=16, K=16), dict(M=127, N=1000, K=513),
               dict(M=1024, N=1024, K=1024)],
        emulator_cases=[dict(M=1, N=1, K=1), dict(M=17, N=33, K=5), dict(M=16, N=16, K=16),
                        dict(M=127, N=1000, K=513), dict(M=100, N=64, K=300)],
        hint="for each k0 = 0, TILE, 2 TILE, ... < K: As[ty][tx] = A[row][k0 + tx] if row < M and k0 + tx < K "
             "else 0, Bs[ty][tx] = B[k0 + ty][col] if k0 + ty < K and col < N else 0; __syncthreads(); add "
             "As[ty][k] * Bs[k][tx] for k < TILE; __syncthreads(); every thread loads and syncs, only the final "
             "store of C[row][col] checks row < M && col < N")
def matmul_tiled(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    M, N, K = case["M"], case["N"], case["K"]
    a, b = _randn(M, K), _randn(K, N)
    a_dev, b_dev = guarded(a, guard=GUARD)[0], guarded(b, guard=GUARD)[0]
    out, buf = guarded_output(M * N, guard=GUARD)
    grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
    load("matmul_tiled")(grid, (TILE, TILE), (M, N, K, a_dev, b_dev, out))
    cudl.sync()
    check_guard(buf, M * N, "C")
    return [(out, (a.astype(np.float64) @ b.astype(np.float64)).ravel())]


# ------------------------------------------------------------------------------ matvec

@grader("matvec", kernels=["matvec"], rtol=RTOL,
        cases=[dict(M=1, K=1), dict(M=5, K=31), dict(M=8, K=32), dict(M=13, K=100), dict(M=1000, K=1000),
               dict(M=4099, K=4096)],
        emulator_cases=[dict(M=1, K=1), dict(M=5, K=31), dict(M=8, K=32), dict(M=13, K=100), dict(M=50, K=333),
                        dict(M=19, K=2048)],
        hint="one warp per row: row = blockIdx.x * 8 + threadIdx.x / 32, leave if row >= M; lane sums "
             "A[row][c] * x[c] for c = lane, lane + 32, ... < K (coalesced), then adds the 32 partial sums with "
             "__shfl_down_sync (offsets 16, 8, 4, 2, 1) and lane 0 writes y[row]")
def matvec(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    M, K = case["M"], case["K"]
    a, x = _randn(M, K), _randn(K)
    a_dev, x_dev = guarded(a, guard=GUARD)[0], guarded(x, guard=GUARD)[0]
    out, buf = guarded_output(M, guard=GUARD)
    load("matvec")(((M + WARPS - 1) // WARPS,), (BLOCK,), (M, K, a_dev, x_dev, out))
    cudl.sync()
    check_guard(buf, M, "y")
    return [(out, a.astype(np.float64) @ x.astype(np.float64))]
