"""Correctness: fresh random inputs, poisoned outputs, and a relative-error check that NaN never passes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import to_numpy, xp

# Default relative tolerances by output dtype: a few units of rounding error of fp32 math
# (fp32: 2^-24 ~ 6e-8 per op), then one rounding to the output type (fp16: 2^-11, bf16: 2^-8).
RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def randn(shape: int | tuple[int, ...], dtype: Any = np.float32, *, seed: int | None = None) -> Any:
    """Fresh standard-normal inputs on the current backend (a new seed every call unless given)."""
    rng = np.random.default_rng(seed)
    return xp().asarray(rng.standard_normal(shape).astype(dtype))


def poison_value(dtype: Any) -> Any:
    """What `poisoned` fills with: NaN for floats, the largest value for integers, True for bool."""
    dt = np.dtype(dtype)
    return np.nan if dt.kind == "f" else (np.iinfo(dt).max if dt.kind in "iu" else 1)


def poisoned(shape: int | tuple[int, ...], dtype: Any = np.float32) -> Any:
    """An output buffer filled with NaN (floats) or a sentinel (integers): unwritten elements show up."""
    return xp().full(shape, poison_value(dtype), dtype=np.dtype(dtype))


def bf16_to_float(bits: Any) -> np.ndarray:
    """bfloat16 values stored as uint16 bits (NumPy has no bfloat16) as float32."""
    return (np.asarray(to_numpy(bits)).astype(np.uint32) << 16).view(np.float32)


def float_to_bf16(x: Any) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as uint16 bits."""
    u = np.asarray(to_numpy(x), dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(u.view(np.float32)), np.uint16(0x7FC0), rounded)


@dataclass
class Comparison:
    """How an output differs from its reference."""

    ok: bool
    rel_err: float  # ||out - ref|| / ||ref|| over the whole array
    rtol: float
    n_bad: int
    size: int
    worst_index: tuple[int, ...] | None
    worst_got: float | None
    worst_expected: float | None
    note: str = ""

    def __str__(self) -> str:
        if self.ok:
            return f"OK: relative error {self.rel_err:.2e} (tolerance {self.rtol:.0e})"
        where = ""
        if self.worst_index is not None:
            idx = self.worst_index[0] if len(self.worst_index) == 1 else self.worst_index
            where = f"; worst at [{idx}]: got {self.worst_got!r}, expected {self.worst_expected!r}"
        return f"{self.n_bad} of {self.size} elements wrong{where}{self.note}"


def compare(out: Any, ref: Any, *, rtol: float | None = None, dtype: str | None = None,
            scale: Any = None) -> Comparison:
    """Elementwise |out-ref| <= rtol*(|ref| + scale), no NaN/Inf where ref is finite, and the norm error.

    `scale` defaults to rms(ref). A result that is a small difference of large terms (a sum of mixed signs,
    a loss m + log s - x_t) passes the size of those terms instead (e.g. sum |x|): its rounding error is
    relative to them, not to the result, which may be near zero."""
    got = to_numpy(out)
    exp = np.asarray(to_numpy(ref))
    if got.shape != exp.shape:
        if got.size == exp.size:
            got = got.reshape(exp.shape)
        else:
            return Comparison(False, float("inf"), 0.0, got.size, got.size, None, None, None,
                              f" (shape {got.shape}, expected {exp.shape})")
    name = dtype or ("bfloat16" if got.dtype == np.uint16 else got.dtype.name)
    if got.dtype == np.uint16 and exp.dtype.kind == "f":  # bf16 outputs travel as raw bits: decode them
        got = bf16_to_float(got)
    if got.dtype.kind in "iub" and exp.dtype.kind in "iub":
        bad = got != exp
        tol = 0.0
        rel = float(np.count_nonzero(bad)) / max(1, got.size)
    else:
        tol = rtol if rtol is not None else RTOL.get(name, 1e-5)
        g = got.astype(np.float64)
        e = exp.astype(np.float64)
        if scale is None:
            scale = float(np.sqrt(np.mean(e[np.isfinite(e)] ** 2))) if e.size else 0.0
        else:
            scale = np.broadcast_to(np.abs(np.asarray(to_numpy(scale), dtype=np.float64)), e.shape)
        diff = np.abs(g - e)
        with np.errstate(invalid="ignore"):
            bad = ~(diff <= tol * (np.abs(e) + scale))  # NaN compares False, so NaN is always bad
        bad &= ~(np.isinf(e) & (g == e))  # matching infinities are fine
        norm = float(np.linalg.norm(e[np.isfinite(e)])) or 1.0
        rel = float(np.linalg.norm(np.where(np.isfinite(diff), diff, np.inf))) / norm
    n_bad = int(np.count_nonzero(bad))
    if n_bad == 0:
        return Comparison(True, rel, tol, 0, got.size, None, None, None)
    flat = np.flatnonzero(bad.ravel())
    if got.dtype.kind == "f":
        errs = np.abs(got.ravel()[flat].astype(np.float64) - exp.ravel()[flat])
        errs = np.where(np.isnan(errs), np.inf, errs)
        first = int(flat[int(np.argmax(errs))])
    else:
        first = int(flat[0])
    index = tuple(int(i) for i in np.unravel_index(first, got.shape))
    return Comparison(False, rel, tol, n_bad, got.size, index, got.ravel()[first].item(),
                      exp.ravel()[first].item())


def check(out: Any, ref: Any, *, rtol: float | None = None, name: str = "output", scale: Any = None) -> float:
    """Assert that `out` matches the reference (compare(); `scale` as there); print the relative error and
    return it."""
    c = compare(out, ref, rtol=rtol, scale=scale)
    if not c.ok:
        raise AssertionError(f"{name} does not match the reference: {c}")
    print(f"✓ {name} matches the reference: relative error {c.rel_err:.1e} (tolerance {c.rtol:.0e})")
    return c.rel_err
