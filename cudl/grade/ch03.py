"""Graders of chapter 3 (03-elementwise): SiLU forward (grid-stride), leaky-ReLU backward, fused bias + ReLU,
and the challenge: a SwiGLU forward in fp16 with half2 loads and stores.

Every output buffer is followed by a guard region of known values, so that a write past the end (which
a GPU rarely notices) becomes a CRASH line on both backends, as in chapter 1's graders.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cudl.grade import grader
from cudl.grade.guard import check_guard, guarded, guarded_output

THREADS = 256  # block size of the one-thread-per-element launches
GRID_STRIDE_LAUNCH = ((4,), (128,))  # silu_forward: 512 threads in all, fewer than most cases' elements


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ------------------------------------------------------------------------------ SiLU forward

@grader("silu_forward", kernels=["silu_forward"],
        cases=[dict(n=1), dict(n=511), dict(n=513), dict(n=100_003), dict(n=2**22 + 1)],
        emulator_cases=[dict(n=1), dict(n=511), dict(n=513), dict(n=4099), dict(n=30001)],
        hint=["silu(x) = x * sigmoid(x), and the grid has only 512 threads: each thread must cover several "
              "elements, every element exactly once",
              "a grid-stride loop: start at the global index, step by gridDim.x * blockDim.x; sigmoid(x) = "
              "1 / (1 + e^-x), with expf in float",
              "for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) "
              "y[i] = x[i] / (1 + expf(-x[i]))"])
def silu_forward(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """y = x * sigmoid(x), launched with 4 blocks of 128 threads whatever n is."""
    n = case["n"]
    x_host = (3 * np.random.default_rng().standard_normal(n)).astype(np.float32)
    x, _ = guarded(x_host, 1.0)
    y, y_full = guarded_output(n, fill=-7.0)  # silu(x) > -0.28: -7 is never an output
    grid, block = GRID_STRIDE_LAUNCH
    load("silu_forward")(grid, block, (x, y, n))
    check_guard(y_full, n, "y", fill=-7.0)
    xd = x_host.astype(np.float64)
    return [(y, xd / (1.0 + np.exp(-xd)))]


# ------------------------------------------------------------------------------ leaky ReLU backward

@grader("leaky_relu_backward", kernels=["leaky_relu_backward"],
        cases=[dict(n=1), dict(n=255), dict(n=257), dict(n=65536), dict(n=2**20 + 7)],
        emulator_cases=[dict(n=1), dict(n=255), dict(n=257), dict(n=4096), dict(n=20001)],
        hint=["the backward pass multiplies the incoming gradient dy by the derivative of leaky_relu at x",
              "leaky_relu(x) = x for x > 0 and slope * x otherwise: its derivative is 1 or slope, chosen by the "
              "sign of x (not of dy); one thread per element, with a bounds check",
              "dx[i] = dy[i] where x[i] > 0 and slope * dy[i] elsewhere, only if i < n"])
def leaky_relu_backward(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """dx = dy * leaky_relu'(x); launched with ceil(n / 256) blocks of 256 threads."""
    n = case["n"]
    rng = np.random.default_rng()
    slope = np.float32(rng.uniform(0.05, 0.3))
    x_host = rng.standard_normal(n).astype(np.float32)
    if n == 1:
        x_host[0] = -abs(x_host[0]) - 0.1  # one element: make it the negative branch
    dy_host = rng.standard_normal(n).astype(np.float32)
    dy, _ = guarded(dy_host, 1.0)
    x, _ = guarded(x_host, 1.0)
    dx, dx_full = guarded_output(n, fill=-9.0)
    load("leaky_relu_backward")((_cdiv(n, THREADS),), (THREADS,), (dy, x, dx, slope, n))
    check_guard(dx_full, n, "dx", fill=-9.0)
    ref = np.where(x_host > 0, dy_host.astype(np.float64), np.float64(slope) * dy_host)
    return [(dx, ref)]


# ------------------------------------------------------------------------------ fused bias + ReLU over rows

