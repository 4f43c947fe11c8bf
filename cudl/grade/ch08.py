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
from cudl.grade import grader
from cudl.grade.checks import bf16_round, deterministic, fp32_sum_rtol, same_bits
from cudl.grade.guard import check_guard, guarded, guarded_output

THREADS = 256  # gelu_tanh_bias_backward: threads per block, one column each
ROWS_PER_BLOCK = 16  # gelu_tanh_bias_backward: rows of the strip each block handles
COLSUM_BLOCK = (32, 8)  # column_sum: 32 columns x 8 row lanes


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def gelu_tanh_grad64(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d/dv of 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) and the sum of the sizes of its two terms, float64."""
    k = math.sqrt(2.0 / math.pi)
    t = np.tanh(k * (v + 0.044715 * v**3))
    first, second = 0.5 * (1.0 + t), 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v)
    return first + second, np.abs(first) + np.abs(second)


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
              "dx = g; sum g over your rows and atomicAdd the sum to dbias[c] (other blocks add theirs)",
              "common slips: the bias enters gelu' (v = x + bias[c], not x); dx must be dy * gelu'(v), the chain "
              "rule's product; dbias[c] += (atomicAdd) the strip's sum, never dbias[c] = ..., since the grader "
              "zeroes dbias once and every block of the column adds into it; stop the strip at rows"],
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
    grad, grad_terms = gelu_tanh_grad64(x_h.astype(np.float64) + b_h)
    ref = dy_h.astype(np.float64) * grad
    # gelu' is 0 near v = -0.75, where its two terms (~0.23 each) cancel: dx is rounded relative to them. dbias sums
    # dx over the rows (mixed signs): relative to the root of the sum of its terms' squared sizes, what rms(dbias)
    # stands for, without one draw's cancellation. Relative to rms(dx), rms(dbias), case 1 (one element) failed
    # about one grading in 1e4
    terms = np.abs(dy_h) * grad_terms
    return [(dx, ref, terms), (dbias, ref.sum(axis=0), np.sqrt((terms**2).sum(axis=0)))]


# ------------------------------------------------------------------------------ deterministic column sum

@grader("column_sum", kernels=["column_sum"],
        cases=[dict(rows=1, cols=1), dict(rows=7, cols=33), dict(rows=1000, cols=31),
               dict(rows=9, cols=5000), dict(rows=4097, cols=1024)],
        emulator_cases=[dict(rows=1, cols=1), dict(rows=7, cols=33), dict(rows=300, cols=31),
                        dict(rows=9, cols=500), dict(rows=129, cols=70)],
        hint=["each block owns 32 columns and must sum ALL rows of them: its 8 row lanes each sum every "
              "8th row, then the 8 partial sums are combined through shared memory after a barrier",
              "column c = blockIdx.x * 32 + threadIdx.x; lane y = threadIdx.y sums rows y, y + 8, y + 16, ...; "
              "put the 8 partial sums in shared memory, __syncthreads(), and let threadIdx.y == 0 add them "
              "and write out[c] if c < cols (every thread must reach the barrier)",
              "__shared__ float part[8][32]; acc = 0; if (c < cols) for (r = threadIdx.y; r < rows; r += 8) "
              "acc += g[r * cols + c]; part[threadIdx.y][threadIdx.x] = acc; __syncthreads(); then thread row 0 "
              "adds part[0..7][threadIdx.x] in order: the same order every run, so the same bits"])
def column_sum(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """out[c] = sum over r of g[r, c]; blocks of 32 x 8 threads, grid ceil(cols / 32), no atomics."""
    rows, cols = case["rows"], case["cols"]
    g_h = np.random.default_rng().standard_normal((rows, cols)).astype(np.float32)
    g, _ = guarded(g_h)
    out, out_full = guarded_output(cols, fill=-9.0)
    load("column_sum")((_cdiv(cols, COLSUM_BLOCK[0]),), COLSUM_BLOCK, (g, out, rows, cols))
    check_guard(out_full, cols, "out", fill=-9.0)
    # run again, on the emulator with blocks and threads in reverse order: a deterministic kernel gives the same bits
    deterministic(lambda: load("column_sum")((_cdiv(cols, COLSUM_BLOCK[0]),), COLSUM_BLOCK, (g, out, rows, cols)),
                  [("out", out)], "the order of the additions must not depend on timing (no atomicAdd; one "
                  "thread adds the 8 partial sums in a fixed order)")
    g64 = g_h.astype(np.float64)
    return [(out, g64.sum(axis=0), np.abs(g64).sum(axis=0), fp32_sum_rtol(rows))]


# ------------------------------------------------------------------------------ challenge: bias + residual, bf16

def _plant_ties(x: np.ndarray, r: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> None:
    """Set about one element in 16 (and the first) of the bf16 arrays x and r (rows x cols, uint16 bits) so that
    x + b[col] + r is exactly halfway between two bf16 values, with every fp32 partial sum exact: rounding to
    nearest even, half up, half away from zero or by truncation each give another answer there, and random
    inputs almost never land on a tie."""
    from cudl.check import bf16_to_float, float_to_bf16

    rows, cols = x.shape
    bias = bf16_to_float(b).astype(np.float64)
    picked = rng.random((rows, cols)) < 1 / 16
    picked.flat[0] = True
    rr, cc = np.nonzero(picked)
    for _ in range(64):  # redraw where x + r cannot hit the tie exactly with two bf16 values
        if rr.size == 0:
            return
        # a tie between two neighbouring bf16 values in [1, 4) (either sign): 9 significant bits, the last one set
        tie = np.ldexp(rng.integers(128, 256, rr.size) * 2 + 1, -8) * rng.choice([-1.0, 1.0, 2.0], rr.size)
        rest = tie - bias[cc]  # = x + r exactly, in float64
        xv = bf16_to_float(float_to_bf16(rest.astype(np.float32))).astype(np.float64)
        rv = rest - xv
        ok = (bf16_to_float(float_to_bf16(rv.astype(np.float32))) == rv) & (np.abs(rv) <= np.abs(xv))
        x[rr[ok], cc[ok]] = float_to_bf16(xv[ok].astype(np.float32))
        r[rr[ok], cc[ok]] = float_to_bf16(rv[ok].astype(np.float32))
        rr, cc = rr[~ok], cc[~ok]


VEC = 8  # bias_add_residual: bf16 elements per 16-byte vector, one vector per thread
VEC_BLOCK = 256


@grader("bias_add_residual", kernels=["bias_add_residual"],
        cases=[dict(rows=1, cols=1), dict(rows=3, cols=5), dict(rows=7, cols=24), dict(rows=33, cols=100),
               dict(rows=1000, cols=1000), dict(rows=8192, cols=4096)],
        emulator_cases=[dict(rows=1, cols=1), dict(rows=3, cols=5), dict(rows=7, cols=24),
                        dict(rows=33, cols=100), dict(rows=50, cols=333), dict(rows=16, cols=2048)],
        speed=dict(case=dict(rows=8192, cols=4096), factor=1.5, bytes=2 * (3 * 8192 * 4096 + 4096)),  # x res out, bias
        hint=["out = x + bias + res is pure memory traffic: move 16 bytes (8 bf16) per load and per store, and "
              "convert to fp32 for the additions; the flat array of rows * cols elements need not be a "
              "multiple of 8, so the last thread finishes the tail one element at a time",
              "thread t owns elements e = 8 t .. 8 t + 7 of the flat array; if 8 t + 8 <= n, load "
              "reinterpret_cast<const uint4*>(x)[t] (and res), unpack the 8 halves of its 4 words, add "
              "bias[(e + j) % cols], round, pack and store one uint4; else loop e < n one element at a time",
              "a bf16 is the high half of an fp32: f = __uint_as_float(bits << 16); back with round to nearest "
              "even: u = __float_as_uint(f), bits = (u + 0x7fff + ((u >> 16) & 1)) >> 16; word k of a uint4 "
              "holds element 2k in its low 16 bits and 2k + 1 in its high 16 bits"])
def bias_add_residual(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """out = bf16(x + bias + res) (bf16 as uint16 bits, fp32 math); grid ceil(ceil(n / 8) / 256), block 256."""
    from cudl.check import bf16_to_float, float_to_bf16

    rows, cols = case["rows"], case["cols"]
    n = rows * cols
    rng = np.random.default_rng()
    x_h = float_to_bf16(rng.standard_normal((rows, cols)).astype(np.float32) * 3)
    r_h = float_to_bf16(rng.standard_normal((rows, cols)).astype(np.float32))
    b_h = float_to_bf16(rng.uniform(-1, 1, cols).astype(np.float32))
    _plant_ties(x_h, r_h, b_h, rng)
    x, _ = guarded(x_h)  # the guard holds bf16 NaN (0xffff): reading past the end gives NaN
    res, _ = guarded(r_h)
    b, _ = guarded(b_h)
    out, out_full = guarded_output((rows, cols), np.uint16)
    threads = _cdiv(n, VEC)
    load("bias_add_residual")((_cdiv(threads, VEC_BLOCK),), (VEC_BLOCK,), (x, b, res, out, rows, cols))
    cudl.sync()
    check_guard(out_full, n, "out")
    # The spec fixes the bits: the fp32 sum (its two additions in any order), rounded once to nearest even.
    xf, bf, rf = bf16_to_float(x_h), np.broadcast_to(bf16_to_float(b_h), (rows, cols)), bf16_to_float(r_h)
    orders = [bf16_round((xf + bf) + rf), bf16_round((xf + rf) + bf), bf16_round(xf + (bf + rf))]
    got = cudl.to_numpy(out).astype(np.uint16)
    one = np.any([got == o for o in orders], axis=0)  # the order may differ from element to element
    same_bits(np.where(one, orders[0], got), orders[0], "out", "the additions in fp32, then one rounding to "
              "the nearest bf16 with ties to even: (u + 0x7fff + ((u >> 16) & 1)) >> 16")
    return [(out, xf.astype(np.float64) + bf + rf)]
