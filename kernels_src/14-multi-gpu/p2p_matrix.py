"""Which GPU can reach which directly, and how fast: the peer-to-peer bandwidth matrix, with CuPy.

    python3 kernels_src/14-multi-gpu/p2p_matrix.py --json p2p.json          # one process, every GPU

One process drives all the GPUs it sees (no torchrun). For every ordered pair (i, j) it asks
cudaDeviceCanAccessPeer, enables peer access where it is possible (cudaDeviceEnablePeerAccess: then
copies go over NVLink or PCIe straight between the two memories; without it the driver stages them
through host memory), and times a copy of --mb megabytes from GPU i to GPU j with cudaMemcpyPeerAsync
between CUDA events, median of --iters. The bidirectional matrix times i -> j and j -> i at once on
two streams and counts the bytes of both. The diagonal is a copy inside one GPU's memory: each byte
is read and written there, so it is bounded by half the HBM bandwidth, not by a link.
Works with any number of GPUs, one included (a 1 x 1 matrix: the diagonal).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import cupy
from cupy.cuda import runtime


def enable_peers(n: int) -> list[list[bool]]:
    can = [[i == j or bool(runtime.deviceCanAccessPeer(i, j)) for j in range(n)] for i in range(n)]
    for i in range(n):
        with cupy.cuda.Device(i):
            for j in range(n):
                if i != j and can[i][j]:
                    try:
                        runtime.deviceEnablePeerAccess(j)
                    except runtime.CUDARuntimeError as exc:
                        if exc.status != 704:  # cudaErrorPeerAccessAlreadyEnabled: fine
                            raise
    return can


def fingerprint(a: cupy.ndarray) -> tuple[int, int]:
    """Sum of the bit patterns and position-weighted sum, computed on a's own GPU."""
    with cupy.cuda.Device(a.device.id):
        bits = a.view(cupy.uint32).astype(cupy.uint64)
        pos = cupy.arange(bits.size, dtype=cupy.uint64) % 65521
        return int(bits.sum()), int((bits * pos).sum())


def timed_copies(copies: list[tuple[cupy.ndarray, cupy.ndarray]], iters: int) -> float:
    """Median seconds for all `copies` (dst, src) issued together, each on a stream of its source GPU."""
    streams, starts, ends = [], [], []
    for _, src in copies:
        with cupy.cuda.Device(src.device.id):
            streams.append(cupy.cuda.Stream(non_blocking=True))
            starts.append(cupy.cuda.Event())
            ends.append(cupy.cuda.Event())
    times = []
    for it in range(iters + 2):  # two warm-up runs
        for (dst, src), s, e0 in zip(copies, streams, starts):
            with cupy.cuda.Device(src.device.id):
                e0.record(s)
                runtime.memcpyPeerAsync(dst.data.ptr, dst.device.id, src.data.ptr, src.device.id,
                                        src.nbytes, s.ptr)
        for (_, src), s, e1 in zip(copies, streams, ends):
            with cupy.cuda.Device(src.device.id):
                e1.record(s)
        for e in ends:
            e.synchronize()
        if it >= 2:  # the slowest copy (events of one GPU only; the copies are issued together)
            times.append(max(cupy.cuda.get_elapsed_time(a, b) for a, b in zip(starts, ends)) / 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    n = runtime.getDeviceCount()
    can = enable_peers(n)
    count = args.mb * 2**20 // 4
    bufs = []
    for d in range(n):
        with cupy.cuda.Device(d):  # random bits, never zeros; two buffers per GPU
            bufs.append((cupy.random.standard_normal(count, dtype=cupy.float32),
                         cupy.full(count, cupy.nan, dtype=cupy.float32)))
    uni = [[0.0] * n for _ in range(n)]
    bi = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            t = timed_copies([(bufs[j][1], bufs[i][0])], args.iters)
            if fingerprint(bufs[j][1]) != fingerprint(bufs[i][0]):  # the copy arrived whole
                raise SystemExit(f"copy {i} -> {j} is WRONG")
            with cupy.cuda.Device(j):
                bufs[j][1].fill(cupy.nan)
            uni[i][j] = count * 4 / t / 1e9
            if i < j:
                t2 = timed_copies([(bufs[j][1], bufs[i][0]), (bufs[i][1], bufs[j][0])], args.iters)
                bi[i][j] = bi[j][i] = 2 * count * 4 / t2 / 1e9
    names = [runtime.getDeviceProperties(d)["name"].decode() for d in range(n)]
    print(f"{n} GPU(s): {', '.join(f'{d}: {names[d]}' for d in range(n))}; copies of {args.mb} MB")
    print("peer access (cudaDeviceCanAccessPeer, row = source):")
    print("      " + "".join(f"{j:>8}" for j in range(n)))
    for i in range(n):
        print(f"{i:>6}" + "".join(f"{'yes' if can[i][j] else 'no':>8}" for j in range(n)))
    print("unidirectional GB/s (row = source, column = destination; diagonal: copy within one GPU):")
    print("      " + "".join(f"{j:>8}" for j in range(n)))
    for i in range(n):
        print(f"{i:>6}" + "".join(f"{uni[i][j]:>8.1f}" for j in range(n)))
    if n > 1:
        print("bidirectional GB/s (both directions at once, bytes of both):")
        for i in range(n):
            print(f"{i:>6}" + "".join(f"{bi[i][j]:>8.1f}" if i != j else f"{'-':>8}" for j in range(n)))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(gpus=names, mb=args.mb, can_access_peer=can,
                                                   unidirectional_gbs=uni, bidirectional_gbs=bi), indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
