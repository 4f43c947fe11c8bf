"""Graders of chapter 4 (reductions): a warp-shuffle block sum, a row-wise max, a row-wise argmax, and the
challenge: a one-pass row-wise log-sum-exp.

Inputs are followed in memory by NaN (a kernel that reads past the end gets NaN into its result) and
outputs by a poisoned guard zone (a kernel that writes past the end is caught).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import Refuse, grader
from cudl.grade.guard import check_guard, guarded, guarded_output

BLOCK = 256  # threads per block in every launch below (8 warps)
WARPS = BLOCK // 32
GUARD = 64  # poisoned elements after each input and output


# ------------------------------------------------------------------------------ block_sum

@grader("block_sum", kernels=["block_sum"],
        cases=[dict(n=1), dict(n=31), dict(n=256), dict(n=1000), dict(n=2**20 + 7), dict(n=2**24 + 3)],
        emulator_cases=[dict(n=1), dict(n=31), dict(n=256), dict(n=1000), dict(n=4097), dict(n=20000)],
        hint=["two levels: first each warp adds its own 32 values with shuffles, then the 8 warp sums are added "
              "through shared memory after a barrier; every thread takes part, with 0 past the end",
              "v = (i < n) ? x[i] : 0; v += __shfl_down_sync(0xffffffff, v, offset) for offset 16, 8, 4, 2, 1 "
              "leaves the warp's sum in lane 0; all 32 lanes must call the shuffle",
              "each warp adds its 32 values with __shfl_down_sync (offsets 16, 8, 4, 2, 1), lane 0 of each warp "
              "stores its sum in shared memory, __syncthreads(), then warp 0 adds the 8 warp sums; threads with "
              "i >= n contribute 0"])
def block_sum(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    n = case["n"]
    blocks = (n + BLOCK - 1) // BLOCK
    x_host = np.random.default_rng().standard_normal(n).astype(np.float32)
    x = guarded(x_host, guard=GUARD)[0]
    partials, buf = guarded_output(blocks, np.float32, guard=GUARD)
    load("block_sum")((blocks,), (BLOCK,), (x, partials, n))
    cudl.sync()
    check_guard(buf, blocks, "partials")
    padded = np.zeros(blocks * BLOCK)
    padded[:n] = x_host
    ref = padded.reshape(blocks, BLOCK).sum(axis=1)  # float64 reference
    # A 256-element tree has depth 8: its error is <= 8 u sum|x| (u = 2^-24), relative to the size of the
    # terms, not of the sum: a block whose sum is near 0 (one block, n = 256) must not fail a correct tree.
    # So the tolerance is scaled by sum|x| per block; a lost or doubled element is still far outside it.
    terms = np.abs(padded).reshape(blocks, BLOCK).sum(axis=1)
    return [(partials, ref, terms)]


# ------------------------------------------------------------------------------ row_max

def _rows_with_offsets(rows: int, cols: int) -> np.ndarray:
    """Normal rows shifted by a random offset in [-10, 10): many rows are all negative."""
    rng = np.random.default_rng()
    x = rng.standard_normal((rows, cols)) + rng.uniform(-10, 10, size=(rows, 1))
    return x.astype(np.float32)


ROW_CASES = [dict(rows=1, cols=1), dict(rows=5, cols=31), dict(rows=8, cols=32), dict(rows=13, cols=100),
             dict(rows=1000, cols=1000), dict(rows=4099, cols=4096)]
ROW_EMU_CASES = [dict(rows=1, cols=1), dict(rows=5, cols=31), dict(rows=8, cols=32), dict(rows=13, cols=100),
                 dict(rows=50, cols=333), dict(rows=19, cols=2048)]


@grader("row_max", kernels=["row_max"], cases=ROW_CASES, emulator_cases=ROW_EMU_CASES,
        hint=["one warp per row; start each lane's maximum from -infinity (rows may be all negative) and let a "
              "NaN win, as torch.amax does",
              "row = blockIdx.x * 8 + threadIdx.x / 32 (the whole warp leaves if row >= rows); lane = threadIdx.x "
              "% 32 takes columns lane, lane + 32, ...; then combine the 32 maxima with __shfl_down_sync "
              "(offsets 16, 8, 4, 2, 1)",
              "m = -__int_as_float(0x7f800000) (minus infinity); combine with (a > b || a != a) ? a : b (a != a "
              "only for NaN: fmaxf would drop a NaN); lane 0 writes out[row] = m"])
def row_max(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    rows, cols = case["rows"], case["cols"]
    x_host = _rows_with_offsets(rows, cols)
    if rows >= 5:  # one row holds a NaN: its maximum is NaN, as torch.amax and the chapter's Max say
        x_host[rows // 2, np.random.default_rng().integers(cols)] = np.nan
    x = guarded(x_host, guard=GUARD)[0]
    out, buf = guarded_output(rows, np.float32, guard=GUARD)
    load("row_max")(((rows + WARPS - 1) // WARPS,), (BLOCK,), (x, out, rows, cols))
    cudl.sync()
    check_guard(buf, rows, "out")
    ref = x_host.max(axis=1).astype(np.float64)  # NaN where the row holds one
    got = cudl.to_numpy(out)
    nan_rows = np.isnan(ref)
    for r in np.flatnonzero(nan_rows & ~np.isnan(got)):
        raise Refuse(f"row {r} holds a NaN, so its maximum is NaN (as torch.amax), got {got[r]}: "
                     f"fmaxf and a > b ? a : b drop a NaN")
    return [(np.where(nan_rows, 0.0, got), np.where(nan_rows, 0.0, ref))]  # indices stay row numbers


# ------------------------------------------------------------------------------ row_argmax

def _rows_with_ties(rows: int, cols: int) -> np.ndarray:
    """Values rounded to multiples of 1/2 (ties happen by themselves), plus a planted tie for the
    maximum in each row: at two columns in the same lane (32 apart), in neighbouring lanes, or anywhere."""
    rng = np.random.default_rng()
    x = np.round(rng.standard_normal((rows, cols)) * 2) / 2
    if cols >= 2:
        top = x.max(axis=1) + 1.0
        for r in range(rows):
            j1 = int(rng.integers(0, cols - 1))
            gap = int(rng.choice([1, 32, int(rng.integers(1, cols - j1))]))
            j2 = min(j1 + gap, cols - 1)
            x[r, j1] = x[r, j2] = top[r]
    return x.astype(np.float32)


@grader("row_argmax", kernels=["row_argmax"], cases=ROW_CASES, emulator_cases=ROW_EMU_CASES,
        hint=["as row_max, but the answer is a column: each lane keeps its best value and the column it came "
              "from; ties go to the smallest column, as numpy.argmax",
              "a candidate (v, c) replaces the lane's (best_v, best_c) only if v > best_v, or v == best_v and "
              "c < best_c; the warp combines pairs with the same rule",
              "keep a (value, index) pair per lane; a candidate replaces it only if its value is larger, or equal "
              "with a smaller index; shuffle both value and index with the same offsets (16, 8, 4, 2, 1) and apply "
              "the same rule, so ties go to the first column like numpy.argmax"])
def row_argmax(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    rows, cols = case["rows"], case["cols"]
    x_host = _rows_with_ties(rows, cols)
    x = guarded(x_host, guard=GUARD)[0]
    out, buf = guarded_output(rows, np.int32, guard=GUARD)
    load("row_argmax")(((rows + WARPS - 1) // WARPS,), (BLOCK,), (x, out, rows, cols))
    cudl.sync()
    check_guard(buf, rows, "out")
    return [(out, np.argmax(x_host, axis=1).astype(np.int32))]


# ------------------------------------------------------------------------------ challenge: row log-sum-exp

def _rows_for_logsumexp(rows: int, cols: int) -> np.ndarray:
    """Rows of 4 N(0, 1) plus a per-row offset in [-40, 100): exp() of a row overflows or underflows fp32
    unless the kernel subtracts the row's maximum."""
    rng = np.random.default_rng()
    x = 4 * rng.standard_normal((rows, cols)) + rng.uniform(-40, 100, size=(rows, 1))
    return x.astype(np.float32)


