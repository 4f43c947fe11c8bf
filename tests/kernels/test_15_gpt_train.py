"""Chapter 15 (capstone): the GPT training step of kernels_src/15-capstone/gpt_train.py and its glue kernels.

Kernels of gpt_ops.cu against float64 NumPy on fresh random inputs (tests/conftest.py prints the seed of a
failure), NaN-poisoned outputs, odd sizes; each sum within n u32 times the sum of its terms' magnitudes
(fp32's rounding, n terms), each copy or fp16 rounding exact. Each kernel has a mutant that must fail.

The step at the toy size (2 layers, d = 128, 2 heads of 64, context 64, 256 byte tokens, 2 sequences) against
the PyTorch twin in float64 (skipped without torch). The tolerance is measured, not guessed: the twin run a
second time in float64 but rounded to fp16 exactly where the book's step rounds (GEMM and attention operands,
the gradients it casts) shows what fp16 alone costs on these inputs; the book must lie within twice that
distance of the float64 twin, per parameter (by norm) and for the per-token losses. A wrong kernel lands tens
to thousands of times farther. (The book also rounds attention's P to fp16 inside the kernels, which the
twin does not: that is the factor 2.)
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import cudl
from cudl.compile import KERNELS_DIR

sys.path.insert(0, str(KERNELS_DIR / "15-capstone"))
import gpt_train as gt  # noqa: E402

U32 = 2.0**-24
OPS = gt.OPS
# The step's tests run kernel 3's path ("sm80") on the emulator unless they name another: the emulator's
# default T4 would pick "sm75", whose WMMA GEMM the emulator runs ~9 times slower (each lane computes the whole
# 16 x 16 tile, cudl/emulator/include/cudl_wmma.h); test_loss_and_gradients_match_the_twin runs every path.
# On a GPU, the GPU's own path.
ARCH = None if cudl.on_gpu() else "sm80"


def dev(a):
    return cudl.xp.asarray(a)


def host(a) -> np.ndarray:
    return cudl.to_numpy(a)


def load(name: str, source: str | None = None):
    return cudl.load(source or OPS, name)


# ------------------------------------------------------------------------------------ kernels


def embedding_forward(k, rng):
    batch, seq, C, V = 3, 7, 37, 11
    tokens = rng.integers(0, V, batch * seq).astype(np.int32)
    wte, wpe = rng.standard_normal((V, C), np.float32), rng.standard_normal((seq, C), np.float32)
    x = cudl.poisoned((batch * seq, C))
    k((5,), 256, (dev(tokens), dev(wte), dev(wpe), x, batch * seq, seq, C))
    pos = np.arange(batch * seq) % seq
    ref = wte[tokens].astype(np.float64) + wpe[pos]
    return host(x), ref, U32 * (np.abs(wte[tokens]) + np.abs(wpe[pos]))


def embedding_backward(k, rng):
    T, C, V = 45, 37, 13
    tokens = rng.integers(0, V - 2, T)  # the last two tokens never appear: their rows stay as they were
    dx = rng.standard_normal((T, C), np.float32)
    base = rng.standard_normal((V, C), np.float32)  # the tied head's gradient, which the kernel adds to
    order, starts = gt.token_segments(tokens, V)
    out = dev(base.copy())
    k((V,), 128, (dev(dx), dev(order), dev(starts), out, C))
    ref, mag = base.astype(np.float64), np.abs(base).astype(np.float64)
    np.add.at(ref, tokens, dx.astype(np.float64))
    np.add.at(mag, tokens, np.abs(dx).astype(np.float64))
    return host(out), ref, T * U32 * mag


def position_backward(k, rng):
    batch, seq, C = 3, 5, 19
    dx = rng.standard_normal((batch * seq, C), np.float32)
    out = cudl.poisoned((seq, C))
    k((3,), 256, (dev(dx), out, batch, seq, C))
    d = dx.reshape(batch, seq, C).astype(np.float64)
    return host(out), d.sum(axis=0), batch * U32 * np.abs(d).sum(axis=0)


def block_sum(k, rng):
    n, parts = 10007, 7
    x = rng.standard_normal(n, np.float32)
    partial, total = cudl.poisoned(parts), cudl.poisoned(1)
    k((parts,), 256, (dev(x), n, 1, partial))
    k((1,), 256, (partial, parts, 0, total))
    x2 = x.astype(np.float64) ** 2
    return host(total), np.array([x2.sum()]), np.array([(n + parts) * U32 * x2.sum()])


def grad_unscale_clip(k, rng):
    n, scale = 1000, 1024.0
    g = rng.standard_normal(n, np.float32) * 3
    out = []
    for max_norm in (1.0, 1e6):  # clipped, and not
        norm_sq = np.float32((g.astype(np.float64) ** 2).sum())
        buf = dev(g.copy())
        k((2,), 256, (buf, n, dev(np.array([norm_sq])), 1 / scale, max_norm))
        norm = np.sqrt(np.float64(norm_sq)) / scale
        out.append((host(buf), g * min(1.0, max_norm / (norm + 1e-6)) / scale))
    got, ref = np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])
    return got, ref, 8 * U32 * np.abs(ref)  # sqrt, divide, min, multiply: a few roundings of the factor


def bias_grad_reduce(k, rng):
    parts, cols = 70, 37  # more parts than the 32 lanes (each lane adds 2 or 3), a partial block of columns
    part = rng.standard_normal((parts, cols), np.float32)
    out = cudl.poisoned(cols)
    k((2,), (32, 32), (dev(part), parts, cols, out))
    p = part.astype(np.float64)
    return host(out), p.sum(axis=0), parts * U32 * np.abs(p).sum(axis=0)


def layernorm_backward_add(k, rng):
    """dx = acc + LayerNorm's input gradient on 13 rows x 44 columns (11 float4 on a 32-thread block) in 3
    parts (the row loop runs), dw and db from the partials through fused_rows' reduce; all against float64."""
    rows, cols, parts = 13, 44, 3
    x, dy, acc = (rng.standard_normal((rows, cols), np.float32) for _ in range(3))
    w = rng.standard_normal(cols, np.float32)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1).astype(np.float32)
    rstd = (1 / np.sqrt(x64.var(axis=1) + gt.LN_EPS)).astype(np.float32)
    dx, dw_part, db_part = cudl.poisoned((rows, cols)), cudl.poisoned((parts, cols)), cudl.poisoned((parts, cols))
    dx[...] = dev(acc)  # in place: dx += LayerNorm's gradient
    k((parts,), 32, (dev(dy), dev(x), dev(w), dev(mean), dev(rstd), dx, dx, dw_part, db_part, rows, cols))
    dw, db = cudl.poisoned(cols), cudl.poisoned(cols)
    cudl.load("07-fusion/fused_rows.cu", "layernorm_backward_reduce<float>")(
        (2,), (32, 8), (dw_part, db_part, dw, db, parts, cols))
    mu, r, d = mean.astype(np.float64)[:, None], rstd.astype(np.float64)[:, None], dy.astype(np.float64)
    xh, g = (x64 - mu) * r, d * w
    mg, mgx = g.mean(axis=1, keepdims=True), (g * xh).mean(axis=1, keepdims=True)
    ln = r * (g - mg - xh * mgx)
    # each sum adds cols (dx) or rows + parts (dw, db) fp32 terms; xhat and g are a few roundings each
    bound_dx = (cols + 8) * U32 * r * (np.abs(g) + np.abs(g).mean(axis=1, keepdims=True)
                                       + np.abs(xh) * np.abs(g * xh).mean(axis=1, keepdims=True))
    bound_dx += 2 * U32 * (np.abs(acc) + np.abs(ln))
    got = np.concatenate([host(dx).ravel(), host(dw), host(db)])
    ref = np.concatenate([(acc + ln).ravel(), (d * xh).sum(axis=0), d.sum(axis=0)])
    bound = np.concatenate([bound_dx.ravel(), (rows + parts + 8) * U32 * np.abs(d * xh).sum(axis=0),
                            (rows + parts) * U32 * np.abs(d).sum(axis=0)])
    return got, ref, bound


