"""cudl.profiling without a GPU: GPU time per category and the timeline of a stored trace."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

from cudl.profiling import gpu_time_by, timeline

matplotlib.use("Agg")
EVENTS = json.loads((Path(__file__).parent / "data" / "torch_trace_sample.json").read_text())["traceEvents"]


def kind(name: str) -> str:
    return "GEMM" if "nvjet" in name or "gemm" in name else "elementwise" if "elementwise" in name else "other"


def test_gpu_time_by_category():
    t = gpu_time_by(EVENTS, kind)
    assert list(t) == ["GEMM", "elementwise", "other"]  # largest first
    total = sum(e["dur"] for e in EVENTS if e["cat"] == "kernel")
    assert abs(sum(t.values()) - total) < 1e-6 and t["GEMM"] > 0.5 * total


def test_timeline_draws_every_kernel():
    ax = timeline(EVENTS, categorize=kind, title="sample")
    kernels = sum(1 for e in EVENTS if e["cat"] == "kernel")
    bars = sum(len(c.get_paths()) for c in ax.collections)
    assert bars >= kernels and ax.get_xlabel().endswith("(ms)")
    assert len(ax.get_legend().get_texts()) == 3
