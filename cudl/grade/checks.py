"""Checks the graders share beyond `cudl.check.compare`: bits where a spec fixes them, error bounds derived
from the computation, and a deterministic result under another thread order.

A tolerance is derived, not picked: a sum of n fp32 terms computed in any order is within
n * U32 * sum|terms| of the exact sum (each of at most n - 1 additions rounds by at most U32 relative to a
partial sum, and every partial sum is at most sum|terms|). A grader passes that bound to compare as
(out, ref, scale=sum|terms|, rtol=n * U32): a kernel that rounds more (an fp16 accumulator, a truncation)
is off by far more, while any correct order of the additions stays inside it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import cudl
from cudl.check import poison_value
from cudl.grade import Refuse

U32 = 2.0**-24  # unit roundoff of fp32: round to nearest is off by at most this, relative
U16 = 2.0**-11  # of fp16
SCHEDULE_ENV = "CUDL_EMULATOR_SCHEDULE"


def fp32_sum_rtol(n: int, slack: float = 2.0) -> float:
    """rtol for a sum of n fp32 terms, relative to sum|terms|: n * U32, times `slack` for what a GPU adds (a
    Tensor Core truncates instead of rounding: up to 2 U32 per addition; fmaf, expf, a division)."""
    return slack * max(1, n) * U32


def same_bits(out: Any, ref_bits: np.ndarray, name: str, why: str, fp16: bool = False) -> None:
    """Refuse unless `out` holds exactly the bits `ref_bits` (same dtype: uint16 for bf16/fp16, uint32 for
    fp32, int8 ...); the message shows the first wrong element as a number and as bits, and `why`. uint16 bits
    are shown as bf16 values, or as fp16 ones with `fp16`."""
    got = np.asarray(cudl.to_numpy(out)).reshape(ref_bits.shape)
    got_bits = got.view(ref_bits.dtype) if got.dtype.itemsize == ref_bits.dtype.itemsize else got
    bad = np.flatnonzero(got_bits.ravel() != ref_bits.ravel())
    if bad.size == 0:
        return
    i = int(bad[0])
    g, e = got_bits.ravel()[i], ref_bits.ravel()[i]
    width = 2 * ref_bits.dtype.itemsize
    raise Refuse(f"{bad.size} of {ref_bits.size} elements of {name} differ from the exact result; first at "
                 f"[{i}]: got {_value(g, ref_bits.dtype, fp16)} (0x{int(g) & (16**width - 1):0{width}x}), expected "
                 f"{_value(e, ref_bits.dtype, fp16)} (0x{int(e) & (16**width - 1):0{width}x}): {why}")


def _value(bits: Any, dtype: np.dtype, fp16: bool = False) -> str:
    """A readable value of one element: bf16 (or fp16) bits (uint16) decoded, fp32 bits (uint32) decoded, ints
    as is."""
    if dtype == np.uint16 and fp16:
        return repr(float(np.array([bits], np.uint16).view(np.float16)[0]))
    if dtype == np.uint16:
        return repr(float(np.array([int(bits) << 16], np.uint32).view(np.float32)[0]))
    if dtype == np.uint32:
        return repr(float(np.array([bits], np.uint32).view(np.float32)[0]))
    return str(int(bits))


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded once to bf16 (nearest, ties to even) as uint16 bits."""
    from cudl.check import float_to_bf16

    return float_to_bf16(np.asarray(x, np.float32))


# ------------------------------------------------------------------------------ another thread order

def schedule_supported() -> bool:
    """Whether this cudl's CPU emulator reads CUDL_EMULATOR_SCHEDULE (blocks and threads in reverse order)."""
    root = Path(cudl.__file__).resolve().parent / "emulator"
    return any(SCHEDULE_ENV in p.read_text(errors="replace") for p in [*root.glob("*.py"), *root.glob("*.cpp")])


@contextlib.contextmanager
def reverse_schedule() -> Iterator[None]:
    """Launches inside run their blocks and threads in reverse order on the emulator (read at each launch);
    on a GPU the order is the hardware's, different from run to run anyway."""
    old = os.environ.get(SCHEDULE_ENV)
    os.environ[SCHEDULE_ENV] = "reverse"
    try:
        yield
    finally:
        if old is None:
            del os.environ[SCHEDULE_ENV]
        else:
            os.environ[SCHEDULE_ENV] = old


def deterministic(launch: Callable[[], None], outputs: list[tuple[str, Any]], why: str) -> None:
    """Run `launch` (which fills `outputs`, (name, array) pairs, from the same inputs) a second time, in reverse
    thread order on the emulator, and refuse unless every output has the same bits as after the first run."""
    first = [np.array(cudl.to_numpy(a), copy=True) for _, a in outputs]
    for _, a in outputs:
        a[...] = poison_value(a.dtype)
    with reverse_schedule():
        launch()
        cudl.sync()
    for (name, a), before in zip(outputs, first):
        after = np.asarray(cudl.to_numpy(a))
        differ = before.reshape(-1).view(np.uint8).reshape(before.size, -1) != \
            after.reshape(-1).view(np.uint8).reshape(after.size, -1)
        if differ.any():
            i = int(np.flatnonzero(differ.any(axis=1))[0])
            was, now = before.ravel()[i].item(), after.ravel()[i].item()
            raise Refuse(f"two runs on the same input gave different bits: {name}[{i}] was {was!r}, then {now!r} "
                         f"with the threads in another order: {why}")
