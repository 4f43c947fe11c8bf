"""Chapter 12 (Flash Attention): the launchers of the chapter's kernels, a float64 reference, and the chapter's
builds with the candidates cudl.autotune picks among. One copy, shared by the chapter, its tests,
gpu_check.py, chapter 15 and the graders (cudl.grade.ch12); loaded as
`flash = cudl.kernels_module("12-flash-attention/flash.py")`.

Q, K, V and O are [BH, S, D] fp16 arrays (BH = batch x heads), LSE is [BH, S] float32 (natural log).
"""

from __future__ import annotations

import math
from collections.abc import Callable
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


# kernel: query rows per warp, whether Q has its own BR x D tile in shared memory, K/V slots (default)
FLASH = {"flash_attn_2_mma": (16, False, 2), "flash_attn_3_32rows": (32, True, 2),
         "flash_attn_4_wgmma": (16, True, 2), "flash_attn_5_overlap": (16, True, 3),
         "flash_attn_6_ws": (16, True, 2)}
WGMMA = "flash_attn_4_wgmma"  # sm_90a only (d = 128; `warps` = 4 x warpgroups)
WS = "flash_attn_6_ws"  # sm_90a only, d = 128: a TMA producer warpgroup and 2 consumers (12 warps)
HOPPER = (WGMMA, "flash_attn_5_overlap", WS)


def flash_kernel(name: str, head_dim: int, *, warps: int = 4, bc: int = 64, stages: int | None = None,
                 sm75: bool = False, source: str | None = None, options: tuple[str, ...] = ()) -> Any:
    """A flash kernel of the chapter compiled for one head dimension and tile shape (or from `source`);
    `stages`: K/V tiles in shared memory (kernels 2 and 3: 2 or 3; None: the kernel's default)."""
    if name == WS:  # always 3 warpgroups; BC 128 unless asked, STAGES: K/V slots of the TMA ring
        if warps != 12:
            raise ValueError(f"{WS} runs 12 warps (a producer and two consumer warpgroups), not {warps}")
        if any(o.startswith("-DSTAGES") for o in options):  # flash_shape would size shared memory wrongly
            raise ValueError(f"{WS}: give the K/V slots as stages=, not as -DSTAGES")
        opts = [f"-DBC={bc}", *([f"-DSTAGES={stages}"] if stages else []), *options]
        opts = ["-arch=sm_90a", *opts] if cudl.on_gpu() else opts
    elif name in HOPPER:
        opts = [f"-DWGS={warps // 4}", *([f"-DBC={bc}"] if bc != 64 else []), *options]  # BC: kernel 5
        opts = ["-arch=sm_90a", *opts] if cudl.on_gpu() else opts
    else:
        opts = [f"-DHEAD_DIM={head_dim}", f"-DWARPS={warps}", f"-DBC={bc}", *options]
        opts += [f"-DSTAGES={stages}"] if stages else []
        opts += ["-DFLASH_SM75"] if sm75 else []
    k = cudl.load(source or f"{D}/{name}.cu", name, options=opts)
    k.tile = (warps, bc, stages or FLASH[name][2])
    k.head_dim = head_dim
    k.persistent = "-DPERSISTENT" in options  # kernel 6: a grid of one block per SM (without a mask)
    return k


def flash_shape(kernel: Any, S: int, bh: int, d: int) -> tuple[tuple[int, int], int, int]:
    """(grid, threads, dynamic shared bytes) of a flash_kernel build."""
    warps, bc, slots = kernel.tile
    rows, q_tile, _ = FLASH[kernel.name]
    br = rows * (warps - 4 if kernel.name == WS else warps)  # kernel 6: the producer has no rows
    align = 1024 if kernel.name in HOPPER else 0  # wgmma's swizzle atoms start on 1 KiB
    align += 256 if kernel.name == WS else 0  # and kernel 6's mbarriers
    return (cdiv(S, br), bh), 32 * warps, ((br if q_tile else 0) + 2 * slots * bc) * d * 2 + align


def flash_launch(kernel: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, causal: bool,
                 scale: float | None = None) -> None:
    """Launch a flash_kernel build writing o ([BH, S, D] fp16) and lse ([BH, S] float32)."""
    bh, S, d = q.shape
    scale = scale if scale is not None else 1 / math.sqrt(d)
    grid, threads, smem = flash_shape(kernel, S, bh, d)
    if kernel.name == WS:  # TMA reads Q, K, V through tensor maps; a 1-D grid of work tiles
        maps = ws_maps(q, k, v, kernel.tile[1])
        work = grid[0] * grid[1]
        # persistent blocks take the tiles in a fixed order: that evens out only equal tiles, so with a
        # causal mask (tiles of every length) the hardware hands out one tile per block as SMs free up
        grid = (min(work, cudl.device_info()["sms"]) if kernel.persistent and not causal else work,)
        kernel(grid, threads, (S, np.float32(scale), int(causal), *maps, o, lse, bh), shared_mem=smem)
        return
    kernel(grid, threads, (S, np.float32(scale), int(causal), q, k, v, o, lse), shared_mem=smem)


_MAPS: dict[tuple[int, int, int, int], Any] = {}


