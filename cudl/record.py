"""`cudl.record`: keep each benchmark of a GPU run in `benchmarks/<gpu>.json` for the Scoreboard page."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .backend import on_gpu
from .bench import Timing
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


def record(t: Timing, *, chapter: str, shape: Any, dtype: str, kernel: str | None = None,
           baseline: Timing | None = None, path: Path | None = None, demo: bool = False) -> dict[str, Any] | None:
    """Append (or replace) this benchmark in benchmarks/<gpu>.json; does nothing on the emulator.

    `demo=True` marks an anti-pattern timed on purpose (the Scoreboard lists it apart from real results).
    """
    if not on_gpu():
        return None
    from .env import device_info

    info = device_info()
    pct = t.pct_of_ceiling()
    entry = {
        "chapter": chapter, "kernel": kernel or t.name, "shape": list(shape) if isinstance(shape, (tuple, list))
        else [shape], "dtype": dtype, "ms": t.ms, "gbps": t.gbps, "tflops": t.tflops,
        "pct_of_ceiling": pct[0] if pct else None, "ceiling": pct[1] if pct else None,
        "baseline": baseline.name if baseline else None, "baseline_ms": baseline.ms if baseline else None,
        "ratio": t.speedup_over(baseline) if baseline else None,
        "flops": t.flops, "bytes": t.bytes, "compute": t.compute, "demo": demo,
        "gpu": info["gpu"], "cc": info["cc"],
        "versions": {k: info.get(k) for k in ("driver", "runtime", "cupy", "torch", "numpy")},
        "commit": git_commit(), "date": _dt.date.today().isoformat(),
    }
    path = path or BENCH_DIR / f"{gpu_slug(info['gpu'])}.json"
    entries = json.loads(path.read_text()) if path.is_file() else []
    key = ("chapter", "kernel", "shape", "dtype")
    entries = [e for e in entries if tuple(e.get(k) for k in key) != tuple(entry[k] for k in key)]
    entries.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1) + "\n")
    return entry


def load_records(directory: Path | None = None) -> list[dict[str, Any]]:
    """All recorded benchmarks of all GPUs, for the Scoreboard page."""
    out: list[dict[str, Any]] = []
    for f in sorted((directory or BENCH_DIR).glob("*.json")):
        out.extend(json.loads(f.read_text()))
    return out
