"""Chapter 12 (Flash Attention): the graders of its exercises (the online softmax update of one tile, a
causal mask, and a CUDA-core attention forward as the speed challenge). The chapter's launchers and its
float64 reference live in kernels_src/12-flash-attention/flash.py, re-exported here for chapter 15.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import cudl
from cudl.compile import kernels_module
from cudl.grade import grader
from cudl.grade.checks import U32, same_bits
from cudl.grade.guard import check_guard, guarded

_flash = kernels_module("12-flash-attention/flash.py")  # the chapter's launchers: one home
D, FLASH, WGMMA, WS, HOPPER = _flash.D, _flash.FLASH, _flash.WGMMA, _flash.WS, _flash.HOPPER
cdiv, reference, flash_kernel, flash_shape = _flash.cdiv, _flash.reference, _flash.flash_kernel, _flash.flash_shape
flash_launch, ws_maps, flash_attention = _flash.flash_launch, _flash.ws_maps, _flash.flash_attention
naive_attention, sdpa_backend = _flash.naive_attention, _flash.sdpa_backend


# ------------------------------------------------------------------------------ graders of the exercises

NEG_INF = -np.inf
ROW_BLOCK = 128  # online_softmax_tile: one thread per row, 128 threads per block


def _tile_state(rng: np.random.Generator, rows: int, d: int, first: bool,
                center: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(m, l, o) of rows after some earlier tiles (or the empty state of the first tile): m up to a few units
    either side of `center` (per row; 0 by default), but 100 below it in one row in 8 and 100 above in another
    (this tile's scores dwarf the old ones, or vanish beside them); l >= 1 (the maximum's own term), o as large
    as l times a typical v."""
    if first:
        return np.full(rows, NEG_INF, np.float32), np.zeros(rows, np.float32), np.zeros((rows, d), np.float32)
    jump = rng.choice([-100.0, 0.0, 100.0], rows, p=[0.125, 0.75, 0.125])
    m = ((0 if center is None else center) + jump + rng.uniform(-4, 4, rows)).astype(np.float32)
    l_sum = (1 + rng.uniform(0, 20, rows)).astype(np.float32)
    o = (rng.standard_normal((rows, d)) * l_sum[:, None]).astype(np.float32)
    return m, l_sum, o


TILE_CASES = [dict(rows=1, bc=1, d=1, first=True), dict(rows=5, bc=16, d=8, first=True),
              dict(rows=37, bc=64, d=64, first=False), dict(rows=130, bc=64, d=128, first=False),
              dict(rows=300, bc=32, d=64, first=True), dict(rows=1000, bc=64, d=128, first=False)]
TILE_EMU_CASES = [*TILE_CASES[:5], dict(rows=200, bc=64, d=128, first=False)]


@grader("online_softmax_tile", kernels=["online_softmax_tile"], cases=TILE_CASES, emulator_cases=TILE_EMU_CASES,
        rtol=1e-4,
        hint=["one thread per row: find the tile's maximum, the new running maximum m', the factor "
              "alpha = exp(m - m') for what l and o hold, then add exp(s - m') to l and exp(s - m') v to o",
              "some rows see only -infinity in this tile (masked keys), some on their first tile (m = -inf): "
              "exp(-inf - (-inf)) is NaN, so when m' is -infinity leave m, l and o as they are",
              "m_new = fmaxf(m, tile max); if (m_new == -inf) return; alpha = expf(m - m_new); "
              "l = alpha * l + sum_j expf(s_j - m_new); o[k] = alpha * o[k] + sum_j expf(s_j - m_new) * v[j][k]"])