def split_k_reduce(k, rng):
    slices, n = 5, 4 * 331  # 331 float4 on one block of 256 threads: the grid-stride loop runs
    part = rng.standard_normal((slices, n), np.float32)
    out = cudl.poisoned(n)
    k((1,), 256, (dev(part), slices, n, out))
    p = part.astype(np.float64)
    return host(out), p.sum(axis=0), slices * U32 * np.abs(p).sum(axis=0)


CASES = {"embedding_forward": embedding_forward, "embedding_backward": embedding_backward,
         "position_backward": position_backward, "block_sum": block_sum,
         "grad_unscale_clip": grad_unscale_clip, "bias_grad_reduce": bias_grad_reduce,
         "layernorm_backward_add": layernorm_backward_add, "split_k_reduce": split_k_reduce}


def failures(name: str, source: str | None = None) -> str | None:
    got, ref, bound = CASES[name](load(name, source), np.random.default_rng())
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)  # NaN (an unwritten output) is bad too
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        return (f"{name}: {bad.sum()} of {bad.size} outside the bound, first at flat index {i}: got "
                f"{got.ravel()[i]!r}, float64 {ref.ravel()[i]!r}, bound {bound.ravel()[i]:.3g}")
    return None


@pytest.mark.parametrize("name", CASES)
def test_kernel(name):
    msg = failures(name)
    assert msg is None, msg


def test_embedding_backward_is_deterministic():
    """Two runs on the same gradient give the same bits (the sum of each token's rows in a fixed order)."""
    rng = np.random.default_rng()
    T, C, V = 300, 64, 5  # many repeats of each token
    tokens = rng.integers(0, V, T)
    dx = dev(rng.standard_normal((T, C), np.float32))
    order, starts = gt.token_segments(tokens, V)
    k, outs = load("embedding_backward"), []
    for _ in range(2):
        out = dev(np.zeros((V, C), np.float32))
        k((V,), 128, (dx, dev(order), dev(starts), out, C))
        outs.append(host(out))
    assert np.array_equal(outs[0], outs[1])


def column_sums(part, parts: int, cols: int):
    """bias_grad_reduce of the first `parts` rows of a per-tile column-sum buffer."""
    out = cudl.poisoned(cols)
    load("bias_grad_reduce")((gt.cdiv(cols, 32),), (32, 32), (part, parts, cols, out))
    return host(out)


def sums_failure(what: str, got, terms: np.ndarray, slack: np.ndarray | float = 0.0) -> str | None:
    """got against the float64 column sums of `terms`, within (rows + 32 lanes) u32 times the sum of the
    magnitudes (each sum adds at most that many fp32 terms in turn), plus `slack` per column (the terms' own
    fp32 error)."""
    t = terms.astype(np.float64)
    err, bound = np.abs(got - t.sum(axis=0)), (len(t) + 32) * U32 * np.abs(t).sum(axis=0) + slack
    if not (err <= bound).all():
        i = int(np.argmax(~(err <= bound)))
        return f"{what}: column {i} {got[i]!r}, float64 {t[:, i].sum()!r}"
    return None


ERF = np.vectorize(__import__("math").erf)


def cast_case(source: str | None = None, both: bool = True, cols: int = 77, kind: str = "plain") -> str | None:
    """cast_transpose on 45 x cols (partial tiles both ways; odd cols: the one-column path) with its epilogue
    (kind: plain v = scale x, gelu v = scale gelu(x + b), grad v = scale x gelu'(pre + b)): y = fp16(v), yt =
    y^T, and the per-tile column sums of v, reduced. Plain: exact. GELU: v's fp32 error (erf, exp and a few
    roundings: 16 u32 of its terms) plus fp16's half ulp."""
    rng = np.random.default_rng()
    rows, scale = 45, 3.0
    x, pre = (rng.standard_normal((rows, cols), np.float32) for _ in range(2))
    b = rng.standard_normal(cols, np.float32)
    y, yt = cudl.poisoned((rows, cols), np.float16), cudl.poisoned((cols, rows), np.float16)
    part = cudl.poisoned((2, cols))
    args = {"plain": (None, None), "gelu": (None, dev(b)), "grad": (dev(pre), dev(b))}[kind]
    load("cast_transpose", source)((gt.cdiv(cols, 64), 2), (32, 8),
                                   (dev(x), *args, y, yt if both else None, part, rows, cols, scale))
    x64, s64 = x.astype(np.float64), np.float64(scale)
    if kind == "plain":
        v, err32 = (np.float32(scale) * x).astype(np.float64), 0.0  # exactly the fp32 product
    elif kind == "gelu":
        u = x64 + b
        v, err32 = s64 * 0.5 * u * (1 + ERF(u / np.sqrt(2))), 16 * U32 * s64 * (np.abs(x64) + np.abs(b))
    else:
        u = pre.astype(np.float64) + b
        cdf, pdf = 0.5 * (1 + ERF(u / np.sqrt(2))), np.exp(-0.5 * u * u) / np.sqrt(2 * np.pi)
        v = s64 * x64 * (cdf + u * pdf)
        err32 = 16 * U32 * s64 * np.abs(x64) * (cdf + np.abs(u) * pdf + np.abs(u))
    got = host(y).astype(np.float64)
    if not (np.abs(got - v) <= 2.0**-11 * (np.abs(v) + err32) + 2.0**-25 + err32).all():
        return "y differs from fp16(v)"
    if both and not np.array_equal(host(yt), host(y).T):
        return "yt differs from the transpose of y"
    if not both and not np.isnan(host(yt)).all():
        return "yt written though null"
    return sums_failure("cast_transpose column sums", column_sums(part, 2, cols), v,
                        np.sum(err32 * np.ones_like(v), axis=0))


