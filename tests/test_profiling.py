"""cudl.profiling without a GPU: GPU time per category and the timeline of a stored trace."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

from cudl.profiling import gpu_time_by, timeline

matplotlib.use("Agg")
EVENTS = json.loads((Path(__file__).parent / "data" / "torch_trace_sample.json").read_text())["traceEvents"]


def kind(name: str) -> str:
    return "GEMM" if "nvjet" in name or "gemm" in name else "elementwise" if "elementwise" in name else "other"


def test_gpu_time_by_category():
    t = gpu_time_by(EVENTS, kind)
    assert list(t) == ["GEMM", "elementwise", "other"]  # largest first
    total = sum(e["dur"] for e in EVENTS if e["cat"] == "kernel")
    assert abs(sum(t.values()) - total) < 1e-6 and t["GEMM"] > 0.5 * total


def test_timeline_draws_every_kernel():
    ax = timeline(EVENTS, categorize=kind, title="sample")
    kernels = sum(1 for e in EVENTS if e["cat"] == "kernel")
    bars = sum(len(c.get_paths()) for c in ax.collections)
    assert bars >= kernels and ax.get_xlabel().endswith("(ms)")
    assert len(ax.get_legend().get_texts()) == 3


def test_timeline_without_cpu_events_draws_no_empty_cpu_lane():
    kernels_only = [e for e in EVENTS if e["cat"] != "cpu_op"]
    labels = [t.get_text() for t in timeline(kernels_only, categorize=kind).get_yticklabels()]
    assert labels == ["GPU kernels"]
    labels = [t.get_text() for t in timeline(EVENTS, categorize=kind).get_yticklabels()]
    assert labels == ["GPU kernels", "CPU operators"]


def test_host_ms_times_the_calls():
    import time

    from cudl.profiling import host_ms

    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.002)

    ms = host_ms(fn, runs=5, calls=2)
    assert len(calls) == 1 + 5 * 2  # one untimed first call, then runs x calls
    assert 1.9 < ms < 50  # each call sleeps 2 ms


def test_kernel_name_strips_signature_and_return_type():
    from cudl.profiling import kernel_name

    assert kernel_name("void bias_gelu_backward<float>(float const*, float*, int)") == "bias_gelu_backward"
    assert kernel_name("matmul_3_smem_tiles") == "matmul_3_smem_tiles"  # extern "C": not mangled
    assert kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                       "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
                       ) == "at::native::vectorized_elementwise_kernel"
    assert kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)"
                       ) == "at::native::(anonymous namespace)::cunn_SoftMaxForward"
    assert kernel_name("void") == "void"  # nothing left: the name as it was
    names = gpu_time_by(EVENTS)  # the default category is the kernel's name
    assert not any(n.startswith("void ") or "(" in n.replace("(anonymous namespace)", "") for n in names)
    assert abs(sum(names.values()) - sum(gpu_time_by(EVENTS, kind).values())) < 1e-6


def _fake_torch(monkeypatch, log: list[str], cuda: bool):
    """A stand-in for `torch` whose profiler 'records' the stored sample trace (events shuffled) and
    logs when it starts, stops and synchronizes: the CUDA path of kernels_launched without a GPU."""
    import random
    import sys
    import types

    events = json.loads((Path(__file__).parent / "data" / "torch_trace_sample.json").read_text())["traceEvents"]
    random.Random(3).shuffle(events)

    class Profile:
        def __init__(self, activities, acc_events=False):
            log.append(f"profile {sorted(a for a in activities)} acc_events={acc_events}")

        def __enter__(self):
            log.append("start")
            return self

        def __exit__(self, *exc):
            log.append("stop")

        def export_chrome_trace(self, path):
            Path(path).write_text(json.dumps({"traceEvents": events}))

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda, synchronize=lambda: log.append("sync"))
    profiler = types.ModuleType("torch.profiler")
    profiler.profile = Profile
    profiler.ProfilerActivity = types.SimpleNamespace(CPU="CPU", CUDA="CUDA")
    torch.profiler = profiler
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.profiler", profiler)
    return events


def test_kernels_launched_lists_the_kernels_in_launch_order(monkeypatch):
    from cudl.profiling import kernels_launched

    log: list[str] = []
    events = _fake_torch(monkeypatch, log, cuda=True)
    names = kernels_launched(lambda: log.append("fn"))
    # fn once, inside the profile, and the GPU waited for before the profile ends
    assert log == ["profile ['CPU', 'CUDA'] acc_events=True", "start", "fn", "sync", "stop"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    assert names == [e["name"] for e in kernels]  # no memsets, no CPU operators, in launch order
    assert names[0].startswith("nvjet_sm90") and len(names) == 11


def test_kernels_launched_without_cuda_profiles_the_cpu_only(monkeypatch):
    from cudl.profiling import kernels_launched

    log: list[str] = []
    _fake_torch(monkeypatch, log, cuda=False)
    kernels_launched(lambda: log.append("fn"))
    assert log == ["profile ['CPU'] acc_events=True", "start", "fn", "stop"]  # no CUDA, no sync


def test_kernels_launched_with_torch_on_the_cpu():
    """The real profiler: on a CPU-only machine fn runs once, no warning, and no kernel is listed (its
    CPU operators are not kernels). With CUDA, a matmul launches at least one kernel."""
    torch = pytest.importorskip("torch")
    import warnings

    from cudl.profiling import kernels_launched

    calls = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.ones(64, 64, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        names = kernels_launched(lambda: calls.append(a @ a))
    assert len(calls) == 1 and float(calls[0][0, 0]) == 64.0
    assert (len(names) >= 1) if device == "cuda" else names == []
    assert not any(n.startswith("aten::") for n in names)
