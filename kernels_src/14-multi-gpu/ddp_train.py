"""Data-parallel training with DistributedDataParallel, one process per GPU, launched by torchrun.

    torchrun --standalone --nproc-per-node=N kernels_src/14-multi-gpu/ddp_train.py --json ddp.json \
        --trace ddp_trace.json                    # GPUs: NCCL; the trace opens in ui.perfetto.dev
    torchrun --standalone --nproc-per-node=2 kernels_src/14-multi-gpu/ddp_train.py --backend gloo \
        --width 256 --steps 10                    # CPU processes with gloo (what the tests run)

Every rank holds a full copy of the model and trains on its own shard of each global batch
(DistributedSampler: the same shuffled order on every rank, rank r takes every n-th sample). DDP
averages the gradients with all-reduce during backward: it packs them into buckets of about
--bucket-cap-mb megabytes, in the reverse order of the forward pass, and starts each bucket's
all-reduce as soon as its last gradient is ready, so communication of the last layers overlaps the
backward of the first ones. The script checks that the averaged gradient equals the gradient of the
whole global batch computed by one process, times training steps, and, with rank 0 alone before
DDP starts, the same steps on one GPU: scaling efficiency = throughput(n) / (n x throughput(1)).
With --trace, rank 0 records a torch.profiler trace of a few steps and measures how much of the
NCCL kernels' time overlaps compute kernels on other streams.

The model is a small MLP classifier on synthetic data (labels from a fixed random "teacher", so the
loss really falls); the chapter should later train chapter 09's model here instead.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import dist_utils as du
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")


def make_model(d_in: int, width: int, depth: int, classes: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    layers: list[nn.Module] = [nn.Linear(d_in, width), nn.GELU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


def make_data(n: int, d_in: int, classes: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """n samples, labels from a fixed random linear teacher; identical on every rank (one seed)."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, d_in, generator=g)
    teacher = torch.randn(d_in, classes, generator=g)
    return x.to(device), (x @ teacher).argmax(1).to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, batches, device: torch.device) -> tuple[float, float]:
    """Run the given (x, y) batches; returns (seconds, last loss)."""
    loss_fn = nn.CrossEntropyLoss()
    sync(device)
    t0 = time.perf_counter()
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    sync(device)
    return time.perf_counter() - t0, float(loss.item())


