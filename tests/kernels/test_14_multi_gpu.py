"""Chapter 14 (kernels_src/14-multi-gpu/): the ring's reduction kernel against NumPy, and the multi-process
scripts with gloo on CPU processes (no GPU): the hand-written ring all-reduce (2 and 3 ranks, its adds done
by ring_reduce.cu on the CPU emulator), DDP training (gradient = one process's gradient of the global batch,
several buckets with a small bucket_cap_mb), the collectives benchmark, and Ray Train where Ray is installed.

The kernel test runs everywhere; the others need PyTorch (`pip install torch`), and skip without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cudl
from cudl.compile import KERNELS_DIR

HERE = KERNELS_DIR / "14-multi-gpu"
U = 2.0**-24  # float32 unit roundoff


@pytest.mark.parametrize("n", [1, 3, 4, 5, 64, 1000, 4099])
@pytest.mark.parametrize("offset", [0, 1])  # offset 1: pointers 4 bytes past alignment, the scalar path
@pytest.mark.parametrize("grid", [1, 3])
def test_ring_reduce_add(n, offset, grid):
    k = cudl.load("14-multi-gpu/ring_reduce.cu", "ring_reduce_add")
    xp, pad = cudl.xp, 7
    acc_all = cudl.randn(offset + n + pad)
    acc_all[offset + n:] = np.nan  # past the end: must stay untouched
    recv_all = cudl.randn(offset + n + pad)
    acc, recv = acc_all[offset:offset + n], recv_all[offset:offset + n]
    ref = cudl.to_numpy(acc).astype(np.float64) + cudl.to_numpy(recv)
    k((grid,), (64,), (acc, recv, n))
    c = cudl.compare(acc, ref, rtol=2 * U)
    assert c.ok, str(c)
    assert bool(xp.isnan(acc_all[offset + n:]).all()), "wrote past n"


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n,offset", [(1, 0), (3, 0), (1000, 0), (4099, 0), (1001, 1)])
def test_oneshot_sum(world, n, offset):
    """The one-shot all-reduce's kernel with `world` virtual ranks: float64 sum, rank order, no write past n.

    offset 1 puts every pointer 4 bytes past 16-byte alignment: the kernel must take its scalar path.
    """
    k = cudl.load("14-multi-gpu/oneshot_reduce.cu", "oneshot_sum")
    xp, pad = cudl.xp, 5
    ins = [cudl.randn(offset + n)[offset:] for _ in range(world)]
    out_all = xp.full(offset + n + pad, np.nan, dtype=np.float32)
    out = out_all[offset:offset + n]
    ptrs = ins + [ins[0]] * (8 - world)  # unused slots repeat in0, as oneshot_allreduce.py passes them
    k((3,), (64,), (*ptrs, np.int32(world), out, np.int64(n)))
    parts = np.stack([cudl.to_numpy(a).astype(np.float64) for a in ins])
    # each output is a float32 sum of `world` terms in rank order: error <= (world - 1) u sum |terms|
    bound = (world - 1) * U * np.abs(parts).sum(0) + 1e-30
    err = np.abs(cudl.to_numpy(out).astype(np.float64) - parts.sum(0))
    assert np.all(err <= bound), f"world={world} n={n}: max error {err.max():.2e}"
    in_order = parts[0].astype(np.float32)
    for r in range(1, world):  # the same order on every GPU: bitwise what a rank-order float32 sum gives
        in_order = (in_order + parts[r].astype(np.float32)).astype(np.float32)
    assert np.array_equal(cudl.to_numpy(out), in_order), "not summed in rank order"
    assert bool(xp.isnan(out_all[offset + n:]).all()), "wrote past n"


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1), (4, 2), (8, 0)])
@pytest.mark.parametrize("n,offset", [(1, 0), (5, 0), (1000, 0), (4099, 0), (1001, 1)])
@pytest.mark.parametrize("calls_before", [6, 2**32 - 2])  # the call number wraps past 2^32 in the second
@pytest.mark.parametrize("push", [0, 1])
def test_oneshot_fused(world, rank, n, offset, calls_before, push):
    """oneshot_fused.cu as GPU `rank` of `world` virtual GPUs, its peers' parts and flags already there.

    The peers have written their inputs where this call reads them (pull: slot r of their own buffers;
    push: slot r of this GPU's buffer, in the half this call uses) and raised their flags (the kernel
    would wait for them otherwise); the kernel must write its own input where its peers read it, raise
    its flag in every peer's flag buffer, sum in rank order, count the call, and touch nothing else.
    """
    k = cudl.load("14-multi-gpu/oneshot_fused.cu", "oneshot_fused")
    xp, grid, block = cudl.xp, 3, 64
    cap = -(-(offset + n) // 64) * 64
    e = (calls_before + 1) % 2**32  # this call's number
    half = (e & 1) * world * cap

    def at(r):  # the elements of slot r in this call's half
        return np.arange(half + r * cap, half + r * cap + n)

    bufs = [xp.full(2 * world * cap, np.nan, dtype=np.float32) for _ in range(world)]
    flags = [xp.zeros(grid * 8, dtype=np.uint32) for _ in range(world)]
    ins = [cudl.randn(offset + n)[offset:] for _ in range(world)]
    for r in range(world):
        if r != rank:  # what peer r did before its own barrier
            bufs[rank if push else r][at(r)] = ins[r]
            flags[rank].reshape(grid, 8)[:, r] = e
    epoch = xp.full(grid, calls_before % 2**32, dtype=np.uint32)
    ptrs = np.array([cudl.address(b) for b in bufs], dtype=np.uint64)
    fptrs = np.array([cudl.address(f) for f in flags], dtype=np.uint64)
    out_all = xp.full(offset + n + 5, np.nan, dtype=np.float32)
    out = out_all[offset:offset + n]
    x = ins[rank].copy() if offset == 0 else ins[rank]  # offset 1: the scalar path
    k((grid,), (block,), (x, out, np.int64(n), xp.asarray(ptrs), xp.asarray(fptrs), epoch,
                          np.int32(world), np.int32(rank), np.int64(cap), np.int32(push)))
    parts = np.stack([cudl.to_numpy(a).astype(np.float32) for a in ins])
    in_order = parts[0]
    for r in range(1, world):  # the same order on every GPU: bitwise a rank-order float32 sum
        in_order = (in_order + parts[r]).astype(np.float32)
    assert np.array_equal(cudl.to_numpy(out), in_order), "not the rank-order sum of every GPU's input"
    assert bool(xp.isnan(out_all[offset + n:]).all()), "wrote past n"
    for g in range(world):  # every GPU's buffer: exactly the slots filled so far, NaN elsewhere
        got = cudl.to_numpy(bufs[g])
        filled = [r for r in range(world) if (g == rank if push else r == g) or (push and r == rank)]
        for r in filled:
            assert np.array_equal(got[at(r)], parts[r]), f"slot {r} of GPU {g}'s buffer"
        rest = np.delete(got, np.concatenate([at(r) for r in filled])) if filled else got
        assert np.isnan(rest).all(), f"GPU {g}'s buffer written outside this call's slots"
    for r in range(world):
        f = cudl.to_numpy(flags[r]).reshape(grid, 8)
        want = np.zeros((grid, 8), dtype=np.uint32)
        if r != rank:
            want[:, rank] = e  # my flag, raised in peer r's buffer for every block
        else:
            want[:, [p for p in range(world) if p != rank]] = e
        assert np.array_equal(f, want), f"flags of GPU {r}: {f.tolist()}"
    assert (cudl.to_numpy(epoch) == e).all(), "the call was not counted"


def test_oneshot_crossover():
    pytest.importorskip("torch")
    sys.path.insert(0, str(HERE))
    from oneshot_allreduce import crossover

    def rows(pairs):
        return [dict(bytes=b, oneshot_us=o, nccl_us=c) for b, o, c in pairs]

    assert crossover(rows([(1, 10, 20), (2, 12, 20), (4, 30, 25), (8, 60, 40)]), "oneshot", "nccl") == 4
    assert crossover(rows([(1, 10, 20), (2, 12, 20)]), "oneshot", "nccl") is None
    # a win for NCCL at one small size followed by losses does not count as the crossover
    assert crossover(rows([(1, 30, 20), (2, 12, 20), (4, 30, 25)]), "oneshot", "nccl") == 4
    assert crossover(rows([(4, 30, 25), (1, 30, 20)]), "oneshot", "nccl") == 1  # any order in, sorted


def run_script(args: list[str], nproc: int | None = 2, timeout: int = 120) -> str:
    """Run a chapter-14 script (under torchrun with `nproc` CPU processes); return its output."""
    pytest.importorskip("torch")
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDL_BACKEND="emulator", PYTHONWARNINGS="ignore")
    launch = [sys.executable] + ([] if nproc is None else
                                 ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"])
    proc = subprocess.run([*launch, *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_ring_plan_covers_every_element():
    pytest.importorskip("torch")
    sys.path.insert(0, str(HERE))
    from ring_allreduce import ALIGN, plan

    rng = np.random.default_rng()
    for _ in range(200):
        count, world, slices = int(rng.integers(1, 100_000)), int(rng.integers(1, 9)), int(rng.integers(1, 6))
        flat = [r for chunk in plan(count, world, slices) for r in chunk]
        assert len(flat) == world * slices
        assert flat[0][0] == 0 and flat[-1][1] == count
        assert all(a[1] == b[0] for a, b in zip(flat, flat[1:])), "gaps or overlaps"
        assert all(a <= b for a, b in flat)
        assert all(a % ALIGN == 0 for a, b in flat if b > a and a != count), "slice starts off alignment"


@pytest.mark.parametrize("nproc,reduce", [(2, "kernel"), (3, "torch")])
def test_ring_allreduce_gloo(nproc, reduce, tmp_path):
    """Correct against gloo's all_reduce and float64 (the script raises otherwise), NaN-poisoned buffer."""
    out = run_script([str(HERE / "ring_allreduce.py"), "--backend", "gloo", "--reduce", reduce,
                      "--sizes-mb", "0.0625", "--iters", "2", "--json", str(tmp_path / "r.json")], nproc)
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["world"] == nproc and res["max_rel_error"] < 1e-6, out
    assert res["rows"] and res["rows"][0]["ring_us"] > 0


