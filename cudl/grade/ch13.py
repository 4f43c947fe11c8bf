"""Graders of chapter 13 (quantization), and the NumPy references of the chapter's formats.

The references compute in float32 exactly as the kernels do (IEEE division, round to nearest even), so the
integers and scales of a kernel match them bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.checks import fp32_sum_rtol, same_bits
from cudl.grade.guard import check_guard, guarded, guarded_output

# ------------------------------------------------------------------------------ references

def _groups(w: np.ndarray, group: int) -> list[tuple[int, int, int]]:
    """(row, first column, last column + 1) of every group, in the order of the scale array."""
    rows, cols = w.shape
    return [(r, c, min(c + group, cols)) for r in range(rows) for c in range(0, cols, group)]


def _absmax_ref(w: np.ndarray, group: int, qmin: int, qmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric absmax codes clipped to [qmin, qmax] (int32), one float32 scale amax / qmax per group."""
    w = np.asarray(w, np.float32)
    q = np.empty(w.shape, np.int32)
    scale = np.empty(len(_groups(w, group)), np.float32)
    for g, (r, a, b) in enumerate(_groups(w, group)):
        amax = np.abs(w[r, a:b]).max()
        s = np.float32(amax) / np.float32(qmax)
        q[r, a:b] = np.clip(np.rint(w[r, a:b] / s), qmin, qmax) if amax > 0 else 0
        scale[g] = s
    return q, scale