def shard_batches(x, y, rank: int, world: int, batch: int, steps: int, epoch: int = 0):
    """This rank's part of `steps` global batches of world * batch samples."""
    sampler = DistributedSampler(range(len(x)), num_replicas=world, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    idx = torch.tensor(list(sampler), device=x.device)
    per_epoch = len(idx) // batch
    return [(x[idx[s % per_epoch * batch:][:batch]], y[idx[s % per_epoch * batch:][:batch]])
            for s in range(steps)]


def check_gradients(ddp: DDP, model_args: tuple, x, y, device: torch.device) -> float:
    """DDP's averaged gradient vs one process's gradient of the whole global batch (relative error)."""
    loss_fn = nn.CrossEntropyLoss()
    ddp.zero_grad(set_to_none=True)
    loss_fn(ddp(x), y).backward()
    world = dist.get_world_size()
    xs, ys = [torch.empty_like(x) for _ in range(world)], [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(xs, x)
    dist.all_gather(ys, y)
    ref = make_model(*model_args).to(device)
    ref.load_state_dict(ddp.module.state_dict())
    loss_fn(ref(torch.cat(xs)), torch.cat(ys)).backward()  # equal shards: mean of means = global mean
    got = torch.cat([p.grad.flatten() for p in ddp.module.parameters()])
    want = torch.cat([p.grad.flatten() for p in ref.parameters()])
    ddp.zero_grad(set_to_none=True)
    return du.rel_error(got, want)


def overlap_from_trace(path: str) -> dict:
    """From a Chrome trace: NCCL kernel time, and the part of it during which other kernels ran."""
    events = json.load(open(path)).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e["name"].lower()]
    comp = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower())
    merged: list[list[float]] = []  # union of compute intervals
    for a, b in comp:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = sum(b - a for a, b in comm)
    hidden = sum(max(0.0, min(b, d) - max(a, c)) for a, b in comm for c, d in merged)
    return dict(nccl_kernels=len(comm), nccl_us=total, overlapped_us=hidden,
                overlap=hidden / total if total else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None)
    ap.add_argument("--d-in", type=int, default=1024)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256, help="samples per rank per step")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size (its default: 25)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the one-GPU run of rank 0")
    ap.add_argument("--trace", default=None, help="rank 0 writes a torch.profiler Chrome trace here")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rank, world, device = du.start(args.backend)
    model_args = (args.d_in, args.width, args.depth, args.classes)
    x, y = make_data(max(4096, 4 * world * args.batch), args.d_in, args.classes, device)
    warm = 3
    batches = shard_batches(x, y, rank, world, args.batch, args.steps + warm)

    single = None  # samples/s of one GPU alone, same per-GPU batch, before the others start
    if not args.no_baseline and rank == 0:
        solo = make_model(*model_args).to(device)
        opt = torch.optim.SGD(solo.parameters(), lr=0.05)
        train_steps(solo, opt, batches[:warm], device)
        t, _ = train_steps(solo, opt, batches[warm:], device)
        single = args.steps * args.batch / t
        del solo, opt
    dist.barrier()

    model = make_model(*model_args).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=args.bucket_cap_mb)
    grad_err = check_gradients(ddp, model_args, *batches[0], device)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    _, loss0 = train_steps(ddp, opt, batches[:warm], device)
    t, loss = train_steps(ddp, opt, batches[warm:], device)
    t_max = torch.tensor([t], dtype=torch.float64, device=device)
    dist.all_reduce(t_max, op=dist.ReduceOp.MAX)
    throughput = args.steps * args.batch * world / float(t_max.item())
    # after training every replica must hold the same weights
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    spread = flat.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    replicas_equal = bool(torch.equal(spread, flat))
    logging = ddp._get_ddp_logging_data()  # private, but the only place DDP reports its buckets
    bucket_sizes = [int(s) for s in str(logging.get("bucket_sizes", "")).split(",") if s.strip()]

    overlap = None
    if args.trace:
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=3)) as prof:
            for xb, yb in batches[:5]:
                train_steps(ddp, opt, [(xb, yb)], device)
                prof.step()
        if rank == 0:
            prof.export_chrome_trace(args.trace)
            overlap = overlap_from_trace(args.trace) if device.type == "cuda" else None
            # one c10d::allreduce_ op per bucket per step (the backend adds its own event inside)
            calls = [e for e in prof.events() if e.name == "c10d::allreduce_"]
            overlap = dict(overlap or {}, allreduce_calls_per_step=len(calls) / 3)

    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        eff = throughput / (world * single) if single else None
        print(f"DDP, {dist.get_backend()}, {world} ranks, {du.gpu_name(device)}: MLP {args.d_in}-"
              f"{args.width}x{args.depth}-{args.classes}, {n_params / 1e6:.1f} M parameters "
              f"({n_params * 4 / 2**20:.0f} MB of gradients), {args.batch} samples per rank per step")
        print(f"gradient vs one process on the global batch: rel error {grad_err:.1e}; "
              f"replicas identical after training: {replicas_equal}")
        print(f"bucket_cap_mb={args.bucket_cap_mb:g}: DDP's first buckets (MB) "
              f"{[round(b / 2**20, 1) for b in bucket_sizes]} (rebuilt after step 1 in backward order)")
        print(f"loss {loss0:.3f} -> {loss:.3f}; {throughput:,.0f} samples/s on {world}"
              + (f", {single:,.0f} on 1 alone: scaling efficiency {eff:.0%}" if single else ""))
        if overlap:
            print(f"profiler: {overlap}")
        du.write_json(args.json, dict(world=world, backend=dist.get_backend(), gpu=du.gpu_name(device),
                                      params=n_params, batch_per_rank=args.batch, steps=args.steps,
                                      bucket_cap_mb=args.bucket_cap_mb, bucket_bytes=bucket_sizes,
                                      grad_rel_error=grad_err, replicas_equal=replicas_equal,
                                      loss_first=loss0, loss_last=loss, samples_per_s=throughput,
                                      single_samples_per_s=single, scaling_efficiency=eff,
                                      trace=args.trace, overlap=overlap))
    ok = grad_err < 1e-4 and replicas_equal
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(f"rank {rank}: DDP check FAILED (gradient error {grad_err:.1e}, "
                         f"replicas equal {replicas_equal})")


if __name__ == "__main__":
    main()
