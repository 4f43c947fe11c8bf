"""What chapter 14's torchrun scripts share: the NCCL environment, process-group start-up,
bus bandwidth as nccl-tests define it, timing of one collective, and the JSON results file.

Imported by the scripts beside it (`python3 script.py` puts this folder on sys.path).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

# NVLink multicast (NVLS, NVLink SHARP) stays off in this book: the lent machines do not allow it,
# and a ring or tree over plain NVLink is what the chapter compares against. Set before NCCL starts.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

# nccl-tests, doc/PERFORMANCE.md: busbw = algbw * factor, with algbw = S / t and S the size in bytes
# of the whole array (for reduce-scatter and all-gather, the count per rank times n).
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
}


def busbw(op: str, nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (10^9 bytes per second) of one collective over `nbytes` in `seconds`."""
    alg = nbytes / seconds / 1e9
    return alg, alg * BUSBW_FACTOR[op](world)


def start(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Join the process group that torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR...).

    backend None picks nccl when this process has a GPU, gloo otherwise. Returns (rank, world, device).
    """
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)  # before the first NCCL call: one GPU per process
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def gpu_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def time_op(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 3,
            before: Callable[[], object] | None = None) -> float:
    """Median seconds of fn() over `iters` runs (CUDA events on a GPU), slowest rank's median.

    `before` runs outside the timed region before each run (e.g. restoring an in-place input).
    """
    for _ in range(warmup):
        if before:
            before()
        fn()
    times = []
    for _ in range(iters):
        if before:
            before()
        if device.type == "cuda":
            start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start_ev.record()
            fn()
            end_ev.record()
            end_ev.synchronize()
            times.append(start_ev.elapsed_time(end_ev) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    med = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)  # a collective is as slow as its slowest rank
    return float(med.item())


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| in float64; NaN anywhere gives NaN (never passes a < test)."""
    g, r = got.double(), ref.double()
    return float(torch.linalg.vector_norm(g - r) / torch.linalg.vector_norm(r))


def write_json(path: str | None, payload: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {path}", flush=True)
