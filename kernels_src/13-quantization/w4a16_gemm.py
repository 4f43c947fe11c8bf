"""Chapter 13 (quantization): the launcher of gemm_w4a16_mma.cu, the W4A16 GEMM on Tensor Cores for
batch 1-16, and the offline weight shuffle it reads. Shared by the chapter, its GPU scripts and tests.

    w4 = cudl.kernels_module("13-quantization/w4a16_gemm.py")
    wq, ws = w4.shuffle_weights(packed, scale)        # once, from quantize_int4's output
    run = w4.gemm_w4a16(xp.asarray(wq), xp.asarray(ws), x, y)   # x B x K, y B x N (fp16)
    run()
    tuned = w4.tune(wq, ws, x, y, check)   # the build and slices of K for this GPU (cudl.autotune)
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl

D = "13-quantization"
GROUP = 128  # the chapter's scale group
CHUNK = 64  # columns of K per 16-byte load of a lane (the kernel's CHUNK)
MULTIPLE = 128  # N and K must be multiples of this (the launcher's promise; the kernel needs less)

# The kernel's -D options by batch tiles (NT = 1 for B <= 8, 2 for B <= 16): 16-row tiles per warp,
# warps per block, chunks in flight per warp: the defaults, picked from a sweep of MT, WARPS, UNROLL and
# splits on an H200 (nvcc 13), where they were the fastest or close to it at both LLaMA shapes. Two tiles
# per warp, not four: twice the row blocks, so fewer slices of K (and fewer partial sums) fill the GPU;
# 77 / 78 registers (NT = 1 / 2), so three blocks of 8 warps fit on an SM.
CONFIG = {1: dict(MT=2, WARPS=8, UNROLL=2), 2: dict(MT=2, WARPS=8, UNROLL=1)}
# What `tune` chooses among, per NT, each with every count of slices in SPLITS (the best of that sweep
# and their neighbours; MT = 4 and 16 warps never won there).
SPACE = {1: [dict(MT=2, WARPS=8, UNROLL=2), dict(MT=1, WARPS=8, UNROLL=2), dict(MT=1, WARPS=4, UNROLL=2),
             dict(MT=2, WARPS=8, UNROLL=4)],
         2: [dict(MT=2, WARPS=8, UNROLL=1), dict(MT=1, WARPS=8, UNROLL=2), dict(MT=2, WARPS=4, UNROLL=2),
             dict(MT=1, WARPS=4, UNROLL=1)]}
SPLITS = (1, 2, 3, 4, 6)


def shuffle_weights(packed, scale, group: int = GROUP) -> tuple[np.ndarray, np.ndarray]:
    """quantize_int4's bytes (N x K/2) and float32 scales (N x K/group) -> the kernel's layout.

    Weights: uint32 [N/16, K/64, 32 lanes, 4 words]: word s of lane (g, t) holds rows g and g + 8
    (of the 16-row tile), columns 16 t + 4 s ... + 3 of the 64-column chunk, nibble p = h + 2 (e // 2)
    + 4 (e % 2) for row g + 8 h, column 16 t + 4 s + e (the A fragment of gemm_w4a16_mma.cu's header).
    Scales: float32 [N/16, K/group, 8, 2]: (row g, row g + 8) of each tile and group.
    """
    p = np.asarray(cudl.to_numpy(packed), dtype=np.uint8)
    N, K = p.shape[0], 2 * p.shape[1]
    if N % 16 or K % CHUNK or K % group or group % CHUNK:
        raise ValueError(f"shuffle_weights: N={N} must be a multiple of 16, K={K} of {CHUNK} and of "
                         f"group={group}, group of {CHUNK}")
    n = np.empty((N, K), np.uint32)  # the nibbles q + 8, column 2j from the low half of byte j
    n[:, 0::2], n[:, 1::2] = p & 15, p >> 4
    # [tile T, half h, g, chunk C, t, s, e]: row 16 T + 8 h + g, column 64 C + 16 t + 4 s + e
    n = n.reshape(N // 16, 2, 8, K // CHUNK, 4, 4, 4)
    h, e = np.arange(2).reshape(2, 1), np.arange(4).reshape(1, 4)
    shift = (4 * (h + 2 * (e // 2) + 4 * (e % 2))).astype(np.uint32)  # [h, e]: bit of the nibble
    words = (n.transpose(0, 3, 2, 4, 5, 1, 6) << shift).sum(axis=(-2, -1), dtype=np.uint64)
    wq = np.ascontiguousarray(words.astype(np.uint32)).reshape(N // 16, K // CHUNK, 32, 4)
    s = np.asarray(cudl.to_numpy(scale), dtype=np.float32).reshape(N // 16, 2, 8, K // group)
    ws = np.ascontiguousarray(s.transpose(0, 3, 2, 1))  # [tile, group, g, h]
    return wq, ws


def options(batch: int, group: int = GROUP, **overrides: int) -> tuple[str, ...]:
    """The -D options for a batch of `batch` rows (NT from the batch, the rest from CONFIG; the
    scale group a constant: GROUP_SIZE)."""
    nt = 1 if batch <= 8 else 2
    opts = {**CONFIG[nt], "GROUP_SIZE": group, **overrides, "NT": nt}
    return tuple(f"-D{k}={v}" for k, v in sorted(opts.items()))


def default_splits(N: int, K: int, mt: int, warps: int, unroll: int, sms: int) -> int:
    """Slices of K: about two blocks per SM, but never fewer chunks per block than one step of
    every warp (warps x unroll chunks)."""
    row_blocks = N // (16 * mt)
    most = max(1, (K // CHUNK) // (warps * unroll))
    return max(1, min(-(-2 * sms // row_blocks), most))


def gemm_w4a16(wq, ws, x, y, group: int = GROUP, splits: int | None = None, source: str | None = None,
               **overrides: int):
    """Check the shapes; return a launcher of Y = X W^T (x B x K, y B x N, fp16; wq, ws from
    shuffle_weights, on the device). `splits` slices of K (None: default_splits); MT, WARPS,
    UNROLL override CONFIG; `source` replaces the kernel's file (a test's mutant)."""
    batch, K = x.shape
    N = y.shape[1]
    if y.shape[0] != batch or not 1 <= batch <= 16:
        raise ValueError(f"x {x.shape} and y {y.shape}: need B x K and B x N with 1 <= B <= 16")
    if N % MULTIPLE or K % MULTIPLE or group % CHUNK or K % group:
        raise ValueError(f"gemm_w4a16 needs N and K multiples of {MULTIPLE} and group a multiple of "
                         f"{CHUNK} dividing K; got N={N}, K={K}, group={group}")
    if wq.size != N * K // 8 or ws.size != 2 * (N // 16) * (K // group) * 8:
        raise ValueError(f"wq ({wq.size} words) or ws ({ws.size} floats) do not hold N={N} x K={K}")
    if x.dtype != np.float16 or y.dtype != np.float16:
        raise ValueError("x and y must be float16")
    opts = options(batch, group, **overrides)
    d = {o[2:].split("=")[0]: int(o.split("=")[1]) for o in opts}
    mt, warps, unroll = d["MT"], d["WARPS"], d["UNROLL"]
    if splits is None:
        info = cudl.device_info()  # the emulator gives the SMs of the GPU it mimics
        splits = default_splits(N, K, mt, warps, unroll, info.get("sms") or info["mimics"]["sms"])
    if not 1 <= splits <= K // CHUNK:
        raise ValueError(f"splits={splits}: between 1 and K / {CHUNK} = {K // CHUNK}")
    k = cudl.load(source or f"{D}/gemm_w4a16_mma.cu", "gemm_w4a16_mma", options=opts)
    xp = cudl.xp
    partial = xp.empty(splits * batch * N, dtype=np.float32) if splits > 1 else None
    counters = xp.zeros(N // (16 * mt), dtype=np.uint32) if splits > 1 else None  # zero between launches
    grid, block = (N // (16 * mt), splits), (32 * warps,)
    args = (batch, N, K, group, splits, wq, ws, x, y, partial, counters)

    def run():
        return k(grid, block, args)

    run.kernel, run.splits, run.grid = k, splits, grid  # for the timing tables
    run.counters = counters  # for the tests: back to zero after every launch
    return run


def dequantized(packed, scale, group: int = GROUP) -> np.ndarray:
    """The exact weights W (N x K, float64) of quantize_int4's output: q times its float32 scale."""
    from cudl.grade.ch13 import expand_scale, unpack_int4

    q = unpack_int4(cudl.to_numpy(packed)).astype(np.float64)
    return q * expand_scale(cudl.to_numpy(scale).astype(np.float64), q.shape, group)


def reference(packed, scale, x, group: int = GROUP) -> np.ndarray:
    """float64 Y = X W^T on the host, W the exact dequantized weights."""
    return cudl.to_numpy(x).astype(np.float64) @ dequantized(packed, scale, group).T


def tune(wq, ws, x, y, check, group: int = GROUP, **kwargs: Any) -> Any:
    """cudl.autotune of the build (MT, WARPS, UNROLL) and the slices of K for this GPU, shape and batch:
    the space is SPACE[NT] x SPLITS (slices that K / 64 chunks allow) plus the default (CONFIG and
    default_splits). `check(run)` raises if the launch `run` wrote a wrong Y. Returns cudl's Tuned, whose
    `.kernel` is the chosen launcher (as gemm_w4a16 returns it); `kwargs` go to cudl.autotune."""
    batch, K = x.shape
    N = y.shape[1]
    nt = 1 if batch <= 8 else 2
    info = cudl.device_info()
    sms = info.get("sms") or info["mimics"]["sms"]
    default = {**CONFIG[nt], "splits": default_splits(N, K, CONFIG[nt]["MT"], CONFIG[nt]["WARPS"],
                                                         CONFIG[nt]["UNROLL"], sms)}
    space = [default] + [{**c, "splits": s} for c in SPACE[nt] for s in SPLITS
                         if s <= K // CHUNK and {**c, "splits": s} != default]
    nbytes = N * K // 2 + 4 * N * (K // group) + 2 * batch * (N + K)  # weights, scales, X and Y

    def build(c: dict) -> Any:
        c = dict(c)
        return gemm_w4a16(wq, ws, x, y, group, splits=c.pop("splits"), **c)

    return cudl.autotune(f"W4A16 GEMM, B = {batch}", space, build, lambda run: run(), check=check,
                         default=default, shape=(batch, N, K, group),
                         source=[f"{D}/gemm_w4a16_mma.cu", f"{D}/w4a16_gemm.py"], bytes=nbytes, **kwargs)
