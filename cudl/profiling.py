"""Reading `torch.profiler` results: the events of a trace as plain dicts, GPU time per category, and a
timeline picture drawn with matplotlib (Perfetto and chrome://tracing show the same trace interactively).

    with torch.profiler.profile(activities=[...CPU, ...CUDA]) as prof:
        step()
    events = cudl.profiling.trace_events(prof)
    cudl.profiling.gpu_time_by(events)  # µs per kernel (by kernel_name), largest first
    cudl.profiling.timeline(events, categorize=lambda name: ...)
    cudl.profiling.host_ms(step)  # CPU time to issue one step, vs the GPU time of its kernels
    cudl.profiling.kernels_launched(lambda: F.conv2d(x, w))  # which GPU kernels one call ran
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

Event = dict[str, Any]  # chrome-trace event: name, cat ('kernel', 'cpu_op', ...), ts and dur in µs


def trace_events(prof: Any, cats: Sequence[str] = ("kernel", "cpu_op", "gpu_memcpy", "gpu_memset")) -> list[Event]:
    """The events of a finished torch.profiler run (via its chrome trace), sorted by start time."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="cudl-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    keep = [{k: e.get(k) for k in ("cat", "name", "ts", "dur", "tid", "pid")} for e in events
            if e.get("cat") in cats and e.get("dur") is not None]
    return sorted(keep, key=lambda e: e["ts"])


def kernel_name(name: str) -> str:
    """A kernel's name as its source spells it: the profiler's demangled C++ signature
    (`void bias_gelu_backward<float>(float const*, ...)`) without return type, template arguments or
    parameters. extern "C" kernels are not mangled and come back unchanged."""
    anon = "(anonymous namespace)"
    n = name.removeprefix("void ").replace(anon, "\0")  # its parentheses are not a parameter list
    cut = min((i for i in (n.find("<"), n.find("(")) if i > 0), default=len(n))
    return n[:cut].replace("\0", anon).strip() or name


def kernels_launched(fn: Callable[[], Any]) -> list[str]:
    """The names of the GPU kernels that one call of `fn` launches, in launch order (as the profiler
    spells them; `kernel_name` shortens them): e.g. which cuDNN algorithm a convolution ran. `fn` runs
    once under torch.profiler, and the GPU is synchronized before the profile ends. Without CUDA (a
    CPU-only PyTorch) the profile has no kernels and the list is empty."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # acc_events=True: one profiling cycle, so it changes no result, but without it recent PyTorch
    # versions warn on every profile() that earlier cycles' events are dropped (pytorch/pytorch#180348)
    with profile(activities=activities, acc_events=True) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    return [e["name"] for e in trace_events(prof, cats=("kernel",))]


def gpu_time_by(events: Sequence[Event], categorize: Callable[[str], str] = kernel_name) -> dict[str, float]:
    """Total kernel time (µs) per category, largest first; `categorize` maps a kernel name to a category
    (by default, the kernel's own name: `kernel_name`)."""
    out: dict[str, float] = {}
    for e in events:
        if e["cat"] == "kernel":
            c = categorize(e["name"])
            out[c] = out.get(c, 0.0) + float(e["dur"])
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def host_ms(fn: Callable[[], Any], *, runs: int = 25, calls: int = 1) -> float:
    """CPU time (ms) to *issue* `fn`: the median over `runs` of `calls` back-to-back calls, each batch
    started on an idle GPU (cudl.sync() first) and timed without waiting for the GPU to finish.

    The GPU runs asynchronously, so this is the launch (enqueue) cost of the Python, PyTorch and
    CUDA-driver code in `fn`. When it exceeds the GPU time of the kernels `fn` launches, the GPU waits
    for the CPU and a faster kernel cannot shorten the step. Keep `calls` small enough that the GPU's
    launch queue (about a thousand launches) does not fill up, or the CPU would wait for the GPU.
    """
    from .backend import sync

    fn()  # first call: compilation, allocation and module loading stay out of the numbers
    sync()
    times = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) * 1e3 / calls)
    sync()
    return statistics.median(times)


def timeline(events: Sequence[Event], *, categorize: Callable[[str], str], title: str = "",
             colors: dict[str, str] | None = None, ax: Any = None) -> Any:
    """Draw the CPU operators (top lane) and the GPU kernels (bottom lane) on one time axis in ms.

    CPU operators are drawn at their nesting depth, so a top-level `aten::linear` sits above the
    `aten::mm` it calls; kernels are coloured by `categorize(name)`. Without CPU events (e.g. only the
    kernels were passed) only the GPU lane is drawn, rather than an empty CPU lane.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.2), dpi=150)
    if not events:
        return ax
    t0 = min(float(e["ts"]) for e in events)
    cpu = [e for e in events if e["cat"] == "cpu_op"]
    gpu = [e for e in events if e["cat"] != "cpu_op"]
    # Nesting depth of each CPU op within its thread: count the open ops that contain it.
    depth, open_ends = [], {}
    for e in cpu:
        stack = [end for end in open_ends.get(e["tid"], []) if end > e["ts"]]
        depth.append(len(stack))
        open_ends[e["tid"]] = stack + [e["ts"] + e["dur"]]
    palette = colors or {}
    default = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    cats = list(dict.fromkeys(categorize(e["name"]) for e in gpu))
    color = {c: palette.get(c, default[i % len(default)]) for i, c in enumerate(cats)}
    lanes = 4  # CPU nesting levels drawn; deeper ops are omitted (they are short)
    for e, d in zip(cpu, depth):
        if d < lanes:
            ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (2 + (lanes - 1 - d) * 0.5, 0.45),
                           color="0.6", lw=0)
    for e in gpu:
        ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (0, 1.6), color=color[categorize(e["name"])],
                       lw=0.3, edgecolor="white")
    if cpu:
        ax.set_yticks([0.8, 2 + lanes * 0.25])
        ax.set_yticklabels(["GPU kernels", "CPU operators"])
        ax.set_ylim(-0.2, 2 + lanes * 0.5 + 0.1)
    else:
        ax.set_yticks([0.8])
        ax.set_yticklabels(["GPU kernels"])
        ax.set_ylim(-0.2, 1.8)
    ax.set_xlabel("time since the first event (ms)")
    if title:
        ax.set_title(title)
    if cats:  # no kernels (a CPU-only trace): no legend
        ax.legend(handles=[Patch(color=color[c], label=c) for c in cats], loc="upper center",
                  bbox_to_anchor=(0.5, -0.3), ncol=min(4, len(cats)), frameon=False, fontsize="small")
    ax.figure.tight_layout()
    return ax