def online_softmax_tile(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Update (m, l, o) of each row with one tile of scores s [rows, bc] and values v [bc, d]."""
    rows, bc, d = case["rows"], case["bc"], case["d"]
    rng = np.random.default_rng()
    # scores of rows shifted by up to +-120: exp() of a score, or of a score minus a stale maximum, overflows
    # or underflows fp32 unless the new maximum m' is taken out
    center = rng.uniform(-120, 120, rows)
    center[0] = 120
    s_host = (rng.standard_normal((rows, bc)) * 3 + center[:, None]).astype(np.float32)
    s_host[rng.random((rows, bc)) < 0.2] = NEG_INF  # masked keys
    s_host[rng.random(rows) < 0.1] = NEG_INF  # rows whose keys are all masked in this tile
    v_host = rng.standard_normal((bc, d)).astype(np.float32)
    m_host, l_host, o_host = _tile_state(rng, rows, d, case["first"], center)
    s, v = guarded(s_host)[0], guarded(v_host)[0]
    (m, mbuf), (l_dev, lbuf), (o, obuf) = guarded(m_host), guarded(l_host), guarded(o_host)
    load("online_softmax_tile")(((rows + ROW_BLOCK - 1) // ROW_BLOCK,), (ROW_BLOCK,),
                                (s, v, m, l_dev, o, rows, bc, d))
    cudl.sync()
    for buf, n, name in [(mbuf, rows, "m"), (lbuf, rows, "l"), (obuf, rows * d, "o")]:
        check_guard(buf, n, name)
    sd, m0 = s_host.astype(np.float64), m_host.astype(np.float64)
    m_new = np.maximum(m0, sd.max(axis=1))
    live = np.isfinite(m_new)
    base = np.where(live, m_new, 0.0)
    alpha = np.where(live, np.exp(m0 - base), 1.0)
    p = np.exp(sd - base[:, None])
    l_ref = alpha * l_host + p.sum(axis=1)
    o_ref = alpha[:, None] * o_host + p @ v_host.astype(np.float64)
    # Error bounds in units of U32: exp(a - b) is off by |a - b| + 3 U32 relative (the rounded difference, then
    # expf's own 2 ulps); the sum of bc products adds 2 bc U32 of the sum of their sizes, and a kernel that
    # rescales after every key (an online update inside the tile) up to 3 U32 per rescaling.
    with np.errstate(invalid="ignore"):
        ep = np.where(np.isfinite(sd), np.abs(sd - base[:, None]), 0.0) + 4 + 5 * bc
        ea = np.where(np.isfinite(m0) & live, np.abs(m0 - base), 0.0) + 4 + 5 * bc
    l_scale = ea * alpha * l_host + (ep * p).sum(axis=1)
    o_scale = (ea * alpha)[:, None] * np.abs(o_host) + (ep * p) @ np.abs(v_host.astype(np.float64))
    m_got, m_ref = cudl.to_numpy(m), np.where(live, m_new, NEG_INF).astype(np.float32)
    same_bits(m_got.view(np.uint32), m_ref.view(np.uint32), "m", "m' = max(m, max_j s_j) is one of the fp32 "
              "values it compares, -infinity when all of them are -infinity")
    return [(m_got.view(np.int32), m_ref.view(np.int32)),
            (l_dev, l_ref, l_scale, U32), (o, o_ref, o_scale, U32)]


MASK_CASES = [dict(rows=1, cols=1, row0=0, col0=0, S=1), dict(rows=64, cols=64, row0=64, col0=64, S=4096),
              dict(rows=64, cols=64, row0=128, col0=0, S=4096), dict(rows=64, cols=64, row0=0, col0=64, S=4096),
              dict(rows=48, cols=40, row0=100, col0=96, S=130), dict(rows=100, cols=77, row0=30, col0=50, S=120)]


@grader("causal_mask_tile", kernels=["causal_mask_tile"], cases=MASK_CASES,
        hint=["one thread per element of the tile: element (i, j) is query row0 + i against key col0 + j",
              "a key after its query (col0 + j > row0 + i) and a key past the sequence (col0 + j >= S) are "
              "masked; the grid covers ceil(cols / 32) x ceil(rows / 8) blocks, so check i < rows and j < cols",
              "if (i < rows && j < cols) { float* e = &s[i * cols + j]; *e = (col0 + j > row0 + i || col0 + j >= S) "
              "? -__int_as_float(0x7f800000) : *e * scale; }"])
def causal_mask_tile(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Scale a rows x cols tile of scores in place and set masked entries to -infinity."""
    rows, cols, row0, col0, S = (case[k] for k in ("rows", "cols", "row0", "col0", "S"))
    rng = np.random.default_rng()
    s_host = rng.standard_normal((rows, cols)).astype(np.float32) * 8
    scale = np.float32(rng.uniform(0.05, 0.2))
    s, buf = guarded(s_host)
    load("causal_mask_tile")(((cols + 31) // 32, (rows + 7) // 8), (32, 8), (s, rows, cols, row0, col0, S, scale))
    cudl.sync()
    check_guard(buf, rows * cols, "s")
    i, j = np.indices((rows, cols))
    masked = (col0 + j > row0 + i) | (col0 + j >= S)
    got = cudl.to_numpy(s)
    ref = np.where(masked, 0.0, s_host.astype(np.float64) * np.float64(scale))
    # -infinity compared by tolerance would accept any value: compare where the mask is, exactly
    return [(np.isneginf(got).astype(np.int32), masked.astype(np.int32)), (np.where(masked, 0.0, got), ref)]


ATT_WARPS = 4  # attention_rows: one warp per query row, 4 rows per block
ATT_D = 64
ATT_CASES = [dict(bh=1, S=1, causal=False), dict(bh=2, S=33, causal=True), dict(bh=3, S=100, causal=False),
             dict(bh=2, S=257, causal=True), dict(bh=4, S=1024, causal=False), dict(bh=8, S=2048, causal=True)]
ATT_EMU_CASES = [*ATT_CASES[:4], dict(bh=2, S=300, causal=False), dict(bh=1, S=500, causal=True)]


@grader("attention_rows", kernels=["attention_rows"], cases=ATT_CASES, emulator_cases=ATT_EMU_CASES, rtol=1e-4,
        # FLOPs: Q K^T and P V over the causal triangle, 2 per multiply-add, on CUDA cores (the fp32 peak)
        speed=dict(case=dict(bh=8, S=2048, causal=True), factor=3, flops=2 * 2 * 8 * (2048 * 2049 // 2) * ATT_D,
                   compute="fp32", bytes=4 * 4 * 8 * 2048 * ATT_D),
        hint=["one warp per query row: the 32 lanes take 32 keys at a time (lane j scores key k0 + j against "
              "the row's q, which every lane reads), then the warp merges the 32 scores into its running maximum "
              "and sum, and adds their weighted values to o (lane j owns o[j] and o[j + 32])",
              "per chunk of 32 keys: mx = warp maximum of the scores (__shfl_xor_sync), m_new = max(m, mx), "
              "alpha = expf(m - m_new), p = expf(score - m_new) (0 for keys past the end or masked); l = alpha * l "
              "+ warp sum of p; o[k] = alpha * o[k] + sum over j of p_j * V[k0 + j][k], p_j from lane j by "
              "__shfl_sync; with causal, the row's last key is the row itself",
              "start from m = -infinity and skip the update while m_new is -infinity; at the end each lane writes "
              "O[row][lane] = o[0] / l and O[row][lane + 32] = o[1] / l"])
def attention_rows(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """O = softmax(Q K^T / sqrt(64)) V (causal or not) for bh heads of S rows, fp32, d = 64."""
    bh, S, causal = case["bh"], case["S"], case["causal"]
    rng = np.random.default_rng()
    q_host = (rng.standard_normal((bh, S, ATT_D)) * 2).astype(np.float32)
    k_host, v_host = rng.standard_normal((2, bh, S, ATT_D)).astype(np.float32)
    # Every score of a head is shifted by +-(100 to 150) (a large common component along dimension 0 of q and
    # k; the rest varies by a few units): exp() of a score overflows or underflows fp32 unless the row's
    # running maximum is taken out. Head 0 goes up, head 1 down.
    shift = rng.uniform(100, 150, bh) * np.where(np.arange(bh) % 2, -1.0, 1.0)
    big = np.sqrt(np.abs(shift) * math.sqrt(ATT_D))
    q_host[:, :, 0] += big[:, None].astype(np.float32)
    k_host[:, :, 0] += (np.sign(shift) * big)[:, None].astype(np.float32)
    q, k, v = guarded(q_host)[0], guarded(k_host)[0], guarded(v_host)[0]
    o, buf = guarded(np.full((bh, S, ATT_D), np.nan, np.float32))
    scale = np.float32(1 / math.sqrt(ATT_D))
    load("attention_rows")(((S + ATT_WARPS - 1) // ATT_WARPS, bh), (32 * ATT_WARPS,),
                           (q, k, v, o, S, scale, int(causal)))
    cudl.sync()
    check_guard(buf, bh * S * ATT_D, "O")
    ref, scale_o = _attention_bound(q_host, k_host, v_host, causal, float(scale))
    return [(o, ref, scale_o, U32)]


def _attention_bound(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool,
                     scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(O in float64, the size of its fp32 rounding error in units of U32) for fp32 attention of [BH, S, D].

    A score is a sum of D products: off by sigma = (D + 2) scale ||q|| ||k|| U32 at most. A weight
    p_j = exp(s_j - m) is then off by delta_j = 2 sigma + |s_j - m| + 3 U32 relative (the two scores, the
    rounded difference, expf's 2 ulps), which moves O = sum p v / sum p by sum_j p_j delta_j (|v_j| + |O|) / l
    at most (the |s_j - m| part bounded with max_j |v_j|); the two sums over up to S keys add
    4 S U32 (sum p |v| / l + |O|)."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    S, d = q.shape[1], q.shape[2]
    s = np.matmul(q64, k64.transpose(0, 2, 1))
    s *= scale
    if causal:
        s[:, np.triu(np.ones((S, S), bool), 1)] = -np.inf
    m = s.max(axis=2, keepdims=True)
    s -= m  # s - m <= 0 from here on
    p = np.exp(s)
    p /= p.sum(axis=2, keepdims=True)  # the weights, normalised
    o = np.matmul(p, v64)
    av = np.abs(v64)
    w = np.matmul(p, av) + np.abs(o)  # sum p (|v| + |O|)
    s[np.isinf(s)] = 0.0  # masked keys have p = 0
    far = -(p * s).sum(axis=2, keepdims=True)  # sum_j p_j |s_j - m|
    wf = far * (av.max(axis=1, keepdims=True) + np.abs(o))
    norms_q, norms_k = np.linalg.norm(q64, axis=2), np.linalg.norm(k64, axis=2)
    sigma = (d + 2) * scale * norms_q * norms_k.max(axis=1, keepdims=True)  # [BH, S]
    return o, (2 * sigma + 3 + 4 * S)[..., None] * w + wf
