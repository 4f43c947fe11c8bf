"""Graders of chapter 8 (08-profiling): the fused backward of tanh-GELU with its bias gradient, and a
deterministic column sum for bias gradients.

Outputs are followed by guard regions of known values (see guard.py), so a write past the end is a CRASH
line on both backends; matrix outputs are poisoned with NaN, so an element never written fails.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import cudl
from cudl.grade import Refuse, grader
from cudl.grade.guard import check_guard, guarded, guarded_output

THREADS = 256  # gelu_tanh_bias_backward: threads per block, one column each
ROWS_PER_BLOCK = 16  # gelu_tanh_bias_backward: rows of the strip each block handles
COLSUM_BLOCK = (32, 8)  # column_sum: 32 columns x 8 row lanes


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def gelu_tanh_grad64(v: np.ndarray) -> np.ndarray:
    """d/dv of 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), in float64."""
    k = math.sqrt(2.0 / math.pi)
    t = np.tanh(k * (v + 0.044715 * v**3))
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v)


# ------------------------------------------------------------------------------ tanh-GELU + bias backward

@grader("gelu_tanh_bias_backward", kernels=["gelu_tanh_bias_backward"],
        cases=[dict(rows=1, cols=1), dict(rows=17, cols=300), dict(rows=100, cols=3),
               dict(rows=1000, cols=1000), dict(rows=4099, cols=1024)],
        emulator_cases=[dict(rows=1, cols=1), dict(rows=17, cols=300), dict(rows=100, cols=3),
                        dict(rows=40, cols=257), dict(rows=129, cols=64)],
        hint=["gelu_tanh'(v) = 0.5 (1 + t) + 0.5 v (1 - t^2) k (1 + 3 * 0.044715 v^2) with "
              "t = tanh(k (v + 0.044715 v^3)), k = sqrt(2 / pi), and v = x + bias[c]; dbias[c] sums dx over ALL "
              "rows, and several blocks share a column",
              "c = blockIdx.x * blockDim.x + threadIdx.x (return if c >= cols); rows r from "
              "blockIdx.y * rows_per_block to min(rows, that + rows_per_block); g = dy * gelu_tanh'(x + bias[c]); "
              "dx = g; sum g over your rows and atomicAdd the sum to dbias[c] (other blocks add theirs)"],
        rtol=1e-4)  # tanhf near +-1 leaves 1 - t^2 with a few fp32 ulps of relative error
def gelu_tanh_bias_backward(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """dx = dy * gelu_tanh'(x + bias), dbias = column sums of dx; grid (ceil(cols/256), ceil(rows/16))."""
    rows, cols = case["rows"], case["cols"]
    rng = np.random.default_rng()
    dy_h = rng.standard_normal((rows, cols)).astype(np.float32)
    # |x + b| <= 3: further out gelu' cancels (0.5 (1 + t) against the second term) and fp32 loses digits
    x_h = rng.uniform(-2, 2, (rows, cols)).astype(np.float32)
    b_h = rng.uniform(-1, 1, cols).astype(np.float32)
    dy, _ = guarded(dy_h, 1.0)
    x, _ = guarded(x_h)  # reading past the end of x brings NaN into the result
    b, _ = guarded(b_h)
    dx, dx_full = guarded_output((rows, cols), fill=-9.0)
    dbias, db_full = guarded_output(cols, fill=-9.0)
    dbias[...] = 0.0  # the kernel adds into it
    grid = (_cdiv(cols, THREADS), _cdiv(rows, ROWS_PER_BLOCK))
    load("gelu_tanh_bias_backward")(grid, (THREADS,), (dy, x, b, dx, dbias, rows, cols, ROWS_PER_BLOCK))
    check_guard(dx_full, rows * cols, "dx", fill=-9.0)
    check_guard(db_full, cols, "dbias", fill=-9.0)
    ref = dy_h.astype(np.float64) * gelu_tanh_grad64(x_h.astype(np.float64) + b_h)
    return [(dx, ref), (dbias, ref.sum(axis=0))]


# ------------------------------------------------------------------------------ deterministic column sum

@grader("column_sum", kernels=["column_sum"],
        cases=[dict(rows=1, cols=1), dict(rows=7, cols=33), dict(rows=1000, cols=31),
               dict(rows=9, cols=5000), dict(rows=4097, cols=1024)],
        emulator_cases=[dict(rows=1, cols=1), dict(rows=7, cols=33), dict(rows=300, cols=31),
                        dict(rows=9, cols=500), dict(rows=129, cols=70)],
        hint=["each block owns 32 columns and must sum ALL rows of them: its 8 row lanes each sum every "
              "8th row, then the 8 partial sums are combined through shared memory after a __syncthreads()",
              "column c = blockIdx.x * 32 + threadIdx.x; lane y = threadIdx.y sums rows y, y + 8, y + 16, ...; "
              "put the 8 partial sums in shared memory, __syncthreads(), and let threadIdx.y == 0 add them "
              "and write out[c] if c < cols (every thread must reach the barrier)"])
def column_sum(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """out[c] = sum over r of g[r, c]; blocks of 32 x 8 threads, grid ceil(cols / 32), no atomics."""
    rows, cols = case["rows"], case["cols"]
    g_h = np.random.default_rng().standard_normal((rows, cols)).astype(np.float32)
    g, _ = guarded(g_h)
    out, out_full = guarded_output(cols, fill=-9.0)
    load("column_sum")((_cdiv(cols, COLSUM_BLOCK[0]),), COLSUM_BLOCK, (g, out, rows, cols))
    check_guard(out_full, cols, "out", fill=-9.0)
    first = cudl.to_numpy(out).copy()
    out[...] = np.nan  # run again: a deterministic kernel gives the same bits
    load("column_sum")((_cdiv(cols, COLSUM_BLOCK[0]),), COLSUM_BLOCK, (g, out, rows, cols))
    if not np.array_equal(first, cudl.to_numpy(out), equal_nan=True):
        raise Refuse("two runs on the same input gave different sums: the order of the additions must not "
                     "depend on timing (no atomicAdd; one thread adds the 8 partial sums in a fixed order)")
    return [(out, g_h.astype(np.float64).sum(axis=0))]