@pytest.mark.parametrize(("kind", "both", "cols"), [("plain", True, 77), ("plain", False, 77), ("plain", True, 130),
                                                    ("plain", False, 130), ("gelu", True, 77), ("grad", False, 130)])
def test_cast_transpose(kind, both, cols):
    msg = cast_case(both=both, cols=cols, kind=kind)
    assert msg is None, msg


def test_bias_sums_are_deterministic():
    """cast_transpose's column sums and their reduce, twice on the same input: the same bits."""
    rng = np.random.default_rng()
    rows, cols = 300, 96
    x, y = dev(rng.standard_normal((rows, cols), np.float32)), cudl.poisoned((rows, cols), np.float16)
    outs = []
    for _ in range(2):
        part = cudl.poisoned((gt.cdiv(rows, 32), cols))
        load("cast_transpose")((2, gt.cdiv(rows, 32)), (32, 8), (x, None, None, y, None, part, rows, cols, 1.0))
        outs.append(column_sums(part, gt.cdiv(rows, 32), cols))
    assert np.array_equal(outs[0], outs[1])


def residual_layernorm_case(source: str | None = None, residual: bool = True, transpose: bool = True) -> str | None:
    """residual_layernorm on 21 rows (a full tile of 16 and a partial one) x 256 (2 float4 per lane): res = x + y
    + bias within 2 u32, mean and rstd within (cols + 8) u32 of float64 (sums of cols terms), h = fp16 of the
    float64 LayerNorm within that error plus fp16's half ulp, ht = h^T."""
    rng = np.random.default_rng()
    rows, cols = 21, 256
    x, y = (rng.standard_normal((rows, cols), np.float32) for _ in range(2))
    bias, w, b = (rng.standard_normal(cols, np.float32) for _ in range(3))
    res, h, ht = cudl.poisoned((rows, cols)), cudl.poisoned((rows, cols), np.float16), cudl.poisoned((cols, rows),
                                                                                                     np.float16)
    mean, rstd = cudl.poisoned(rows), cudl.poisoned(rows)
    extra = (dev(y), dev(bias), res) if residual else (None, None, None)
    load("residual_layernorm", source)((2,), 128, (dev(x), *extra, dev(w), dev(b), h, ht if transpose else None,
                                                   mean, rstd, rows, cols, gt.LN_EPS), shared_mem=16 * (cols + 2) * 2)
    v = x.astype(np.float64) + ((y.astype(np.float64) + bias) if residual else 0)
    mag = np.abs(x) + ((np.abs(y) + np.abs(bias)) if residual else 0)
    if residual and not (np.abs(host(res) - v) <= 2 * U32 * mag).all():
        return "res differs from x + y + bias"
    mu, sd = v.mean(axis=1), np.sqrt(v.var(axis=1) + gt.LN_EPS)
    tol = (cols + 8) * U32
    if not (np.abs(host(mean) - mu) <= tol * np.abs(v).mean(axis=1) + 2 * U32 * mag.mean(axis=1)).all():
        return "mean differs"
    if not (np.abs(host(rstd) * sd - 1) <= tol * (1 + (mag / sd[:, None]).max(axis=1))).all():
        return "rstd differs"
    xh = (v - mu[:, None]) / sd[:, None]
    ref = xh * w + b
    err32 = tol * (1 + (mag / sd[:, None]).max(axis=1, keepdims=True)) * (np.abs(xh) + 1) * np.abs(w) + 2 * U32 * (
        np.abs(xh * w) + np.abs(b))
    got = host(h).astype(np.float64)
    if not (np.abs(got - ref) <= 2.0**-11 * (np.abs(ref) + err32) + 2.0**-25 + err32).all():
        return "h differs from fp16 of the LayerNorm"
    if transpose and not np.array_equal(host(ht), host(h).T):
        return "ht differs from the transpose of h"
    if not transpose and not np.isnan(host(ht)).all():
        return "ht written though null"
    return None


@pytest.mark.parametrize(("residual", "transpose"), [(True, True), (False, False)])
def test_residual_layernorm(residual, transpose):
    msg = residual_layernorm_case(residual=residual, transpose=transpose)
    assert msg is None, msg


HEADS_SHAPES = [(2, 37, 3, 8), (1, 40, 2, 64)]  # batch, seq, heads, hd: seq not a multiple of the 32-tile


def heads_case(source: str | None = None, shape: tuple[int, int, int, int] = HEADS_SHAPES[0]) -> str | None:
    """split_heads with bias (3 parts) into fp16 [B H, S, hd], exact (8-thread blocks: the row loop runs),
    and merge_heads back to fp16 rows, exact, with the transposed copy and the column sums."""
    rng = np.random.default_rng()
    batch, seq, heads, hd = shape
    C, rows = heads * hd, batch * seq
    src = rng.standard_normal((rows, 3 * C), np.float32)
    bias = rng.standard_normal(3 * C, np.float32)
    outs = [cudl.poisoned((batch * heads, seq, hd), np.float16) for _ in range(3)]
    load("split_heads", source)((rows,), 8, (dev(src), dev(bias), *outs, batch, seq, heads, hd, 3))
    rows16 = (src + bias).astype(np.float16)
    ref = rows16.reshape(batch, seq, 3, heads, hd).transpose(2, 0, 3, 1, 4)
    for p in range(3):
        if not np.array_equal(host(outs[p]), ref[p].reshape(batch * heads, seq, hd)):
            return f"split_heads: part {p} differs"
    tiles = batch * gt.cdiv(seq, 32)
    y, yt, part = (cudl.poisoned((rows, 3 * C), np.float16), cudl.poisoned((3 * C, rows), np.float16),
                   cudl.poisoned((tiles, 3 * C)))
    load("merge_heads", source)((gt.cdiv(seq, 32), batch * heads, 3), 256,
                                (*outs, y, yt, part, batch, seq, heads, hd, 3))
    if not np.array_equal(host(y), rows16):
        return "merge_heads does not invert split_heads"
    if not np.array_equal(host(yt), rows16.T):
        return "merge_heads: yt differs from the transpose"
    return sums_failure("merge_heads column sums", column_sums(part, tiles, 3 * C), rows16)


@pytest.mark.parametrize("shape", HEADS_SHAPES, ids=["hd8", "hd64"])
def test_split_and_merge_heads(shape):
    msg = heads_case(shape=shape)
    assert msg is None, msg