def test_ddp_train_gloo(tmp_path):
    """DDP's averaged gradient equals one process's gradient of the whole global batch; a small bucket cap
    gives several all-reduce calls per step (bucketing), and the replicas end identical."""
    run_script([str(HERE / "ddp_train.py"), "--backend", "gloo", "--d-in", "64", "--width", "256",
                "--depth", "3", "--batch", "32", "--steps", "4", "--bucket-cap-mb", "0.1",
                "--trace", str(tmp_path / "trace.json"), "--json", str(tmp_path / "d.json")])
    res = json.loads((tmp_path / "d.json").read_text())
    assert res["world"] == 2 and res["grad_rel_error"] < 1e-5 and res["replicas_equal"]
    assert res["overlap"]["allreduce_calls_per_step"] >= 2, res["overlap"]
    assert res["samples_per_s"] > 0 and res["scaling_efficiency"] > 0
    assert (tmp_path / "trace.json").stat().st_size > 0


def test_nccl_bench_gloo(tmp_path):
    run_script([str(HERE / "nccl_bench.py"), "--backend", "gloo", "--sizes-mb", "0.0625", "--iters", "2",
                "--json", str(tmp_path / "n.json")])
    res = json.loads((tmp_path / "n.json").read_text())
    assert all(e < 1e-6 for e in res["errors"].values()), res["errors"]
    for r in res["rows"]:
        factor = {"all_reduce": 1.0, "reduce_scatter": 0.5, "all_gather": 0.5}[r["op"]]  # n = 2
        assert r["busbw"] == pytest.approx(r["algbw"] * factor)
        assert r["algbw"] == pytest.approx(r["bytes"] / (r["us"] * 1e-6) / 1e9)


