"""`cudl.record`: keep each benchmark of a GPU run in `benchmarks/<gpu>.json` for the Scoreboard page."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

from .backend import on_gpu
from .bench import Timing, check_precision
from .ceilings import PRECISIONS, note_rate, precision_of
from .compile import ROOT

BENCH_DIR = ROOT / "benchmarks"


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def git_commit() -> str:
    """The commit the code came from: $CUDL_GIT_COMMIT (set where .git is absent) or git."""
    if os.environ.get("CUDL_GIT_COMMIT"):
        return os.environ["CUDL_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# A baseline is a library (the comparison a reader cares about) or the book's own previous step (how much
# one idea bought): the Scoreboard shows them in separate columns. Names that mention a library are the first.
_LIBRARY = re.compile(r"(?<![a-z])(pytorch|torch|cublas|cudnn|cutlass|triton|sdpa|nccl|cupy|flash-?attn|thrust)",
                      re.IGNORECASE)
BASELINE_KINDS = ("library", "previous")


def baseline_kind_of(name: str) -> str:
    """'library' if the baseline's name names a library (PyTorch, torch.*, cuBLAS, cuDNN, Triton, SDPA, ...),
    else 'previous': one of the book's own kernels, an earlier step of the chapter."""
    return "library" if _LIBRARY.search(str(name)) else "previous"


class Recorded(dict):
    """What cudl.record stored (a dict), shown in one line when it ends a notebook cell."""

    def __repr__(self) -> str:
        pct = self.get("pct_of_ceiling")
        where = f"{pct:.0f}% of {self['ceiling']}" if pct is not None else self.get("note") or "no ceiling"
        return f"recorded {self['chapter']}: {self['kernel']}, {self['ms']:.4g} ms ({where})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's display of a cell's last value
        p.text(repr(self))


def record(t: Timing, *, chapter: str, shape: Any, dtype: str, kernel: str | None = None,
           baseline: Timing | None = None, path: Path | None = None, demo: bool = False,
           compute: str | None = None, baseline_kind: str | None = None, note: str | None = None) -> Recorded | None:
    """Append (or replace) this benchmark in benchmarks/<gpu>.json; does nothing on the emulator, nor in mimic
    mode (CUDL_MIMIC: the times are another GPU's), where it warns.

    A timing with flops needs a precision: `compute=`, else the timing's own, else the one `dtype` names
    (DTYPE_PRECISION: 'float16' -> fp16, ...); a dtype that names none ('w4') is refused.
    `baseline_kind`: "library" or "previous" (the book's own earlier step); by default it is read from
    the baseline's name (a library's name -> "library"). `note`: why the percentage passes 100 (or any
    caveat the Scoreboard should show with it). `demo=True` marks an anti-pattern timed on purpose (the
    Scoreboard lists it apart from real results).
    """
    name = kernel or t.name
    check_precision(compute)
    precision = compute or t.compute or precision_of(dtype)
    if t.flops and not precision:
        raise ValueError(f"cudl.record({name!r}): it has a FLOP rate but dtype={dtype!r} names no precision; "
                         f"pass compute= (one of {', '.join(PRECISIONS)}) to say which ceiling it is compared with")
    if baseline_kind is not None and (baseline is None or baseline_kind not in BASELINE_KINDS):
        raise ValueError(f"baseline_kind={baseline_kind!r}: one of {BASELINE_KINDS}, and only with a baseline")
    if not on_gpu():
        return None
    from .mimicry import active

    card = active()
    if card is not None:  # the time is the real GPU's: stored, it would read as the card's, or mix into its file
        warnings.warn(f"cudl.record: {name} not recorded: this run mimics a {card['name']} on another GPU, whose "
                      "speed it measured (set CUDL_MIMIC only to check correctness)", stacklevel=2)
        return None
    from .env import device_info

    info = device_info()
    found = t.ceiling(precision)
    pct, ceiling = found if found else (None, None)
    if found is None and (t.flops or t.bytes):
        what = precision if t.flops else "read-only" if t.traffic == "read" else "bandwidth"
        note = note or f"no measured {what} ceiling on this GPU"
    if pct is not None and pct > 100 and not note:
        warnings.warn(f"{name}: {pct:.1f}% of {ceiling.name}: above its ceiling. Declare its traffic "
                      "(bytes=(read, written) or traffic='read'), or say why with cudl.record(..., note=...)",
                      stacklevel=2)
    if t.flops and precision and ceiling is not None and ceiling.unit == "TFLOP/s":
        note_rate(precision, t.tflops, name)
    traffic = list(t.traffic) if isinstance(t.traffic, tuple) else t.traffic or ("copy" if t.bytes else None)
    entry = Recorded({
        "chapter": chapter, "kernel": name, "shape": list(shape) if isinstance(shape, (tuple, list))
        else [shape], "dtype": dtype, "ms": t.ms, "gbps": t.gbps, "tflops": t.tflops,
        "compute": precision, "traffic": traffic,
        "pct_of_ceiling": pct, "ceiling": ceiling.name if ceiling else None,
        "ceiling_key": ceiling.key if ceiling else None, "ceiling_value": ceiling.value if ceiling else None,
        "ceiling_unit": ceiling.unit if ceiling else None, "note": note,
        "baseline": baseline.name if baseline else None, "baseline_ms": baseline.ms if baseline else None,
        "baseline_kind": (baseline_kind or baseline_kind_of(baseline.name)) if baseline else None,
        "ratio": t.speedup_over(baseline) if baseline else None,
        "flops": t.flops, "bytes": t.bytes, "demo": demo,
        "gpu": info["gpu"], "cc": info["cc"],
        "versions": {k: info.get(k) for k in ("driver", "runtime", "cupy", "torch", "numpy")},
        "commit": git_commit(), "date": _dt.date.today().isoformat(),
    })
    path = path or BENCH_DIR / f"{gpu_slug(info['gpu'])}.json"
    entries = json.loads(path.read_text()) if path.is_file() else []
    key = ("chapter", "kernel", "shape", "dtype")
    entries = [e for e in entries if tuple(e.get(k) for k in key) != tuple(entry[k] for k in key)]
    entries.append(dict(entry))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1) + "\n")
    return entry


def load_records(directory: Path | None = None) -> list[dict[str, Any]]:
    """All recorded benchmarks of all GPUs, for the Scoreboard page."""
    out: list[dict[str, Any]] = []
    for f in sorted((directory or BENCH_DIR).glob("*.json")):
        out.extend(json.loads(f.read_text()))
    return out