# (kernel, line, replacement, check): one slip each; every one must fail its check
MUTANTS = {
    "embedding_forward: position of the batch": ("(long long)(r % seq) * C", "(long long)(r / seq) * C", "k"),
    "embedding_backward: overwrites the head's part": ("dwte[(long long)v * C + c] += acc;",
                                                       "dwte[(long long)v * C + c] = acc;", "k"),
    "embedding_backward: last row of a token lost": ("i < end; i++", "i < end - 1; i++", "k"),
    "position_backward: last sequence lost": ("b < batch; b++", "b < batch - 1; b++", "k"),
    "residual_layernorm: bias left out": ("if (bias) {\n                    const float4 e",
                                          "if (!bias) {\n                    const float4 e", "resln"),
    "residual_layernorm: variance about 0": ("make_float4(v[k].x - mu, v[k].y - mu, v[k].z - mu, v[k].w - mu)",
                                             "make_float4(v[k].x, v[k].y, v[k].z, v[k].w)", "resln"),
    "residual_layernorm: last row of a tile lost": ("i < LN_ROWS; i += blockDim.x / WARP",
                                                    "i < LN_ROWS - 1; i += blockDim.x / WARP", "resln"),
    "residual_layernorm: no barrier": ("    __syncthreads();\n    // thread t: row t % 16",
                                       "    // thread t: row t % 16", "resln-race"),
    "block_sum: squares left out": ("square ? x[i] * x[i] : x[i]", "x[i]", "k"),
    "grad_unscale_clip: never clips": ("fminf(1.f, max_norm", "fmaxf(1.f, max_norm", "k"),
    "split_k_reduce: last slice left out": ("j < slices; j++", "j < slices - 1; j++", "k"),
    "split_k_reduce: a slice read twice": ("p[j * n4 + i]", "p[(j - 1) * n4 + i]", "k"),
    "bias_grad_reduce: last lane left out": ("k < WARP; k++) s += sums", "k < WARP - 1; k++) s += sums", "k"),
    "layernorm_backward_add: residual gradient not added": ("if (acc) {", "if (!acc) {", "k"),
    "layernorm_backward_add: mean(g xhat) term dropped": ("r * (g.w - mg - xh.w * mgx)", "r * (g.w - mg)", "k"),
    "layernorm_backward_add: db partial misses a row": ("db = make_float4(db.x + d.x",
                                                        "if (row + gridDim.x < rows) db = make_float4(db.x + d.x",
                                                        "k"),
    "cast_transpose: second column's value lost": ("tile[i][2 * threadIdx.x + 1] = v1;",
                                                   "tile[i][2 * threadIdx.x + 1] = v0;", "cast"),
    "cast_transpose: no barrier": ("    __syncthreads();\n    if (yt) {\n#pragma unroll",
                                   "    if (yt) {\n#pragma unroll", "cast-race"),
    "cast_transpose: last tile row left out of the sums": ("i < TILE_ROWS; i++) acc += tile[i][j]",
                                                           "i < TILE_ROWS - 1; i++) acc += tile[i][j]", "cast"),
    "cast_transpose: GELU's bias left out": ("gelu_erf(x + bias)", "gelu_erf(x)", "cast-gelu"),
    "cast_transpose: GELU's derivative at x, not at pre": ("gelu_erf_grad(pre + bias)", "gelu_erf_grad(x + bias)",
                                                           "cast-grad"),
    "cast_transpose: padding of a GELU tile not zeroed": (
        "const float v1 = in1 ? epilogue(v[k].y, u[k].y, b.y, kind, scale) : 0.f;",
        "const float v1 = epilogue(v[k].y, u[k].y, b.y, kind, scale);", "cast-gelu"),
    "split_heads: heads swapped with rows": ("r = blockIdx.x, b = r / seq, s = r - b * seq;",
                                             "r = blockIdx.x, s = r / seq, b = r - s * seq;", "heads"),
    "merge_heads: part 2 read from part 1": ("(p == 0 ? src0 : p == 1 ? src1 : src2);",
                                             "(p == 0 ? src0 : p == 1 ? src1 : src1);", "heads"),
    "merge_heads: yt of the first sequence only": ("rows + b * seq + s0 + s] = tile[s][d]",
                                                   "rows + s0 + s] = tile[s][d]", "heads"),
    "merge_heads: last position left out of the sums": ("s < WARP; s++) acc +=", "s < WARP - 1; s++) acc +=",
                                                        "heads"),
}
KERNEL_OF = {m: m.split(":")[0] for m in MUTANTS}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_check_fails_on_mutants(mutant, mutated_kernel):
    old, new, check = MUTANTS[mutant]
    src = mutated_kernel("15-capstone", "gpt_ops", old, new, race=check.endswith("-race"))
    try:
        if check == "k":
            msg = failures(KERNEL_OF[mutant], src)
        elif check.startswith("resln"):
            msg = residual_layernorm_case(src)
        elif check.startswith("cast"):
            msg = cast_case(src, kind={"cast-gelu": "gelu", "cast-grad": "grad"}.get(check, "plain"))
        else:
            msg = heads_case(src)
    except cudl.KernelFault as fault:  # the race check stops the launch
        msg = str(fault)
    assert msg, f"the check passes a kernel with '{mutant}'"


def test_token_segments():
    tokens = np.array([[3, 1, 3], [0, 3, 1]])
    order, starts = gt.token_segments(tokens, 5)
    assert order.tolist() == [3, 1, 5, 0, 2, 4]  # token 0 at row 3; 1 at rows 1, 5; 3 at rows 0, 2, 4
    assert starts.tolist() == [0, 1, 3, 3, 6, 6]


# ------------------------------------------------------------------------------------ the step vs the twin

BATCH = 2


@pytest.fixture(scope="module")
def toy():
    """The toy config, its initial parameters (seed printed on failure through the test seed), and the
    book's corpus in batches."""
    torch = pytest.importorskip("torch")
    seed = int(np.random.default_rng().integers(2**31))
    params = gt.init_params(gt.TOY, seed)
    batches = gt.Batches(gt.corpus("book"), BATCH, gt.TOY.seq, seed=seed)
    return torch, seed, params, batches


def twins(torch, params, scale):
    t64 = gt.Twin(gt.TOY, params, dtype=torch.float64)
    t16 = gt.Twin(gt.TOY, params, dtype=torch.float64, fp16_at_book_sites=True, loss_scale=scale)
    return t64, t16


def rel(a, b, size) -> float:
    return float(np.linalg.norm(a - b) / (np.linalg.norm(size) or 1.0))


