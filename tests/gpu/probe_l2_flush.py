"""Does the L2 flush before each timed run cost the run itself? A GPU probe for the next timing session.

cudl.bench flushes L2 by writing 256 MB ("write"). The written lines stay dirty in L2, and a short read-only
kernel that evicts them pays for writing them back to DRAM: up to L2's size (50 MB on an H100) of extra
traffic. Chapter 13 suspected this behind GEMVs of 20-50 us at 25-68% of the copy bandwidth. This probe
times the same kernels three ways:
  write   the current flush (fill a 256 MB buffer);
  read    CUDL_L2_FLUSH=read: read the buffer instead, so L2 holds clean lines;
  rotate  no flush at all, but each run reads another copy of the inputs, cycling through > 4x L2,
          so nothing is left in L2 from the last use of the same copy.
If "read" agrees with "rotate" and "write" is slower for short kernels, switch the default to "read" and
re-execute the book (every stored number used "write"). Run on a GPU from the repository root:

    python3 tests/gpu/probe_l2_flush.py
"""

from __future__ import annotations

import os

import cupy as cp

import cudl
from cudl.bench import bench


def rotating(make, bytes_each: int):
    """Copies of the inputs, enough to cycle through more than 4x the L2, and a counter over them."""
    l2 = cp.cuda.Device().attributes["L2CacheSize"]
    copies = [make() for _ in range(max(2, -(-4 * l2 // bytes_each)))]
    state = {"i": 0}

    def next_copy():
        state["i"] = (state["i"] + 1) % len(copies)
        return copies[state["i"]]

    return copies[0], next_copy


def three_ways(name: str, make, run, bytes_moved: int) -> None:
    first, next_copy = rotating(make, bytes_moved)
    rows = []
    for mode in ("write", "read"):
        os.environ["CUDL_L2_FLUSH"] = mode
        rows.append((mode, bench(lambda: run(first), bytes=bytes_moved, name=name)))
    os.environ["CUDL_L2_FLUSH"] = "write"
    rows.append(("rotate", bench(lambda: run(next_copy()), bytes=bytes_moved, name=name, flush=False)))
    line = "  ".join(f"{m:>6} {t.ms * 1e3:8.1f} us {t.gbps:6.0f} GB/s" for m, t in rows)
    print(f"{name:<34} {line}", flush=True)


def main() -> None:
    cudl.setup()
    print(f"{cudl.gpu_name()}; L2 {cp.cuda.Device().attributes['L2CacheSize'] / 2**20:.0f} MiB")
    rng = cp.random.default_rng(0)
    for n, k in ((4096, 11008), (11008, 4096), (4096, 4096), (1024, 1024)):
        x = rng.standard_normal(k, dtype=cp.float32).astype(cp.float16)
        three_ways(f"cuBLAS fp16 GEMV {n} x {k}",
                   lambda n=n, k=k: rng.standard_normal((n, k), dtype=cp.float32).astype(cp.float16),
                   lambda w, x=x: cp.matmul(w, x), 2 * n * k)
    for mib in (8, 64, 1024):
        n = mib * 2**20 // 4
        out = cp.empty(n, dtype=cp.float32)
        three_ways(f"device copy {mib} MiB", lambda n=n: cp.ones(n, dtype=cp.float32),
                   lambda a, out=out: out.__setitem__(slice(None), a), 2 * 4 * n)


if __name__ == "__main__":
    main()
