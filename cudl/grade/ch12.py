"""Chapter 12 (Flash Attention): launchers of the chapter's kernels and a float64 reference, shared by the
chapter, its tests and kernels_src/12-flash-attention/gpu_check.py; the graders of its exercises (the online
softmax update of one tile, a causal mask, and a CUDA-core attention forward as the speed challenge).

Q, K, V and O are [BH, S, D] fp16 arrays (BH = batch x heads), LSE is [BH, S] float32 (natural log).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.checks import U32, same_bits
from cudl.grade.guard import check_guard, guarded

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