def runnable(arch: str) -> None:
    """Skip a path this device cannot run: one newer than its own, or "sm90" (kernel 5) on the emulator."""
    if arch == "sm90" and not cudl.on_gpu() or gt.ARCHS.index(arch) > gt.ARCHS.index(gt.device_arch()) \
            and cudl.on_gpu():
        pytest.skip(f"path {arch} needs a newer GPU than this device's ({gt.device_arch()})")


@pytest.mark.parametrize("arch", gt.ARCHS)
def test_loss_and_gradients_match_the_twin(toy, arch):
    """One step of each path (sm75: a T4's kernels, forced on any device) against the twins; every product
    it launches has M, N and K multiples of its GEMM's tile and K step (kernels 1 and 3 have no bounds
    checks)."""
    runnable(arch)
    torch, seed, params, batches = toy
    x, y = batches.next()
    model = gt.Model(gt.TOY, BATCH, params, arch=arch)
    assert model.arch == arch
    shapes, gemm = [], model.gemm

    def spy(a, b, c, M, N, K, split=False):
        shapes.append((M, N, K))
        gemm(a, b, c, M, N, K, split=split)

    model.gemm = spy
    model.forward_backward(x, y)
    assert len(shapes) == 3 + 12 * gt.TOY.layers  # the head: 1 forward, 2 backward; 4 + 8 per layer
    assert all(M % gt.GEMM_TILE == 0 and N % gt.GEMM_TILE == 0 and K % gt.GEMM_STEP == 0 for M, N, K in shapes)
    t64, t16 = twins(torch, params, model.scale)
    l64, l16 = (t.losses(x, y) for t in (t64, t16))
    (l64.mean()).backward()
    (l16.mean()).backward()
    l64, l16 = l64.detach().numpy(), l16.detach().numpy()
    book = host(model.losses).astype(np.float64)
    bad = []
    err, fp16 = rel(book, l64, l64), rel(l16, l64, l64)
    if not err <= 2 * fp16:
        bad.append(f"per-token losses: {err:.2e} from float64, fp16's share {fp16:.2e}")
    gb, g64, g16 = model.gradients(), t64.gradients(), t16.gradients()
    for name in g64:
        err, fp16 = rel(gb[name], g64[name], g64[name]), rel(g16[name], g64[name], g64[name])
        if not err <= 2 * fp16:
            bad.append(f"{name}: gradient {err:.2e} from float64, fp16's share {fp16:.2e}")
    assert not bad, f"seed {seed}:\n" + "\n".join(bad)


def test_fp16_twin_unscales_before_clipping(toy):
    """A T4's baseline: the twin under fp16 autocast with PyTorch's GradScaler. The gradient norm it clips is the
    true one (within 2x of the float32 twin's; a norm of scaled gradients would be 2^12 times larger), and its
    steps lower the loss of a repeated batch (a scaler that skipped every step would not)."""
    torch, seed, params, batches = toy
    x, y = batches.next()
    t32 = gt.Twin(gt.TOY, params)
    t32.forward_backward(x, y)
    n32 = float(t32.optimizer_step())
    t16 = gt.Twin(gt.TOY, params, autocast=torch.float16)
    assert t16.scaler is not None and t32.scaler is None
    first = float(t16.forward_backward(x, y))
    n16 = float(t16.optimizer_step())
    assert 0.5 * n32 <= n16 <= 2 * n32, f"seed {seed}: clipped norm {n16:.3g}, the float32 twin's {n32:.3g}"
    for _ in range(5):
        last = float(t16.step(x, y))
    assert last < first, f"seed {seed}: loss {first:.4f} -> {last:.4f} after 6 steps on one batch"


def test_training_steps_track_the_twin(toy):
    """Four AdamW steps (clipping active: max_norm below the gradients' norm) on fresh batches: at each step,
    twins built from the book's own parameters (float64, and float64 rounded to fp16 at the book's sites) give
    the reference, so each step is checked as the one-step test checks the first: per-token losses within
    twice the fp16 twin's distance from the float64 twin, the gradient norm within the distance that the
    gradients may have (twice fp16's share). Twins that took their own steps are not the reference: after a
    few steps their distance from the book is a draw of the rounding noise amplified by AdamW (a CI run saw
    2.3x fp16's share at step 3), not a bound derived from the computation. The parameters themselves are not
    compared: AdamW's first steps are nearly lr sign(g), so an element whose gradient is near 0 (the key bias's
    is exactly 0: a row's scores all move by q.b) steps +-lr on rounding noise alone, on either side;
    test_optimizer_step_matches_float64 checks the update given the book's own gradients."""
    torch, seed, params, batches = toy
    hyper = gt.Hyper(lr=1e-3, max_norm=0.5, dynamic=False)
    model = gt.Model(gt.TOY, BATCH, params, hyper, arch=ARCH)
    bad = []
    for step in range(4):
        now = model.params()  # the book's parameters after its previous steps
        t64, t16 = (gt.Twin(gt.TOY, now, dtype=torch.float64, fp16_at_book_sites=r, loss_scale=model.scale,
                            hyper=hyper) for r in (False, True))
        x, y = batches.next()
        model.forward_backward(x, y)
        norm = model.optimizer_step()
        ls, gs, norms = [], [], []
        for t in (t64, t16):
            t.opt.zero_grad()
            losses = t.losses(x, y)
            losses.mean().backward()
            gs.append(np.concatenate([g.ravel() for g in t.gradients().values()]))
            norms.append(float(t.optimizer_step()))
            ls.append(losses.detach().numpy())
        book = host(model.losses).astype(np.float64)
        err, fp16 = rel(book, ls[0], ls[0]), rel(ls[1], ls[0], ls[0])
        if not err <= 2 * fp16:
            bad.append(f"step {step}: per-token losses {err:.2e} from float64, fp16's share {fp16:.2e}")
        # |norm - norm64| <= ||g - g64||, within twice fp16's share by the gradient test above
        if not abs(norm - norms[0]) <= 2 * float(np.linalg.norm(gs[1] - gs[0])):
            bad.append(f"step {step}: gradient norm {norm:.8g}, float64 twin {norms[0]:.8g}")
    assert not bad, f"seed {seed}:\n" + "\n".join(bad)


def test_overflow_skips_the_step_and_halves_the_scale(toy):
    """A loss scale so large that fp16 overflows: the step is skipped (parameters unchanged), the scale
    halves."""
    _, _, params, batches = toy
    model = gt.Model(gt.TOY, BATCH, params, gt.Hyper(loss_scale=2.0**40), arch=ARCH)
    x, y = batches.next()
    model.forward_backward(x, y)
    norm = model.optimizer_step()
    assert not np.isfinite(norm) and model.scale == 2.0**39 and model.skipped == 1 and model.t == 0
    after = model.params()
    assert all(np.array_equal(after[n], params[n]) for n in params)


