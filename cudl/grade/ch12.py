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
    s = np.einsum("bid,bjd->bij", q, k, optimize=True) * (scale if scale is not None else 1 / math.sqrt(d))
    if causal:
        s = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, s)
    m = s.max(axis=2, keepdims=True)
    p = np.exp(s - m)
    l_sum = p.sum(axis=2, keepdims=True)
    return np.einsum("bij,bjd->bid", p / l_sum, v, optimize=True), (m + np.log(l_sum))[..., 0]


# kernel: query rows per warp, whether Q has its own BR x D tile in shared memory, K/V slots
FLASH = {"flash_attn_2_mma": (16, False, 2), "flash_attn_3_32rows": (32, True, 2),
         "flash_attn_4_wgmma": (16, True, 2), "flash_attn_5_overlap": (16, True, 3)}
WGMMA = "flash_attn_4_wgmma"  # sm_90a only (d = 128, BC = 64; `warps` = 4 x warpgroups)
HOPPER = (WGMMA, "flash_attn_5_overlap")


def flash_kernel(name: str, head_dim: int, *, warps: int = 4, bc: int = 64, sm75: bool = False,
                 source: str | None = None, options: tuple[str, ...] = ()) -> Any:
    """A flash kernel of the chapter compiled for one head dimension and tile shape (or from `source`)."""
    if name in HOPPER:
        opts = ["-arch=sm_90a", f"-DWGS={warps // 4}", *options] if cudl.on_gpu() else [f"-DWGS={warps // 4}"]
    else:
        opts = [f"-DHEAD_DIM={head_dim}", f"-DWARPS={warps}", f"-DBC={bc}", *options]
        opts += ["-DFLASH_SM75"] if sm75 else []
    k = cudl.load(source or f"{D}/{name}.cu", name, options=opts)
    k.tile = (warps, bc)
    return k


def flash_shape(kernel: Any, S: int, bh: int, d: int) -> tuple[tuple[int, int], int, int]:
    """(grid, threads, dynamic shared bytes) of a flash_kernel build."""
    warps, bc = kernel.tile
    rows, q_tile, slots = FLASH[kernel.name]
    br = rows * warps
    align = 1024 if kernel.name in HOPPER else 0  # wgmma's swizzle atoms start on 1 KiB
    return (cdiv(S, br), bh), 32 * warps, ((br if q_tile else 0) + 2 * slots * bc) * d * 2 + align


def flash_launch(kernel: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, causal: bool,
                 scale: float | None = None) -> None:
    """Launch a flash_kernel build writing o ([BH, S, D] fp16) and lse ([BH, S] float32)."""
    bh, S, d = q.shape
    scale = scale if scale is not None else 1 / math.sqrt(d)
    grid, threads, smem = flash_shape(kernel, S, bh, d)
    kernel(grid, threads, (S, np.float32(scale), int(causal), q, k, v, o, lse), shared_mem=smem)


def flash_attention(name: str, q: Any, k: Any, v: Any, causal: bool, **build: Any) -> tuple[Any, Any]:
    """O and LSE of a flash kernel, written into NaN-poisoned arrays; `build`: flash_kernel's options."""
    bh, S, d = q.shape
    o, lse = cudl.poisoned((bh, S, d), np.float16), cudl.poisoned((bh, S))
    flash_launch(flash_kernel(name, d, **build), q, k, v, o, lse, causal)
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
