"""Graders of chapter 9 (a training pipeline): softmax cross-entropy with label smoothing, forward
and gradient in one kernel; the update of torch.optim.SGD with Nesterov momentum over a flat buffer;
and, speed-graded, the bias gradient (a column sum) of a tall, narrow matrix. Inputs are followed in
memory by NaN and outputs by a poisoned guard zone (see cudl.grade.guard).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.checks import U32, fp32_sum_rtol
from cudl.grade.guard import check_guard, guarded, guarded_output

GUARD = 64
BLOCK = 256  # one warp per row: 8 rows per block
WARPS = BLOCK // 32

# ------------------------------------------------------------------------------ smoothed_cross_entropy

# cols = 1 would make the loss exactly 0 in exact arithmetic, and any rounding an infinite relative error
SCE_CASES = [dict(rows=1, cols=2), dict(rows=3, cols=10), dict(rows=8, cols=33), dict(rows=100, cols=10),
             dict(rows=1000, cols=1000), dict(rows=4099, cols=129)]
SCE_EMU_CASES = [dict(rows=1, cols=2), dict(rows=3, cols=10), dict(rows=8, cols=33), dict(rows=100, cols=10),
                 dict(rows=13, cols=1000), dict(rows=41, cols=129)]


@grader("smoothed_cross_entropy", kernels=["smoothed_cross_entropy"], cases=SCE_CASES,
        emulator_cases=SCE_EMU_CASES,
        hint=["one warp per row, two passes: the first finds the row's maximum m, sum of exp(x - m) and "
              "sum of x (shuffles merge the lanes), the second writes the gradient; the smoothed target "
              "puts 1 - eps + eps / cols on the right class and eps / cols on every other",
              "loss = m + log(sum exp(x - m)) - (1 - eps) x[target] - eps * mean(x); every column's "
              "gradient is (softmax - q) / rows, where q is the smoothed target, not only the target's",
              "after the shuffles every lane must hold m, the sum and sum(x) (use __shfl_xor_sync, a "
              "butterfly); divide by rows (the batch), since the loss is the mean over rows"])
def smoothed_cross_entropy(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    rows, cols = case["rows"], case["cols"]
    rng = np.random.default_rng()
    eps = np.float32(rng.uniform(0.05, 0.2))
    # rows shifted by up to +-50 and logits spread by 20 around that: in every case some logits are beyond 88.7,
    # where exp() overflows fp32, unless m is taken out first (row 0: shifted by +50 and one logit at +110)
    shift = rng.uniform(-50, 50, (rows, 1))
    shift[0] = 50
    x_host = (rng.standard_normal((rows, cols)) * 20 + shift).astype(np.float32)
    x_host[0, rng.integers(cols)] = 110
    t_host = rng.integers(0, cols, rows).astype(np.int32)
    x, t = guarded(x_host, guard=GUARD)[0], guarded(t_host, fill=0, guard=GUARD)[0]
    loss, lbuf = guarded_output(rows, np.float32, guard=GUARD)
    dx, dbuf = guarded_output((rows, cols), np.float32, guard=GUARD)
    load("smoothed_cross_entropy")(((rows + WARPS - 1) // WARPS,), (BLOCK,), (x, t, loss, dx, rows, cols, eps))
    cudl.sync()
    check_guard(lbuf, rows, "loss")
    check_guard(dbuf, rows * cols, "dx")
    xd, e = x_host.astype(np.float64), float(eps)
    m = xd.max(axis=1, keepdims=True)
    s = np.exp(xd - m).sum(axis=1, keepdims=True)
    r = np.arange(rows)
    ref_loss = m[:, 0] + np.log(s[:, 0]) - (1 - e) * xd[r, t_host] - e * xd.mean(axis=1)
    q = np.full((rows, cols), e / cols)
    q[r, t_host] += 1 - e
    p = np.exp(xd - m) / s
    ref_dx = (p - q) / rows
    # Error bounds, in units of U32 (cudl.grade.checks). softmax: exp of x - m (or of x - logsumexp) is off by
    # about |x| + |m| + |logsumexp| U32 relative, the sum s by cols U32: so p by F = 3 max|x| + cols + 16 U32,
    # relative to p (not to p - q, which may be a small difference: a correct kernel that writes p - q
    # differently is off there by many ulps of the result); q - its rounding, the difference's, the division's
    # by rows (or a product with 1 / rows, itself rounded) - by up to 8 U32 of q.
    big = np.abs(xd).max(axis=1, keepdims=True)
    dx_scale = ((3 * big + cols + 16) * p + 8 * q) / rows
    # loss = m + log s - (1 - eps) x_t - eps mean(x): terms of size |m| and |x_t| (up to ~110) whose difference
    # may be ~0.1, and the sum of x (cols terms)
    loss_scale = (4 * (np.abs(m[:, 0]) + np.abs(xd[r, t_host]) + np.log(s[:, 0]) + 1)
                  + (cols + 4) * (1 + e * np.abs(xd).mean(axis=1)))
    return [(loss, ref_loss, loss_scale, U32), (dx, ref_dx, dx_scale, U32)]


# ------------------------------------------------------------------------------ sgd_nesterov

SGD_GRID = 120  # blocks: fewer than one per 256 elements for the larger cases (a grid-stride loop)
SGD_CASES = [dict(n=1), dict(n=255), dict(n=1000), dict(n=2**20 + 3), dict(n=2**22)]
SGD_EMU_CASES = [dict(n=1), dict(n=255), dict(n=1000), dict(n=40_000), dict(n=70_001)]


@grader("sgd_nesterov", kernels=["sgd_nesterov"], cases=SGD_CASES, emulator_cases=SGD_EMU_CASES,
        hint=["one elementwise pass over the flat buffers with a grid-stride loop: the grid has "
              f"{SGD_GRID} blocks, fewer than the elements; follow torch.optim.SGD's order: weight decay "
              "into the gradient, then the momentum buffer, then the Nesterov step",
              "g = g + wd * p; buf = first_step ? g : momentum * buf + g; p = p - lr * (g + momentum * buf) "
              "(the gradient array itself is read-only: keep the decayed g in a register)",
              "for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * "
              "blockDim.x) { ... } with i a long long; write buf[i] at every step, also the first"])
def sgd_nesterov(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    n = case["n"]
    rng = np.random.default_rng()
    lr, mom, wd = (np.float32(v) for v in (rng.uniform(0.01, 0.1), rng.uniform(0.8, 0.95), rng.uniform(0.01, 0.1)))
    p_host = rng.standard_normal(n).astype(np.float32)
    p, pbuf = guarded(p_host, guard=GUARD)
    buf, bbuf = guarded(rng.standard_normal(n).astype(np.float32), guard=GUARD)  # garbage before step 1
    p64, b64 = p_host.astype(np.float64), None
    # Sums of |terms| behind each result: an element of p or buf is a difference of terms that may cancel
    # (the CI once saw an n = 1 case whose p ended near 0), and fp32 rounds relative to the terms
    p_terms, b_terms = np.abs(p64), np.zeros(n)
    kernel = load("sgd_nesterov")
    for step in range(3):
        g_host = (rng.standard_normal(n) * rng.uniform(0.1, 3)).astype(np.float32)
        g = guarded(g_host, guard=GUARD)[0]
        kernel((min((n + BLOCK - 1) // BLOCK, SGD_GRID),), (BLOCK,), (p, g, buf, n, lr, mom, wd, int(step == 0)))
        gd = g_host + float(wd) * p64
        gd_terms = np.abs(g_host) + float(wd) * np.abs(p64)
        b64 = gd if b64 is None else float(mom) * b64 + gd
        b_terms = gd_terms if step == 0 else float(mom) * b_terms + gd_terms
        p64 = p64 - float(lr) * (gd + float(mom) * b64)
        p_terms = p_terms + float(lr) * (gd_terms + float(mom) * b_terms)
    cudl.sync()
    check_guard(pbuf, n, "p")
    check_guard(bbuf, n, "buf")
    return [(p, p64, p_terms), (buf, b64, b_terms)]


# ------------------------------------------------------------------------------ challenge: bias_grad_tall

ROW_BLOCKS = 128  # at most this many blocks along the rows
COL_CASES = [dict(rows=1, cols=1), dict(rows=7, cols=33), dict(rows=300, cols=10), dict(rows=2000, cols=64),
             dict(rows=2**18, cols=96)]
COL_EMU_CASES = [dict(rows=1, cols=1), dict(rows=7, cols=33), dict(rows=300, cols=10), dict(rows=2000, cols=64),
                 dict(rows=3001, cols=70)]


def bias_grad_tall_launch(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return ((cols + 31) // 32, min(ROW_BLOCKS, (rows + 7) // 8)), (32, 8)


@grader("bias_grad_tall", kernels=["bias_grad_tall"], cases=COL_CASES, emulator_cases=COL_EMU_CASES,
        speed=dict(case=dict(rows=2**18, cols=96), factor=2, bytes=4 * (2**18 * 96 + 96)),
        hint=["the grid has blocks along the rows too (blockIdx.y): each block sums its own share of the "
              "rows for its 32 columns, combines its 8 row lanes in shared memory, and adds its partial "
              "sum to db (zeroed before the launch) with atomicAdd",
              "thread (tx, ty) of block (bx, by) sums rows r = by * 8 + ty, then r += 8 * gridDim.y, of "
              "column bx * 32 + tx; a __syncthreads() between writing the partials to shared memory "
              "and reading them back",
              "__shared__ float part[8][33]; part[ty][tx] = acc; __syncthreads(); if (ty == 0 && c < cols) "
              "{ float s = 0; for (k = 0; k < 8; ++k) s += part[k][tx]; atomicAdd(&db[c], s); }"])
def bias_grad_tall(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """db[c] = sum over r of dy[r, c] for a rows x cols row-major matrix (db zeroed first)."""
    rows, cols = case["rows"], case["cols"]
    dy_host = np.random.default_rng().standard_normal((rows, cols)).astype(np.float32)
    dy = guarded(dy_host, guard=GUARD)[0]
    whole = cudl.xp.zeros(cols + GUARD, np.float32)
    whole[cols:] = np.nan
    db = whole[:cols]
    load("bias_grad_tall")(*bias_grad_tall_launch(rows, cols), (dy, db, rows, cols))
    cudl.sync()
    check_guard(whole, cols, "db")
    d64 = dy_host.astype(np.float64)
    return [(db, d64.sum(axis=0), np.abs(d64).sum(axis=0), fp32_sum_rtol(rows))]