def test_optimizer_step_matches_float64(toy):
    """One optimizer step from the book's own (scaled) gradients against float64: unscale, clip
    (max_norm below the norm), AdamW with the two decay groups; then the fp16 weight copies (W and W^T) are
    the rounded new weights. Per element within 4 u32 |p| (the master weight's rounding and the decay) plus
    lr 2^-16: the update is lr m / (sqrt(v) + eps), fp32 math of a few operations on a clip factor whose
    fp32 norm is a sum of a million squares (relative error ~ sqrt(n) u32 = 6e-5 at most in practice)."""
    _, seed, params, batches = toy
    hyper = gt.Hyper(lr=1e-3, max_norm=0.5, dynamic=False)
    model = gt.Model(gt.TOY, BATCH, params, hyper, arch=ARCH)
    x, y = batches.next()
    model.forward_backward(x, y)
    g = model.gradients()  # float64, unscaled
    norm = np.sqrt(sum((a**2).sum() for a in g.values()))
    c = min(1.0, hyper.max_norm / (norm + 1e-6))
    b1, b2 = hyper.betas
    got_norm = model.optimizer_step()
    after = model.params()
    bad = []
    if not abs(got_norm - norm) <= 1e-4 * norm:
        bad.append(f"gradient norm {got_norm} vs float64 {norm}")
    for name, _shape, decay in gt.param_shapes(gt.TOY):
        p, gc = params[name].astype(np.float64), g[name] * c
        m, v = (1 - b1) * gc, (1 - b2) * gc**2
        wd = hyper.weight_decay if decay else 0.0
        ref = p * (1 - hyper.lr * wd) - hyper.lr * (m / (1 - b1)) / (np.sqrt(v / (1 - b2)) + hyper.eps)
        err = np.abs(after[name] - ref)
        bound = 4 * U32 * np.abs(p) + hyper.lr * 2.0**-16
        if not (err <= bound).all():
            i = np.argmax(err - bound)
            bad.append(f"{name}: element {i} {after[name].ravel()[i]!r}, float64 {ref.ravel()[i]!r}")
    for name, _shape, _ in model.matrices():
        w = after[name].astype(np.float16)
        if not (np.array_equal(host(model.w16[name]), w) and np.array_equal(host(model.wt16[name]), w.T)):
            bad.append(f"{name}: the fp16 copies are not the new weights rounded")
    assert not bad, f"seed {seed}:\n" + "\n".join(bad)


def test_gpu_check_sections_run_on_the_emulator(toy, monkeypatch):
    """gpu_check.py's check and train sections at the toy size, the twin on the CPU: they run, record their
    numbers and report no failure (the timing section needs a GPU: CUDA events, graphs, torch.compile)."""
    import argparse

    import gpu_check

    _, _, params, batches = toy
    monkeypatch.setattr(gpu_check, "DEVICE", "cpu")
    monkeypatch.setattr(gpu_check, "failed", [])
    monkeypatch.setattr(gpu_check, "results", {"sections": {}})
    x, y = batches.next()
    gpu_check.check(gt.TOY, BATCH, params, x, y, arch=ARCH)
    args = argparse.Namespace(corpus="book", seed=1, eval_batches=1, seconds=1e9, lr=1e-3, warmup=2,
                              max_steps=3, eval_every=2, split_k=None, arch=ARCH, attn_bwd=None,
                              twin_runs=2)
    gpu_check.train(gt.TOY, BATCH, params, args)
    assert gpu_check.failed == [], gpu_check.failed
    assert gpu_check.results["sections"]["check"]["ok"]
    out = gpu_check.results["sections"]["train"]
    assert out["book"]["steps"] == 3 and out["twin_eager_bf16"]["steps"] == 3
    assert out["twin_eager_bf16_rerun"]["steps"] == 3
    assert len(out["book"]["val_loss"]) == 3 and all(np.isfinite(v) for _, v in out["book"]["val_loss"])


# ------------------------------------------------------------------------------------ split-K


def test_choose_split_k_on_an_h200():
    """choose_split_k's model on 132 SMs, K = 16384 (256 steps of 64): the numbers of its docstring, and every
    choice keeps SPLIT_MIN_STEPS steps per slice."""
    assert [gt.choose_split_k(t, 256, 132) for t in (18, 54, 72, 1182)] == [7, 2, 5, 1]
    assert gt.choose_split_k(384, 48, 132) == 1  # a dX product (M = T): hundreds of tiles already
    for tiles in range(1, 400, 7):
        for steps in (8, 16, 40, 256, 1024):
            s = gt.choose_split_k(tiles, steps, 132)
            assert s == 1 or steps // s >= gt.SPLIT_MIN_STEPS