@grader("row_logsumexp", kernels=["row_logsumexp"], cases=ROW_CASES, emulator_cases=ROW_EMU_CASES,
        speed=dict(case=dict(rows=4099, cols=4096), factor=1.5),  # H100: two-pass 0.83x (L2 re-read)
        hint=["exp() of these rows overflows (or underflows) float32: keep, per lane, the largest value m seen so "
              "far and the sum s of exp(v - m), and read each element once; when a larger value arrives the sum "
              "must be rescaled to the new maximum",
              "per element v: if v > m { s = s * expf(m - v) + 1; m = v; } else s += expf(v - m); start from m = "
              "-infinity, s = 0; to combine two lanes (m1, s1), (m2, s2): M = max(m1, m2), s = s1 * expf(m1 - M) "
              "+ s2 * expf(m2 - M), shuffling both m and s",
              "a lane with no columns (cols < 32) still has m = -infinity, and expf(-inf - (-inf)) is NaN: combine "
              "only when M is finite (if (M != -infinity) ...); lane 0 writes out[row] = m + logf(s)"])
def row_logsumexp(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    rows, cols = case["rows"], case["cols"]
    x_host = _rows_for_logsumexp(rows, cols)
    x = guarded(x_host, guard=GUARD)[0]
    out, buf = guarded_output(rows, np.float32, guard=GUARD)
    load("row_logsumexp")(((rows + WARPS - 1) // WARPS,), (BLOCK,), (x, out, rows, cols))
    cudl.sync()
    check_guard(buf, rows, "out")
    xd = x_host.astype(np.float64)
    m = xd.max(axis=1)
    return [(out, m + np.log(np.exp(xd - m[:, None]).sum(axis=1)))]
