"""Guard zones of the graders: device buffers followed by `guard` elements of known values.

A GPU rarely faults on a write a few elements past the end of an array (allocations are rounded up), so a
kernel without a bounds check would pass there. Each grader therefore allocates its buffers with a guard
zone after them and calls `check_guard` after the launch: a changed guard element raises KernelFault, which
the grader reports as a CRASH line naming the array and the index, like the CPU emulator's own reports.
Inputs get a guard too (poison by default), so a kernel that reads past their end gets NaN into its result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import cudl
from cudl.check import poison_value
from cudl.errors import KernelFault

GUARD = 1024  # elements after a buffer: more than one block can write past the end


def guarded(data: np.ndarray, fill: Any = None, guard: int = GUARD) -> tuple[Any, Any]:
    """(view, whole): `data` copied to the device (cudl.xp), followed by `guard` elements of `fill`
    (default: the poison of data's dtype); `view` has data's shape, `whole` is the flat buffer."""
    data = np.asarray(data)
    full = np.full(data.size + guard, poison_value(data.dtype) if fill is None else fill, dtype=data.dtype)
    full[: data.size] = data.ravel()
    whole = cudl.xp.asarray(full)
    return whole[: data.size].reshape(data.shape), whole


def guarded_output(shape: int | tuple[int, ...], dtype: Any = np.float32, fill: Any = None,
                   guard: int = GUARD) -> tuple[Any, Any]:
    """(view, whole): a poisoned output of `shape` (see cudl.poisoned) followed by `guard` elements of `fill`
    (default: the same poison)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    size = math.prod(shape)
    whole = cudl.poisoned(size + guard, dtype)
    if fill is not None:
        whole[size:] = fill
    return whole[:size].reshape(shape), whole


def check_guard(whole: Any, size: int, name: str, fill: Any = None) -> None:
    """Raise KernelFault naming the first element past `size` of `whole` that the kernel changed (NaN-aware)."""
    tail = np.asarray(cudl.to_numpy(whole[size:]))
    f = poison_value(tail.dtype) if fill is None else fill
    kept = np.isnan(tail) if tail.dtype.kind == "f" and np.isnan(f) else tail == f
    if not kept.all():
        changed = np.flatnonzero(~kept)
        raise KernelFault(f"out-of-bounds write of {name}[{size + int(changed[0])}] ({name} has {size} elements; "
                          f"{changed.size} of the {tail.size} elements past its end changed): check the bounds "
                          f"test before each write (is every thread's index compared with the size?)")
