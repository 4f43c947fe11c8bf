"""Mimic mode: a T4's (or an A100's) code path run on a newer GPU, to test it where no such card is at hand.

    CUDL_MIMIC=t4 jupyter ...        # or, before the first cudl.load: cudl.mimic("t4")

In this mode every kernel is built as PTX for the mimicked card's virtual architecture (compute_75 for a T4,
compute_80 for an A100), which the driver compiles for the real GPU when it loads it; launches are held to that
card's limits (threads, shared memory and registers per block); `cudl.device_info()` reports its compute capability
(and its per-block limits under "mimics"), so the chapters take that card's branches. The SM count, the per-SM
limits (occupancy) and the speed stay the real GPU's: `cudl.record` refuses to store the speed. The cards and their
limits are the CPU emulator's (`cudl.emulator.DEVICES`, limits from `cudl.occupancy.LIMITS`). On the emulator,
CUDL_MIMIC picks the device whose limits it enforces, as CUDL_EMULATOR_DEVICE does (which wins where both are set).
"""

from __future__ import annotations

import os
from typing import Any

_chosen: list[str | None] = []  # what cudl.mimic() set: overrides CUDL_MIMIC; empty: not called


def mimic(card: str | None) -> None:
    """Mimic `card` ("t4", "a100"; None leaves the mode) from now on: call it before the first cudl.load,
    since kernels loaded earlier were built for the real GPU."""
    _chosen[:] = [_key(card) if card else None]


def _key(card: str) -> str:
    from .emulator import DEVICES

    key = card.strip().upper()
    if key not in DEVICES:
        raise ValueError(f"cudl cannot mimic {card!r}: choose one of {', '.join(k.lower() for k in DEVICES)}")
    return key


def card() -> str | None:
    """The key of the mimicked card ('T4', 'A100'), or None outside the mode."""
    if _chosen:
        return _chosen[0]
    env = os.environ.get("CUDL_MIMIC", "").strip()
    return _key(env) if env else None


def active() -> dict[str, Any] | None:
    """On a GPU in mimic mode: the mimicked card (name, cc, sms and per-block limits); None otherwise."""
    from .backend import on_gpu

    key = card()
    if key is None or not on_gpu():
        return None
    from .emulator import device

    return device(key)


def arch() -> str:
    """The virtual architecture kernels are built for in mimic mode: 'compute_75' for a T4."""
    return "compute_" + active()["cc"].replace(".", "")


def leave_hint() -> str:
    return "unset CUDL_MIMIC (or call cudl.mimic(None) before loading kernels) to use the real GPU's limits"
