"""A ring all-reduce written by hand: reduce-scatter, then all-gather, in slices that pipeline.

    torchrun --standalone --nproc-per-node=N kernels_src/14-multi-gpu/ring_allreduce.py --json ring.json
    torchrun --standalone --nproc-per-node=2 kernels_src/14-multi-gpu/ring_allreduce.py --backend gloo \
        --sizes-mb 0.25 1                                  # CPU processes: the same ring, gloo underneath

The array of every rank is cut into n chunks, and every chunk into slices. Reduce-scatter: at step s
(0 .. n-2) rank r sends chunk (r - s) mod n to rank r+1 and receives chunk (r - s - 1) mod n from
rank r-1, adding it to its own with ring_reduce.cu; after n-1 steps rank r holds the full sum of
chunk (r + 1) mod n. All-gather: n-1 more steps pass the summed chunks around the ring, each
received chunk overwriting the stale one. Each GPU sends and receives 2(n-1)/n of the array, the
bound that nccl-tests' bus bandwidth assumes, so ring busbw and NCCL busbw compare directly.

P2P copies: one process per GPU (torchrun), so a process cannot simply cudaMemcpyPeer into another
process's buffer (that needs CUDA IPC handles exchanged between processes). torch.distributed's
batch_isend_irecv posts the pair (send to the next rank, receive from the previous) as one NCCL
group, which moves the bytes GPU to GPU over NVLink (NCCL's P2P transport) without the host. The
reduction is our kernel, launched on the current stream: work.wait() makes that stream wait for the
receive, and the next send waits for the stream, so no host synchronisation is needed.

Pipelining: slice p of step s is posted as soon as slice p of step s-1 is added, so while one slice
is on the link the previous one is being summed, and only the last slice's add is not hidden.
With gloo (CPU processes, for tests) the add is torch's, or the kernel on the CPU emulator.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import dist_utils as du
import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
ALIGN = 64  # slice boundaries at multiples of 64 floats (256 B): the kernel's float4 path applies
Reduce = Callable[[torch.Tensor, torch.Tensor], None]


def split(start: int, end: int, parts: int, align: int = ALIGN) -> list[tuple[int, int]]:
    """`parts` contiguous pieces of [start, end), inner boundaries rounded to `align` (some may be empty)."""
    n = end - start
    cuts = [start + min(n, (n * i // parts + align - 1) // align * align) for i in range(parts)] + [end]
    cuts[0] = start
    return [(cuts[i], cuts[i + 1]) for i in range(parts)]


def plan(count: int, world: int, slices: int) -> list[list[tuple[int, int]]]:
    """plan[c][p]: the element range of slice p of chunk c. Every rank computes the same plan."""
    return [split(a, b, slices) for a, b in split(0, count, world)]


def default_slices(count: int, world: int, slice_bytes: int = 16 * 2**20) -> int:
    """About 16 MB a slice (the add of one slice hides behind the transfer of the next), 1 to 16."""
    return max(1, min(16, -(-count * 4 // world // slice_bytes)))


def ring_allreduce(x: torch.Tensor, reduce: Reduce, slices: int = 0,
                   work: torch.Tensor | None = None) -> torch.Tensor:
    """Sum the 1-D float32 tensor x over all ranks, in place, around the ring; returns x.

    `work`: a receive buffer shaped like x (allocated when None).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return x
    slices = slices or default_slices(x.numel(), world)
    chunks = plan(x.numel(), world, slices)
    work = torch.empty_like(x) if work is None else work
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def post(send: tuple[int, int], recv: tuple[int, int], into: torch.Tensor) -> list:
        # An empty slice is skipped on both sides: my send is empty exactly when my neighbour's
        # receive is (the same slice of the same chunk in the same plan).
        ops = ([dist.P2POp(dist.isend, x[send[0]:send[1]], nxt)] if send[1] > send[0] else []) + \
              ([dist.P2POp(dist.irecv, into[recv[0]:recv[1]], prv)] if recv[1] > recv[0] else [])
        return dist.batch_isend_irecv(ops) if ops else []

    pending: list[list] = [[] for _ in range(slices)]

    def settle(p: int) -> None:  # wait once for slice p's transfers (a finished work is not waited again)
        for w in pending[p]:
            w.wait()
        pending[p] = []

    # reduce-scatter: receive into `work`, then x += work over the same slice
    for s in range(world):
        for p in range(slices):
            if s > 0:  # the slice of step s-1 has arrived: add it (its send at step s needs the sum)
                settle(p)
                a, b = chunks[(rank - s) % world][p]
                if b > a:
                    reduce(x[a:b], work[a:b])
            if s < world - 1:
                send, recv = chunks[(rank - s) % world][p], chunks[(rank - s - 1) % world][p]
                pending[p] = post(send, recv, work)
    # all-gather: the summed chunk (rank + 1) goes around; receive straight into x
    for s in range(world - 1):
        for p in range(slices):
            settle(p)
            send, recv = chunks[(rank + 1 - s) % world][p], chunks[(rank - s) % world][p]
            pending[p] = post(send, recv, x)
    for p in range(slices):
        settle(p)
    return x


