"""Graders of chapter 5 (matrix multiplication): a shared-memory tiled matmul for any size, a matrix-vector product,
and the challenge: C = A^T B with 2D register tiles.

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
                        dict(M=127, N=200, K=513), dict(M=100, N=64, K=300)],  # N=200: 5x less than the
        # GPU case, whose emulator launch took 11 s of the 15 s margin that test_graders asks of a solution
        hint=["sizes are not multiples of 16: load zeros for the parts of a tile outside A or B, so that every "
              "thread still loads and reaches both barriers; only the final store is skipped outside C",
              "per step k0: each thread loads one element of the A tile and one of the B tile, __syncthreads(), "
              "adds the 16 products of its row of As and column of Bs, __syncthreads() before the next step",
              "for each k0 = 0, TILE, 2 TILE, ... < K: As[ty][tx] = A[row][k0 + tx] if row < M and k0 + tx < K "
              "else 0, Bs[ty][tx] = B[k0 + ty][col] if k0 + ty < K and col < N else 0; __syncthreads(); add "
              "As[ty][k] * Bs[k][tx] for k < TILE; __syncthreads(); every thread loads and syncs, only the final "
              "store of C[row][col] checks row < M && col < N"])
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
        hint=["one warp per row of A: its 32 lanes read the row along consecutive columns (coalesced) and add "
              "their partial dot products with shuffles",
              "row = blockIdx.x * 8 + threadIdx.x / 32 (the whole warp leaves if row >= M); lane = threadIdx.x % 32 "
              "sums A[row][c] * x[c] for c = lane, lane + 32, ... < K",
              "then the 32 partial sums are added with __shfl_down_sync (offsets 16, 8, 4, 2, 1) and lane 0 "
              "writes y[row]"])
def matvec(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    M, K = case["M"], case["K"]
    a, x = _randn(M, K), _randn(K)
    a_dev, x_dev = guarded(a, guard=GUARD)[0], guarded(x, guard=GUARD)[0]
    out, buf = guarded_output(M, guard=GUARD)
    load("matvec")(((M + WARPS - 1) // WARPS,), (BLOCK,), (M, K, a_dev, x_dev, out))
    cudl.sync()
    check_guard(buf, M, "y")
    return [(out, a.astype(np.float64) @ x.astype(np.float64))]


# ------------------------------------------------------------------------------ challenge: C = A^T B

AT_TILE, AT_THREADS = 64, 16  # matmul_at_b: 16 x 16 threads compute a 64 x 64 tile of C, 4 x 4 each


@grader("matmul_at_b", kernels=["matmul_at_b"], rtol=RTOL,
        cases=[dict(M=1, N=1, K=1), dict(M=17, N=33, K=5), dict(M=64, N=64, K=16), dict(M=127, N=1000, K=513),
               dict(M=1000, N=129, K=77), dict(M=2048, N=2048, K=2048)],
        emulator_cases=[dict(M=1, N=1, K=1), dict(M=17, N=33, K=5), dict(M=64, N=64, K=16),
                        dict(M=127, N=200, K=513), dict(M=300, N=129, K=77), dict(M=65, N=130, K=200)],
        speed=dict(case=dict(M=2048, N=2048, K=2048), factor=2.0),  # H100: naive 3.4x
        hint=["A is stored K x M, so a tile of A^T is a tile of A read along its rows: copy it to shared memory "
              "as it lies (As[k][m], coalesced, no transpose needed) next to the tile Bs[k][n] of B; then each "
              "thread accumulates a 4 x 4 block of C in registers",
              "per tile k0 = 0, 16, ...: the 256 threads fill As[16][64] and Bs[16][64] (4 elements each, zeros "
              "outside the matrices), __syncthreads(), then for each k load a[i] = As[k][threadIdx.y * 4 + i] "
              "and b[j] = Bs[k][threadIdx.x + 16 * j] into registers and add a[i] * b[j] to acc[i][j], "
              "__syncthreads() before the next tile",
              "element e = tid, tid + 256, ... of a tile: k = e / 64, m = e % 64, As[k][m] = A[(k0 + k) * M + "
              "m0 + m] if k0 + k < K && m0 + m < M else 0 (the same for B with N); store acc[i][j] to "
              "C[(m0 + threadIdx.y * 4 + i) * N + n0 + threadIdx.x + 16 * j] inside the matrix only"])
def matmul_at_b(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """C = A^T B for A of shape K x M and B of shape K x N (row-major)."""
    M, N, K = case["M"], case["N"], case["K"]
    a, b = _randn(K, M), _randn(K, N)
    a_dev, b_dev = guarded(a, guard=GUARD)[0], guarded(b, guard=GUARD)[0]
    out, buf = guarded_output(M * N, guard=GUARD)
    grid = ((N + AT_TILE - 1) // AT_TILE, (M + AT_TILE - 1) // AT_TILE)
    load("matmul_at_b")(grid, (AT_THREADS, AT_THREADS), (M, N, K, a_dev, b_dev, out))
    cudl.sync()
    check_guard(buf, M * N, "C")
    return [(out, (a.astype(np.float64).T @ b.astype(np.float64)).ravel())]