@grader("bias_relu_rows", kernels=["bias_relu_rows"],
        cases=[dict(rows=1, cols=1), dict(rows=3, cols=300), dict(rows=300, cols=3), dict(rows=100, cols=1000),
               dict(rows=1024, cols=4099)],
        emulator_cases=[dict(rows=1, cols=1), dict(rows=3, cols=300), dict(rows=300, cols=3),
                        dict(rows=37, cols=257), dict(rows=64, cols=1000)],
        hint=["the bias has one value per column, shared by all rows; the grid's y index is the row, its x "
              "indices run along the columns and overhang the last one",
              "col from blockIdx.x, blockDim.x and threadIdx.x, row = blockIdx.y; add bias[col] (not bias[row]) "
              "before the max with 0, and check col < cols",
              "col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y; only if col < cols: "
              "y[row * cols + col] = max(x[row * cols + col] + bias[col], 0)"])
def bias_relu_rows(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """y = relu(x + bias) for a rows x cols matrix, bias of length cols; grid (ceil(cols / 256), rows)."""
    rows, cols = case["rows"], case["cols"]
    rng = np.random.default_rng()
    x_host = rng.standard_normal((rows, cols)).astype(np.float32)
    b_host = rng.standard_normal(cols).astype(np.float32)
    x, _ = guarded(x_host, 1.0)
    b, _ = guarded(b_host, 1.0)
    y, y_full = guarded_output((rows, cols), fill=-5.0)  # relu >= 0: -5 never is
    load("bias_relu_rows")((_cdiv(cols, THREADS), rows), (THREADS,), (x, b, y, rows, cols))
    check_guard(y_full, rows * cols, "y", fill=-5.0)
    return [(y, np.maximum(x_host.astype(np.float64) + b_host, 0.0))]


# ------------------------------------------------------------------------------ challenge: SwiGLU in half2

@grader("swiglu_half2", kernels=["swiglu_half2"],
        cases=[dict(rows=1, hidden=2), dict(rows=3, hidden=6), dict(rows=1, hidden=1000), dict(rows=37, hidden=130),
               dict(rows=1000, hidden=1026), dict(rows=8192, hidden=4096)],
        emulator_cases=[dict(rows=1, hidden=2), dict(rows=3, hidden=6), dict(rows=1, hidden=1000),
                        dict(rows=37, hidden=130), dict(rows=129, hidden=258), dict(rows=300, hidden=514)],
        speed=dict(case=dict(rows=8192, hidden=4096), factor=1.5),  # H100: scalar __half 1.53x, at the noise floor
        hint=["each row of x holds 2 * hidden halves, the gates first and then the ups, so as half2 a row is "
              "`hidden` pairs: the pair of gates of output pair c is at pair r * hidden + c, its ups hidden / 2 "
              "pairs later; compute in fp32 and round once",
              "p = blockIdx.x * blockDim.x + threadIdx.x is the output pair (return if p >= rows * hidden / 2); "
              "r = p / (hidden / 2), c = p % (hidden / 2); read both half2 through "
              "reinterpret_cast<const __half2*>(x), convert with __half22float2",
              "y.x = g.x / (1 + expf(-g.x)) * u.x, the same for .y, then "
              "reinterpret_cast<__half2*>(out)[p] = __float22half2_rn(y)"])
def swiglu_half2(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """out = silu(gate) * up for x = [gate | up] of shape (rows, 2 * hidden), fp16; one thread per half2."""
    rows, hidden = case["rows"], case["hidden"]
    rng = np.random.default_rng()
    x_host = (3 * rng.standard_normal((rows, 2 * hidden))).astype(np.float16)
    x, _ = guarded(x_host)  # NaN after the end: a read past it shows
    out, out_full = guarded_output((rows, hidden), np.float16, fill=np.float16(-1000.0))  # |out| < 1000
    pairs = rows * hidden // 2
    load("swiglu_half2")((_cdiv(pairs, THREADS),), (THREADS,), (x, out, rows, hidden))
    check_guard(out_full, rows * hidden, "out", fill=np.float16(-1000.0))
    g, u = x_host[:, :hidden].astype(np.float64), x_host[:, hidden:].astype(np.float64)
    return [(out, g / (1 + np.exp(-g)) * u)]