def test_k_slices_cover_k_in_whole_steps():
    for K, s, step in ((16384, 7, 64), (128, 3, 32), (448, 3, 64), (64, 1, 64)):
        b = gt.k_slices(K, s, step)
        assert len(b) == s and b[0][0] == 0 and b[-1][1] == K
        assert all(k1 == n0 for (_, k1), (n0, _) in zip(b, b[1:]))
        sizes = [(k1 - k0) // step for k0, k1 in b]
        assert all(k0 % step == 0 and (k1 - k0) % step == 0 for k0, k1 in b) and max(sizes) - min(sizes) <= 1
    for K, s, step in ((128, 5, 32), (100, 2, 32), (64, 0, 64)):
        with pytest.raises(ValueError, match="split-K"):
            gt.k_slices(K, s, step)


def test_split_k_gradients_match_the_unsplit_step():
    """The toy step at batch 4 (K = T = 256) with split_k=3: each block matrix's dW (on the emulator kernel 3's
    path: slices of 2, 3, 3 K steps of 32, A's slices copied) within 2 (K + s) u32 of sum_k |a_ik b_kj| of
    the float64 product of its own fp16 operands (an fp32 sum of K exact fp16 products, then the reduce's s - 1
    adds; 2 u32 per add: tensor cores may truncate). The partials start as NaN: an unwritten one shows. On the
    emulator every other gradient equals split_k=1's bit for bit (nothing downstream reads a dW; on a GPU the
    attention backward's atomics reorder sums from run to run)."""
    seed, batch, s = int(np.random.default_rng().integers(2**31)), 4, 3
    params = gt.init_params(gt.TOY, seed)
    x, y = gt.Batches(gt.corpus("book"), batch, gt.TOY.seq, seed=seed).next()
    model = gt.Model(gt.TOY, batch, params, split_k=s, arch=ARCH)
    assert model.splits == dict.fromkeys(gt.MATRICES, s)
    model.partials[...] = np.nan
    operands, gemm = [], model.gemm

    def spy(a, b, c, M, N, K, split=False):
        if split:
            operands.append((host(a).reshape(M, K).astype(np.float64), host(b).reshape(K, N).astype(np.float64), c))
        gemm(a, b, c, M, N, K, split=split)

    model.gemm = spy
    model.forward_backward(x, y)
    assert len(operands) == 4 * gt.TOY.layers
    bad, split_names = [], set()
    for a, b, c in operands:
        name = next(n for n in model.offsets if cudl.xp.shares_memory(c, model.view(model.g, n)))
        split_names.add(name)
        got, ref = host(c).astype(np.float64), a @ b
        if not (np.abs(got - ref) <= 2 * (a.shape[1] + s) * U32 * (np.abs(a) @ np.abs(b))).all():
            bad.append(f"{name}: split-K's dW outside fp32's bound of the float64 product of its operands")
    if not cudl.on_gpu():
        ref = gt.Model(gt.TOY, batch, params, split_k=1, arch=ARCH)
        ref.forward_backward(x, y)
        bad += [f"{n}: differs from split_k=1's, though split-K does not compute it" for n in model.offsets
                if n not in split_names and not np.array_equal(host(model.view(model.g, n)), host(ref.view(ref.g, n)))]
    assert not bad, f"seed {seed}:\n" + "\n".join(bad)


@pytest.mark.skipif(cudl.on_gpu(), reason="fakes CuPy; on a GPU test_split_k_gradients runs the real streams")
def test_split_k_on_kernel_5_streams_and_slices(monkeypatch):
    """Kernel 5's split-K path with its launches and CuPy's streams faked (no GPU here): slice j reads the
    column range A[:, k0:k1] (a view with A's row stride, which tensor_map_args accepts) and the rows
    B[k0:k1], writes partial j; slice 0 runs on the current stream, slice j on side stream j - 1, after that
    stream waited for the fork event recorded on the current one; the current stream waits for every slice's
    event, then the reduce sums the partials: the result is A B within (K + s) u32 of sum |a b|."""
    import types

    from cudl.tma import tensor_map_args

    model = gt.Model(gt.TOY, BATCH, gt.init_params(gt.TOY, 0), split_k=1, arch=ARCH)
    log, current = [], ["main"]

    class Stream:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            current.append(self.name)

        def __exit__(self, *exc):
            current.pop()

        def wait_event(self, ev):
            log.append(("wait", self.name, ev.name))

    class Event:
        def __init__(self, name):
            self.name = name

        def record(self, stream):
            log.append(("record", stream.name, self.name))

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_current_stream=lambda: Stream(current[-1]))))
    s, (M, N, K) = 3, (128, 256, 7 * 64)  # slices of 2, 2 and 3 steps
    model.wgmma, model.streams = True, [Stream("side0"), Stream("side1")]
    model.events = [Event(f"e{j}") for j in range(s)]
    model.partials = cudl.poisoned(s * M * N)

    def launcher5(a, b, c, options=gt.GEMM5_OPTIONS):
        assert a.base is not None and a.strides[0] == K * 2  # a view of A, rows K apart
        # slices run side by side on several streams: never the persistent build, which holds every SM
        assert options == gt.GEMM5_SPLIT_OPTIONS and "-DPERSISTENT" not in options, options
        tensor_map_args(a.shape, a.strides, a.itemsize, a.ctypes.data, (128, 64))  # raises if TMA cannot

        def run():
            j = [p.ctypes.data for p in parts].index(c.ctypes.data)
            log.append(("slice", current[-1], j, a.shape[1]))
            c[...] = a.astype(np.float32) @ b.astype(np.float32)
        return run

    parts = model.partials.reshape(s, M, N)
    monkeypatch.setattr(model, "launcher5", launcher5)
    rng = np.random.default_rng()
    a, b = rng.standard_normal((M, K)).astype(np.float16), rng.standard_normal((K, N)).astype(np.float16)
    c = cudl.poisoned((M, N))
    model.gemm_split(a, b, c, M, N, K, s)
    assert log == [("record", "main", "e0"), ("wait", "side0", "e0"), ("wait", "side1", "e0"),
                   ("slice", "main", 0, 128), ("slice", "side0", 1, 128), ("record", "side0", "e1"),
                   ("slice", "side1", 2, 192), ("record", "side1", "e2"),
                   ("wait", "main", "e1"), ("wait", "main", "e2")]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert (np.abs(host(c) - a64 @ b64) <= (K + s) * U32 * (np.abs(a64) @ np.abs(b64))).all()


# ------------------------------------------------------------------------------------ the T4 path


def test_device_arch_follows_the_compute_capability(monkeypatch):
    """The path of each compute capability (on the emulator, of the GPU it mimics), and which path a device
    accepts: its own and older ones; "sm90" (kernel 5) only on a Hopper GPU."""
    import cudl.emulator

    monkeypatch.setattr(cudl, "on_gpu", lambda: True)
    for cc, arch in (("7.5", "sm75"), ("8.0", "sm80"), ("8.9", "sm80"), ("9.0", "sm90"), ("12.0", "sm80")):
        monkeypatch.setattr(cudl, "device_info", lambda cc=cc: {"cc": cc})
        assert gt.device_arch() == arch, cc
    monkeypatch.setattr(cudl, "device_info", lambda: {"cc": "7.0"})
    with pytest.raises(RuntimeError, match="7.5"):
        gt.device_arch()
    monkeypatch.setattr(cudl, "on_gpu", lambda: False)
    for key, arch in (("T4", "sm75"), ("A100", "sm80"), ("H100", "sm80")):  # wgmma is not emulated
        monkeypatch.setenv("CUDL_EMULATOR_DEVICE", key)
        monkeypatch.setattr(cudl, "device_info", lambda: {"cc": None, "mimics": cudl.emulator.device()})
        assert gt.device_arch() == arch, key
    monkeypatch.undo()
    if not cudl.on_gpu():
        params = gt.init_params(gt.TOY, 0)
        for arch in ("sm90", "sm70"):
            with pytest.raises(ValueError, match="arch"):
                gt.Model(gt.TOY, BATCH, params, arch=arch)


def test_gemm_builds_take_the_step_shapes():
    """Every product's M, N and K is one of T = batch x seq, d, 3d, 4d and V: check_config accepts GPT-2 small
    and the toy at the chapter's batches, and each path's GEMM build (chapter 11's KERNELS) takes tiles that
    divide them, with no shared memory beyond a T4's 48 KiB without opt-in."""
    tc = cudl.kernels_module("11-tensor-cores/hgemm.py")
    for cfg, batches in ((gt.GPT2, (1, 2, 4, 16)), (gt.TOY, (2, 4))):
        for b in batches:
            gt.check_config(cfg, b)
            T, C, V = b * cfg.seq, cfg.d, cfg.vocab
            for build in gt.GEMMS.values():
                _, kernel, threads, (bm, bn), bk, opts = tc.KERNELS[build]
                assert all(n % bm == 0 and n % bn == 0 and n % bk == 0 for n in (T, C, 3 * C, 4 * C, V)), build
                assert tc.shared_bytes(kernel, opts) <= 48 * 1024 and threads <= 1024