def test_busbw_factors():
    pytest.importorskip("torch")
    sys.path.insert(0, str(HERE))
    import dist_utils as du

    assert du.busbw("all_reduce", 10**9, 1.0, 4) == pytest.approx((1.0, 1.5))
    assert du.busbw("reduce_scatter", 10**9, 0.5, 8) == pytest.approx((2.0, 1.75))
    assert du.busbw("all_gather", 10**9, 1.0, 1) == pytest.approx((1.0, 0.0))


def test_ray_train_cpu_workers(tmp_path):
    """Ray Train's TorchTrainer with 2 CPU workers (gloo); skipped unless `pip install "ray[train]"`."""
    # Only look for Ray here: importing it in the test process (pandas, pyarrow) crashed pytest in a
    # garbage collection during `make test`; the script below imports it in its own process.
    if importlib.util.find_spec("ray") is None:
        pytest.skip('Ray is not installed (pip install "ray[train]"; `make test` does)')
    out = run_script([str(HERE / "ray_train.py"), "--workers", "2", "--cpu", "--d-in", "64", "--width", "128",
                      "--depth", "2", "--batch", "32", "--steps", "3", "--json", str(tmp_path / "ray.json")],
                     nproc=None, timeout=240)
    res = json.loads((tmp_path / "ray.json").read_text())
    assert res["world"] == 2 and res["backend"] == "gloo" and res["samples_per_s"] > 0, out
    assert Path(tmp_path / "ray.json").exists()


