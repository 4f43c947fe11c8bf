"""Graders of chapter 11 (Tensor Cores): a WMMA GEMM with one warp per 16 x 16 tile, the fragments of one
mma.sync m16n8k16 loaded with ldmatrix, and the challenge: C = A B^T on Tensor Cores, graded for speed.

fp16 inputs (fresh random values), fp32 outputs poisoned with NaN and followed by a guard zone; inputs are
followed by NaN, so a kernel that reads past the end gets NaN into its result. Sizes are multiples of the
tiles the exercises state (the kernels need no bounds checks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.guard import check_guard, guarded, guarded_output

GUARD = 64
# fp32 accumulation of exact fp16 products: relative error ~1e-6; a wrong fragment is off by O(1)
RTOL = 1e-3


def _half(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape).astype(np.float16)


def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


# ------------------------------------------------------------------------------ wmma_gemm

@grader("wmma_gemm", kernels=["wmma_gemm"], rtol=RTOL,
        cases=[dict(M=16, N=16, K=16), dict(M=32, N=48, K=64), dict(M=48, N=16, K=160),
               dict(M=128, N=256, K=512), dict(M=1024, N=512, K=2048)],
        emulator_cases=[dict(M=16, N=16, K=16), dict(M=32, N=48, K=64), dict(M=48, N=16, K=160),
                        dict(M=64, N=32, K=96), dict(M=16, N=64, K=256)],
        hint=["one warp owns one 16 x 16 tile of C: an accumulator fragment set to zero, then K / 16 "
              "steps of load A fragment, load B fragment, mma_sync; the leading dimension of each "
              "load is the row length of the matrix in memory",
              "row0 = blockIdx.y * 16, col0 = blockIdx.x * 16; for k = 0, 16, ... < K: load_matrix_sync(a, "
              "A + row0 * K + k, K) and load_matrix_sync(b, B + k * N + col0, N), both row_major fragments",
              "after the loop: wmma::store_matrix_sync(C + row0 * N + col0, acc, N, wmma::mem_row_major); "
              "the matrix_b fragment must be declared wmma::row_major since B is stored K x N row-major"])
def wmma_gemm(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    M, N, K = case["M"], case["N"], case["K"]
    a, b = _half(M, K), _half(K, N)
    a_dev, b_dev = guarded(a, guard=GUARD)[0], guarded(b, guard=GUARD)[0]
    out, buf = guarded_output(M * N, guard=GUARD)
    load("wmma_gemm")((N // 16, M // 16), (32,), (M, N, K, a_dev, b_dev, out))
    cudl.sync()
    check_guard(buf, M * N, "C")
    return [(out, _ref(a, b).ravel())]


# ------------------------------------------------------------------------------ mma_fragments

@grader("mma_fragments", kernels=["mma_fragments"], rtol=RTOL,
        cases=[dict(T=1), dict(T=2), dict(T=7), dict(T=64), dict(T=1000)],
        emulator_cases=[dict(T=1), dict(T=2), dict(T=7), dict(T=16), dict(T=33)],
        hint=["ldmatrix.x4 takes one 16-byte row address per lane: lanes 0-7 give the rows of the first "
              "8 x 8 matrix, 8-15 of the second, 16-23 of the third, 24-31 of the fourth; for A those "
              "matrices are (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows "
              "8-15, cols 8-15), the order of a[0..3]",
              "A: lane gives &As[lane % 16][(lane / 16) * 8]; B (16 x 8, row-major) needs the transpose: "
              "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 with lanes 0-15 giving &Bs[lane][0], "
              "b[0] from rows 0-7, b[1] from rows 8-15",
              "after mma_16x8x16(c, a, b): with g = lane / 4 and t = lane % 4, c[0] and c[1] are row g, "
              "columns 2t and 2t + 1 of the tile, c[2] and c[3] the same columns of row g + 8; store them "
              "at C + tile * 128 + row * 8 + column"])
def mma_fragments(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """T independent products C[t] = A[t] B[t] of 16 x 16 by 16 x 8 (row-major), one warp each."""
    T = case["T"]
    a, b = _half(T, 16, 16), _half(T, 16, 8)
    a_dev, b_dev = guarded(a, guard=GUARD)[0], guarded(b, guard=GUARD)[0]
    out, buf = guarded_output(T * 128, guard=GUARD)
    load("mma_fragments")((T,), (32,), (T, a_dev, b_dev, out))
    cudl.sync()
    check_guard(buf, T * 128, "C")
    ref = np.einsum("tik,tkj->tij", a.astype(np.float64), b.astype(np.float64))
    return [(out, ref.ravel())]


# ------------------------------------------------------------------------------ challenge: C = A B^T

ABT_TILE = 128  # hgemm_abt: 256 threads per block, a 128 x 128 tile of C each


@grader("hgemm_abt", kernels=["hgemm_abt"], rtol=RTOL,
        cases=[dict(M=128, N=128, K=32), dict(M=256, N=128, K=64), dict(M=128, N=384, K=160),
               dict(M=1024, N=1024, K=1024), dict(M=2048, N=2048, K=2048)],
        emulator_cases=[dict(M=128, N=128, K=32), dict(M=256, N=128, K=64), dict(M=128, N=384, K=160),
                        dict(M=128, N=256, K=96), dict(M=256, N=256, K=32)],
        speed=dict(case=dict(M=2048, N=2048, K=2048), factor=2.0),
        hint=["B^T needs no transpose: B is stored N x K, so a tile of B is read like a tile of A (rows of "
              "K), and the mma's col-major B fragment (two k values of one column n) is a row of that tile: "
              "ldmatrix without .trans",
              "stage 128 x 32 tiles of A and B in shared memory (16-byte copies, cp.async with a few stages "
              "on sm_80+), XOR-swizzle their 16-byte chunks so that ldmatrix is conflict-free, and let each of "
              "the 8 warps compute a 64 x 32 tile with 4 x 4 mma.sync m16n8k16",
              "B fragment of two 8-wide column tiles j, j + 1 with one ldmatrix.x4: lane gives row n = wn + "
              "8 * j + lane % 8 + (lane / 16) * 8, column k = kk + ((lane / 8) % 2) * 8 of the B tile; the "
              "registers come back as b[j][0], b[j][1], b[j + 1][0], b[j + 1][1]"])
def hgemm_abt(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """C = A B^T for A of shape M x K and B of shape N x K (row-major fp16), C M x N in fp32."""
    M, N, K = case["M"], case["N"], case["K"]
    a, b = _half(M, K), _half(N, K)
    a_dev, b_dev = guarded(a, guard=GUARD)[0], guarded(b, guard=GUARD)[0]
    out, buf = guarded_output(M * N, guard=GUARD)
    load("hgemm_abt")((N // ABT_TILE, M // ABT_TILE), (256,), (M, N, K, a_dev, b_dev, out))
    cudl.sync()
    check_guard(buf, M * N, "C")
    return [(out, _ref(a, b.T).ravel())]