def ws_maps(q: Any, k: Any, v: Any, bc: int) -> tuple[Any, Any, Any]:
    """The tensor maps of flash_attn_6_ws: Q, K, V [BH, S, 128] fp16 seen as [BH S, 128], in boxes of 64
    columns and 128 (Q) or `bc` (K, V) rows with the 128-byte swizzle. A map holds only the address and
    the shape, so maps are kept per (address, shape, box): a launch then makes none and copies none."""
    if not cudl.on_gpu():
        raise RuntimeError(f"{WS} needs an sm_90 GPU: TMA, mbarriers, setmaxnreg and wgmma are not emulated")
    from cudl.tma import tensor_map_2d

    bh, S, d = q.shape
    if d != 128:
        raise ValueError(f"{WS} takes head dimension 128 only, not {d}")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"{WS}: Q, K and V must have one shape, not {q.shape}, {k.shape}, {v.shape}")
    maps = []
    for a, rows in ((q, 128), (k, bc), (v, bc)):
        if a.dtype != np.float16 or not a.flags.c_contiguous or a.data.ptr % 16:
            raise ValueError(f"{WS} takes C-contiguous, 16-byte aligned float16 arrays")
        key = (a.data.ptr, bh * S, d, rows)
        if key not in _MAPS:
            _MAPS[key] = tensor_map_2d(a.reshape(bh * S, d), (rows, 64))
        maps.append(_MAPS[key])
    return maps[0], maps[1], maps[2]


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


def sdpa_backend(fn: Any) -> str:
    """Which backend a call of torch's scaled_dot_product_attention ran, from the names of the CUDA kernels
    that torch's profiler sees while `fn` runs once: "cuDNN", "FlashAttention-2", "memory-efficient" (the
    xFormers-derived kernels) or "math" (unfused), with the first kernel's name."""
    from cudl.profiling import kernels_launched

    names = kernels_launched(fn)
    low = " ".join(names).lower()
    kind = ("cuDNN" if "cudnn" in low else "FlashAttention-2" if "flash" in low
            else "memory-efficient" if "fmha" in low or "efficient" in low else "math")
    return f"{kind} ({names[0][:70] if names else 'no kernel seen'})"


# The chapter's builds. label: (kernel, flash_kernel options), the defaults: the best of the H100
# sweeps (gpu_check.py, 2026-11), with the branches for GPUs with less shared memory per block.
def chapter_builds(smem_optin: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """The default build of each kernel for a GPU whose blocks may have `smem_optin` bytes."""
    builds = {
        "2 mma.sync": ("flash_attn_2_mma", dict(warps=8, bc=128, stages=3)),
        "3 mma.sync, 32 rows/warp": ("flash_attn_3_32rows", dict(warps=4, bc=48)),
        "4 wgmma": (WGMMA, dict(warps=8, options=("-DMIN_BLOCKS=2",))),
        "5 wgmma + overlap": ("flash_attn_5_overlap", dict(warps=8, bc=128)),
        "6 TMA producer + ping-pong": (WS, dict(warps=12, bc=176, options=("-DPERSISTENT",))),
    }
    if smem_optin < 192 * 1024:  # an A100 has 163 KiB: kernel 2 with two K/V slots (128 KiB)
        builds["2 mma.sync"] = ("flash_attn_2_mma", dict(warps=8, bc=128))
    if smem_optin < 128 * 1024:  # a T4 has 64 KiB: kernel 2 with BC = 64, kernel 3 with BC = 32
        builds["2 mma.sync"] = ("flash_attn_2_mma", dict(warps=8, bc=64))
        builds["3 mma.sync, 32 rows/warp"] = ("flash_attn_3_32rows", dict(warps=4, bc=32))
    return builds


FAST = "--use_fast_math"
# The candidates of each kernel (each default above among them): the runners-up of the H100 sweeps.
# A candidate that needs more shared memory than this GPU's blocks may have fails its launch and
# is listed as such in the tuning table.
SPACES: dict[str, list[dict[str, Any]]] = {
    "2 mma.sync": [dict(warps=8, bc=128, stages=3), dict(warps=8, bc=128),
                   dict(warps=8, bc=64), dict(warps=8, bc=64, stages=3)],
    "3 mma.sync, 32 rows/warp": [dict(warps=4, bc=48), dict(warps=4, bc=32),
                                 dict(warps=4, bc=64), dict(warps=4, bc=48, stages=3)],
    "4 wgmma": [dict(warps=8, options=("-DMIN_BLOCKS=2",)), dict(warps=8), dict(warps=12)],
    "5 wgmma + overlap": [dict(warps=8, bc=128), dict(warps=12, bc=64), dict(warps=8, bc=64),
                          dict(warps=8, bc=128, options=(FAST,))],
    "6 TMA producer + ping-pong": [dict(warps=12, bc=176, options=("-DPERSISTENT",)),
                                   dict(warps=12, bc=192, options=("-DPERSISTENT",)),
                                   dict(warps=12, bc=128, stages=3, options=("-DPERSISTENT",)),
                                   dict(warps=12, bc=176)],
}


def tune(label: str, default: tuple[str, dict[str, Any]], q: Any, k: Any, v: Any,
         check: Callable[[Any], Any], **kwargs: Any) -> cudl.Tuned:
    """cudl.autotune over SPACES[label] for kernel `default[0]` (default build `default[1]`), timed
    without a mask on q, k, v; `check(kernel)` raises on a wrong build."""
    name, build = default
    bh, S, d = q.shape
    o, lse = cudl.poisoned((bh, S, d), np.float16), cudl.poisoned((bh, S))
    return cudl.autotune(
        f"flash attention {label}", space=SPACES[label], default=build,
        build=lambda b: flash_kernel(name, d, **b),
        run=lambda kern: flash_launch(kern, q, k, v, o, lse, False), check=check,
        shape=(bh, S, d), source=[f"{D}/{name}.cu", f"{D}/flash.py"],
        flops=4 * bh * S * S * d, compute="fp16", **kwargs)
