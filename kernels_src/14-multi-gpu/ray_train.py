"""The training of ddp_train.py through Ray Train: TorchTrainer starts the workers and their process group.

    python3 kernels_src/14-multi-gpu/ray_train.py --workers N --json ray.json    # N GPU workers (NCCL)
    python3 kernels_src/14-multi-gpu/ray_train.py --workers 2 --cpu --width 256   # CPU workers (gloo)

No torchrun here: Ray starts one worker process per GPU (ScalingConfig(num_workers, use_gpu)),
sets RANK/WORLD_SIZE/MASTER_ADDR for them, creates the torch.distributed process group (NCCL with
GPUs, gloo on CPU workers), and runs train_loop on every worker; prepare_model moves the model to
the worker's device and wraps it in DistributedDataParallel. The same script then runs on a Ray
cluster of many machines (`ray start --head` on one, `ray start --address=...` on the others):
only num_workers changes. Ray is an optional dependency: `pip install "ray[train]"`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
# NVLink multicast off, as in every NCCL script of the chapter; Ray passes these to its workers.
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
os.environ.update(NCCL_ENV)


def train_loop(config: dict) -> dict:
    """Runs in every Ray worker, inside a process group that Ray has already created."""
    sys.path.insert(0, config["here"])
    import ddp_train as dt
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    model_args = (config["d_in"], config["width"], config["depth"], config["classes"])
    x, y = dt.make_data(max(4096, 4 * world * config["batch"]), config["d_in"], config["classes"], device)
    warm, steps = 3, config["steps"]
    batches = dt.shard_batches(x, y, rank, world, config["batch"], steps + warm)
    model = ray.train.torch.prepare_model(dt.make_model(*model_args))  # to device, wrapped in DDP
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    _, loss0 = dt.train_steps(model, opt, batches[:warm], device)
    t, loss = dt.train_steps(model, opt, batches[warm:], device)
    t_max = torch.tensor([t], dtype=torch.float64, device=device)
    dist.all_reduce(t_max, op=dist.ReduceOp.MAX)
    metrics = dict(world=world, backend=dist.get_backend(), device=str(device), loss_first=loss0,
                   loss_last=loss, samples_per_s=steps * config["batch"] * world / float(t_max.item()))
    # Ray Train 2 keeps only metrics that come with a checkpoint: rank 0 attaches a tiny one
    with tempfile.TemporaryDirectory() as d:
        ckpt = None
        if rank == 0:
            torch.save(model.module.state_dict() if world > 1 else model.state_dict(), Path(d) / "model.pt")
            ckpt = ray.train.Checkpoint.from_directory(d)
        ray.train.report(metrics, checkpoint=ckpt)
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cpu", action="store_true", help="CPU workers with gloo even where GPUs exist")
    ap.add_argument("--d-in", type=int, default=1024)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import ray
    import torch
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    use_gpu = torch.cuda.is_available() and not args.cpu
    ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": NCCL_ENV})
    config = dict(here=HERE, d_in=args.d_in, width=args.width, depth=args.depth, classes=args.classes,
                  batch=args.batch, steps=args.steps)
    trainer = TorchTrainer(train_loop, train_loop_config=config,
                           scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=use_gpu,
                                                        resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(storage_path=tempfile.mkdtemp(prefix="ray_train_")))
    result = trainer.fit()
    m = getattr(result, "return_value", None) or result.metrics  # rank 0's return value (Ray >= 2.5x)
    print(f"Ray Train TorchTrainer, {m['world']} workers ({m['backend']}, {m['device']}): "
          f"loss {m['loss_first']:.3f} -> {m['loss_last']:.3f}, {m['samples_per_s']:,.0f} samples/s")
    sys.path.insert(0, HERE)
    import dist_utils as du

    du.write_json(args.json, dict(m, ray=ray.__version__, use_gpu=use_gpu))
    ray.shutdown()


if __name__ == "__main__":
    main()
