"""One GPU run that tries what chapter 08 needs: cudl.ncu, torch.profiler, custom_op + torch.compile,
load_inline. Usage: python tests/gpu/probe_08_profiling.py OUTDIR (prints a short table last)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

import cudl

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/probe08")
OUT.mkdir(parents=True, exist_ok=True)
summary: dict[str, object] = {}


def step(name):
    def deco(fn):
        t0 = time.perf_counter()
        print(f"\n===== {name}", flush=True)
        try:
            fn()
            summary[name] = f"ok {time.perf_counter() - t0:.1f}s"
        except Exception as exc:  # keep going: learn as much as possible from one run
            traceback.print_exc()
            summary[name] = f"FAIL {type(exc).__name__}: {str(exc)[:200]}"
        print(f"===== {name}: {summary[name]}", flush=True)
        return fn
    return deco


cudl.setup()


@step("ncu")
def _ncu():
    real_run = subprocess.run
    captured = {}

    def spy(cmd, **kw):
        p = real_run(cmd, **kw)
        captured["out"], captured["err"] = p.stdout, p.stderr
        return p

    subprocess.run = spy
    try:
        r = cudl.ncu("""
n = 2**24
x, y, out = cudl.randn(n), cudl.randn(n), cudl.poisoned(n)
k = cudl.load("01-first-kernel/vector_add.cu", "vector_add")
for _ in range(3):
    k(((n + 255) // 256,), (256,), (x, y, out, n))
""", kernel="vector_add", metrics=["sectors_per_request", "bank_conflicts_ld", "theoretical_occupancy",
                                    "registers", "l2_hit_rate"], launch_skip=1)
    finally:
        subprocess.run = real_run
    (OUT / "ncu_raw.csv").write_text(captured.get("out", ""))
    print(captured.get("err", "")[-3000:])
    print(r)
    if r is not None:
        print(r._repr_markdown_())


import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

M, D, H = 8192, 1024, 4096
dt = torch.bfloat16
dev = "cuda"


class MLP(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc1 = torch.nn.Linear(D, H, bias=False, device=dev, dtype=dt)
        self.b1 = torch.nn.Parameter(torch.randn(H, device=dev, dtype=dt) * 0.1)
        self.fc2 = torch.nn.Linear(H, D, device=dev, dtype=dt)
        self.act = act

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x), self.b1))


def unfused(h, b):
    return F.gelu(h + b)


x = torch.randn(M, D, device=dev, dtype=dt, requires_grad=True)
g = torch.randn(M, D, device=dev, dtype=dt)
base = MLP(unfused)


def train_step(model):
    def fn():
        model.zero_grad(set_to_none=True)
        x.grad = None
        model(x).backward(g)
    return fn


@step("profiler")
def _prof():
    from torch.profiler import ProfilerActivity, profile

    fn = train_step(base)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        fn()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12))
    ka = prof.key_averages(group_by_input_shape=True)
    for e in ka:
        dtime = getattr(e, "self_device_time_total", None)
        if dtime is None:
            dtime = e.self_cuda_time_total
        if dtime > 0:
            print(f"{e.key:30s} {str(e.input_shapes)[:60]:60s} {dtime:10.1f} us  n={e.count}")
    prof.export_chrome_trace(str(OUT / "trace.json"))
    tr = json.loads((OUT / "trace.json").read_text())
    ev = [e for e in tr["traceEvents"] if e.get("cat") in ("kernel", "cpu_op", "gpu_memcpy", "gpu_memset")]
    print("trace events by cat:", {c: sum(1 for e in ev if e["cat"] == c) for c in
                                    ("kernel", "cpu_op", "gpu_memcpy", "gpu_memset")})
    for e in [e for e in ev if e["cat"] == "kernel"][:30]:
        print(f"  kernel ts={e['ts']:.1f} dur={e['dur']:.1f} {e['name'][:90]}")
    small = {"traceEvents": [{k: e.get(k) for k in ("cat", "name", "ts", "dur", "tid", "pid")} for e in ev]}
    (OUT / "trace.json").write_text(json.dumps(small))
    t = cudl.bench(fn, name="train step, unfused")
    print(t)


import cupy  # noqa: E402

FWD = cudl.load("03-elementwise/bias_gelu.cu", "bias_gelu_forward<bfloat16>")
BWD = cudl.load("08-profiling/bias_gelu_backward.cu", "bias_gelu_backward<bf16>")
FWD32 = cudl.load("03-elementwise/bias_gelu.cu", "bias_gelu_forward<float>")
BWD32 = cudl.load("08-profiling/bias_gelu_backward.cu", "bias_gelu_backward<float>")


def as_cupy(t):
    if t.dtype == torch.bfloat16:
        try:
            t = t.view(torch.uint16)
        except Exception:
            t = t.view(torch.int16)
    return cupy.from_dlpack(t)


def kernels_for(t):
    return (FWD, BWD) if t.dtype == torch.bfloat16 else (FWD32, BWD32)


@torch.library.custom_op("cudl::bias_gelu", mutates_args=())
def bias_gelu(h: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(h)
    rows, cols = h.shape
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        kernels_for(h)[0]((min(rows, 132 * 8),), (256,), (as_cupy(h), as_cupy(b), as_cupy(y), rows, cols))
    return y


@bias_gelu.register_fake
def _(h, b):
    return torch.empty_like(h)


@torch.library.custom_op("cudl::bias_gelu_backward", mutates_args=())
def bias_gelu_bwd(dy: torch.Tensor, h: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dh = torch.empty_like(h)
    rows, cols = h.shape
    db = torch.zeros(cols, device=h.device, dtype=torch.float32)
    rpb = 32
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        kernels_for(h)[1](((cols + 255) // 256, (rows + rpb - 1) // rpb), (256,),
                          (as_cupy(dy.contiguous()), as_cupy(h), as_cupy(b), as_cupy(dh), as_cupy(db),
                           rows, cols, rpb))
    return dh, db.to(b.dtype)


@bias_gelu_bwd.register_fake
def _(dy, h, b):
    return torch.empty_like(h), torch.empty_like(b)


def setup_ctx(ctx, inputs, output):
    h, b = inputs
    ctx.save_for_backward(h, b)


def backward(ctx, dy):
    h, b = ctx.saved_tensors
    return bias_gelu_bwd(dy, h, b)


bias_gelu.register_autograd(backward, setup_context=setup_ctx)


@step("custom_op")
def _custom():
    print("as_cupy bf16 dtype:", as_cupy(torch.zeros(4, device=dev, dtype=dt)).dtype)
    h = torch.randn(333, 1000, device=dev, dtype=torch.float32, requires_grad=True)
    b = torch.randn(1000, device=dev, dtype=torch.float32, requires_grad=True)
    dy = torch.randn(333, 1000, device=dev)
    y = bias_gelu(h, b)
    y.backward(dy)
    h64, b64 = h.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    y64 = F.gelu(h64 + b64)
    y64.backward(dy.double())
    for name, a, r in [("y", y, y64), ("dh", h.grad, h64.grad), ("db", b.grad, b64.grad)]:
        err = ((a.double() - r).norm() / r.norm()).item()
        print(f"{name}: rel err {err:.2e}")
    torch.library.opcheck(bias_gelu, (h.detach(), b.detach()))
    print("opcheck ok")
    fused = MLP(bias_gelu)
    fused.load_state_dict(base.state_dict())
    out_b, out_f = base(x), fused(x)
    print("model rel err", ((out_f.float() - out_b.float()).norm() / out_b.float().norm()).item())
    t_base = cudl.bench(train_step(base), name="unfused")
    t_fused = cudl.bench(train_step(fused), name="custom op")
    print(t_base, t_fused, "speedup", t_base.ms / t_fused.ms)
    # pieces
    h = torch.randn(M, H, device=dev, dtype=dt)
    b = torch.randn(H, device=dev, dtype=dt)
    dyb = torch.randn(M, H, device=dev, dtype=dt)
    n = M * H * 2
    pieces = [
        cudl.bench(lambda: h + b, name="add", bytes=2 * n),
        cudl.bench(lambda: F.gelu(h), name="gelu", bytes=2 * n),
        cudl.bench(lambda: torch.ops.aten.gelu_backward(dyb, h), name="gelu_backward", bytes=3 * n),
        cudl.bench(lambda: dyb.sum(0), name="sum(0)", bytes=n),
        cudl.bench(lambda: bias_gelu(h, b), name="fused fwd", bytes=2 * n),
        cudl.bench(lambda: bias_gelu_bwd(dyb, h, b), name="fused bwd", bytes=3 * n),
        cudl.bench(lambda: h.clone(), name="copy", bytes=2 * n),
    ]
    for p in pieces:
        print(p)
    compiled = torch.compile(fused)
    t0 = time.perf_counter()
    oc = compiled(x)
    oc.backward(g)
    torch.cuda.synchronize()
    print("compile+first step", time.perf_counter() - t0, "s; rel err",
          ((oc.float() - out_b.float()).norm() / out_b.float().norm()).item())
    cb = torch.compile(base)
    t_cf = cudl.bench(train_step(compiled), name="compiled custom op")
    t_cb = cudl.bench(train_step(cb), name="compiled unfused")
    print(t_cf, t_cb)


@step("load_inline")
def _inline():
    import os

    from torch.utils.cpp_extension import load_inline

    from cudl.compile import resolve

    kernel_src, _ = resolve("03-elementwise/bias_gelu.cu")
    launcher = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/cuda/CUDAContext.h>

at::Tensor bias_gelu(const at::Tensor& h, const at::Tensor& b) {
    TORCH_CHECK(h.is_cuda() && h.dim() == 2 && h.is_contiguous(), "h: a contiguous CUDA matrix");
    TORCH_CHECK(b.dim() == 1 && b.size(0) == h.size(1) && b.dtype() == h.dtype(), "b: one per column");
    auto y = at::empty_like(h);
    const int rows = h.size(0), cols = h.size(1);
    const int blocks = rows < 1056 ? rows : 1056;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (h.scalar_type() == at::kBFloat16) {
        bias_gelu_forward<bfloat16><<<blocks, 256, 0, stream>>>(
            static_cast<const bfloat16*>(h.data_ptr()), static_cast<const bfloat16*>(b.data_ptr()),
            static_cast<bfloat16*>(y.data_ptr()), rows, cols);
    } else {
        TORCH_CHECK(h.scalar_type() == at::kFloat, "float32 or bfloat16");
        bias_gelu_forward<float><<<blocks, 256, 0, stream>>>(
            h.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    }
    return y;
}
"""
    t0 = time.perf_counter()
    decl = "at::Tensor bias_gelu(const at::Tensor& h, const at::Tensor& b);"
    ext = load_inline(name="cudl_bias_gelu", cpp_sources=decl,
                      cuda_sources=kernel_src + launcher, functions=["bias_gelu"], verbose=False,
                      extra_cuda_cflags=["-O3"], build_directory=None)
    print("load_inline build", time.perf_counter() - t0, "s", os.environ.get("TORCH_CUDA_ARCH_LIST"))
    h = torch.randn(M, H, device=dev, dtype=dt)
    b = torch.randn(H, device=dev, dtype=dt)
    y1, y2 = ext.bias_gelu(h, b), bias_gelu(h, b)
    print("ext vs custom op equal:", torch.equal(y1, y2))
    print(cudl.bench(lambda: ext.bias_gelu(h, b), name="load_inline fwd", bytes=2 * M * H * 2))


@step("ncu_fused_bwd")
def _ncu2():
    r = cudl.ncu("""
rows, cols, rpb = 8192, 4096, 32
dy, x = cudl.randn((rows, cols)), cudl.randn((rows, cols))
b, dx, db = cudl.randn(cols), cudl.poisoned((rows, cols)), xp.zeros(cols, np.float32)
k = cudl.load("08-profiling/bias_gelu_backward.cu", "bias_gelu_backward<float>")
k(((cols + 255) // 256, (rows + rpb - 1) // rpb), (256,), (dy, x, b, dx, db, rows, cols, rpb))
""", kernel="bias_gelu_backward", metrics=["sectors_per_request"])
    print(r)


print("\n===== summary")
for k, v in summary.items():
    print(f"{k:16s} {v}")