def test_overlap_from_trace(tmp_path):
    """The overlap measure of ddp_train.py on a hand-made trace: NCCL kernels against the union of compute."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(HERE))
    from ddp_train import overlap_from_trace

    def kernel(name, ts, dur):
        return {"cat": "kernel", "name": name, "ts": ts, "dur": dur}

    events = [kernel("gemm", 0, 10), kernel("gelu", 8, 4), kernel("ncclDevKernel_AllReduce", 5, 10),
              kernel("ncclDevKernel_AllReduce", 30, 10), {"cat": "cpu_op", "name": "x", "ts": 0, "dur": 99}]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    got = overlap_from_trace(str(tmp_path / "t.json"))
    # compute covers [0, 12]: the first NCCL kernel [5, 15] overlaps 7 us, the second none
    assert got["nccl_kernels"] == 2 and got["nccl_us"] == 20 and got["overlapped_us"] == 7
    assert got["overlap"] == pytest.approx(0.35)



def test_step_anatomy():
    """ddp_anatomy.step_anatomy on a hand-made trace of two steps: per step, a forward kernel, a backward
    GEMM alone (50 us), the same GEMM beside an all-reduce (100 us), a second all-reduce after the
    backward (40 us) and the optimizer; the all-reduces of 2 MB, 20 us alone by the NCCL rows given."""
    sys.path.insert(0, str(HERE))
    from ddp_anatomy import step_anatomy

    def kernel(name, ts, dur, **args):
        return {"cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": args}

    def mark(name, ts, dur):
        return {"cat": "gpu_user_annotation", "name": name, "ts": ts, "dur": dur}

    nccl_args = {"In msg nelems": 500_000, "dtype": "Float", "grid": [24, 1, 1]}
    events = []
    for t0 in (0, 300):
        events += [mark("DistributedDataParallel.forward", t0, 100), kernel("fwd_gemm", t0, 100),
                   kernel("bwd_gemm", t0 + 100, 50), kernel("bwd_gemm", t0 + 150, 100),
                   kernel("ncclDevKernel_AllReduce", t0 + 150, 100, **nccl_args),
                   kernel("ncclDevKernel_AllReduce", t0 + 250, 40, **nccl_args),
                   mark("Optimizer.step#SGD.step", t0 + 290, 10), kernel("sgd", t0 + 290, 10)]
    trace = {"traceEvents": events, "deviceProperties": [{"numSms": 132}]}
    nccl = {"rows": [{"op": "all_reduce", "bytes": 1e6, "us": 10.0}, {"op": "all_reduce", "bytes": 4e6, "us": 40.0},
                     {"op": "all_gather", "bytes": 2e6, "us": 1.0}]}
    ddp = {"world": 2, "batch_per_rank": 10, "samples_per_s": 50.0, "single_samples_per_s": 25.0}
    got = step_anatomy(ddp, {"samples_per_s": 40.0}, nccl, trace)
    assert got["step_1"] == pytest.approx(400) and got["step_n"] == pytest.approx(400)
    assert got["step_one"] == pytest.approx(500)
    assert got["calls"] == 2 and got["bucket_mb"] == pytest.approx(2.0)
    assert got["allreduce_alone"] == pytest.approx(0.040) and got["nccl"] == pytest.approx(0.140)
    assert got["backward_alone"] == pytest.approx(0.100) and got["backward"] == pytest.approx(0.150)
    assert got["slowdown"] == pytest.approx(2.0) and got["tail"] == pytest.approx(0.040)
    assert got["blocks"] == 24 and got["sms"] == 132
    with pytest.raises(ValueError, match="NCCL kernels"):
        step_anatomy(ddp, None, nccl, {"traceEvents": [e for e in events if "nccl" not in e["name"]]})

def _solution_notebook(tmp_path: Path) -> tuple[Path, Path]:
    """Chapter 14's solution notebook and the exercise notebook `make sync` generated from it."""
    root = HERE.parents[1]
    return root / "solutions" / "14-multi-gpu.ipynb", root / "exercises" / "14-multi-gpu.ipynb"


def test_exercises_graders_and_stubs(tmp_path):
    """Chapter 14's solution notebook grades its two kernels, the exercise holds stubs in their place, and the
    challenge is speed-graded on one of its cases. (That the solutions PASS is checked where all solutions
    are: nbval of solutions/*.ipynb and tests/test_graders.py; that the stubs fail, by tests/test_notebooks.py,
    which runs every exercise notebook.)"""
    from cudl.grade import REGISTRY, _load_all
    from cudl.grade.extract import graded_sources

    _load_all()  # the registry fills as grader modules are imported
    sol_path, ex_path = _solution_notebook(tmp_path)
    sols, stubs = graded_sources(sol_path), graded_sources(ex_path)
    assert [c.grader for c in sols] == ["ring_reduce_step", "ring_reduce_scatter_step"]
    assert [c.grader for c in stubs] == [c.grader for c in sols]
    for sol, stub in zip(sols, stubs):
        assert "BEGIN SOLUTION" not in stub.source and "TODO" in stub.source and stub.source != sol.source
    chal = REGISTRY["ring_reduce_scatter_step"]
    assert chal.speed and chal.speed["case"] in chal.cases


