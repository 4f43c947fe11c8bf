"""Graders of chapter 10 (transformer inference): RoPE in place, the KV-cache append of a decode step, and
the challenge, attention of one new query per sequence over its cache, graded for speed. Inputs are followed
in memory by NaN (or a sentinel) and outputs by a guard zone (see cudl.grade.guard); cache slots past a
sequence's length hold NaN, so a kernel that reads them fails.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.guard import check_guard, guarded, guarded_output

BLOCK = 256
ROPE_BLOCKS = 64  # the grid of the RoPE grader: fewer threads than pairs in the large cases
BASE = 10000.0
HEAD_DIM = 64  # the challenge's head size


def _rope64(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """RoPE ("rotate half") of x [rows, heads, head_dim] at positions pos [rows], float64."""
    hd = x.shape[-1]
    h = hd // 2
    ang = pos.astype(np.float64)[:, None, None] * BASE ** (-2.0 * np.arange(h) / hd)
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :h].astype(np.float64), x[..., h:].astype(np.float64)
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


# ------------------------------------------------------------------------------ rope

ROPE_CASES = [dict(rows=1, heads=1, head_dim=2), dict(rows=3, heads=5, head_dim=6),
              dict(rows=17, heads=4, head_dim=64), dict(rows=33, heads=7, head_dim=18),
              dict(rows=1000, heads=8, head_dim=128), dict(rows=4097, heads=16, head_dim=64)]
ROPE_EMU_CASES = [*ROPE_CASES[:4], dict(rows=100, heads=8, head_dim=128), dict(rows=301, heads=3, head_dim=64)]


@grader("rope", kernels=["rope"], cases=ROPE_CASES, emulator_cases=ROPE_EMU_CASES, rtol=1e-3,
        hint=["each thread rotates pairs (x[i], x[i + head_dim / 2]) of one head: angle = pos[row] * "
              "base^(-2i / head_dim); the grid has fewer threads than pairs, so loop with a grid stride",
              "number the pairs p = 0 .. rows * heads * (head_dim / 2) - 1; i = p % (head_dim / 2), the head "
              "(row * heads + head) is p / (head_dim / 2) and starts at x + that * head_dim",
              "read both values before writing either: x1 = h[i], x2 = h[i + half]; sincosf(angle, &s, &c); "
              "h[i] = x1 * c - x2 * s; h[i + half] = x2 * c + x1 * s; the frequency is "
              "powf(base, -2.0f * i / head_dim)"])
def rope(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """In place on x [rows, heads, head_dim] (fp32), positions pos [rows]; block 256, at most 64 blocks."""
    rows, heads, hd = case["rows"], case["heads"], case["head_dim"]
    rng = np.random.default_rng()
    x_host = rng.standard_normal((rows, heads, hd)).astype(np.float32)
    pos_host = rng.integers(0, 2048, rows).astype(np.int32)
    pos_host[0] = 0  # position 0 is the identity: a kernel must leave that row as it is
    x, whole = guarded(x_host)
    pos = guarded(pos_host)[0]
    pairs = rows * heads * (hd // 2)
    load("rope")((min(-(-pairs // BLOCK), ROPE_BLOCKS),), (BLOCK,), (x, pos, rows, heads, hd, BASE))
    cudl.sync()
    check_guard(whole, x_host.size, "x")
    return [(x, _rope64(x_host, pos_host))]


# ------------------------------------------------------------------------------ kv_cache_append

KV_CASES = [dict(batch=1, heads=1, head_dim=1, max_len=1), dict(batch=2, heads=3, head_dim=5, max_len=7),
            dict(batch=4, heads=8, head_dim=64, max_len=100), dict(batch=3, heads=5, head_dim=33, max_len=17),
            dict(batch=64, heads=16, head_dim=128, max_len=300)]
KV_EMU_CASES = [*KV_CASES[:4], dict(batch=9, heads=4, head_dim=32, max_len=40)]


@grader("kv_cache_append", kernels=["kv_cache_append"], cases=KV_CASES, emulator_cases=KV_EMU_CASES, rtol=1e-7,
        hint=["one thread per value of k_new (and the same value of v_new): find its sequence b, head h and "
              "index d, and copy it to slot pos[b] of that sequence's head in each cache",
              "the caches are [batch, heads, max_len, head_dim]: the value goes to "
              "((b * heads + h) * max_len + pos[b]) * head_dim + d; a position outside [0, max_len) is dropped",
              "e = blockIdx.x * blockDim.x + threadIdx.x; if (e >= batch * heads * head_dim) return; "
              "d = e % head_dim; h = (e / head_dim) % heads; b = e / (heads * head_dim); p = pos[b]; if (p < 0 || "
              "p >= max_len) return; then write k_cache[...] = k_new[e] and v_cache[...] = v_new[e]"])
def kv_cache_append(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """k_new, v_new [batch, heads, head_dim] -> caches [batch, heads, max_len, head_dim] at pos[b];
    block 256, grid ceil(batch * heads * head_dim / 256)."""
    B, H, D, L = case["batch"], case["heads"], case["head_dim"], case["max_len"]
    rng = np.random.default_rng()
    k_host = rng.standard_normal((B, H, D)).astype(np.float32)
    v_host = rng.standard_normal((B, H, D)).astype(np.float32)
    kc_host = rng.standard_normal((B, H, L, D)).astype(np.float32)  # what earlier steps cached: kept
    vc_host = rng.standard_normal((B, H, L, D)).astype(np.float32)
    pos_host = rng.integers(0, L, B).astype(np.int32)
    pos_host[-1] = L  # the last sequence is full: its new token is dropped
    if B > 2:
        pos_host[1] = L - 1
    k_new, v_new, pos = guarded(k_host)[0], guarded(v_host)[0], guarded(pos_host, fill=0)[0]
    kc, kc_whole = guarded(kc_host)
    vc, vc_whole = guarded(vc_host)
    n = B * H * D
    load("kv_cache_append")((-(-n // BLOCK),), (BLOCK,), (k_new, v_new, kc, vc, pos, B, H, D, L))
    cudl.sync()
    check_guard(kc_whole, kc_host.size, "k_cache")
    check_guard(vc_whole, vc_host.size, "v_cache")
    ref_k, ref_v = kc_host.astype(np.float64), vc_host.astype(np.float64)
    for b in range(B):
        if pos_host[b] < L:
            ref_k[b, :, pos_host[b]] = k_host[b]
            ref_v[b, :, pos_host[b]] = v_host[b]
    return [(kc, ref_k), (vc, ref_v)]


# ------------------------------------------------------------------------------ challenge: decode attention

DEC_CASES = [dict(batch=1, heads=1, max_len=1), dict(batch=2, heads=3, max_len=50),
             dict(batch=1, heads=8, max_len=1000), dict(batch=3, heads=5, max_len=777),
             dict(batch=4, heads=32, max_len=4096)]
DEC_EMU_CASES = [*DEC_CASES[:2], dict(batch=1, heads=4, max_len=300), dict(batch=3, heads=5, max_len=77),
                 dict(batch=2, heads=4, max_len=513)]


@grader("decode_attention", kernels=["decode_attention"], cases=DEC_CASES, emulator_cases=DEC_EMU_CASES,
        # bytes: the keys and values below lens[b], at the fewest (lens 1, 1, 1, max_len: see decode_attention)
        speed=dict(case=dict(batch=4, heads=32, max_len=4096), factor=2, bytes=(4096 + 3) * 32 * HEAD_DIM * 4 * 2),
        rtol=1e-3,
        hint=["one block per (head, sequence); the 8 warps split the keys (warp w takes keys w, w + 8, ...) and "
              "each keeps its own online softmax (m, l) and output accumulator; then the block merges the 8",
              "a warp scores one key at a time: lane j multiplies q[j] and q[j + 32] with k[key][j] and "
              "k[key][j + 32], a butterfly sum (__shfl_xor_sync) gives every lane the dot product; only keys "
              "below lens[b] exist (the slots after them hold NaN)",
              "per key: s = dot * scale; m_new = fmaxf(m, s); c = expf(m - m_new); p = expf(s - m_new); "
              "l = l * c + p; acc = acc * c + p * v[key]; to merge, write each warp's m, l and acc to shared "
              "memory, take M = max m, and out = sum(acc_w * exp(m_w - M)) / sum(l_w * exp(m_w - M))"])
def decode_attention(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """out[b, h] = softmax(q[b, h] . k[b, h, :lens[b]] * scale) v[b, h, :lens[b]], head_dim 64;
    grid (heads, batch), block 256."""
    B, H, L = case["batch"], case["heads"], case["max_len"]
    D = HEAD_DIM
    rng = np.random.default_rng()
    lens_host = rng.integers(1, L + 1, B).astype(np.int32)
    lens_host[0], lens_host[-1] = 1 if B > 1 else L, L
    q_host = rng.standard_normal((B, H, D)).astype(np.float32)
    # keys share a large component along q: every score is +-150 plus noise of sd 1, so exp() of a score
    # overflows fp32 unless the running maximum is taken out
    scale = 1 / math.sqrt(D)
    along_q = q_host / (q_host * q_host).sum(-1, keepdims=True)  # q . along_q = 1
    sign = np.sign(rng.standard_normal((B, H, 1, 1)))
    k_host = (rng.standard_normal((B, H, L, D)) + sign * 150 / scale * along_q[:, :, None, :]).astype(np.float32)
    v_host = rng.standard_normal((B, H, L, D)).astype(np.float32)
    for b in range(B):
        k_host[b, :, lens_host[b]:] = np.nan
        v_host[b, :, lens_host[b]:] = np.nan
    q, kc, vc = guarded(q_host)[0], guarded(k_host)[0], guarded(v_host)[0]
    lens = guarded(lens_host, fill=0)[0]
    out, whole = guarded_output((B, H, D))
    load("decode_attention")((H, B), (BLOCK,), (q, kc, vc, lens, out, H, L, np.float32(scale)))
    cudl.sync()
    check_guard(whole, B * H * D, "out")
    ref = np.empty((B, H, D))
    for b in range(B):
        n = lens_host[b]
        s = np.einsum("hld,hd->hl", k_host[b, :, :n].astype(np.float64), q_host[b].astype(np.float64)) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        ref[b] = np.einsum("hl,hld->hd", p, v_host[b, :, :n].astype(np.float64)) / p.sum(-1, keepdims=True)
    return [(out, ref)]
