"""Graders of chapter 15 (the capstone: a GPT trained on the book's kernels): three of the small kernels of
kernels_src/15-capstone/gpt_ops.cu. The token embedding's backward pass, a deterministic scatter-add that adds
into the gradient the tied output head left; the unscale-and-clip of loss-scaled gradients, as
torch.nn.utils.clip_grad_norm_; and, speed-graded, the fp16 cast with its transposed copy. Inputs are followed
in memory by poison (NaN, or the largest integer) and outputs by a guard zone (see cudl.grade.guard).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.checks import U32, deterministic, same_bits
from cudl.grade.guard import check_guard, guarded, guarded_output

GUARD = 256


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ------------------------------------------------------------------------------ embedding_backward

EMB_BLOCK = 128  # threads per block; one block per vocabulary row


def token_segments(tokens: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts) as gpt_train.token_segments: the rows sorted by token (stable), where each token begins."""
    order = np.argsort(tokens, kind="stable").astype(np.int32)
    starts = np.zeros(vocab + 1, np.int32)
    np.cumsum(np.bincount(tokens, minlength=vocab), out=starts[1:])
    return order, starts


def _draw_tokens(rng: np.random.Generator, vocab: int, rows: int, skew: float) -> np.ndarray:
    """`rows` tokens: uniform over a random 3/4 of the vocabulary (so some tokens are absent from the batch;
    the last token, whose block is the grid's last, present or absent by a coin flip), then a fraction `skew`
    of the rows replaced by one hot token."""
    present = rng.permutation(vocab)[: max(1, (3 * vocab) // 4)]
    tokens = rng.choice(present, rows)
    if vocab > 1 and rng.random() < 0.5:
        tokens[tokens == vocab - 1] = present[0] if present[0] != vocab - 1 else 0
    elif vocab > 1:
        tokens[-1] = vocab - 1
    hot = rng.random(rows) < skew
    tokens[hot] = rng.integers(vocab)
    return tokens.astype(np.int64)


EMB_CASES = [dict(vocab=1, rows=1, C=1), dict(vocab=7, rows=5, C=100), dict(vocab=50, rows=300, C=768, skew=0.9),
             dict(vocab=1000, rows=2048, C=1000), dict(vocab=512, rows=8192, C=130, skew=0.9),
             dict(vocab=50304, rows=16384, C=768)]
EMB_EMU_CASES = [dict(vocab=1, rows=1, C=1), dict(vocab=7, rows=5, C=100), dict(vocab=50, rows=300, C=768, skew=0.9),
                 dict(vocab=64, rows=200, C=1000), dict(vocab=40, rows=600, C=130, skew=0.9),
                 dict(vocab=300, rows=256, C=257)]


@grader("embedding_backward", kernels=["embedding_backward"], cases=EMB_CASES, emulator_cases=EMB_EMU_CASES,
        hint=["block v owns row v of dwte: it walks the rows of token v in the order the host sorted them "
              "(order[starts[v]] .. order[starts[v + 1] - 1]), its threads splitting the C columns, and adds "
              "the sum to what dwte already holds (the output head's gradient); no other block touches row "
              "v, so no atomics are needed and the order of the additions is fixed",
              "column c = threadIdx.x, then c += blockDim.x while c < C (C need not be a multiple of 128); for "
              "each, acc = 0 summed over i = starts[v] .. starts[v + 1] - 1 of dx[order[i] * C + c]; a token "
              "with no rows leaves its row of dwte as it was",
              "for (int c = threadIdx.x; c < C; c += blockDim.x) { float acc = 0.f; for (int i = begin; i < end; "
              "i++) acc += dx[(long long)order[i] * C + c]; dwte[(long long)v * C + c] += acc; } with begin = "
              "starts[blockIdx.x], end = starts[blockIdx.x + 1]"])
def embedding_backward(load: Any, case: dict[str, Any]) -> list[tuple[Any, ...]]:
    """dwte[v] += sum of dx[r] over the rows r of token v, in the order of `order`; grid (vocab,), block (128,)."""
    vocab, rows, C = case["vocab"], case["rows"], case["C"]
    rng = np.random.default_rng()
    tokens = _draw_tokens(rng, vocab, rows, case.get("skew", 0.0))
    order_h, starts_h = token_segments(tokens, vocab)
    dx_h = rng.standard_normal((rows, C), np.float32)
    head_h = (rng.standard_normal((vocab, C)) * rng.uniform(0.1, 2)).astype(np.float32)  # the tied head's dW
    dx = guarded(dx_h, guard=GUARD)[0]
    order, starts = guarded(order_h, guard=GUARD)[0], guarded(starts_h, guard=GUARD)[0]
    dwte, whole = guarded_output((vocab, C), np.float32, guard=GUARD)
    kernel = load("embedding_backward")

    def launch() -> None:
        dwte[...] = cudl.xp.asarray(head_h)  # the kernel adds into it: start again from the head's gradient
        kernel((vocab,), (EMB_BLOCK,), (dx, order, starts, dwte, C))

    launch()
    cudl.sync()
    check_guard(whole, vocab * C, "dwte")
    # the same bits on a second run, on the emulator with blocks and threads in reverse order
    deterministic(launch, [("dwte", dwte)], "each token's rows must be added in the order the host sorted them, "
                  "by one thread per column (atomicAdd adds them in whatever order the threads arrive)")
    check_guard(whole, vocab * C, "dwte")
    # float64 reference; a float32 sum of the k rows of a token plus the head's value, in any order, is within
    # (k + 1) U32 (|head| + sum |dx rows|) of it (cudl.grade.checks): the bound grows with each token's count
    d64 = dx_h.astype(np.float64)
    ref, size = head_h.astype(np.float64), np.abs(head_h).astype(np.float64)
    np.add.at(ref, tokens, d64)
    np.add.at(size, tokens, np.abs(d64))
    count = np.bincount(tokens, minlength=vocab).astype(np.float64)[:, None]
    return [(dwte, ref, 2 * (count + 1) * size, U32)]


# ------------------------------------------------------------------------------ grad_clip

CLIP_GRID = 120  # blocks at most: fewer than n / 256 for the larger cases, so the kernel needs a grid-stride loop
CLIP_BLOCK = 256
EPS = 1e-6  # torch.nn.utils.clip_grad_norm_ divides by norm + 1e-6

# ratio: the unscaled gradient norm over max_norm (below 1: no clipping); scale: the loss scale S
CLIP_CASES = [dict(n=1, scale=1, ratio=3.0), dict(n=255, scale=1, ratio=0.5), dict(n=1000, scale=2**12, ratio=4.0),
              dict(n=5000, scale=2**16, ratio=2.0, max_norm=1e-3), dict(n=2**20 + 3, scale=2**16, ratio=0.7),
              dict(n=2**24, scale=2**12, ratio=1.5)]
CLIP_EMU_CASES = [dict(n=1, scale=1, ratio=3.0), dict(n=255, scale=1, ratio=0.5), dict(n=1000, scale=2**12, ratio=4.0),
                  dict(n=5000, scale=2**16, ratio=2.0, max_norm=1e-3), dict(n=40_000, scale=2**16, ratio=0.7),
                  dict(n=70_001, scale=2**12, ratio=1.5)]


@grader("grad_clip", kernels=["grad_unscale_clip"], cases=CLIP_CASES, emulator_cases=CLIP_EMU_CASES,
        hint=["g holds the gradients multiplied by the loss scale S, and *norm_sq their squared norm (scaled "
              "too): the norm clipping compares with max_norm is the unscaled one, sqrt(*norm_sq) / S; every "
              f"element gets one factor, the same for all; the grid has at most {CLIP_GRID} blocks, fewer "
              "than the elements",
              "norm = sqrtf(*norm_sq) * inv_scale; factor = inv_scale * min(1, max_norm / (norm + 1e-6)) "
              "(below max_norm the gradients are only unscaled); then a grid-stride loop multiplies g[i] by it",
              "const float factor = inv_scale * fminf(1.f, max_norm / (sqrtf(*norm_sq) * inv_scale + 1e-6f)); "
              "for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)"
              "gridDim.x * blockDim.x) g[i] *= factor;"])
def grad_clip(load: Any, case: dict[str, Any]) -> list[tuple[Any, ...]]:
    """g *= min(1, max_norm / (||g|| / S + 1e-6)) / S in place; block 256, grid min(ceil(n / 256), 120)."""
    n, S = case["n"], float(case["scale"])
    rng = np.random.default_rng()
    max_norm = case.get("max_norm", float(rng.uniform(0.5, 2.0)))
    u = rng.standard_normal(n) * rng.uniform(0.1, 10, n) ** 2  # unequal sizes, as real gradients
    u *= case["ratio"] * max_norm / np.linalg.norm(u)  # the unscaled norm is ratio x max_norm
    g_h = (u * S).astype(np.float32)  # what the backward pass left: S times the gradient
    norm_sq_h = np.array([np.sum(g_h.astype(np.float64) ** 2)], np.float32)
    g, whole = guarded(g_h, guard=GUARD)
    norm_sq = guarded(norm_sq_h, guard=GUARD)[0]
    load("grad_unscale_clip")((min(_cdiv(n, CLIP_BLOCK), CLIP_GRID),), (CLIP_BLOCK,),
                              (g, n, norm_sq, np.float32(1 / S), np.float32(max_norm)))
    cudl.sync()
    check_guard(whole, n, "g")
    norm = np.sqrt(float(norm_sq_h[0])) / S
    factor = min(1.0, max_norm / (norm + EPS)) / S
    ref = g_h.astype(np.float64) * factor
    # the factor is a few fp32 operations (sqrt, products, a division, + 1e-6), each off by U32 at most, and the
    # product with g one more rounding: 8 U32 relative to each element; leaving out the 1e-6 is off by
    # 1e-6 / norm relative, over 100 U32 where max_norm is 1e-3
    return [(g, ref, np.abs(ref), 8 * U32)]


# ------------------------------------------------------------------------------ challenge: cast_transpose

TILE = 32
CT_BLOCK = (32, 8)


def cast_transpose_launch(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return (_cdiv(cols, TILE), _cdiv(rows, TILE)), CT_BLOCK


def _halfway(rng: np.random.Generator, size: int) -> np.ndarray:
    """float32 values exactly halfway between two neighbouring fp16 values (normal range, either sign): round to
    nearest even, half away from zero, half up and truncation each give a different half there."""
    h = rng.integers(0x0400, 0x7bff, size).astype(np.uint16)  # finite normal halves, below the largest
    lo = h.view(np.float16).astype(np.float32)
    hi = (h + 1).view(np.float16).astype(np.float32)
    return ((lo + hi) / 2 * rng.choice([-1, 1], size)).astype(np.float32)  # exact: one more bit than fp16


# outs: which outputs the launch asks for ("y" or "yt" alone: the other pointer is null); scale: a power of two
# (2^12, a loss scale: the planted ties stay ties after the product), 1, or drawn from [0.3, 3]
CT_CASES = [dict(rows=1, cols=1, scale="drawn"), dict(rows=33, cols=65, scale=2**12),
            dict(rows=31, cols=100, outs="y", scale=1), dict(rows=1000, cols=768, outs="yt", scale="drawn"),
            dict(rows=768, cols=3072, scale=2**12), dict(rows=16384, cols=3072, scale="drawn")]
CT_EMU_CASES = [dict(rows=1, cols=1, scale="drawn"), dict(rows=33, cols=65, scale=2**12),
                dict(rows=31, cols=100, outs="y", scale=1), dict(rows=200, cols=96, outs="yt", scale="drawn"),
                dict(rows=96, cols=330, scale=2**12), dict(rows=130, cols=257, scale="drawn")]


@grader("cast_transpose", kernels=["cast_transpose"], cases=CT_CASES, emulator_cases=CT_EMU_CASES,
        speed=dict(case=CT_CASES[-1], factor=2, bytes=16384 * 3072 * (4 + 2 + 2)),
        hint=["a block owns a 32 x 32 tile: its 32 x 8 threads read the tile row by row (coalesced), write y "
              "the same way, keep the scaled values in shared memory, and after a barrier read the tile down its "
              "columns so that the writes of yt, whose rows are x's columns, are coalesced too; the tiles on the "
              "right and bottom edges are partial",
              "loading: for i = threadIdx.y, i + 8, ... < 32: r = blockIdx.y * 32 + i, c = blockIdx.x * 32 + "
              "threadIdx.x, if (r < rows && c < cols) tile[i][threadIdx.x] = scale * x[r * cols + c] (and y); "
              "storing: c = blockIdx.x * 32 + i, r = blockIdx.y * 32 + threadIdx.x, yt[c * rows + r] = "
              "tile[threadIdx.x][i]; a row of 33 floats keeps the column reads free of bank conflicts",
              "__float2half_rn rounds to nearest even (truncation is off by one in the last bit for about half "
              "the values); when yt is null skip the second phase for the whole block (the barrier must be met "
              "by all threads or none); the scale multiplies what goes to both outputs"])
def cast_transpose(load: Any, case: dict[str, Any]) -> list[tuple[Any, ...]]:
    """y = half(scale x) [rows, cols] and yt = its transpose [cols, rows], either of them null; fp16 as bits."""
    rows, cols, outs = case["rows"], case["cols"], case.get("outs", "both")
    rng = np.random.default_rng()
    scale = np.float32(rng.uniform(0.3, 3.0) if case["scale"] == "drawn" else case["scale"])
    x_h = (rng.standard_normal((rows, cols)) * rng.uniform(0.5, 4)).astype(np.float32)
    if case["scale"] != "drawn":  # about one element in 16 (and the last) a tie of fp16 after the scaling
        pick = rng.random((rows, cols)) < 1 / 16
        pick.flat[-1] = True
        x_h[pick] = _halfway(rng, int(pick.sum())) / scale
    # a few that overflow fp16 or are subnormal there
    special = rng.random((rows, cols)) < 1 / 64
    x_h[special] = (rng.choice([7e4, -1e5, 3e-6, -2e-7, 6.1e-5], int(special.sum())) / scale).astype(np.float32)
    x = guarded(x_h, guard=GUARD)[0]
    y, ybuf = guarded_output((rows, cols), np.float16, guard=GUARD) if outs != "yt" else (None, None)
    yt, ytbuf = guarded_output((cols, rows), np.float16, guard=GUARD) if outs != "y" else (None, None)
    load("cast_transpose")(*cast_transpose_launch(rows, cols), (x, y, yt, rows, cols, scale))
    cudl.sync()
    want = (scale * x_h).astype(np.float16)  # the fp32 product, rounded once to nearest even
    why = ("y = __float2half_rn(scale * x): one fp32 product, then one rounding to the nearest fp16 with ties to "
           "even (overflow to infinity, subnormals kept)")
    pairs = []
    if y is not None:
        check_guard(ybuf, rows * cols, "y")
        same_bits(y.view(np.uint16), want.view(np.uint16), "y", why, fp16=True)
        pairs.append((y.view(np.uint16), want.view(np.uint16)))
    if yt is not None:
        check_guard(ytbuf, rows * cols, "yt")
        same_bits(yt.view(np.uint16), np.ascontiguousarray(want.T).view(np.uint16), "yt", "yt[c][r] = y[r][c]; "
                  + why, fp16=True)
        pairs.append((yt.view(np.uint16), np.ascontiguousarray(want.T).view(np.uint16)))
    return pairs