def test_exercise_hints_give_no_solution_line(tmp_path):
    """The first hint of each grader holds no code line of the solution (tests/test_exercises.py's rule)."""
    import re

    from cudl import nbtools
    from cudl.grade import REGISTRY, _load_all
    from cudl.grade.extract import graded_sources

    _load_all()  # alone (or first on an xdist worker), nothing else has imported the grader modules

    for cell in graded_sources(_solution_notebook(tmp_path)[0]):
        g = REGISTRY[cell.grader]
        assert len(g.hints) >= 3 and len(set(g.hints)) == len(g.hints)
        first = re.sub(r"\s+", "", g.hints[0])
        for code in nbtools.solution_lines(cell.source):
            assert code not in first, (cell.grader, code)


def test_cupy_stream_of_torch_stream(monkeypatch):
    """ring_allreduce.cupy_stream: Stream.from_external (CuPy 14) where it exists, else ExternalStream
    (CuPy 13), made on the right device, and one wrapper per stream (never re-made, never finalised early).
    Runs without PyTorch and CuPy: stand-ins for both."""
    import contextlib
    import types

    try:
        import torch  # noqa: F401
    except ImportError:  # what ring_allreduce.py and dist_utils.py touch at import time
        fake = types.ModuleType("torch")
        fake.Tensor, fake.distributed = object, types.ModuleType("torch.distributed")
        monkeypatch.setitem(sys.modules, "torch", fake)
        monkeypatch.setitem(sys.modules, "torch.distributed", fake.distributed)
    monkeypatch.syspath_prepend(str(HERE))
    spec = importlib.util.spec_from_file_location("ring_allreduce_under_test", HERE / "ring_allreduce.py")
    ra = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ra)
    monkeypatch.delitem(sys.modules, "dist_utils", raising=False)

    made, devices = [], []

    @contextlib.contextmanager
    def device(i):
        devices.append(i)
        yield

    class Stream14:
        @classmethod
        def from_external(cls, obj):
            made.append(("from_external", obj.__cuda_stream__(), devices[-1]))
            return object()

    class Stream13:
        pass

    def external(ptr, dev):
        made.append(("ExternalStream", ptr, dev))
        return object()

    ra._CUPY_STREAMS.clear()
    cupy14 = types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=Stream14, Device=device))
    s = ra.cupy_stream(cupy14, 1234, 3)
    assert ra.cupy_stream(cupy14, 1234, 3) is s
    assert made == [("from_external", (0, 1234), 3)]
    ra._CUPY_STREAMS.clear()
    cupy13 = types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=Stream13, Device=device,
                                                              ExternalStream=external))
    ra.cupy_stream(cupy13, 99, 1)
    assert made[-1] == ("ExternalStream", 99, 1)


def test_cupy_view_of_tensor_memory(monkeypatch):
    """ring_allreduce.cupy_view, the one CuPy view of the scripts: a tensor's own bytes (its type, or another
    of the same size), or a buffer shaped like it at a peer's address, kept alive by the tensor. A stand-in
    CuPy records what the view is made of (CPU tensors: device index None)."""
    torch = pytest.importorskip("torch")
    import types

    monkeypatch.syspath_prepend(str(HERE))
    import ring_allreduce as ra

    class Unowned:
        def __init__(self, ptr, size, owner, device):
            self.args = (ptr, size, owner, device)

    cuda = types.SimpleNamespace(UnownedMemory=Unowned, MemoryPointer=lambda mem, offset: (mem.args, offset))
    fake = types.SimpleNamespace(cuda=cuda, ndarray=lambda shape, dtype, ptr: (shape, dtype, ptr),
                                 float32="f4", int64="i8", int32="i4", uint64="u8")
    x = torch.zeros(10)[3:]  # a slice: the view starts at its first element, not the storage's
    assert ra.cupy_view(fake, x) == ((7,), "f4", ((x.data_ptr(), 28, x, None), 0))
    ptrs = torch.zeros(4, dtype=torch.int64)
    assert ra.cupy_view(fake, ptrs, fake.uint64) == ((4,), "u8", ((ptrs.data_ptr(), 32, ptrs, None), 0))
    buf = torch.zeros(6)
    assert ra.cupy_view(fake, buf, ptr=4096) == ((6,), "f4", ((4096, 24, buf, None), 0))
