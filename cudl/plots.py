"""The book's three plots: a roofline, bars of variants against the library, and a rate-vs-size sweep."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

from .bench import Timing
from .ceilings import ceilings, memory_ceiling
from .env import gpu_name

LIBRARY_COLOR = "#444444"
DPI = 100  # figure dpi; the notebook stores PNGs at twice this (`hidpi`), sharp on HiDPI screens

plt.rcParams.update({"figure.dpi": DPI, "savefig.dpi": 2 * DPI, "savefig.bbox": "tight"})


def hidpi() -> None:
    """Make IPython store figures as PNGs of twice the pixels, shown at their normal size ('retina')."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def log2_axis(axis: Any) -> None:
    """Base-2 log scale on an x or y Axis with one label per power of two (1,024 or 2^20), no minor labels."""

    def label(v: float, _pos: int) -> str:
        if v <= 0:
            return ""
        k = int(round(np.log2(v)))
        # plain numbers while they stay short; powers of two for the whole axis once it reaches 2^14
        return f"{2**k:,}" if 0 <= k and axis.get_view_interval()[1] < 2**14 else f"$2^{{{k}}}$"

    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def legend_below(ax: Any, source: Any = None) -> None:
    """The legend under the axes and their x label, where it cannot cover bars, labels or lines; with
    `source`, of the lines of those axes (the legend of a figure's panels under its bottom panel)."""
    # anchored at the bottom edge of the axes, pushed down by a fixed distance in font sizes
    # (tick labels + x label, ~34 pt), whatever the height of the axes
    ax.legend(*(source or ax).get_legend_handles_labels(), fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, 0), borderaxespad=4.3, ncol=2, frameon=False)


def roofline(points: Sequence[Timing], *, compute: str = "fp32", ax: Any = None) -> Any:
    """Measured roofline (copy bandwidth, cuBLAS rate) with each timing placed at its arithmetic intensity."""
    c = ceilings()
    bw, peak = c["copy_gbps"] / 1e3, c["gemm_tflops"][compute]  # TB/s and TFLOP/s
    ax = ax or plt.subplots(figsize=(6.5, 4.2))[1]
    x = np.logspace(-2, 4, 200)
    ax.loglog(x, np.minimum(bw * x, peak), color=LIBRARY_COLOR, lw=2,
              label=f"roofline: {c['copy_gbps']:,.0f} GB/s copy, {peak:.1f} TFLOP/s cuBLAS {compute}")
    ax.axvline(peak / bw, color=LIBRARY_COLOR, ls=":", lw=1)
    for t in points:
        if not (t.flops and t.bytes):
            raise ValueError(f"{t.name}: a roofline point needs both flops and bytes")
        ax.loglog(t.flops / t.bytes, t.tflops, "o", ms=8, label=f"{t.name} ({t.tflops:.2f} TFLOP/s)")
    ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="TFLOP/s", title=f"Roofline on {gpu_name()}")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    return ax


# How each bandwidth ceiling is named on a figure (Ceiling.key -> label).
LINE_LABELS = {"copy": "measured copy bandwidth", "read": "measured read-only stream",
               "mix": "measured ceiling of this read/write mix"}


def bandwidth_line(timings: Sequence[Timing]) -> tuple[float, str]:
    """(GB/s, label) of the bandwidth ceiling that the timings' traffic shares; the 1:1 copy if they differ.

    One line per figure: a chart of reductions draws the read-only stream its bars are a percentage of,
    not the copy that they may pass.
    """
    # a mix is its ratio of bytes read to bytes written, whatever the size (a sweep over sizes shares one)
    kinds = {(round(t.traffic[0] / t.traffic[1], 9), 1.0) if isinstance(t.traffic, (tuple, list))
             else t.traffic or "copy" for t in timings if t.bytes}
    c = memory_ceiling(kinds.pop()) if len(kinds) == 1 and "copy" not in kinds else None
    if c is None:  # a 1:1 copy, timings of different traffic, or no read-only stream measured
        return ceilings()["copy_gbps"], LINE_LABELS["copy"]
    return c.value, LINE_LABELS[c.key]


def bars(timings: Sequence[Timing], *, baseline: Timing | None = None, metric: str = "gbps",
         ceiling: bool = True, ax: Any = None) -> Any:
    """Horizontal bars of variants (GB/s, TFLOP/s or % of baseline), the library drawn in grey."""
    labels = {"gbps": "GB/s", "tflops": "TFLOP/s", "pct": "% of baseline"}
    if metric not in labels:
        raise ValueError(f"metric must be one of {sorted(labels)}")
    rows = [*timings, *([baseline] if baseline else [])]

    def value(t: Timing) -> float:
        if metric == "pct":
            if baseline is None:
                raise ValueError("metric='pct' needs a baseline")
            return 100 * baseline.ms / t.ms
        v = getattr(t, metric)
        if v is None:
            raise ValueError(f"{t.name} has no {metric}: pass bytes= or flops= to cudl.bench")
        return v

    vals = [value(t) for t in rows]
    ax = ax or plt.subplots(figsize=(6.5, 0.45 * len(rows) + 1.2))[1]
    colors = ["C0"] * len(timings) + ([LIBRARY_COLOR] if baseline else [])
    ax.barh([t.name for t in rows], vals, color=colors)
    ax.invert_yaxis()
    line, line_label = (bandwidth_line(rows) if ceiling and metric == "gbps" else
                        (100, "baseline = 100%") if metric == "pct" else (0, ""))
    # room right of the longest bar (or the ceiling line) for its value label
    ax.set_xlim(0, 1.22 * max([*vals, line]))
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:,.0f}" if v >= 10 else f" {v:.2f}", va="center", fontsize=8,
                bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.85))
    if line:
        # the line is named in an empty band above the bars, not in a legend over them
        ax.set_ylim(len(rows) - 0.5, -1.3)
        color = "C3" if metric == "gbps" else LIBRARY_COLOR
        ax.axvline(line, color=color, ls="--", zorder=0)
        ax.text(line, -0.9, line_label + " ",
                ha="right", va="center", fontsize=8, color=color)
    ax.set(xlabel=labels[metric], title=f"{gpu_name()}")
    return ax


def rate_vs_size(sizes: Sequence[float], series: Mapping[str, Sequence[Timing]], *, metric: str = "gbps",
                 xlabel: str = "bytes moved", library: str | None = None, logy: bool = False,
                 ax: Any = None) -> Any:
    """Rate against problem size (base-2 log x; log y with `logy`), one line per kernel.

    `library` names the baseline series. The legend sits under the axes, clear of the lines.
    """
    ax = ax or plt.subplots(figsize=(6.5, 4.6))[1]
    for name, ts in series.items():
        style = dict(color=LIBRARY_COLOR, ls="--") if name == library else dict(ls="-")
        ax.plot(sizes, [getattr(t, metric) for t in ts], marker="o", ms=3, label=name, **style)
    if metric == "gbps":
        value, label = bandwidth_line([t for ts in series.values() for t in ts])
        ax.axhline(value, color="C3", ls=":", label=label)
    ax.set_xscale("log", base=2)
    log2_axis(ax.xaxis)
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel={"gbps": "GB/s", "tflops": "TFLOP/s", "ms": "ms"}[metric],
           title=f"{gpu_name()}")
    legend_below(ax)
    ax.grid(True, which="major", alpha=0.3)
    return ax


hidpi()
