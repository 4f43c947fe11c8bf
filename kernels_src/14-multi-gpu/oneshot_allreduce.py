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

The same in one launch (OneShotFused, oneshot_fused.cu): the copy-in, a barrier per block (flags
written into the peers' flag buffers) and the sum in one kernel, which counts its calls on the GPU,
so its launch never changes and calls can be captured in a CUDA graph. Two ways to move the bytes:
pull (each GPU loads its peers' copies over NVLink) and push (each GPU stores its input into every
peer's buffer, then sums from local memory). Timed eager and graphed, against NCCL's all_reduce and
PyTorch's one-shot captured the same way (GRAPH_CALLS calls per graph): graphed against graphed.

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
from ring_allreduce import cupy_stream, cupy_view, kernel_reduce, ring_allreduce

warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
BLOCK = 256
ROUNDS = 3  # a difference counts only where every round agrees on it
GRAPH_CALLS = 20  # calls per captured graph: one replay's launch spread over 20 calls


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


class _OneShotKernel:
    """What both one-shot versions set up: their kernel, loaded by cudl on this rank's GPU, and a buffer
    capacity of max_count floats rounded up so that every half and slot starts at a multiple of 256 bytes."""

    def __init__(self, max_count: int, device: torch.device, source: str, name: str) -> None:
        import cupy

        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for cudl
        import cudl

        self.world, self.rank, self.device, self.cupy = dist.get_world_size(), dist.get_rank(), device, cupy
        if self.world > 8:
            raise SystemExit(f"{source} sums at most 8 buffers (one NVLink node)")
        self.cap = -(-max_count // 64) * 64
        cupy.cuda.Device(device.index).use()  # CuPy loads the module on its current device
        self.kernel = cudl.load(f"14-multi-gpu/{source}", name)

    def stream(self):
        """torch's current stream of this GPU as a CuPy stream: the kernel runs in order with torch's work."""
        return cupy_stream(self.cupy, torch.cuda.current_stream(self.device).cuda_stream, self.device.index)


class OneShot(_OneShotKernel):
    """x -> the sum of x over all ranks, in place, with oneshot_reduce.cu over symmetric memory."""

    def __init__(self, max_count: int, device: torch.device) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        super().__init__(max_count, device, "oneshot_reduce.cu", "oneshot_sum")
        self.buf = symm_mem.empty(2 * self.cap, dtype=torch.float32, device=device)
        self.buf.fill_(float("nan"))  # a peer's half never written would poison the sum
        self.hdl = symm_mem.rendezvous(self.buf, dist.group.WORLD)
        self.parity = 0
        self.max_grid = 4 * torch.cuda.get_device_properties(device).multi_processor_count
        # every rank's buffer, mapped into this GPU: halves 0 and 1, made once (a call only picks one)
        peers = [cupy_view(self.cupy, self.buf, ptr=p) for p in self.hdl.buffer_ptrs]
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
            self.kernel((grid,), (BLOCK,), (*ins, self.cupy.int32(self.world), cupy_view(self.cupy, x),
                                            self.cupy.int64(n)))
        return x


class OneShotFused(_OneShotKernel):
    """The same all-reduce in one launch (oneshot_fused.cu): copy-in, per-block barrier and sum.

    The kernel keeps its own call count per block on the GPU, so a call's launch never changes and a
    sequence of calls can be captured in a CUDA graph and replayed without the host (capture()).
    Each block waits only for the blocks of the same index on the other GPUs, so every block must be
    resident at once: one block per SM (GRID), with nothing else running on the GPU meanwhile.
    """

    def __init__(self, max_count: int, device: torch.device, push: bool) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        super().__init__(max_count, device, "oneshot_fused.cu", "oneshot_fused")
        self.push = push  # True: write my input into every GPU's buffer; False: peers load it from mine
        self.grid = torch.cuda.get_device_properties(device).multi_processor_count  # all resident
        self.buf = symm_mem.empty(2 * self.world * self.cap, dtype=torch.float32, device=device)
        self.buf.fill_(float("nan"))  # a peer's part never written would poison the sum
        self.flags = symm_mem.empty(self.grid * 8, dtype=torch.int32, device=device)
        self.flags.zero_()  # the kernel's flags count calls from zero on every GPU
        hdl = symm_mem.rendezvous(self.buf, dist.group.WORLD)
        fhdl = symm_mem.rendezvous(self.flags, dist.group.WORLD)
        # every GPU's buffers as this GPU sees them (CUDA IPC mappings), as device arrays of pointers
        self.ptrs = torch.tensor(list(hdl.buffer_ptrs), dtype=torch.int64, device=device)
        self.flag_ptrs = torch.tensor(list(fhdl.buffer_ptrs), dtype=torch.int64, device=device)
        self.epoch = torch.zeros(self.grid, dtype=torch.int32, device=device)
        cp = self.cupy
        self.args = [cupy_view(cp, self.ptrs, cp.uint64), cupy_view(cp, self.flag_ptrs, cp.uint64),
                     cupy_view(cp, self.epoch, cp.uint32)]  # the kernel's unsigned types
        self.views: dict[tuple[int, int], object] = {}  # x's CuPy view, made once per tensor
        torch.cuda.synchronize(device)
        dist.barrier()  # every GPU's flags are zero before any GPU's first call writes a peer's

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        if n > self.cap:
            raise ValueError(f"{n} elements: this OneShotFused holds at most {self.cap}")
        cp = self.cupy
        if not (x.is_contiguous() and x.dtype == torch.float32 and x.device == self.device):
            raise ValueError("OneShotFused sums a contiguous float32 tensor on this rank's GPU")
        key = (x.data_ptr(), n)
        if key not in self.views:
            self.views = {key: cupy_view(cp, x)}  # keep the latest only (graphs reuse one tensor)
        xa = self.views[key]
        with cp.cuda.Device(self.device.index), self.stream():
            self.kernel((self.grid,), (BLOCK,), (xa, xa, cp.int64(n), *self.args, cp.int32(self.world),
                                                 cp.int32(self.rank), cp.int64(self.cap),
                                                 cp.int32(self.push)))
        return x


def capture(fn, calls: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `calls` calls of fn() in a row (warmed up first on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return graph


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
    pull, push = OneShotFused(shot.cap, device, push=False), OneShotFused(shot.cap, device, push=True)
    worst, lib_worst, torch_err = {"oneshot": 0.0, "pull": 0.0, "push": 0.0}, 0.0, None
    mine = {"oneshot": shot, "pull": pull, "push": push}

    def check(name: str, x: torch.Tensor, ref: torch.Tensor, what: str) -> None:
        err = du.rel_error(x, ref)
        first = x.clone()
        dist.broadcast(first, 0)
        if not err < 1e-6 * world or not torch.equal(x, first):
            raise SystemExit(f"rank {rank}: {name} all-reduce WRONG {what}: error vs float64 {err:.2e}, "
                             f"equal to rank 0's: {torch.equal(x, first)}")
        worst[name] = max(worst[name], err)

    for count in (1, 3, 1000, 4099, (1 << 18) + 1, 1 << 20):
        xs = [torch.randn(count, generator=torch.Generator().manual_seed(100 * r + count)) for r in range(world)]
        ref = torch.stack([t.double() for t in xs]).sum(0).to(device)
        lib = xs[rank].to(device)
        dist.all_reduce(lib)
        lib_worst = max(lib_worst, du.rel_error(lib, ref))
        for name, fn in mine.items():
            x = xs[rank].to(device)
            check(name, fn(x), ref, f"at count={count}")
        try:
            t_err = du.rel_error(torch_oneshot(xs[rank].to(device)), ref)
            torch_err = max(torch_err or 0.0, t_err)
        except Exception as exc:  # noqa: BLE001 - a library op missing here is reported, not fatal
            torch_err = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    base = torch.randn(4099, generator=torch.Generator().manual_seed(rank)).to(device)
    total = base.double().clone()
    dist.all_reduce(total)
    for name, fn in mine.items():
        for call in range(64):
            check(name, fn(base + call), total + world * call, f"at call {call} of 64 in a row (a barrier too few?)")
    # the fused kernels replayed from a CUDA graph: 5 calls in place multiply the sum by world^4
    for name in ("pull", "push"):
        x = base.clone()
        graph = capture(lambda: mine[name](x), 5)  # noqa: B023 - captured here, used here (3 warm-ups ran on x)
        x.copy_(base)
        graph.replay()
        check(name, x, total * float(world) ** 4, "replayed from a CUDA graph, 5 calls in a row")
        del graph

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
    graph_err = None
    for count in counts:
        src = torch.randn(count, generator=torch.Generator().manual_seed(rank)).to(device)
        x, work = src.clone(), torch.empty_like(src)

        def restore() -> None:  # every method sums in place (PyTorch's one-shot into a new tensor)
            x.copy_(src)

        methods = {"nccl": lambda: dist.all_reduce(x), "oneshot": lambda: shot(x), "pull": lambda: pull(x),
                   "push": lambda: push(x), "ring": lambda: ring_allreduce(x, reduce, 1, work)}
        if torch_ok:
            methods["torch_oneshot"] = lambda: torch_oneshot(x)
        # graphed against graphed: GRAPH_CALLS calls in a row captured once, replayed; time per call.
        # In place, the values grow by world per call; no timing here depends on them.
        graphs = {}
        for name in ("nccl", "pull", "push", "torch_oneshot"):
            if name in methods:
                try:
                    graphs[f"{name}_graph"] = capture(methods[name], GRAPH_CALLS)
                except Exception as exc:  # noqa: BLE001 - reported: a method that cannot be captured
                    graph_err = f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        row = dict(bytes=count * 4)
        for _ in range(ROUNDS):  # the methods in turn, ROUNDS times: each round's median is kept
            for name, fn in methods.items():
                row.setdefault(f"{name}_rounds", []).append(
                    du.time_op(fn, device, args.iters, before=restore) * 1e6)
            for name, g in graphs.items():
                row.setdefault(f"{name}_rounds", []).append(
                    du.time_op(g.replay, device, max(5, args.iters // 5), before=restore) * 1e6 / GRAPH_CALLS)
        for name in [*methods, *graphs]:
            row[f"{name}_us"] = statistics.median(row[f"{name}_rounds"])
            row[f"{name}_busbw"] = du.busbw("all_reduce", count * 4, row[f"{name}_us"] / 1e6, world)[1]
        for name, fn in methods.items():
            row[f"{name}_host_us"] = host_us(fn, restore, min(args.iters, 20))
        rows.append(row)
        del graphs
        torch.cuda.synchronize()
        dist.barrier()

    if rank == 0:
        print(f"one-shot all-reduce (oneshot_reduce.cu, oneshot_fused.cu over symmetric memory) vs NCCL, "
              f"{world} ranks, {du.gpu_name(device)}")
        print(f"correct: max rel error vs float64: three launches {worst['oneshot']:.1e}, one launch "
              f"{worst['pull']:.1e} (pull), {worst['push']:.1e} (push) (odd counts, 64 calls in a row, "
              "5 graph-replayed calls,")
        print(f"  NaN-poisoned buffers; every rank bitwise equal to rank 0); NCCL {lib_worst:.1e}; "
              f"PyTorch's one-shot: {torch_err if isinstance(torch_err, str) else f'{torch_err:.1e}'}")
        print(f"barrier: {shot.barrier_kind}; graph capture: {graph_err or 'every method captured'}")
        print(f"one send/recv pair (4 KB, batch_isend_irecv): {pair_us:.1f} us on the GPU, "
              f"{pair_host:.1f} us to issue; a ring of {world} GPUs takes {2 * (world - 1)} such steps")
        eager = [m for m in ("nccl", "oneshot", "pull", "push", "torch_oneshot", "ring") if f"{m}_us" in rows[0]]
        print("eager calls, median us on the GPU (host us to issue one call):")
        print(f"{'size':>10}" + "".join(f"{m:>17}" for m in eager))
        for r in rows:
            print(f"{r['bytes'] / 1024:>8.0f}KB" + "".join(
                f"{r[f'{m}_us']:>9.1f} ({r[f'{m}_host_us']:>5.1f})" for m in eager))
        graphed = [m for m in ("nccl_graph", "pull_graph", "push_graph", "torch_oneshot_graph")
                   if f"{m}_us" in rows[0]]
        print(f"CUDA-graphed, {GRAPH_CALLS} calls per graph, median us per call:")
        print(f"{'size':>10}" + "".join(f"{m:>20}" for m in graphed))
        for r in rows:
            print(f"{r['bytes'] / 1024:>8.0f}KB" + "".join(f"{r[f'{m}_us']:>20.1f}" for m in graphed))
        cross = crossover(rows, "oneshot", "nccl")
        cross_graph = {m: crossover(rows, f"{m}_graph", "nccl_graph") for m in ("pull", "push")}
        say = lambda c: f"{c / 1024:.0f} KB" if c else "no size measured here"  # noqa: E731
        print(f"NCCL takes over from {say(cross)} (eager: three launches vs NCCL); "
              f"graphed: from {say(cross_graph['pull'])} (pull), {say(cross_graph['push'])} (push)")
        du.write_json(args.json, dict(world=world, gpu=du.gpu_name(device), max_rel_error=worst["oneshot"],
                                      pull_rel_error=worst["pull"], push_rel_error=worst["push"],
                                      nccl_rel_error=lib_worst,
                                      torch_oneshot=torch_err, graph_error=graph_err, graph_calls=GRAPH_CALLS,
                                      pair_us=pair_us, pair_host_us=pair_host, crossover_bytes=cross,
                                      crossover_graph_bytes=cross_graph, barrier=shot.barrier_kind, rows=rows))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
