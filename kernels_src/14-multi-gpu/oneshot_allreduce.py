"""A one-shot all-reduce for small messages, and what a step of the ring costs.

    torchrun --standalone --nproc-per-node=N kernels_src/14-multi-gpu/oneshot_allreduce.py --json oneshot.json

Every GPU copies its array into a buffer that its peers can read (PyTorch's symmetric memory: CUDA
IPC mappings of each GPU's buffer into every other GPU's address space, NVLink multicast off), all
GPUs meet at a barrier, and each one sums all n buffers itself with oneshot_reduce.cu, writing the
result in place. One step instead of the ring's 2(n-1), so the latency of a small message is paid
once; but each GPU reads (n-1) x S bytes over its links instead of 2(n-1)/n x S, so large messages
belong to the ring. Timed against NCCL's all_reduce, PyTorch's own one-shot
(torch.ops.symm_mem.one_shot_all_reduce, the library kernel that does the same) and the hand ring
(ring_allreduce.py, one slice), over sizes from 16 KB, with the crossover where NCCL takes over.

Two buffers, used in turn, need only one barrier per call: when a GPU writes buffer b again (call
k + 2) it has passed call k + 1's barrier, which no peer reaches before its call-k kernel, the last
reader of buffer b, has finished (stream order).

The ring's cost per step: one send/recv pair of batch_isend_irecv timed alone at 4 KB, and, for
each method, the host's time to issue one call (no synchronisation) beside its GPU time: where the
two agree, the GPU waited for the host, and the launch path, not the link, is the cost.
GPUs only: symmetric memory needs CUDA devices with peer access (the test suite checks the
kernel on the CPU emulator with virtual ranks).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import dist_utils as du
import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
BLOCK = 256
ROUNDS = 3  # a difference counts only where every round agrees on it


def crossover(rows: list[dict], fast: str, slow: str) -> int | None:
    """The smallest size (bytes) from which `slow` is at least as fast as `fast` at every larger size.

    rows: dicts with "bytes" and "<name>_us"; None when `fast` wins at every size measured.
    """
    rows = sorted((r for r in rows if r.get(f"{fast}_us") and r.get(f"{slow}_us")), key=lambda r: r["bytes"])
    cross = None
    for r in reversed(rows):
        if r[f"{slow}_us"] <= r[f"{fast}_us"]:
            cross = r["bytes"]
        else:
            break
    return cross


class OneShot:
    """x -> the sum of x over all ranks, in place, with oneshot_reduce.cu over symmetric memory."""

    def __init__(self, max_count: int, device: torch.device) -> None:
        import cupy
        import torch.distributed._symmetric_memory as symm_mem

        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for cudl
        from ring_allreduce import cupy_stream

        import cudl

        self.world, self.device, self.cupy = dist.get_world_size(), device, cupy
        if self.world > 8:
            raise SystemExit("oneshot_reduce.cu sums at most 8 buffers (one NVLink node)")
        self.cap = -(-max_count // 64) * 64  # each half starts at a multiple of 256 bytes
        self.buf = symm_mem.empty(2 * self.cap, dtype=torch.float32, device=device)
        self.buf.fill_(float("nan"))  # a peer's half never written would poison the sum
        self.hdl = symm_mem.rendezvous(self.buf, dist.group.WORLD)
        self.parity = 0
        cupy.cuda.Device(device.index).use()  # CuPy loads the module on its current device
        self.kernel = cudl.load("14-multi-gpu/oneshot_reduce.cu", "oneshot_sum")
        self.stream = lambda: cupy_stream(cupy, torch.cuda.current_stream(device).cuda_stream, device.index)
        self.max_grid = 4 * torch.cuda.get_device_properties(device).multi_processor_count

        def wrap(ptr: int, count: int, owner) -> cupy.ndarray:  # device memory as a CuPy array, no copy
            mem = cupy.cuda.UnownedMemory(ptr, count * 4, owner, device.index)
            return cupy.ndarray((count,), cupy.float32, cupy.cuda.MemoryPointer(mem, 0))

        self.wrap = wrap
        # every rank's buffer, mapped into this GPU: halves 0 and 1, made once (a call only picks one)
        peers = [wrap(p, 2 * self.cap, self.buf) for p in self.hdl.buffer_ptrs]
        self.halves = [[p[h * self.cap:] for p in peers] for h in (0, 1)]
        self.flag = torch.zeros(1, device=device)
        try:  # the handle's barrier: each GPU writes a flag into its peers' signal pads and waits for theirs
            self.hdl.barrier(channel=0)
            self.barrier_kind = "symmetric memory signal pads"
        except (AttributeError, TypeError, RuntimeError):
            self.barrier_kind = "a one-element NCCL all-reduce"
        torch.cuda.synchronize(device)
        dist.barrier()

    def barrier(self) -> None:
        """Every GPU's copy is written before any GPU reads it: a barrier on the GPU, in stream order."""
        if self.barrier_kind.startswith("symmetric"):
            self.hdl.barrier(channel=0)
        else:  # no signal-pad barrier in this PyTorch: NCCL's all-reduce also waits for every GPU
            dist.all_reduce(self.flag)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        if n > self.cap:
            raise ValueError(f"{n} elements: this OneShot holds at most {self.cap}")
        h, self.parity = self.parity, self.parity ^ 1
        self.buf[h * self.cap:h * self.cap + n].copy_(x)  # my contribution, where my peers can read it
        self.barrier()
        ins = self.halves[h]
        ins = ins + [ins[0]] * (8 - len(ins))
        grid = max(1, min(self.max_grid, -(-n // (4 * BLOCK))))
        with self.cupy.cuda.Device(self.device.index), self.stream():
            self.kernel((grid,), (BLOCK,), (*ins, self.cupy.int32(self.world), self.wrap(x.data_ptr(), n, x),
                                            self.cupy.int64(n)))
        return x


def host_us(fn, before, iters: int) -> float:
    """Median microseconds the host spends issuing fn() (no synchronisation inside the timed part)."""
    times = []
    for _ in range(iters):
        before()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-kb", type=float, nargs="+", default=[16, 64, 256, 1024, 4096, 16384, 65536])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("oneshot_allreduce.py needs GPUs with peer access (symmetric memory); "
                         "the kernel alone runs on the emulator: tests/kernels/test_14_multi_gpu.py")
    rank, world, device = du.start("nccl")
    from ring_allreduce import kernel_reduce, ring_allreduce

    counts = [max(world, int(kb * 1024) // 4) for kb in args.sizes_kb]
    shot = OneShot(max(max(counts), 1 << 20), device)
    reduce = kernel_reduce(device)
    import torch.distributed._symmetric_memory as symm_mem

    group = dist.group.WORLD.group_name
    tbuf = symm_mem.empty(shot.cap, dtype=torch.float32, device=device)  # PyTorch's one-shot reads this
    symm_mem.rendezvous(tbuf, dist.group.WORLD)

    def torch_oneshot(x: torch.Tensor) -> torch.Tensor:
        tbuf[:x.numel()].copy_(x)
        return torch.ops.symm_mem.one_shot_all_reduce(tbuf[:x.numel()], "sum", group)

    # correct: odd counts against float64 and NCCL, every rank bitwise the same; then 64 calls in a row,
    # each with new inputs, so a missing or misplaced barrier (a peer's stale or half-written buffer) shows
    worst, lib_worst, torch_err = 0.0, 0.0, None
    for count in (1, 3, 1000, 4099, (1 << 18) + 1, 1 << 20):
        xs = [torch.randn(count, generator=torch.Generator().manual_seed(100 * r + count)) for r in range(world)]
        ref = torch.stack([t.double() for t in xs]).sum(0).to(device)
        x = xs[rank].to(device)
        lib = x.clone()
        dist.all_reduce(lib)
        shot(x)
        err, same = du.rel_error(x, ref), du.rel_error(x, lib)
        first = x.clone()
        dist.broadcast(first, 0)
        if not err < 1e-6 * world or not torch.equal(x, first):
            raise SystemExit(f"rank {rank}: one-shot all-reduce WRONG at count={count}: error vs float64 "
                             f"{err:.2e}, vs NCCL {same:.2e}, equal to rank 0's: {torch.equal(x, first)}")
        worst, lib_worst = max(worst, err), max(lib_worst, same)
        try:
            t_err = du.rel_error(torch_oneshot(xs[rank].to(device)), ref)
            torch_err = max(torch_err or 0.0, t_err)
        except Exception as exc:  # noqa: BLE001 - a library op missing here is reported, not fatal
            torch_err = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    base = torch.randn(4099, generator=torch.Generator().manual_seed(rank)).to(device)
    total = base.double().clone()
    dist.all_reduce(total)
    for call in range(64):
        x = base + call
        shot(x)
        err = du.rel_error(x, total + world * call)
        if not err < 1e-6 * world:
            raise SystemExit(f"rank {rank}: one-shot all-reduce WRONG at call {call} of 64 in a row: "
                             f"error {err:.2e} (a barrier too few?)")
        worst = max(worst, err)

    # the ring's step: one send/recv pair with the neighbours, alone
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    s4, r4 = torch.randn(1024, device=device), torch.empty(1024, device=device)

    def pair() -> None:
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, s4, nxt), dist.P2POp(dist.irecv, r4, prv)]):
            w.wait()

    pair_us = du.time_op(pair, device, args.iters) * 1e6
    pair_host = host_us(pair, lambda: None, args.iters)

    rows = []
    torch_ok = not isinstance(torch_err, str)
    for count in counts:
        src = torch.randn(count, generator=torch.Generator().manual_seed(rank)).to(device)
        x, work = src.clone(), torch.empty_like(src)

        def restore() -> None:  # every method sums in place (PyTorch's one-shot into a new tensor)
            x.copy_(src)

        methods = {"nccl": lambda: dist.all_reduce(x), "oneshot": lambda: shot(x),
                   "ring": lambda: ring_allreduce(x, reduce, 1, work)}
        if torch_ok:
            methods["torch_oneshot"] = lambda: torch_oneshot(x)
        row = dict(bytes=count * 4)
        for _ in range(ROUNDS):  # the methods in turn, ROUNDS times: each round's median is kept
            for name, fn in methods.items():
                row.setdefault(f"{name}_rounds", []).append(
                    du.time_op(fn, device, args.iters, before=restore) * 1e6)
        for name, fn in methods.items():
            row[f"{name}_us"] = statistics.median(row[f"{name}_rounds"])
            row[f"{name}_busbw"] = du.busbw("all_reduce", count * 4, row[f"{name}_us"] / 1e6, world)[1]
            row[f"{name}_host_us"] = host_us(fn, restore, min(args.iters, 20))
        rows.append(row)

    if rank == 0:
        print(f"one-shot all-reduce (oneshot_reduce.cu over symmetric memory) vs NCCL, {world} ranks, "
              f"{du.gpu_name(device)}")
        print(f"correct: max rel error vs float64 {worst:.1e} (odd counts, 64 calls in a row, NaN-poisoned "
              f"buffers; every rank bitwise equal to rank 0); NCCL vs float64 {lib_worst:.1e}; "
              f"PyTorch's one-shot: {torch_err if isinstance(torch_err, str) else f'{torch_err:.1e}'}")
        print(f"barrier: {shot.barrier_kind}")
        print(f"one send/recv pair (4 KB, batch_isend_irecv): {pair_us:.1f} us on the GPU, "
              f"{pair_host:.1f} us to issue; a ring of {world} GPUs takes {2 * (world - 1)} such steps")
        names = [m for m in ("nccl", "oneshot", "torch_oneshot", "ring") if f"{m}_us" in rows[0]]
        print(f"{'size':>10}" + "".join(f"{m + ' us':>17}" for m in names) + "   (host us to issue)")
        for r in rows:
            print(f"{r['bytes'] / 1024:>8.0f}KB" + "".join(
                f"{r[f'{m}_us']:>9.1f} ({r[f'{m}_host_us']:>5.1f})" for m in names))
        cross = crossover(rows, "oneshot", "nccl")
        print("NCCL takes over from " + (f"{cross / 1024:.0f} KB" if cross else "no size measured here"))
        du.write_json(args.json, dict(world=world, gpu=du.gpu_name(device), max_rel_error=worst,
                                      nccl_rel_error=lib_worst, torch_oneshot=torch_err, pair_us=pair_us,
                                      pair_host_us=pair_host, crossover_bytes=cross, barrier=shot.barrier_kind,
                                      rows=rows))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