def quantize_int8_ref(w: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Absmax int8 with one float32 scale per `group` columns of a row: (q int8, scale float32)."""
    q, scale = _absmax_ref(w, group, -127, 127)
    return q.astype(np.int8), scale


def quantize_uint8_zero_point_ref(w: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric uint8 with a float32 scale and a uint8 zero point per group: (q, scale, zero)."""
    w = np.asarray(w, np.float32)
    q = np.empty(w.shape, np.uint8)
    n = len(_groups(w, group))
    scale, zero = np.empty(n, np.float32), np.empty(n, np.uint8)
    for g, (r, a, b) in enumerate(_groups(w, group)):
        lo = min(np.float32(w[r, a:b].min()), np.float32(0))
        hi = max(np.float32(w[r, a:b].max()), np.float32(0))
        s = np.float32(hi - lo) / np.float32(255)
        z = np.rint(np.float32(-lo) / s) if s > 0 else np.float32(0)
        q[r, a:b] = np.clip(np.rint(w[r, a:b] / s) + z, 0, 255) if s > 0 else 0
        scale[g], zero[g] = s, z
    return q, scale, zero


def quantize_int4_ref(w: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Absmax int4 in [-8, 7], packed two per byte (nibble q + 8, even column low): (packed uint8, scale)."""
    q, scale = _absmax_ref(w, group, -8, 7)
    return pack_int4(q), scale


def pack_int4(q: np.ndarray) -> np.ndarray:
    """int values in [-8, 7] (even number of columns) -> bytes, column 2j in the low nibble of byte j."""
    n = (np.asarray(q, np.int32) + 8).astype(np.uint8)
    return (n[..., 0::2] | (n[..., 1::2] << 4)).astype(np.uint8)


def unpack_int4(p: np.ndarray) -> np.ndarray:
    """The inverse of pack_int4: int8 values in [-8, 7]."""
    p = np.asarray(p, np.uint8)
    out = np.empty((*p.shape[:-1], 2 * p.shape[-1]), np.int8)
    out[..., 0::2] = (p & 15).astype(np.int8) - 8
    out[..., 1::2] = (p >> 4).astype(np.int8) - 8
    return out


def expand_scale(scale: np.ndarray, shape: tuple[int, int], group: int) -> np.ndarray:
    """The per-group scales (or zero points) broadcast to one per element of a rows x cols matrix."""
    rows, cols = shape
    groups = -(-cols // group)
    return np.repeat(np.asarray(scale).reshape(rows, groups), group, axis=1)[:, :cols]


def dequantize_ref(q: np.ndarray, scale: np.ndarray, group: int, zero: np.ndarray | None = None) -> np.ndarray:
    """float32 weights back from integers (int8, or int4 already unpacked) and their group scales."""
    q = np.asarray(q)
    s = expand_scale(scale, q.shape, group)
    if zero is None:
        return (q.astype(np.float32) * s).astype(np.float32)
    z = expand_scale(zero, q.shape, group).astype(np.float32)
    return ((q.astype(np.float32) - z) * s).astype(np.float32)


# ------------------------------------------------------------------------------ graders

WARPS = 8  # int4_dot: 256 threads = 8 warps, one row each
GUARD = 64  # poisoned elements after each input and output


def _randn(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


def _random_int4(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng().integers(-8, 8, size=(rows, cols)).astype(np.int32)


@grader("int4_dot", kernels=["int4_dot"],
        cases=[dict(N=1, K=2), dict(N=5, K=34), dict(N=8, K=64), dict(N=37, K=1000), dict(N=1000, K=4096),
               dict(N=4099, K=2050)],
        emulator_cases=[dict(N=1, K=2), dict(N=5, K=34), dict(N=8, K=64), dict(N=37, K=1000), dict(N=19, K=2048),
                        dict(N=9, K=130)],
        hint=["one warp per row: the lanes walk the row's K / 2 bytes at stride 32; each byte holds two weights, "
              "column 2j in its low nibble and 2j + 1 in its high nibble, both stored as q + 8",
              "for byte j = lane, lane + 32, ... < K / 2: b = P[row * (K / 2) + j]; add ((b & 15) - 8) * x[2j] + "
              "((b >> 4) - 8) * x[2j + 1]; then a shuffle reduction over the warp",
              "row = blockIdx.x * 8 + threadIdx.x / 32 (return if row >= N); after the loop, sum with "
              "__shfl_down_sync at offsets 16, 8, 4, 2, 1 and let lane 0 write y[row] = scale[row] * sum"])
def int4_dot(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """y[n] = scale[n] * sum_k q[n][k] x[k] with q packed two per byte (column 2j low nibble, stored q + 8)."""
    N, K = case["N"], case["K"]
    q = _random_int4(N, K)
    scale = np.random.default_rng().uniform(0.01, 0.1, N).astype(np.float32)
    x = _randn(K)
    p_dev = guarded(pack_int4(q), guard=GUARD)[0]
    s_dev, x_dev = guarded(scale, guard=GUARD)[0], guarded(x, guard=GUARD)[0]
    out, buf = guarded_output(N, guard=GUARD)
    load("int4_dot")(((N + WARPS - 1) // WARPS,), (32 * WARPS,), (N, K, p_dev, s_dev, x_dev, out))
    cudl.sync()
    check_guard(buf, N, "y")
    s64, q64, x64 = scale.astype(np.float64), q.astype(np.float64), x.astype(np.float64)
    # an fp32 sum of K products, then the scale: within fp32_sum_rtol(K + 2) of scale * sum |q x|
    return [(out, s64 * (q64 @ x64), s64 * (np.abs(q64) @ np.abs(x64)), fp32_sum_rtol(K + 2))]


@grader("quantize_groups", kernels=["quantize_groups"],
        cases=[dict(rows=1, cols=1, group=1), dict(rows=3, cols=100, group=32), dict(rows=7, cols=33, group=33),
               dict(rows=1, cols=4096, group=4096), dict(rows=64, cols=1000, group=128),
               dict(rows=4096, cols=4096, group=128)],
        emulator_cases=[dict(rows=1, cols=1, group=1), dict(rows=3, cols=100, group=32),
                        dict(rows=7, cols=33, group=33), dict(rows=1, cols=4096, group=4096),
                        dict(rows=13, cols=1000, group=128), dict(rows=5, cols=256, group=64)],
        hint=["one warp per group: first the largest |w| of the group (each lane its share, then a shuffle "
              "reduction that leaves the maximum in every lane), then every lane writes its share of q",
              "the scale is amax / 127.0f and q = rintf(w / scale), clamped to [-127, 127]; an all-zero group "
              "has amax = 0: write q = 0 there (and the scale 0) instead of dividing by zero",
              "gid = (blockIdx.x * 128 + threadIdx.x) / 32; groups = ceil(cols / group); row = gid / groups, "
              "c0 = (gid % groups) * group, len = min(group, cols - c0); use __shfl_xor_sync with fmaxf so all "
              "lanes get amax; lane 0 writes scale[gid]"])
def quantize_groups(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Absmax int8 per group of `group` columns of each row: q (int8, bit-exact) and the float32 scales."""
    rows, cols, group = case["rows"], case["cols"], case["group"]
    w = _randn(rows, cols)
    _plant_ties(w, group, np.random.default_rng())
    if rows * cols > 64:
        w[0, :min(group, cols)] = 0.0  # an all-zero group: scale 0, q 0
    ref_q, ref_s = quantize_int8_ref(w, group)
    w_dev = guarded(w, guard=GUARD)[0]
    q, qbuf = guarded_output(rows * cols, np.int8, fill=-128, guard=GUARD)
    q.fill(-128)  # never a result of absmax int8: an unwritten element shows
    s, sbuf = guarded_output(ref_s.size, guard=GUARD)
    warps = ref_s.size
    load("quantize_groups")(((warps + 3) // 4,), (128,), (rows, cols, group, w_dev, q, s))
    cudl.sync()
    check_guard(qbuf, rows * cols, "q", fill=-128)
    check_guard(sbuf, ref_s.size, "scale")
    same_bits(s.view(np.uint32), ref_s.view(np.uint32), "scale", "s = amax / 127.0f, one IEEE division")
    same_bits(q, ref_q.ravel(), "q", "q = rintf(w / s): the division, then rounding to nearest with ties to even")
    return [(q, ref_q.ravel()), (s.view(np.uint32), ref_s.view(np.uint32))]


def _plant_ties(w: np.ndarray, group: int, rng: np.random.Generator) -> None:
    """Overwrite about one element in 6 of each group of w (rows x cols, float32; fewer in large matrices; never
    a group's largest |w|, so the scale stays) with a value where the rounding rule shows: w / s exactly k + 1/2
    with k even (rintf rounds to k, roundf and floor(x + 0.5) away from it), or a value next to a tie where
    w * (127 / amax) rounds to another integer than w / s. Random inputs almost never hit either."""
    rows, cols = w.shape
    groups = -(-cols // group)
    padded = np.zeros((rows, groups * group), np.float32)
    padded[:, :cols] = w
    g = padded.reshape(rows, groups, group)  # a view: writes go to padded
    top = np.abs(g).argmax(axis=2)
    amax = np.abs(g).max(axis=2)
    col = np.arange(groups * group).reshape(groups, group)
    rate = min(1 / 6, 50_000 / w.size)  # enough ties in every case, without minutes of NumPy in the large ones
    pick = (rng.random(g.shape) < rate) & (col < cols)[None] & (np.arange(group) != top[..., None])
    pick &= (np.minimum(group, cols - np.arange(groups) * group) >= 2)[None, :, None] & (amax > 0)[..., None]
    r, gi, j = np.nonzero(pick)
    a = amax[r, gi]
    s, inv = a / np.float32(127), np.float32(127) / a
    k = rng.integers(-63, 63, r.size) * 2  # even
    near = ((k + 0.5) * s.astype(np.float64)).astype(np.float32)
    cand = near[:, None] + np.arange(-4, 5, dtype=np.float32)[None, :] * np.spacing(near)[:, None]
    ok = np.abs(cand) < a[:, None]
    differ = ok & (np.rint(cand / s[:, None]) != np.rint(cand * inv[:, None]))
    tie = ok & (cand / s[:, None] == (k + 0.5).astype(np.float32)[:, None])
    want = np.where((rng.random(r.size) < 0.5) & differ.any(axis=1), 0, 1)[:, None]
    mask = np.where(want == 0, differ, np.where(tie.any(axis=1, keepdims=True), tie, differ))
    choice = (mask * rng.random(mask.shape)).argmax(axis=1)
    has = mask.any(axis=1)
    g[r[has], gi[has], j[has]] = cand[has, choice[has]]
    w[:] = padded[:, :cols]


@grader("w4a16_gemv", kernels=["w4a16_gemv"], rtol=2e-3,
        cases=[dict(N=1, K=256), dict(N=5, K=512), dict(N=37, K=1024), dict(N=4096, K=4096),
               dict(N=11008, K=4096), dict(N=4096, K=11008)],
        emulator_cases=[dict(N=1, K=256), dict(N=5, K=512), dict(N=37, K=1024), dict(N=9, K=4096),
                        dict(N=3, K=2816), dict(N=4, K=11008)],
        speed=dict(case=dict(N=11008, K=4096), factor=1.5,  # bytes: the packed weights, their scales, x and y
                   bytes=11008 * 4096 // 2 + 4 * 11008 * 4096 // 128 + 2 * (4096 + 11008)),
        hint=["memory-bound: the time is the 0.5 byte per weight over the bandwidth, if each lane loads 16 "
              "bytes (32 weights) at a time and several such loads are in flight before the arithmetic",
              "the integer-to-float conversion is slow; instead OR a nibble (masked in place) into the bits "
              "0x4B000000: the float is 2^23 + n 16^p for a nibble at bit 4p, and subtracting 2^23 + 8 16^p "
              "leaves q 16^p exactly (fold 16^-p into x); nibbles at bits 20-31 come from the word >> 12",
              "one warp per row; lane l handles 16-byte chunks c = l, l + 32, ... of the row (uint4 loads of "
              "P, 4 uint4 loads of x per chunk); per chunk: partial = sum of 32 products, acc += "
              "scale[row * (K / 128) + c / 4] * partial; load the weights of UNROLL chunks (the solution: 2) "
              "before using any"])
def w4a16_gemv(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """y = (s * Q) x, Q int4 packed two per byte, one float32 scale per 128 weights of a row; x, y fp16."""
    N, K = case["N"], case["K"]
    w = _randn(N, K)
    p, s = quantize_int4_ref(w, 128)
    x = _randn(K).astype(np.float16)
    p_dev, s_dev = guarded(p, guard=GUARD)[0], guarded(s, guard=GUARD)[0]
    x_dev = guarded(x, guard=GUARD)[0]
    out, buf = guarded_output(N, np.float16, guard=GUARD)
    load("w4a16_gemv")(((N + 3) // 4,), (128,), (N, K, p_dev, s_dev, x_dev, out))
    cudl.sync()
    check_guard(buf, N, "y")
    terms = dequantize_ref(unpack_int4(p), s, 128).astype(np.float64) * x.astype(np.float64)
    # relative to the root of the sum of the squared terms of each row: a sum of K products of mixed signs is rounded
    # in fp32 relative to them, and that is what rms(y) stands for (in expectation) without one draw's cancellation:
    # relative to rms(y), case 1 (one row: y ~ 0 now and then) failed about one grading in 1e5. Not sum |terms|: that
    # worst-case bound would let an fp16 accumulator through the large cases
    return [(out, terms.sum(axis=1), np.sqrt(np.einsum("nk,nk->n", terms, terms)))]
