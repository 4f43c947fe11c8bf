"""Chapter 12 (Flash Attention): launchers of the chapter's kernels and a float64 reference, shared by the
chapter, its tests and kernels_src/12-flash-attention/gpu_check.py.

Q, K, V and O are [BH, S, D] fp16 arrays (BH = batch x heads), LSE is [BH, S] float32 (natural log).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import cudl

D = "12-flash-attention"


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def reference(q: Any, k: Any, v: Any, causal: bool, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Attention in float64 on the host: (O [BH, S, D], logsumexp of each row of scale Q K^T [BH, S])."""
    q, k, v = (cudl.to_numpy(a).astype(np.float64) for a in (q, k, v))
    S, d = q.shape[1], q.shape[2]
    s = np.einsum("bid,bjd->bij", q, k) * (scale if scale is not None else 1 / math.sqrt(d))
    if causal:
        s = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, s)
    m = s.max(axis=2, keepdims=True)
    p = np.exp(s - m)
    l_sum = p.sum(axis=2, keepdims=True)
    return np.einsum("bij,bjd->bid", p / l_sum, v), (m + np.log(l_sum))[..., 0]


def flash_kernel(head_dim: int, *, warps: int = 4, bc: int = 64, sm75: bool = False,
                 source: str | None = None) -> Any:
    """flash_attn_2_mma compiled for one head dimension and tile shape (or from `source`, e.g. a variant)."""
    opts = [f"-DHEAD_DIM={head_dim}", f"-DWARPS={warps}", f"-DBC={bc}"] + (["-DFLASH_SM75"] if sm75 else [])
    return cudl.load(source or f"{D}/flash_attn_2_mma.cu", "flash_attn_2_mma", options=opts)


def flash_launch(kernel: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, causal: bool, *, warps: int = 4,
                 bc: int = 64, scale: float | None = None) -> None:
    """Launch a flash_attn_2_mma build (`flash_kernel(d, warps=, bc=)`) writing o and lse."""
    bh, S, d = q.shape
    scale = scale if scale is not None else 1 / math.sqrt(d)
    kernel((cdiv(S, 16 * warps), bh), 32 * warps, (S, np.float32(scale), int(causal), q, k, v, o, lse),
           shared_mem=4 * bc * d * 2)


def flash_attention(q: Any, k: Any, v: Any, causal: bool, *, warps: int = 4, bc: int = 64,
                    sm75: bool = False) -> tuple[Any, Any]:
    """O and LSE of flash_attn_2_mma, written into NaN-poisoned arrays."""
    bh, S, d = q.shape
    o, lse = cudl.poisoned((bh, S, d), np.float16), cudl.poisoned((bh, S))
    flash_launch(flash_kernel(d, warps=warps, bc=bc, sm75=sm75), q, k, v, o, lse, causal, warps=warps, bc=bc)
    return o, lse


def naive_attention(q: Any, k: Any, v: Any, causal: bool, buffers: tuple[Any, Any, Any] | None = None) -> Any:
    """O of the naive kernels: scores into s ([BH, S, S] float), 07's softmax<float> from s into p (same
    shape), then P V into o; `buffers` = (s, p, o) to reuse, else NaN-poisoned new ones."""
    bh, S, d = q.shape
    scores = cudl.load(f"{D}/attention_naive.cu", "attention_scores")
    pv = cudl.load(f"{D}/attention_naive.cu", "attention_pv")
    softmax = cudl.load("07-fusion/fused_rows.cu", "softmax<float>")
    s, p, o = buffers or (cudl.poisoned((bh, S, S)), cudl.poisoned((bh, S, S)), cudl.poisoned((bh, S, d), np.float16))
    scores((cdiv(S, 32), cdiv(S, 8), bh), (32, 8), (S, d, np.float32(1 / math.sqrt(d)), int(causal), q, k, s))
    threads = min(1024, max(32, 32 * cdiv(cdiv(S, 16), 32)))  # 07: cols <= 16 values x threads
    softmax((bh * S,), threads, (s, p, bh * S, S))
    pv((cdiv(d, 32), cdiv(S, 8), bh), (32, 8), (S, d, p, v, o))
    return o
