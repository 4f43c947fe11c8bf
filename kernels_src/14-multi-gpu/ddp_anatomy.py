"""Where a DDP step's time goes, from what `run_all.sh` stored: ddp.json, ddp_one_bucket.json,
nccl.json and rank 0's profiler trace (ddp_trace.json). Plain Python and NumPy (no PyTorch), so
that the chapter reads the stored runs on any machine.

The rule of thumb "if the backward pass takes longer than its all-reduce, bucketing hides the
all-reduce" assumes that the two run beside each other at their standalone speeds. The trace
tests that: the same compute kernel is timed with and without an NCCL kernel running beside it,
and every NCCL kernel against the standalone rate that nccl.json measured for its size.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

ELEMENT_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8}  # the trace's "dtype" field


def _shared_us(e: dict, comm: list[dict]) -> float:
    """Microseconds during which kernel `e` ran beside any of the NCCL kernels `comm`."""
    return sum(max(0.0, min(e["ts"] + e["dur"], c["ts"] + c["dur"]) - max(e["ts"], c["ts"]))
               for c in comm)


def allreduce_alone_us(nbytes: float, nccl_rows: list[dict]) -> float:
    """The standalone time of an all-reduce of `nbytes`, interpolated (log-log) in nccl.json's rows."""
    rows = sorted((x["bytes"], x["us"]) for x in nccl_rows if x["op"] == "all_reduce")
    sizes, times = zip(*rows)
    return float(np.exp(np.interp(np.log(nbytes), np.log(sizes), np.log(times))))


def step_anatomy(ddp: dict, one_bucket: dict | None, nccl: dict, trace: dict) -> dict[str, Any]:
    """Times of one training step (ms) from the untimed runs and the trace, and what overlap cost.

    step_1, step_n, step_one: a step on one GPU alone, with DDP on n GPUs, with one bucket (None
    without that run), from the samples per second of the JSON files. From the trace (its steps
    averaged): calls, the all-reduces per step; bucket_mb, their median size; allreduce_alone, what
    they take at nccl.json's standalone rates; nccl, what their kernels took; backward_alone and
    backward, the backward's compute kernels at their standalone durations and as they ran;
    slowdown, how many times as long the compute kernels that ran beside NCCL took as the same
    kernels alone; tail, NCCL time after the backward's last kernel; blocks and sms, the
    all-reduce kernel's grid and the GPU's SM count.
    """
    events = trace["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    comm = [e for e in kernels if "nccl" in e["name"].lower()]
    compute = [e for e in kernels if "nccl" not in e["name"].lower()]
    marks = sorted((e for e in events if e.get("cat") == "gpu_user_annotation"), key=lambda e: e["ts"])
    forwards = [e for e in marks if e["name"].startswith("DistributedDataParallel.forward")]
    optimizers = [e for e in marks if e["name"].startswith("Optimizer.step")]
    steps = len(optimizers)
    if not (comm and steps and len(forwards) == steps):
        raise ValueError("the trace needs NCCL kernels and, per step, DDP's forward and the optimizer")

    alone: dict[str, list[float]] = {}  # a compute kernel's durations with no NCCL kernel beside it
    for e in compute:
        if _shared_us(e, comm) == 0:
            alone.setdefault(e["name"], []).append(e["dur"])
    typical = {name: statistics.median(d) for name, d in alone.items()}
    beside = [e for e in compute if _shared_us(e, comm) > 0.5 * e["dur"] and e["name"] in typical]
    backward, backward_alone, tail = [], [], []
    for f, o in zip(forwards, optimizers):  # the backward: from the forward's end to the optimizer
        start, end = f["ts"] + f["dur"], o["ts"]
        ks = [e for e in compute if start <= e["ts"] < end]
        backward.append(sum(e["dur"] for e in ks))
        backward_alone.append(sum(typical.get(e["name"], e["dur"]) for e in ks))
        last = max(e["ts"] + e["dur"] for e in ks)
        tail.append(max([0.0] + [c["ts"] + c["dur"] - last for c in comm if start <= c["ts"] < end]))
    sizes = [e["args"]["In msg nelems"] * ELEMENT_BYTES[e["args"]["dtype"]] for e in comm]
    per_rank, world = ddp["batch_per_rank"], ddp["world"]
    return dict(
        step_1=1e3 * per_rank / ddp["single_samples_per_s"],
        step_n=1e3 * world * per_rank / ddp["samples_per_s"],
        step_one=1e3 * world * per_rank / one_bucket["samples_per_s"] if one_bucket else None,
        calls=len(comm) / steps,
        bucket_mb=statistics.median(sizes) / 1e6,
        allreduce_alone=sum(allreduce_alone_us(b, nccl["rows"]) for b in sizes) / steps / 1e3,
        nccl=sum(e["dur"] for e in comm) / steps / 1e3,
        backward_alone=statistics.mean(backward_alone) / 1e3,
        backward=statistics.mean(backward) / 1e3,
        slowdown=(sum(e["dur"] for e in beside) / sum(typical[e["name"]] for e in beside)) if beside else None,
        tail=statistics.mean(tail) / 1e3,
        blocks=max(e["args"].get("grid", [0])[0] for e in comm),
        sms=(trace.get("deviceProperties") or [{}])[0].get("numSms"),
    )
