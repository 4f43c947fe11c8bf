"""Graders of chapter 13 (quantization), and the NumPy references of the chapter's formats.

The references compute in float32 exactly as the kernels do (IEEE division, round to nearest even), so the
integers and scales of a kernel match them bit for bit.
"""

from __future__ import annotations

import numpy as np

# ------------------------------------------------------------------------------ references

def _groups(w: np.ndarray, group: int) -> list[tuple[int, int, int]]:
    """(row, first column, last column + 1) of every group, in the order of the scale array."""
    rows, cols = w.shape
    return [(r, c, min(c + group, cols)) for r in range(rows) for c in range(0, cols, group)]


def quantize_int8_ref(w: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Absmax int8 with one float32 scale per `group` columns of a row: (q int8, scale float32)."""
    w = np.asarray(w, np.float32)
    q = np.empty(w.shape, np.int8)
    scale = np.empty(len(_groups(w, group)), np.float32)
    for g, (r, a, b) in enumerate(_groups(w, group)):
        amax = np.abs(w[r, a:b]).max()
        s = np.float32(amax) / np.float32(127)
        q[r, a:b] = np.clip(np.rint(w[r, a:b] / s), -127, 127) if amax > 0 else 0
        scale[g] = s
    return q, scale


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
    w = np.asarray(w, np.float32)
    q = np.empty(w.shape, np.int32)
    scale = np.empty(len(_groups(w, group)), np.float32)
    for g, (r, a, b) in enumerate(_groups(w, group)):
        amax = np.abs(w[r, a:b]).max()
        s = np.float32(amax) / np.float32(7)
        q[r, a:b] = np.clip(np.rint(w[r, a:b] / s), -8, 7) if amax > 0 else 0
        scale[g] = s
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
