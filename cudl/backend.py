"""Which backend runs the kernels: a CUDA GPU through CuPy, or the CPU emulator.

`CUDL_BACKEND=gpu|emulator` forces a choice; otherwise a visible CUDA GPU wins.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

import numpy as np

from .errors import GpuOnly


@functools.lru_cache(maxsize=1)
def _detect() -> tuple[str, str]:
    forced = os.environ.get("CUDL_BACKEND", "").strip().lower()
    if forced not in ("", "gpu", "emulator"):
        raise ValueError(f"CUDL_BACKEND={forced!r}: use 'gpu' or 'emulator'")
    if forced == "emulator":
        return "emulator", "CUDL_BACKEND=emulator was set"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except ImportError:
        reason = "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x to use a GPU)"
    except Exception as exc:  # no driver, no device: CuPy raises CUDARuntimeError
        reason = f"no CUDA GPU is visible ({type(exc).__name__}: {exc})"
    else:
        if count > 0:
            return "gpu", ""
        reason = "CuPy sees no CUDA device"
    if forced == "gpu":
        raise RuntimeError(f"CUDL_BACKEND=gpu but {reason}")
    return "emulator", reason


def backend() -> str:
    """'gpu' or 'emulator'."""
    return _detect()[0]


def fallback_reason() -> str:
    """Why the emulator is in use ('' on a GPU)."""
    return _detect()[1]


def on_gpu() -> bool:
    """True when kernels run on a real CUDA GPU."""
    return backend() == "gpu"


def xp() -> ModuleType:
    """The array module: CuPy on a GPU, NumPy on the emulator."""
    if on_gpu():
        import cupy

        return cupy
    return np


def to_numpy(a: Any) -> np.ndarray:
    """A host copy of a device (or host) array."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def address(a: Any) -> int:
    """The address of an array's first element: a CuPy array's device pointer, a NumPy array's host one (the
    emulator's memory). For alignment checks, and for kernels that take pointers inside an array of addresses."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def sync() -> None:
    """Wait for all queued GPU work (a no-op on the emulator, which runs launches synchronously)."""
    if on_gpu():
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def size(gpu: int, emulator: int) -> int:
    """Problem size for this backend: large enough to fill a GPU, small enough to emulate quickly."""
    return gpu if on_gpu() else emulator


def require_gpu(what: str) -> None:
    """Raise GpuOnly with a clear message when `what` needs real hardware."""
    if not on_gpu():
        raise GpuOnly(f"{what} needs a CUDA GPU; the CPU emulator checks correctness only ({fallback_reason()})")
