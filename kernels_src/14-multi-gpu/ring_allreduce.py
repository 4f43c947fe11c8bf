"""A ring all-reduce written by hand: reduce-scatter, then all-gather, in slices that pipeline.

    torchrun --standalone --nproc-per-node=N kernels_src/14-multi-gpu/ring_allreduce.py --json ring.json
    torchrun --standalone --nproc-per-node=2 kernels_src/14-multi-gpu/ring_allreduce.py --backend gloo \
        --sizes-mb 0.25 1                                  # CPU processes: the same ring, gloo underneath
    torchrun --standalone --nproc-per-node=N kernels_src/14-multi-gpu/ring_allreduce.py --transport nccl peer \
        --json ring.json                                   # the ring over send/recv, and over peer loads

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

The peer transport (--transport peer, GPUs only). On 4 H200s behind NVSwitch a send/recv pair of one
64 MB chunk runs at well under half the rate of the same bytes read by a kernel from the peer's
memory (transport_alone in the JSON measures both), and the send/recv ring stays far below NCCL's
bus bandwidth at 256 MB, unlike on 2 GPUs; NCCL's P2P settings (channels per peer, chunk size, copy
engines) did not raise it. So the bytes move another way: every rank keeps
its array in a symmetric-memory buffer S that its neighbour can map (the one-shot's buffers, see
oneshot_allreduce.py), and at each step of the same ring schedule ring_reduce.cu adds the previous
rank's chunk to its own with `recv` pointing into that rank's S: the kernel's loads cross NVLink, no
NCCL kernel or proxy in between. The all-gather copies the previous rank's summed chunk out of its S
(copy_, a device-to-device copy that reads over NVLink). The price: a barrier before each of the
2(n-1) steps and one after the last, and copying x into S and back; both are inside the timing,
since NCCL's all_reduce works on any tensor.
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


def peer_ring_steps(rank: int, world: int) -> list[tuple[str, int]]:
    """The peer ring's schedule for `rank`: ("add", c) is S_rank[c] += S_prev[c], ("copy", c) is
    S_rank[c] = S_prev[c], with c a chunk of split(0, count, world). The same steps as the send/recv ring.
    """
    # reduce-scatter: prev summed chunk (rank - s - 1) over s ranks at its step s - 1; after n - 1 steps
    # rank r holds the whole sum of chunk (r + 1) mod n. All-gather: at step 0 prev holds chunk r whole,
    # and at step s it holds chunk (r - s), copied at its step s - 1.
    return ([("add", (rank - s - 1) % world) for s in range(world - 1)] +
            [("copy", (rank - s) % world) for s in range(world - 1)])


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


def cupy_view(cupy, t: torch.Tensor, dtype=None, ptr: int | None = None):
    """A 1-D CuPy array over the memory of the contiguous tensor t, on t's GPU (no copy, no synchronisation).

    dtype: read the bytes as another type of the same size (torch's int64 as the kernel's uint64).
    ptr: view a buffer shaped like t at another address instead, one that t keeps alive (a peer's copy of
    t's symmetric-memory buffer, mapped into t's GPU).
    """
    dtype = dtype or {torch.float32: cupy.float32, torch.int64: cupy.int64, torch.int32: cupy.int32}[t.dtype]
    address = t.data_ptr() if ptr is None else ptr
    mem = cupy.cuda.UnownedMemory(address, t.numel() * t.element_size(), t, t.device.index)
    return cupy.ndarray((t.numel(),), dtype, cupy.cuda.MemoryPointer(mem, 0))


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

    def reduce(acc: torch.Tensor, recv: torch.Tensor) -> None:
        stream = cupy_stream(cupy, torch.cuda.current_stream(device).cuda_stream, device.index)
        with cupy.cuda.Device(device.index), stream:
            k((grid,), (256,), (cupy_view(cupy, acc), cupy_view(cupy, recv), acc.numel()))

    return reduce


class PeerRing:
    """x -> the sum of x over all ranks, in place: the ring's steps with peer loads over symmetric memory.

    GPUs with peer access only. One buffer S of `capacity` floats per rank; each step reads the previous
    rank's S (the add's `recv`, or a copy's source) and writes my own.
    """

    def __init__(self, capacity: int, device: torch.device, reduce: Reduce | None = None) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.rank, self.world, self.device = dist.get_rank(), dist.get_world_size(), device
        self.prev = (self.rank - 1) % self.world
        self.cap = capacity
        self.buf = symm_mem.empty(capacity, dtype=torch.float32, device=device)
        self.buf.fill_(float("nan"))  # a chunk never written would poison the sum
        self.hdl = symm_mem.rendezvous(self.buf, dist.group.WORLD)
        # the previous rank's S mapped into this GPU's address space: a tensor on this device whose loads
        # go over NVLink (its data_ptr is hdl.buffer_ptrs[prev])
        self.prev_buf = self.hdl.get_buffer(self.prev, (capacity,), torch.float32)
        assert self.prev_buf.data_ptr() == self.hdl.buffer_ptrs[self.prev], "get_buffer: not prev's S"
        self.reduce = reduce or kernel_reduce(device)
        torch.cuda.synchronize(device)  # every S is NaN-filled before any rank's first barrier
        dist.barrier()

    def barrier(self) -> None:
        """Every rank has finished the work issued before it (on the GPU, in stream order, no host wait)."""
        self.hdl.barrier(channel=0)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        if n > self.cap:
            raise ValueError(f"{n} elements: this PeerRing holds at most {self.cap}")
        if self.world == 1:
            return x
        chunks = split(0, n, self.world)  # the same chunks on every rank
        self.buf[:n].copy_(x)
        # A barrier before every step: the chunk prev wrote at step s - 1 is complete when I read it. No
        # barrier is needed between my write and my neighbour's read in the same step: at step s I write
        # chunk (r - s - 1) (add) or (r - s) (copy) of S_r, and rank r + 1 reads chunk (r - s) or
        # (r - s + 1) of S_r: they differ by 1 mod n, so never the same chunk.
        for op, c in peer_ring_steps(self.rank, self.world):
            self.barrier()
            a, b = chunks[c]
            if b == a:  # an empty chunk (count < n x 64): nothing to move, yet every rank took the barrier
                continue
            if op == "add":
                self.reduce(self.buf[a:b], self.prev_buf[a:b])  # ring_reduce.cu: recv is prev's memory
            else:
                self.buf[a:b].copy_(self.prev_buf[a:b])  # a device-to-device copy from the peer
        # The next call's copy-in overwrites all of S, while rank r + 1 may still be reading the last
        # step's chunk of it: wait for every rank to finish.
        self.barrier()
        x.copy_(self.buf[:n])
        return x


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


def check_peer_ring(ring: PeerRing, device: torch.device) -> float:
    """The peer ring against float64 and the library on odd counts, S NaN-poisoned before each, every
    rank bitwise equal to rank 0; then 16 calls back to back, each with new inputs (a barrier too few
    lets a rank read a chunk its neighbour has not written yet, or has overwritten already)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    worst = 0.0

    def judge(x: torch.Tensor, ref: torch.Tensor, lib: torch.Tensor | None, what: str) -> float:
        err = du.rel_error(x, ref)
        same = du.rel_error(x, lib) if lib is not None else 0.0
        first = x.clone()
        dist.broadcast(first, 0)
        if not err < 1e-6 * world or not same < 1e-6 * world or not torch.equal(x, first):
            raise SystemExit(f"rank {rank}: peer ring all-reduce WRONG at {what}: error vs float64 {err:.2e}, "
                             f"vs library {same:.2e}, equal to rank 0's: {torch.equal(x, first)}")
        return err

    for count in (1, world * 3 + 1, 10_007, 1 << 18):
        xs = [torch.randn(count, generator=torch.Generator().manual_seed(100 * r + count)) for r in range(world)]
        ref = torch.stack([t.double() for t in xs]).sum(0).to(device)
        x = xs[rank].to(device)
        lib = x.clone()
        dist.all_reduce(lib)
        # safe between calls: the last call's final barrier is behind us, this call's first one ahead
        ring.buf.fill_(float("nan"))
        worst = max(worst, judge(ring(x), ref, lib, f"count={count}"))
    g = torch.Generator(device=device).manual_seed(1000 + rank)
    xs = [torch.randn((1 << 20) + 3, generator=g, device=device) for _ in range(16)]
    refs = [x.double() for x in xs]
    for ref in refs:
        dist.all_reduce(ref)  # float64: the reference
    for x in xs:  # back to back, no host synchronisation in between
        ring(x)
    for call, (x, ref) in enumerate(zip(xs, refs)):
        worst = max(worst, judge(x, ref, None, f"call {call} of 16 in a row (a barrier too few?)"))
    return worst