def torch_reduce(acc: torch.Tensor, recv: torch.Tensor) -> None:
    acc.add_(recv)


class _StreamHandle:
    """A raw cudaStream_t behind the CUDA stream protocol (`__cuda_stream__` -> (0, pointer))."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.ptr


_CUPY_STREAMS: dict[tuple[int, int], object] = {}


def cupy_stream(cupy, ptr: int, device_index: int):
    """torch's stream `ptr` of GPU `device_index` as a CuPy stream, so our kernel runs in order with NCCL.

    CuPy 14 wraps foreign streams with Stream.from_external (ExternalStream is deprecated there); CuPy 13
    has only ExternalStream. One wrapper per stream, kept for the life of the process: the object
    from_external returns is a cupy.cuda.Stream, and a Stream's finaliser may destroy its handle.
    """
    key = (ptr, device_index)
    if key not in _CUPY_STREAMS:
        with cupy.cuda.Device(device_index):  # from_external takes the device from the current one
            if hasattr(cupy.cuda.Stream, "from_external"):
                _CUPY_STREAMS[key] = cupy.cuda.Stream.from_external(_StreamHandle(ptr))
            else:
                _CUPY_STREAMS[key] = cupy.cuda.ExternalStream(ptr, device_index)
    return _CUPY_STREAMS[key]


def kernel_reduce(device: torch.device) -> Reduce:
    """ring_reduce.cu through cudl: CuPy on a GPU (on torch's current stream), the emulator on the CPU."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for cudl
    if device.type == "cpu":
        os.environ.setdefault("CUDL_BACKEND", "emulator")  # CPU tensors: NumPy views, the emulator
    import cudl

    if device.type == "cpu":
        k = cudl.load("14-multi-gpu/ring_reduce.cu", "ring_reduce_add")
        return lambda acc, recv: k((4,), (64,), (acc.numpy(), recv.numpy(), acc.numel()))
    import cupy

    cupy.cuda.Device(device.index).use()  # CuPy loads the module on its current device: this rank's GPU
    k = cudl.load("14-multi-gpu/ring_reduce.cu", "ring_reduce_add")

    grid = 4 * torch.cuda.get_device_properties(device).multi_processor_count

    def view(t: torch.Tensor) -> cupy.ndarray:  # the tensor's memory as a CuPy array, no copy
        mem = cupy.cuda.UnownedMemory(t.data_ptr(), t.numel() * 4, t, device.index)
        return cupy.ndarray((t.numel(),), cupy.float32, cupy.cuda.MemoryPointer(mem, 0))

    def reduce(acc: torch.Tensor, recv: torch.Tensor) -> None:
        stream = cupy_stream(cupy, torch.cuda.current_stream(device).cuda_stream, device.index)
        with cupy.cuda.Device(device.index), stream:
            k((grid,), (256,), (view(acc), view(recv), acc.numel()))

    return reduce


def check_kernel_on_gpu(reduce: Reduce, device: torch.device) -> float:
    """The reduction kernel alone against float64, on odd sizes and a misaligned slice."""
    worst = 0.0
    for n in (1, 3, 1000, 2**20 + 5):
        acc, recv = torch.randn(n + 1, device=device), torch.randn(n + 1, device=device)
        for off in (0, 1):
            a, r = acc[off:off + n].clone(), recv[off:off + n]
            ref = a.double() + r.double()
            if off:  # a view that starts 4 bytes in: the kernel must take its scalar path
                a = torch.cat([torch.full((1,), float("nan"), device=device), a])[1:]
            reduce(a, r)
            worst = max(worst, du.rel_error(a, ref))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None)
    ap.add_argument("--reduce", choices=["kernel", "torch"], default="kernel",
                    help="the add of each received slice: ring_reduce.cu (default) or torch's add_")
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--slices", type=int, nargs="+", default=[0],
                    help="slices per chunk; 0 = about 16 MB each; several values compare pipelining")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rank, world, device = du.start(args.backend)
    reduce = kernel_reduce(device) if args.reduce == "kernel" else torch_reduce

    kernel_err = check_kernel_on_gpu(reduce, device) if device.type == "cuda" else None
    # correctness: odd counts and several slicings, against NCCL/gloo's all_reduce and float64
    worst = 0.0
    for count in (1, world * 3 + 1, 10_007, 1 << 18):
        for slices in (1, 3):
            xs = [torch.randn(count, generator=torch.Generator().manual_seed(100 * r + count))
                  for r in range(world)]
            ref = torch.stack([t.double() for t in xs]).sum(0)
            x = xs[rank].to(device)
            lib = x.clone()
            dist.all_reduce(lib)
            work = torch.full_like(x, float("nan"))  # a slice never received would poison the sum
            ring_allreduce(x, reduce, slices, work)
            err = du.rel_error(x.cpu(), ref)
            same = du.rel_error(x.cpu(), lib.cpu())
            worst = max(worst, err)
            if not err < 1e-6 * world or not same < 1e-6 * world:
                raise SystemExit(f"rank {rank}: ring all-reduce WRONG at count={count} slices={slices}: "
                                 f"error vs float64 {err:.2e}, vs library {same:.2e}")

    rows = []
    for mb in args.sizes_mb:
        count = max(world, int(mb * 2**20) // 4)
        g = torch.Generator().manual_seed(rank)
        src = torch.randn(count, generator=g).to(device)
        x, work = src.clone(), torch.empty_like(src)
        nbytes = count * 4

        def restore() -> None:  # the sum is in place: every run starts from the same input
            x.copy_(src)

        t_lib = du.time_op(lambda: dist.all_reduce(x), device, args.iters, before=restore)
        row = dict(bytes=nbytes, lib_us=t_lib * 1e6, lib_busbw=du.busbw("all_reduce", nbytes, t_lib, world)[1])
        for sl in args.slices:
            used = sl or default_slices(count, world)
            t = du.time_op(lambda: ring_allreduce(x, reduce, used, work), device, args.iters, before=restore)
            bus = du.busbw("all_reduce", nbytes, t, world)[1]
            rows.append(dict(row, slices=used, ring_us=t * 1e6, ring_busbw=bus,
                             ratio=t_lib / t))

    if rank == 0:
        lib = dist.get_backend()
        print(f"ring all-reduce vs {lib}.all_reduce, {world} ranks, {du.gpu_name(device)}, "
              f"reduce={args.reduce}")
        if kernel_err is not None:
            print(f"ring_reduce.cu alone vs float64: max rel error {kernel_err:.1e}")
        print(f"correct: max rel error vs float64 {worst:.1e} (odd counts, 1 and 3 slices, NaN-poisoned buffer)")
        print(f"{'size':>10}{'slices':>7}{'ring us':>10}{'lib us':>10}{'ring busbw':>12}{'lib busbw':>11}"
              f"{'ring/lib':>10}")
        for r in rows:
            print(f"{r['bytes'] / 2**20:>8.2f}MB{r['slices']:>7}{r['ring_us']:>10.1f}{r['lib_us']:>10.1f}"
                  f"{r['ring_busbw']:>12.1f}{r['lib_busbw']:>11.1f}{r['ratio']:>9.0%}")
        du.write_json(args.json, dict(world=world, backend=lib, gpu=du.gpu_name(device), reduce=args.reduce,
                                      max_rel_error=worst, kernel_rel_error=kernel_err, rows=rows))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