def launched_kernels(arch: str):
    """Every kernel one step of path `arch` launches at the toy size, with the largest block and dynamic shared
    memory it is launched with."""
    from cudl.kernel import Kernel

    seen, call = {}, Kernel.__call__

    def spy(self, grid, block, args, shared_mem=0):
        threads = int(np.prod(block if isinstance(block, tuple) else (block,)))
        _, t, s = seen.get(id(self), (self, 0, 0))
        seen[id(self)] = (self, max(t, threads), max(s, shared_mem))
        return call(self, grid, block, args, shared_mem=shared_mem)

    params = gt.init_params(gt.TOY, 0)
    x, y = gt.Batches(gt.corpus("book"), BATCH, gt.TOY.seq, seed=0).next()
    model = gt.Model(gt.TOY, BATCH, params, arch=arch)
    Kernel.__call__ = spy
    try:
        model.forward_backward(x, y)
        model.optimizer_step()
    finally:
        Kernel.__call__ = call
    return model, list(seen.values())


@pytest.fixture(scope="module")
def sm75_kernels():
    if cudl.on_gpu():
        pytest.skip("the emulator records the launches of the forced sm75 path; on a GPU the GPU is the judge")
    return launched_kernels("sm75")


def test_sm75_path_compiles_for_a_t4(sm75_kernels):
    """Every kernel of the T4 path (forward, backward, optimizer), as the step builds and launches it, compiles
    for sm_75 with NVRTC and fits a T4: static + dynamic shared memory within 64 KiB per block (at d = LN_MAX_D
    for residual_layernorm, the one launch whose shared memory grows with d; the attention's depends on the
    head dimension only, 64 in GPT-2 small as in the toy), registers x threads within 64 K per block."""
    pytest.importorskip("cuda.bindings")
    from cudl.compile import nvrtc_resources
    from cudl.occupancy import LIMITS

    t4 = LIMITS["7.5"]
    model, launched = sm75_kernels
    names = {k.name for k, _, _ in launched}
    assert {"hgemm_1_wmma", "flash_attn_2_mma", "flash_attn_bwd_2_mma", "adamw_step"} <= names, names
    assert {"hgemm_3_cp_async", "hgemm_5_wgmma_tma"}.isdisjoint(names)
    assert "-DFLASH_SM75" in model.attn_fwd._options and "-DTC_SM75" in model.attn_bwd._options
    bad = []
    for k, threads, dynamic in launched:
        expr = (k.name,) if "<" in k.name else ()
        res = nvrtc_resources(k._source, k.shown, "sm_75", k._options, expr)[k.name]
        if k.name == "residual_layernorm":
            dynamic = 16 * (gt.LN_MAX_D + 2) * 2
        if res["shared"] + dynamic > t4.smem_per_block:
            bad.append(f"{k.name}: {res['shared']} B static + {dynamic} B dynamic shared memory")
        if res["regs"] * threads > 64 * 1024:
            bad.append(f"{k.name}: {res['regs']} registers x {threads} threads")
    assert not bad, "above a T4's limits:\n" + "\n".join(bad)


def test_sm75_path_compiles_with_nvrtc12(sm75_kernels):
    """The same sources and options with NVRTC 12 for sm_75, as CuPy compiles them on Colab's T4. Sources that
    include mma.h (WMMA) need CUDA 12's crt/ headers, which no pip wheel ships: those are reported as skipped
    after the others have compiled (test_sm75_path_compiles_for_a_t4 compiles them with NVRTC 13)."""
    sys.path.insert(0, str(KERNELS_DIR.parent / "tests"))
    import nvrtc12

    if nvrtc12.library() is None:
        pytest.skip("pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 to compile as Colab does")
    from cudl.errors import CompileError

    _, launched = sm75_kernels
    no_crt = []
    for k, _, _ in launched:
        try:
            nvrtc12.compile_cubin(k._source, k.shown, "sm_75", k._options,
                                  name_expressions=(k.name,) if "<" in k.name else ())
        except CompileError as exc:
            if 'cannot open source file "crt/' not in str(exc):
                raise
            no_crt.append(k.name)
    if no_crt:
        pytest.skip(f"{len(launched) - len(no_crt)} kernels compiled; {len(no_crt)} ({', '.join(no_crt)}) "
                    "need CUDA 12's crt/ headers (Colab's toolkit has them)")


def test_step_gemms_are_the_step_products():
    """gpu_check's per-shape GEMM table lists the products of a step: their FLOPs add up to the weights' share
    of gt.step_flops, 6 T (12 L C^2 + V C), and every shape is one that the step's GEMM path takes."""
    gpu_check = cudl.kernels_module("15-capstone/gpu_check.py")
    for cfg, batch in ((gt.TOY, 2), (gt.GPT2, 16)):
        T, C, V, L = batch * cfg.seq, cfg.d, cfg.vocab, cfg.layers
        rows = gpu_check.step_gemms(cfg, batch)
        assert sum(2 * M * N * K * n for _, M, N, K, n, _ in rows) == 6 * T * (12 * L * C**2 + V * C)
        assert sum(w for *_, w in rows) == 4  # the blocks' four weight gradients, split-K's candidates
        assert len({name for name, *_ in rows}) == len(rows) == 15


def test_attention_backward_version_fits_the_card(toy, monkeypatch):
    """The step takes version 3 of the attention backward where its shared memory fits a block (an H100's 227
    KiB), version 2 where it does not (the emulator's T4: 64 KiB), and the version asked for in any case."""
    torch, seed, params, batches = toy
    if not cudl.on_gpu():
        assert cudl.max_shared_per_block() == cudl.device_info()["mimics"]["max_smem_per_block_optin"]
    monkeypatch.setattr(cudl, "max_shared_per_block", lambda: 227 * 1024)
    assert gt.Model(gt.TOY, BATCH, params, arch=ARCH).attn_bwd.name == "flash_attn_bwd_3_ldmatrix"
    monkeypatch.setattr(cudl, "max_shared_per_block", lambda: 64 * 1024)
    assert gt.Model(gt.TOY, BATCH, params, arch=ARCH).attn_bwd.name == "flash_attn_bwd_2_mma"
    assert gt.Model(gt.TOY, BATCH, params, arch=ARCH, attn_bwd=2).attn_bwd.name == "flash_attn_bwd_2_mma"
