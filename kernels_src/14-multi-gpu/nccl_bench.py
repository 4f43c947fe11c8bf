"""NCCL's collectives through torch.distributed, timed over sizes, with the bandwidths of nccl-tests.

    torchrun --standalone --nproc-per-node=N kernels_src/14-multi-gpu/nccl_bench.py --json nccl.json
    torchrun --standalone --nproc-per-node=2 kernels_src/14-multi-gpu/nccl_bench.py --backend gloo \
        --sizes-mb 0.25 1                                    # CPU processes, to try the script anywhere

One process per GPU. For each size S (bytes of the whole array) it times all_reduce (in place),
reduce_scatter_tensor (S in, S/n out) and all_gather_into_tensor (S/n in, S out) and prints
algbw = S / t and busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for the other two, exactly as
nccl-tests' doc/PERFORMANCE.md defines them: busbw is what each GPU's link carried per second, so
it can be held against the link's bandwidth whatever n is. Each result is also checked against the
sum (or concatenation) computed in float64 from every rank's inputs, drawn from a seed per rank.
"""

from __future__ import annotations

import argparse

import dist_utils as du
import torch
import torch.distributed as dist

OPS = ("all_reduce", "reduce_scatter", "all_gather")


def inputs(rank: int, count: int, device: torch.device, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(count, generator=g).to(device)


def check(op: str, rank: int, world: int, count: int, device: torch.device) -> float:
    """Relative error of one collective against a float64 reference built from every rank's seed."""
    xs = [inputs(r, count, torch.device("cpu"), seed=7) for r in range(world)]
    total = torch.stack([x.double() for x in xs]).sum(0)
    x = xs[rank].to(device)
    if op == "all_reduce":
        dist.all_reduce(x)
        return du.rel_error(x.cpu(), total)
    if op == "reduce_scatter":
        out = torch.full((count // world,), float("nan"), device=device)
        dist.reduce_scatter_tensor(out, x)
        return du.rel_error(out.cpu(), total.view(world, -1)[rank])
    out = torch.full((count * world,), float("nan"), device=device)
    dist.all_gather_into_tensor(out, x)
    return du.rel_error(out.cpu(), torch.cat([x.double() for x in xs]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None)
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64, 256, 1024])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None, help="write the results here (rank 0)")
    args = ap.parse_args()
    rank, world, device = du.start(args.backend)
    backend = dist.get_backend()

    errors = {op: check(op, rank, world, 4099 * world, device) for op in OPS}
    rows = []
    for mb in args.sizes_mb:
        count = max(world, int(mb * 2**20) // 4 // world * world)  # float32, a multiple of n
        nbytes = count * 4
        x = inputs(rank, count, device, seed=1)
        part = torch.empty(count // world, device=device)
        full = torch.empty(count, device=device)
        funcs = {"all_reduce": lambda: dist.all_reduce(x),
                 "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, x),
                 "all_gather": lambda: dist.all_gather_into_tensor(full, part)}
        for op in OPS:
            t = du.time_op(funcs[op], device, args.iters)
            alg, bus = du.busbw(op, nbytes, t, world)
            rows.append(dict(op=op, bytes=nbytes, us=t * 1e6, algbw=alg, busbw=bus))

    if rank == 0:
        print(f"{backend}, {world} ranks, {du.gpu_name(device)}; busbw = algbw x 2(n-1)/n "
              f"(all-reduce), x (n-1)/n (reduce-scatter, all-gather)")
        print("check vs float64: " + ", ".join(f"{op} {e:.1e}" for op, e in errors.items()))
        print(f"{'op':<15}{'size':>10}{'time us':>11}{'algbw GB/s':>12}{'busbw GB/s':>12}")
        for r in rows:
            print(f"{r['op']:<15}{r['bytes'] / 2**20:>8.2f}MB{r['us']:>11.1f}{r['algbw']:>12.1f}"
                  f"{r['busbw']:>12.1f}")
        du.write_json(args.json, dict(world=world, backend=backend, gpu=du.gpu_name(device),
                                      errors=errors, rows=rows))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
