"""Graders of chapter 7 (kernel fusion): a one-sweep cross-entropy with the online softmax, and the
RMSNorm backward. Both use one warp per row; inputs are followed in memory by NaN and outputs by a
poisoned guard zone (see cudl.grade.guard).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.checks import same_bits
from cudl.grade.guard import check_guard, guarded, guarded_output

BLOCK = 256  # threads per block: 8 warps, so 8 rows per block
WARPS = BLOCK // 32
GUARD = 64

CASES = [dict(rows=1, cols=1), dict(rows=3, cols=31), dict(rows=8, cols=32), dict(rows=13, cols=100),
         dict(rows=1000, cols=1000), dict(rows=4099, cols=4096), dict(rows=64, cols=32000)]
EMU_CASES = [dict(rows=1, cols=1), dict(rows=3, cols=31), dict(rows=8, cols=32), dict(rows=13, cols=100),
             dict(rows=50, cols=333), dict(rows=19, cols=2048), dict(rows=9, cols=5000)]


# RMSNorm of one column is y = w * sign(x): its gradient in x vanishes and dx is pure rounding noise.
NORM_CASES = [dict(rows=1, cols=3), *CASES[1:]]
NORM_EMU_CASES = [dict(rows=1, cols=3), *EMU_CASES[1:]]


def _launch(rows: int) -> tuple[tuple[int], tuple[int]]:
    return ((rows + WARPS - 1) // WARPS,), (BLOCK,)


# ------------------------------------------------------------------------------ cross_entropy

@grader("cross_entropy", kernels=["cross_entropy"], cases=CASES, emulator_cases=EMU_CASES,
        hint=["one warp per row; keep a running (m, d) per lane: for each logit v, if v > m rescale d by "
              "exp(m - v) and set m = v, then add exp(v - m); merge the lanes' pairs with __shfl_xor_sync; "
              "loss = m + log(d) - x[row, target[row]]",
              "start from m = -infinity (-__int_as_float(0x7f800000)) and d = 0, never m = 0: some rows hold "
              "only logits below -100, whose exp() is 0 in float32",
              "merging (m1, d1) and (m2, d2): m = max(m1, m2), d = d1 * exp(m1 - m) + d2 * exp(m2 - m); skip the "
              "merge when both m are -infinity (lanes that saw no column), or exp(-inf + inf) gives NaN"])
def cross_entropy(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    rows, cols = case["rows"], case["cols"]
    rng = np.random.default_rng()
    # Logits of a few hundred, each row shifted by up to +-300: exp() overflows or underflows float32
    # unless the maximum is taken out first.
    x_host = (rng.standard_normal((rows, cols)) * 30 + rng.uniform(-300, 300, size=(rows, 1))).astype(np.float32)
    t_host = rng.integers(0, cols, size=rows).astype(np.int32)
    x = guarded(x_host, guard=GUARD)[0]
    t = guarded(t_host, fill=0, guard=GUARD)[0]
    loss, buf = guarded_output(rows, np.float32, guard=GUARD)
    load("cross_entropy")(*_launch(rows), (x, t, loss, rows, cols))
    cudl.sync()
    check_guard(buf, rows, "loss")
    xd = x_host.astype(np.float64)
    m = xd.max(axis=1)
    log_d, x_t = np.log(np.exp(xd - m[:, None]).sum(axis=1)), xd[np.arange(rows), t_host]
    # relative to |m| + log d + |x_t|, the terms the loss is a sum of: where the target is the row's maximum the
    # loss is ~0 while m + logf(d) rounds relative to |m| (up to 300); + 1 as logf(d) is off by a few U32 absolutely
    # (d = 1 + a tiny sum rounds to 1). Relative to rms(loss), case 2 (3 rows) failed about one grading in 3e4
    return [(loss, m + log_d - x_t, np.abs(m) + log_d + np.abs(x_t) + 1)]


# ------------------------------------------------------------------------------ rmsnorm_backward

@grader("rmsnorm_backward", kernels=["rmsnorm_backward"], cases=NORM_CASES, emulator_cases=NORM_EMU_CASES,
        hint=["one warp per row: g = w[c] * dy[row, c]; the warp sums g * x over the row (shuffles), then "
              "dx = rstd * (g - x * rstd^2 * mean(g * x)) for every column",
              "the mean divides by cols, and rstd enters cubed in the second term: d(rstd)/dx_j = "
              "-rstd^3 * x_j / cols",
              "every lane needs the row's sum: use __shfl_xor_sync (a butterfly), or broadcast lane 0's result "
              "with __shfl_sync(0xffffffff, s, 0)"])
def rmsnorm_backward(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    rows, cols = case["rows"], case["cols"]
    rng = np.random.default_rng()
    x_host = (rng.standard_normal((rows, cols)) * 2 + rng.uniform(-3, 3, size=(rows, 1))).astype(np.float32)
    dy_host = rng.standard_normal((rows, cols)).astype(np.float32)
    w_host = (rng.standard_normal(cols) + 1).astype(np.float32)
    xd, dyd, wd = x_host.astype(np.float64), dy_host.astype(np.float64), w_host.astype(np.float64)
    r = (1 / np.sqrt((xd * xd).mean(axis=1) + 1e-6)).astype(np.float32)
    rd = r.astype(np.float64)[:, None]
    g = dyd * wd
    ref = rd * (g - xd * rd**2 * (g * xd).mean(axis=1, keepdims=True))
    # relative to the sizes of the terms: dx is g minus x times the mean of g x (itself a sum of mixed signs), which
    # cancel where g is nearly parallel to x; relative to rms(dx), the 3-column case failed about one grading in 3e4
    terms = rd * (np.abs(g) + np.abs(xd) * rd**2 * np.abs(g * xd).mean(axis=1, keepdims=True))
    x, dy = guarded(x_host, guard=GUARD)[0], guarded(dy_host, guard=GUARD)[0]
    w, rstd = guarded(w_host, guard=GUARD)[0], guarded(r, guard=GUARD)[0]
    dx, buf = guarded_output((rows, cols), np.float32, guard=GUARD)
    load("rmsnorm_backward")(*_launch(rows), (dy, x, w, rstd, dx, rows, cols))
    cudl.sync()
    check_guard(buf, rows * cols, "dx")
    return [(dx, ref, terms)]


# ------------------------------------------------------------------------------ challenge: add + RMSNorm

@grader("add_rmsnorm", kernels=["add_rmsnorm"], cases=CASES, emulator_cases=EMU_CASES,
        speed=dict(case=dict(rows=4099, cols=4096), factor=2, bytes=4 * (4 * 4099 * 4096 + 4096)),  # x res h y, w
        hint=["one warp per row, as in the chapter's fused kernels: the warp reads x and res once, writes the "
              "sum h (the next residual) and adds up h squared for the row in fp32; every lane then needs the "
              "row's total to scale its own columns",
              "pass 1 over c = lane, lane + 32, ...: v = x + res, store h[c] = v, ss += v * v; combine ss with "
              "__shfl_xor_sync (offsets 16..1) so that all lanes hold it; rstd = rsqrtf(ss / cols + 1e-6)",
              "pass 2 over the same columns reads back h[c] (the lane's own writes, still in cache, not x and "
              "res again) and writes y[c] = h[c] * rstd * w[c]; the mean divides by cols, not by 32"])
def add_rmsnorm(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """h = x + res, y = h / sqrt(mean(h^2) + 1e-6) * w, per row; one warp per row, 8 rows per block."""
    rows, cols = case["rows"], case["cols"]
    rng = np.random.default_rng()
    x_host = (rng.standard_normal((rows, cols)) + rng.uniform(-2, 2, size=(rows, 1))).astype(np.float32)
    r_host = (rng.standard_normal((rows, cols)) * rng.uniform(0.1, 3, size=(rows, 1))).astype(np.float32)
    w_host = (rng.standard_normal(cols) + 1).astype(np.float32)
    x, res = guarded(x_host, guard=GUARD)[0], guarded(r_host, guard=GUARD)[0]
    w = guarded(w_host, guard=GUARD)[0]
    h, hbuf = guarded_output((rows, cols), np.float32, guard=GUARD)
    y, ybuf = guarded_output((rows, cols), np.float32, guard=GUARD)
    load("add_rmsnorm")(*_launch(rows), (x, res, w, h, y, rows, cols))
    cudl.sync()
    check_guard(hbuf, rows * cols, "h")
    check_guard(ybuf, rows * cols, "y")
    # h = x + res is one fp32 addition: its bits are fixed (compared as integers)
    h32 = x_host + r_host
    same_bits(h.view(np.uint32), h32.view(np.uint32), "h", "h = x + res is one fp32 addition, rounded once")
    yd = h32 / np.sqrt((h32.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6) * w_host.astype(np.float64)
    return [(h.view(np.uint32), h32.view(np.uint32)), (y, yd)]
