"""Probe (issue 23): why chapter 9's torch.compile(mode="reduce-overhead") step takes ~8x the time
of the same step captured whole with torch.cuda.graph. Times each variant of the MLP twin's step and
counts, with torch.profiler, the kernel launches and graph launches that one step issues.

Run on a GPU:  TORCH_LOGS=perf_hints,cudagraphs python3 tests/gpu/probe_ch09_compile.py
"""

import sys
import warnings

import torch

import cudl
from cudl.compile import KERNELS_DIR

sys.path.insert(0, str(KERNELS_DIR / "09-training"))
import training  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")

BATCH, STEPS, LR = 128, 400, 2e-3
data = training.load_digits()


def mlp():
    return [training.Dense(64, 256, "gelu"), training.Dense(256, 256, "gelu"), training.Dense(256, 10)]


def setup(graph=False, **adamw):
    twin = training.torch_twin(training.Model(mlp(), seed=0))
    opt = torch.optim.AdamW(twin.parameters(), lr=LR, weight_decay=1e-2, **adamw)
    loader = training.Loader(data["x_train"], data["y_train"], BATCH, STEPS, 0)
    return twin, opt, training.torch_step(twin, opt, loader, graph=graph)


def launches(fn, n=10):
    """(kernel launches, graph launches) per call of fn, from the profiler's CUDA runtime events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    k = g = 0
    for e in prof.events():
        if e.name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"):
            k += 1
        elif e.name in ("cudaGraphLaunch", "cuGraphLaunch"):
            g += 1
    return k / n, g / n


results = {}


def run(label, fn):
    try:
        t = cudl.bench(fn, name=label)
        k, g = launches(fn)
        results[label] = (t.ms * 1e3, k, g)
        print(f"{label:<55} {t.ms * 1e3:8.0f} us  kernels/step {k:6.1f}  graphs/step {g:4.1f}", flush=True)
    except Exception as exc:  # a variant that fails is a finding too
        print(f"{label:<55} FAILED: {type(exc).__name__}: {str(exc)[:400]}", flush=True)


twin, opt, step = setup(fused=True)
run("eager (fused AdamW)", step)
twin, opt, step = setup(graph=True, capturable=True, fused=True)
run("torch.cuda.graph of the whole step", step)
for mode in ("default", "reduce-overhead"):
    twin, opt, step = setup(fused=True)
    compiled = torch.compile(twin, mode=mode)
    run(f"torch.compile(model, {mode}) (chapter today)", lambda: step(compiled))

# reduce-overhead with a step marker: cudagraph trees then know that a new iteration begins
twin, opt, step = setup(fused=True)
compiled = torch.compile(twin, mode="reduce-overhead")


def marked():
    torch.compiler.cudagraph_mark_step_begin()
    return step(compiled)


run("torch.compile(model, reduce-overhead) + mark_step_begin", marked)

# the whole step (forward, loss, backward, optimizer) in one compiled function, backward traced by
# compiled autograd, optimizer step compiled with it
for mode in ("default", "reduce-overhead"):
    try:
        torch._dynamo.reset()
        torch._dynamo.config.compiled_autograd = True
        twin, opt, _ = setup(capturable=True, foreach=True)
        loader = training.Loader(data["x_train"], data["y_train"], BATCH, STEPS, 0)
        x_all = torch.as_tensor(cudl.to_numpy(loader.data), device="cuda")
        y_all = torch.as_tensor(cudl.to_numpy(loader.labels), device="cuda").long()
        order = torch.as_tensor(cudl.to_numpy(loader.order), device="cuda").long().view(STEPS, BATCH)
        counter = torch.zeros(1, dtype=torch.long, device="cuda")
        import torch.nn.functional as F

        @torch.compile(mode=mode)
        def whole_step():
            idx = order.index_select(0, counter).view(-1)
            counter.add_(1).remainder_(STEPS)
            loss = F.cross_entropy(twin(x_all[idx]), y_all[idx])
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
            return loss.detach()

        def whole():
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            return whole_step()

        run(f"torch.compile(whole step, {mode}), compiled autograd", whole)
    except Exception as exc:
        print(f"whole step {mode} FAILED: {type(exc).__name__}: {str(exc)[:400]}")
    finally:
        torch._dynamo.config.compiled_autograd = False
print(results)