def transport_alone(ring: PeerRing, count: int, device: torch.device, iters: int) -> dict:
    """Chunk 0 of `count` floats moved once by every rank at the same time, as in one step of the ring:
    an NCCL send/recv pair, ring_reduce.cu with recv = prev's S (peer loads), the all-gather's copy from
    prev's S, and the add with a local recv (the kernel's own, DRAM-bound, time). GB/s = the chunk's
    bytes / time, per link."""
    rank, world = dist.get_rank(), dist.get_world_size()
    a, b = split(0, count, world)[0]
    n = b - a
    send, recv, local = (torch.randn(n, device=device) for _ in range(3))
    acc, peer = ring.buf[:n], ring.prev_buf[:n]  # the values are garbage by now: only the time counts
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def pair() -> None:
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]):
            w.wait()

    out: dict = dict(bytes=n * 4)
    for name, fn in (("nccl_sendrecv", pair), ("peer_add", lambda: ring.reduce(acc, peer)),
                     ("peer_copy", lambda: acc.copy_(peer)), ("local_add", lambda: ring.reduce(acc, local))):
        t = du.time_op(fn, device, iters)
        out[f"{name}_us"], out[f"{name}_gbs"] = t * 1e6, n * 4 / t / 1e9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None)
    ap.add_argument("--reduce", choices=["kernel", "torch"], default="kernel",
                    help="the add of each received slice: ring_reduce.cu (default) or torch's add_")
    ap.add_argument("--transport", choices=["nccl", "peer"], nargs="+", default=["nccl"],
                    help="how the ring moves its chunks: NCCL send/recv (default), peer loads over "
                         "symmetric memory (GPUs only), or both")
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--slices", type=int, nargs="+", default=[0],
                    help="slices per chunk; 0 = about 16 MB each; several values compare pipelining")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    transports = list(dict.fromkeys(args.transport))
    if "peer" in transports and (args.backend == "gloo" or not torch.cuda.is_available()):
        raise SystemExit("--transport peer: peer loads need GPUs with NVLink/P2P and symmetric memory "
                         "(these are CPU processes with gloo); use --transport nccl")
    rank, world, device = du.start(args.backend)
    reduce = kernel_reduce(device) if args.reduce == "kernel" else torch_reduce
    counts = [max(world, int(mb * 2**20) // 4) for mb in args.sizes_mb]
    ring = PeerRing(max(*counts, (1 << 20) + 3), device, reduce) if "peer" in transports else None

    kernel_err = check_kernel_on_gpu(reduce, device) if device.type == "cuda" else None
    # correctness: odd counts and several slicings, against NCCL/gloo's all_reduce and float64
    errors: dict[str, float] = {}
    if "nccl" in transports:
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
        errors["nccl"] = worst
    if ring is not None:
        errors["peer"] = check_peer_ring(ring, device)
    worst = max(errors.values())

    rows = []
    for count in counts:
        g = torch.Generator().manual_seed(rank)
        src = torch.randn(count, generator=g).to(device)
        x, work = src.clone(), torch.empty_like(src)
        nbytes = count * 4

        def restore() -> None:  # the sum is in place: every run starts from the same input
            x.copy_(src)

        t_lib = du.time_op(lambda: dist.all_reduce(x), device, args.iters, before=restore)
        row = dict(bytes=nbytes, lib_us=t_lib * 1e6, lib_busbw=du.busbw("all_reduce", nbytes, t_lib, world)[1])
        runs = []  # (transport, slices, the call)
        if "nccl" in transports:
            for sl in args.slices:
                used = sl or default_slices(count, world)
                runs.append(("nccl", used, lambda used=used: ring_allreduce(x, reduce, used, work)))
        if ring is not None:
            runs.append(("peer", 1, lambda: ring(x)))
        for transport, used, fn in runs:
            t = du.time_op(fn, device, args.iters, before=restore)
            bus = du.busbw("all_reduce", nbytes, t, world)[1]
            rows.append(dict(row, transport=transport, slices=used, ring_us=t * 1e6, ring_busbw=bus,
                             ratio=t_lib / t))
    alone = transport_alone(ring, max(counts), device, args.iters) if ring is not None else None

    if rank == 0:
        lib = dist.get_backend()
        print(f"ring all-reduce vs {lib}.all_reduce, {world} ranks, {du.gpu_name(device)}, "
              f"reduce={args.reduce}, transport={' '.join(transports)}")
        if kernel_err is not None:
            print(f"ring_reduce.cu alone vs float64: max rel error {kernel_err:.1e}")
        if "nccl" in errors:
            print(f"correct: max rel error vs float64 {errors['nccl']:.1e} "
                  "(odd counts, 1 and 3 slices, NaN-poisoned buffer)")
        if "peer" in errors:
            print(f"correct (peer): max rel error vs float64 {errors['peer']:.1e} (odd counts, NaN-poisoned "
                  "buffers, 16 calls in a row; every rank bitwise equal to rank 0)")
        print(f"{'size':>10}{'transport':>10}{'slices':>7}{'ring us':>10}{'lib us':>10}{'ring busbw':>12}"
              f"{'lib busbw':>11}{'ring/lib':>10}")
        for r in rows:
            print(f"{r['bytes'] / 2**20:>8.2f}MB{r['transport']:>10}{r['slices']:>7}{r['ring_us']:>10.1f}"
                  f"{r['lib_us']:>10.1f}{r['ring_busbw']:>12.1f}{r['lib_busbw']:>11.1f}{r['ratio']:>9.0%}")
        if alone is not None:
            print(f"one chunk of {alone['bytes'] / 2**20:.1f} MB moved once, every rank at the same time: "
                  f"NCCL send/recv {alone['nccl_sendrecv_gbs']:.0f} GB/s, peer-load add "
                  f"{alone['peer_add_gbs']:.0f} GB/s, peer copy {alone['peer_copy_gbs']:.0f} GB/s, "
                  f"the add from local memory {alone['local_add_gbs']:.0f} GB/s")
        du.write_json(args.json, dict(world=world, backend=lib, gpu=du.gpu_name(device), reduce=args.reduce,
                                      transports=transports, max_rel_error=worst, rel_error=errors,
                                      kernel_rel_error=kernel_err, transport_alone=alone, rows=rows))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
