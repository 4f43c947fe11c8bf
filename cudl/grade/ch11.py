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
from cudl.grade import Refuse, check_pair, grader
from cudl.grade.checks import fp32_sum_rtol
from cudl.grade.guard import check_guard, guarded, guarded_output

GUARD = 64
# The products of fp16 values are exact in fp32, so C is an fp32 sum of K terms: within fp32_sum_rtol(K) (which
# allows a Tensor Core's truncation) of sum_k |a_ik b_kj|. An fp16 accumulator is off by ~2^-12 of the partial
# sums at every step, hundreds of times more; a wrong fragment by O(1).


def _half(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape).astype(np.float16)


def _product_pair(out: Any, a: np.ndarray, b: np.ndarray) -> tuple[Any, ...]:
    """(out, A B, sum |a| |b|, rtol) for C = A B with fp32 accumulation of K products (see above)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return out, (a64 @ b64).ravel(), (np.abs(a64) @ np.abs(b64)).ravel(), fp32_sum_rtol(a.shape[-1])


# ------------------------------------------------------------------------------ wmma_gemm

@grader("wmma_gemm", kernels=["wmma_gemm"],
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
    return [_product_pair(out, a, b)]


# ------------------------------------------------------------------------------ mma_fragments

@grader("mma_fragments", kernels=["mma_fragments"],
        cases=[dict(T=1), dict(T=2), dict(T=7), dict(T=64), dict(T=1000)],
        emulator_cases=[dict(T=1), dict(T=2), dict(T=7), dict(T=16), dict(T=33)],
        hint=["three pieces, and the FAIL line says which one is wrong: A's fragment (ldmatrix.x4: one 16-byte "
              "row address per lane, lanes 8j to 8j + 7 the rows of the j-th 8 x 8 matrix, in the order of "
              "a[0..3]: (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols "
              "8-15)), B's fragment (B is row-major, the mma wants it by columns: a transposed load) and where "
              "c[0..3] go in C",
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
    pair = _product_pair(out, a, b)
    if not check_pair(pair).ok:
        _diagnose_fragments(load)
    return [pair]


def _diagnose_fragments(load: Any) -> None:
    """Say which of A's fragment, B's fragment and the store of c is wrong (raises Refuse), from one launch of two
    tiles with the same A. If A's fragment is right, B' = A^-1 C is the B the kernel multiplied by, made of B's
    values in other places; if B's is right, A' = [C1 C2] [B1 B2]^-1 is made of A's values. When the other
    fragment is wrong, such a solve mixes the values instead. Orthogonal matrices (rounded to fp16) keep both
    solves exact to ~1e-3, far below the O(1) of a value in the wrong place."""
    rng = np.random.default_rng()
    a0 = (np.linalg.qr(rng.standard_normal((16, 16)))[0] * 4).astype(np.float16)
    bb = (np.linalg.qr(rng.standard_normal((16, 16)))[0] * 4).astype(np.float16)
    a, b = np.stack([a0, a0]), np.stack([bb[:, :8], bb[:, 8:]])
    out = cudl.poisoned(2 * 128)
    load("mma_fragments")((2,), (32,), (2, cudl.xp.asarray(a), cudl.xp.asarray(b), out))
    cudl.sync()
    c = cudl.to_numpy(out).astype(np.float64).reshape(2, 16, 8)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if not np.isfinite(c).all():
        raise Refuse("C holds NaN where the products go (poisoned before the launch): some of c[0..3] is not "
                     "stored, or stored outside the tile's 16 x 8 elements")
    close = lambda x, y: np.allclose(x, y, rtol=0, atol=1e-2)  # noqa: E731
    if close(np.sort(c.reshape(2, -1)), np.sort(ref.reshape(2, -1))):
        raise Refuse("every product is right but stored in the wrong place of C: the accumulators c[0..3] of a "
                     "lane belong to two rows of the tile (g = lane / 4 and g + 8) and two neighbouring columns")
    b_used = np.linalg.solve(a0.astype(np.float64), c[0])
    a_used = np.concatenate([c[0], c[1]], axis=1) @ np.linalg.inv(bb.astype(np.float64))

    def made_of(used: np.ndarray, values: np.ndarray) -> bool:  # every element is one of the values, or 0
        pool = np.append(values.astype(np.float64).ravel(), 0.0)
        return bool((np.abs(used.ravel()[:, None] - pool[None, :]).min(axis=1) < 1e-2).all())

    a_ok, b_ok = made_of(b_used, b[0]), made_of(a_used, a0)
    if a_ok and b_ok:  # C = A P B for a permutation P of k: either fragment could hold the k values out of order
        raise Refuse("the mma pairs A's columns with the wrong rows of B: one of the fragments holds its k values "
                     "in another order (a[0], a[1] hold columns k 0-7 of A and a[2], a[3] columns 8-15; b[0] "
                     "rows k 0-7 of B and b[1] rows 8-15)")
    if a_ok and not b_ok:
        raise Refuse("the A fragment and the store are right, the B fragment is not: the mma multiplied by a B whose "
                     "values sit in other places (B is 16 x 8 row-major, and b[0], b[1] hold two k values of one "
                     "column n each: ldmatrix has to transpose)")
    if b_ok and not a_ok:
        raise Refuse("the B fragment and the store are right, the A fragment is not: the mma multiplied by an A "
                     "whose values sit in other places (check which rows and columns of As each lane's ldmatrix "
                     "address points at, and the order of a[0..3])")
    raise Refuse("both fragments are wrong, or one of them and where c[0..3] are stored: test A's load with "
                 "B = the identity's first 8 columns, so that C should be A's first 8 columns")


# ------------------------------------------------------------------------------ challenge: C = A B^T

ABT_TILE = 128  # hgemm_abt: 256 threads per block, a 128 x 128 tile of C each


@grader("hgemm_abt", kernels=["hgemm_abt"],
        cases=[dict(M=128, N=128, K=32), dict(M=256, N=128, K=64), dict(M=128, N=384, K=160),
               dict(M=1024, N=1024, K=1024), dict(M=2048, N=2048, K=2048)],
        emulator_cases=[dict(M=128, N=128, K=32), dict(M=256, N=128, K=64), dict(M=128, N=384, K=160),
                        dict(M=128, N=256, K=96), dict(M=256, N=256, K=32)],
        speed=dict(case=dict(M=2048, N=2048, K=2048), factor=2.0, flops=2 * 2048**3, compute="fp16",
                   bytes=2 * 2 * 2048 * 2048 + 4 * 2048 * 2048),
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
    return [_product_pair(out, a, np.ascontiguousarray(b.T))]
