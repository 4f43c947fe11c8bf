"""One GPU run for chapter 15 (the capstone): the book's GPT training step (gpt_train.Model) at GPT-2 small's
shape against its PyTorch twin. Needs CuPy and PyTorch; about 5 minutes on an H200 with the defaults.

    python kernels_src/15-capstone/gpu_check.py --out $OUT/capstone.json       # from the repository root
    python kernels_src/15-capstone/gpu_check.py --batch 8 --seconds 60 --skip compile
    python kernels_src/15-capstone/gpu_check.py --skip check train compile --split-k 1   # split-K off
    python kernels_src/15-capstone/gpu_check.py --arch sm75 --batch 4   # the T4 path (on any GPU)

1. check: one step's per-parameter gradients against the twin in float32 (TF32 off), within twice the
   distance of a float32 twin rounded to fp16 where the book's step rounds (what fp16 alone costs); the loss
   likewise.
2. timing: tokens/s of the book's step (forward, backward, clipping, AdamW) vs the twin eager and under
   torch.compile (default; max-autotune-no-cudagraphs with --max-autotune), both twins in bf16 autocast with
   fused AdamW; the book's forward + backward replayed from a CUDA graph (its optimizer tail eager); peak
   memory of each; a per-kernel-family breakdown (torch.profiler, which sees CuPy's launches too).
3. train: --seconds (default 120) split between the book and the eager twin from the same init on the same
   batches of a corpus (--corpus stdlib: the Python standard library's sources, byte tokens), held-out loss
   every --eval-every steps.
Writes every number to --out (JSON). Each section prints what failed and the run goes on; exit status 1 if
the check failed or a section raised.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

import cudl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_train as gt  # noqa: E402

T0 = time.time()
DEVICE = "cuda"  # the twin's device; tests run the check and train sections on "cpu" with the emulator
results: dict = {"device": None, "torch": torch.__version__, "sections": {}}
failed: list[str] = []
RAISE = False  # chapter 15's page sets it: a failed section stops the notebook instead of printing


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def section(name: str):
    """Run a section; on an exception print what failed (with the traceback) and go on."""
    def wrap(fn):
        def run(*args, **kwargs):
            log(f"--- {name}")
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - report every failure, then the next section
                if RAISE:
                    raise
                traceback.print_exc()
                print(f"FAILED {name}: {type(exc).__name__}: {exc}", flush=True)
                failed.append(f"{name}: {type(exc).__name__}: {exc}")
                results["sections"][name] = dict(error=f"{type(exc).__name__}: {exc}")
                return None
        return run
    return wrap


def free_torch() -> None:
    gc.collect()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def free_cupy() -> None:
    if cudl.on_gpu():
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def tokens_t(a: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(a, dtype=torch.long, device=DEVICE)


def twin_autocast() -> torch.dtype:
    """The twin's mixed precision: bf16 from sm_80 on (and on the CPU); fp16 with a GradScaler on
    older GPUs (a T4), where PyTorch's bf16 attention has no fused kernel."""
    if DEVICE == "cpu" or torch.cuda.get_device_capability() >= (8, 0):
        return torch.bfloat16
    return torch.float16


@section("check")
def check(cfg: gt.Config, batch: int, params: dict, x: np.ndarray, y: np.ndarray, split_k: int | None = None,
          arch: str | None = None, attn_bwd: int | None = None) -> None:
    model = gt.Model(cfg, batch, params, split_k=split_k, arch=arch, attn_bwd=attn_bwd)
    model.forward_backward(x, y)
    cudl.sync()
    book_losses = cudl.to_numpy(model.losses).astype(np.float64)
    gb = model.gradients()
    scale, arch = model.scale, model.arch
    del model
    free_cupy()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    refs = {}
    for name, rounded in (("f32", False), ("f32_fp16_sites", True)):
        tw = gt.Twin(cfg, params, device=DEVICE, dtype=torch.float32, fp16_at_book_sites=rounded, loss_scale=scale)
        losses = tw.losses(tokens_t(x), tokens_t(y))
        losses.mean().backward()
        refs[name] = (losses.detach().double().cpu().numpy(), tw.gradients())
        del tw, losses
        free_torch()
        log(f"twin {name} done")
    (l32, g32), (l16, g16) = refs["f32"], refs["f32_fp16_sites"]

    def rel(a, b):
        return float(np.linalg.norm(a - b) / (np.linalg.norm(b) or 1.0))

    out, bad = {}, []
    err, share = rel(book_losses, l32), rel(l16, l32)
    out["losses"] = dict(err=err, fp16_share=share, book=float(book_losses.mean()), twin=float(l32.mean()))
    if not err <= 2 * share:
        bad.append(f"per-token losses: {err:.2e} from float32, fp16's share {share:.2e}")
    for name in g32:
        err, share = rel(gb[name], g32[name]), rel(g16[name], g32[name])
        out[name] = dict(err=err, fp16_share=share)
        if not err <= 2 * share:
            bad.append(f"{name}: gradient {err:.2e} from float32, fp16's share {share:.2e}")
    worst = max((v["err"] / max(v["fp16_share"], 1e-30), k) for k, v in out.items())
    log(f"loss book {out['losses']['book']:.6f}, twin float32 {out['losses']['twin']:.6f}; worst ratio to fp16's "
        f"share {worst[0]:.2f} ({worst[1]})")
    results["sections"]["check"] = dict(ok=not bad, failures=bad, per_param=out, arch=arch)
    if bad:
        print("CHECK FAILED:\n  " + "\n  ".join(bad), flush=True)
        failed.append("check: " + "; ".join(bad[:5]))
    else:
        print("CHECK OK: every gradient within twice fp16's share of the float32 twin", flush=True)


def family(name: str, book: bool) -> str:
    # The book's labels stay those of the first H200 run, for comparison; since the fusions, "fp16 casts" also
    # holds the MLP's bias + GELU and its backward (the cast's epilogue), "LayerNorm" the residual adds
    # (residual_layernorm, layernorm_backward_add), "residual+heads" only split_heads and merge_heads.
    n = name.lower()
    table = ([("hgemm", "GEMM"), ("split_k_reduce", "GEMM"),  # split-K's reduce: part of the GEMMs' cost
              ("flash_attn_bwd", "attention backward"), ("flash_attn", "attention forward"),
              ("layernorm", "LayerNorm"), ("gelu", "bias+GELU"), ("softmax_cross_entropy", "cross-entropy"),
              ("cast_transpose", "fp16 casts"), ("adamw", "optimizer"), ("grad_unscale", "optimizer"),
              ("block_sum", "optimizer"), ("bias_grad", "bias grads"), ("embedding", "embeddings"),
              ("position", "embeddings"), ("residual", "residual+heads"), ("heads", "residual+heads")]
             if book else
             [("flash", "attention"), ("fmha", "attention"), ("attention", "attention"), ("triton", "fused (triton)"),
              ("gemm", "GEMM"), ("cutlass", "GEMM"), ("xmma", "GEMM"), ("nvjet", "GEMM"), ("layer_norm", "LayerNorm"),
              ("adam", "optimizer"), ("softmax", "cross-entropy"), ("nll", "cross-entropy"),
              ("elementwise", "elementwise"), ("reduce", "reductions")])
    for key, fam in table:
        if key in n:
            return fam
    return "other"


def breakdown(fn, book: bool, steps: int = 3) -> dict:
    """Device time per kernel family over `steps` calls of fn (torch.profiler: CUPTI sees CuPy's kernels)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    fams: dict[str, float] = {}
    for e in prof.key_averages():
        if getattr(e, "device_type", None) != DeviceType.CUDA:
            continue
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        fam = family(e.key, book)
        fams[fam] = fams.get(fam, 0.0) + us / 1e3 / steps
    return dict(sorted(fams.items(), key=lambda kv: -kv[1]))


@section("timing")
def timing(cfg: gt.Config, batch: int, params: dict, x: np.ndarray, y: np.ndarray, args) -> None:
    import cupy

    tokens = batch * cfg.seq
    out: dict = {"tokens_per_step": tokens}
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    model = gt.Model(cfg, batch, params, split_k=args.split_k, arch=args.arch,
                     attn_bwd=args.attn_bwd)
    out["arch"] = model.arch
    out["split_k"] = model.splits  # slices of K of each block matrix's weight gradient
    log(f"split-K of the weight gradients: {model.splits} ({'automatic' if args.split_k is None else 'forced'})")
    model.load_batch(x, y)

    def book_step():
        model.forward()
        model.backward()
        model.optimizer_step()

    book_step()
    cudl.sync()
    out["book_peak_bytes"] = pool.total_bytes()  # every buffer is allocated once, in Model
    torch.cuda.reset_peak_memory_stats()
    twin = gt.Twin(cfg, params, device="cuda", dtype=torch.float32, autocast=twin_autocast())
    xt, yt = tokens_t(x), tokens_t(y)

    def eager_step():
        twin.step(xt, yt)

    eager_step()
    torch.cuda.synchronize()
    out["twin_eager_peak_bytes"] = torch.cuda.max_memory_allocated()

    def record(name, p):
        out["pairs"][name] = p
        out[name] = dict(book_ms=p.timing.ms, twin_ms=p.baseline.ms, ratio=p.ratio, sign=p.sign(),
                         book_tok_s=tokens / p.timing.ms * 1e3, twin_tok_s=tokens / p.baseline.ms * 1e3,
                         rounds=p.round_ratios)
        log(f"{name}: book {p.timing.ms:.2f} ms ({tokens / p.timing.ms * 1e3:,.0f} tok/s), twin "
            f"{p.baseline.ms:.2f} ms ({tokens / p.baseline.ms * 1e3:,.0f} tok/s): book at {p.ratio:.3f}x the twin's "
            f"speed (sign {p.sign()})")

    flops = dict(flops=gt.step_flops(cfg, batch), compute="fp16")  # the model's FLOPs: a rate for both
    out["pairs"] = {}  # the cudl.Pair of each comparison (chapter 15 records them; JSON keeps their text)
    record("vs_eager", cudl.bench_pair(book_step, eager_step, rounds=3, name="book", baseline_name="eager",
                                       **flops))
    if any(n > 1 for n in model.splits.values()):  # split-K's gain, the book against itself
        def whole_step():  # every weight gradient as one product
            model.split_k = 1
            book_step()
            model.split_k = args.split_k

        p = cudl.bench_pair(book_step, whole_step, rounds=3, name="book, split-K", baseline_name="book, no split-K",
                            **flops)
        out["split_pair"] = p  # not in "pairs": its baseline is the book's own step
        log(f"split-K: {p.timing.ms:.2f} ms, without {p.baseline.ms:.2f} ms: {p.ratio:.3f}x (sign {p.sign()})")
    try:
        out["breakdown_book_ms"] = breakdown(book_step, True)
        out["breakdown_eager_ms"] = breakdown(eager_step, False)
        log(f"book per family (ms/step): {json.dumps({k: round(v, 2) for k, v in out['breakdown_book_ms'].items()})}")
        log(f"eager per family (ms/step): {json.dumps({k: round(v, 2) for k, v in out['breakdown_eager_ms'].items()})}")
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        print(f"FAILED breakdown: {exc}", flush=True)
        failed.append(f"breakdown: {exc}")
    try:  # the book's forward + backward + norm as one CUDA graph, its optimizer tail eager
        model.forward()
        model.backward()
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            model.forward()
            model.backward()
            model.grad_norm_sq()
            graph = stream.end_capture()
        stream.synchronize()

        def graphed_step():
            graph.launch()
            model.optimizer_step()

        record("graphed_vs_eager", cudl.bench_pair(graphed_step, eager_step, rounds=3, name="book graphed",
                                                   baseline_name="eager", **flops))
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        print(f"FAILED CUDA graph of the book's step: {exc}", flush=True)
        failed.append(f"graph: {exc}")
    modes = [] if "compile" in args.skip else ["default"]
    modes += ["max-autotune-no-cudagraphs"] if args.max_autotune and modes else []
    for mode in modes:
        if time.time() - T0 > args.budget - args.seconds - 120:
            log(f"torch.compile {mode}: skipped (time budget)")
            continue
        try:
            twin = None  # the eager twin's memory goes before the compiled one is built
            free_torch()
            torch.cuda.reset_peak_memory_stats()
            twin = gt.Twin(cfg, params, device="cuda", dtype=torch.float32, autocast=twin_autocast())
            compiled = torch.compile(twin.loss, mode=mode)

            def compiled_step():
                twin.opt.zero_grad(set_to_none=True)
                compiled(xt, yt).backward()
                twin.optimizer_step()

            t = time.time()
            compiled_step()
            torch.cuda.synchronize()
            log(f"torch.compile {mode}: first step {time.time() - t:.1f} s (compilation)")
            compiled_step()
            torch.cuda.synchronize()
            out[f"twin_compile_{mode}_peak_bytes"] = torch.cuda.max_memory_allocated()
            record(f"vs_compile_{mode}", cudl.bench_pair(book_step, compiled_step, rounds=3, name="book",
                                                         baseline_name=f"torch.compile {mode}", **flops))
            if mode == "default":
                out["breakdown_compile_ms"] = breakdown(compiled_step, False)
                log("compiled per family (ms/step): "
                    f"{json.dumps({k: round(v, 2) for k, v in out['breakdown_compile_ms'].items()})}")
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            print(f"FAILED torch.compile {mode}: {exc}", flush=True)
            failed.append(f"compile {mode}: {exc}")
    log(f"peak memory: book {out['book_peak_bytes'] / 2**30:.2f} GiB (CuPy pool), twin eager "
        f"{out['twin_eager_peak_bytes'] / 2**30:.2f} GiB (torch.cuda.max_memory_allocated)")
    results["sections"]["timing"] = out


def twin_run(cfg: gt.Config, params: dict, hyper: gt.Hyper, data: bytes, val: list, batch: int,
             steps: int, seconds: float, lr_at, args) -> tuple[list[float], list[tuple[int, float]]]:
    """The eager bf16 twin trained from `params` on the same batches as the book: (training losses,
    (step, held-out loss) pairs)."""
    twin = gt.Twin(cfg, params, device=DEVICE, dtype=torch.float32, autocast=twin_autocast(), hyper=hyper)
    batches = gt.Batches(data, batch, cfg.seq, seed=args.seed)
    tl: list[float] = []
    tv: list[tuple[int, float]] = []
    t = time.time()

    def twin_val() -> float:
        with torch.no_grad():
            return float(np.mean([twin.loss(tokens_t(a), tokens_t(b)).item() for a, b in val]))

    while len(tl) < steps and time.time() - t < seconds:
        step = len(tl)
        if step % args.eval_every == 0:
            tv.append((step, twin_val()))
        for group in twin.opt.param_groups:
            group["lr"] = lr_at(step)
        a, b = batches.next()
        tl.append(float(twin.step(tokens_t(a), tokens_t(b))))
        if step % 50 == 0:
            log(f"twin step {step}: loss {tl[-1]:.4f}")
    tv.append((len(tl), twin_val()))
    log(f"twin: {len(tl)} steps in {time.time() - t:.1f} s")
    return tl, tv


def step_gemms(cfg: gt.Config, batch: int) -> list[tuple[str, int, int, int, int, bool]]:
    """(name, M, N, K, count per step, is a block's weight gradient) of every matrix product of one step,
    C [M, N] = A [M, K] B [K, N]: per layer four forward, four input-gradient and four weight-gradient
    products, and the tied head's three."""
    T, C, V, L = batch * cfg.seq, cfg.d, cfg.vocab, cfg.layers
    rows = []
    for w, n_in, n_out in (("qkv", C, 3 * C), ("proj", C, C), ("fc", C, 4 * C), ("fc2", 4 * C, C)):
        rows += [(f"{w} forward", T, n_out, n_in, L, False), (f"{w} dX", T, n_in, n_out, L, False),
                 (f"{w} dW", n_in, n_out, T, L, True)]
    rows += [("head forward", T, V, C, 1, False), ("head dX", T, C, V, 1, False),
             ("head dW", V, C, T, 1, False)]
    return rows


@section("gemms")
def gemms(cfg: gt.Config, batch: int, params: dict, args) -> None:
    """Each product of the step on the book's path (kernel 5 or the path's GEMMS, split-K where the step
    splits) against cuBLAS (torch.mm, fp16 in and out, the library's usual layout), timed in turn: which
    shapes hold the GEMM family's gap."""
    import cupy

    model = gt.Model(cfg, batch, params, split_k=args.split_k, arch=args.arch, attn_bwd=args.attn_bwd)
    out = {}
    for name, M, N, K, count, weight_grad in step_gemms(cfg, batch):
        a = cupy.random.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
        b = cupy.random.standard_normal((K, N), dtype=cupy.float32).astype(cupy.float16)
        c = cupy.empty((M, N), cupy.float32)
        ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")

        # The del at the end of the loop empties these closures' cells, so that one shape's arrays are
        # freed before the next shape's are made; ruff reads the deleted names as undefined here.
        def book():
            model.gemm(a, b, c, M, N, K, split=weight_grad)  # noqa: F821

        def cublas():
            torch.mm(ta, tb)  # noqa: F821

        book()
        err = float(cupy.abs(c - cupy.asarray(torch.mm(ta.float(), tb.float()))).max()
                    / cupy.abs(c).max())
        p = cudl.bench_pair(book, cublas, rounds=3, name=f"book {name}", baseline_name=f"cuBLAS {name}",
                            flops=2 * M * N * K, compute="fp16")
        out[name] = dict(M=M, N=N, K=K, count=count, book_ms=p.timing.ms, cublas_ms=p.baseline.ms,
                         ratio=p.ratio, sign=p.sign(), rounds=p.round_ratios, max_rel_err=err,
                         split=model.split_for(M, N, K) if weight_grad else 1,
                         step_ms_book=count * p.timing.ms, step_ms_cublas=count * p.baseline.ms)
        log(f"{name:14} {M:6} x {N:6} x {K:6} x{count:3}: book {p.timing.ms:.3f} ms, cuBLAS "
            f"{p.baseline.ms:.3f} ms ({p.ratio:.2f}x, sign {p.sign()}), error {err:.1e}")
        del a, b, c, ta, tb
    book_ms = sum(r["step_ms_book"] for r in out.values())
    cublas_ms = sum(r["step_ms_cublas"] for r in out.values())
    log(f"per step: book {book_ms:.1f} ms, cuBLAS {cublas_ms:.1f} ms")
    results["sections"]["gemms"] = dict(shapes=out, book_ms=book_ms, cublas_ms=cublas_ms)


@section("train")
def train(cfg: gt.Config, batch: int, params: dict, args) -> None:
    data = gt.corpus(args.corpus)
    log(f"corpus {args.corpus}: {len(data):,} bytes")
    val = gt.Batches(data, batch, cfg.seq, seed=args.seed).validation(args.eval_batches)
    seconds = args.seconds / 2
    hyper = gt.Hyper(lr=args.lr)

    def lr_at(step: int) -> float:  # linear warm-up, then constant
        return args.lr * min(1.0, (step + 1) / args.warmup)

    out: dict = {"corpus": args.corpus, "bytes": len(data), "batch": batch, "lr": args.lr,
                 "twin_autocast": str(twin_autocast()).removeprefix("torch.")}
    # the book
    model = gt.Model(cfg, batch, params, hyper, split_k=args.split_k, arch=args.arch,
                     attn_bwd=args.attn_bwd)
    batches = gt.Batches(data, batch, cfg.seq, seed=args.seed)
    losses, vals, t = [], [], time.time()
    while time.time() - t < seconds and len(losses) < args.max_steps:
        step = len(losses)
        if step % args.eval_every == 0:
            vals.append((step, float(np.mean([model.eval_loss(*b) for b in val]))))
        model.hyper.lr = lr_at(step)
        losses.append(model.step(*batches.next()))
        if step % 50 == 0:
            log(f"book step {step}: loss {losses[-1]:.4f}, loss scale {model.scale:g}")
    steps = len(losses)
    vals.append((steps, float(np.mean([model.eval_loss(*b) for b in val]))))
    out["book"] = dict(steps=steps, seconds=time.time() - t, train_loss=losses, val_loss=vals,
                       skipped=model.skipped, final_scale=model.scale)
    log(f"book: {steps} steps in {time.time() - t:.1f} s, held-out loss {vals[0][1]:.4f} -> {vals[-1][1]:.4f}")
    del model
    free_cupy()
    # the eager twin, same init, same batches, same number of steps (or fewer if time runs out);
    # run again from the same init: its kernels (atomics in the backward) do not repeat to the bit,
    # and 500 steps amplify that, so the two runs' difference is the noise a comparison must beat
    runs = ["twin_eager_bf16", "twin_eager_bf16_rerun"][:max(1, args.twin_runs)]
    for key in runs:
        tl, tv = twin_run(cfg, params, hyper, data, val, batch, steps, seconds + 30, lr_at, args)
        out[key] = dict(steps=len(tl), train_loss=tl, val_loss=tv)
    tl = out[runs[0]]["train_loss"]
    n = min(len(tl), steps, *(len(out[k]["train_loss"]) for k in runs))
    if n >= 20:
        last = slice(max(0, n - 20), n)  # the mean of the last 20 steps: a single step's loss is noisy
        end = {k: float(np.mean(out[k]["train_loss"][last])) for k in runs}
        b_end, t_end = float(np.mean(losses[last])), end[runs[0]]
        out["last20_train_loss"] = dict(book=b_end, twin=t_end, rel_diff=abs(b_end - t_end) / t_end)
        if len(runs) > 1:  # the twin against itself
            rerun = end[runs[1]]
            out["last20_train_loss"].update(twin_rerun=rerun, twin_spread=abs(rerun - t_end) / t_end)
        log(f"mean train loss of steps {n - 20}-{n - 1}: book {b_end:.4f}, twin "
            + ", ".join(f"{v:.4f}" for v in end.values())
            + f" ({100 * abs(b_end - t_end) / t_end:.2f}% apart)")
        log(f"held-out loss: book {vals[-1][1]:.4f}, twin "
            + ", ".join(f"{out[k]['val_loss'][-1][1]:.4f}" for k in runs))
    results["sections"]["train"] = out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The options (chapter 15's page passes its own list, as a command line would)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="capstone.json", help="JSON file of every number")
    ap.add_argument("--batch", type=int, default=16, help="sequences of 1024 tokens per step (16: 16k tokens)")
    ap.add_argument("--seconds", type=float, default=120, help="training run, split between book and twin")
    ap.add_argument("--budget", type=float, default=390, help="seconds for the whole run (compile skipped after)")
    ap.add_argument("--corpus", default="stdlib", choices=["stdlib", "book"])
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--max-steps", type=int, default=500)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-autotune", action="store_true", help="also time torch.compile max-autotune-no-cudagraphs")
    ap.add_argument("--skip", nargs="*", default=[], choices=["check", "timing", "compile", "train"])
    ap.add_argument("--toy", action="store_true", help="the toy config (a quick smoke run of this script)")
    ap.add_argument("--split-k", type=int, default=None,
                    help="slices of K of the blocks' weight gradients (1: off; default: chosen per shape)")
    ap.add_argument("--arch", choices=gt.ARCHS, default=None,
                    help="the kernels' path (default: this GPU's); sm75 runs the T4 path on a newer GPU")
    ap.add_argument("--gemms", action="store_true",
                    help="time each product of the step against cuBLAS (not part of the page)")
    ap.add_argument("--twin-runs", type=int, default=2, choices=[1, 2],
                    help="train the twin twice: the difference of its runs is the comparison's noise")
    ap.add_argument("--attn-bwd", type=int, default=None, choices=[2, 3],
                    help="the attention backward's main kernel (default: the path's, gt.ATTN_BWD)")
    return ap.parse_args(argv)


def main() -> int:
    args = parse()
    if not cudl.on_gpu():
        print("gpu_check.py needs a GPU (CuPy and PyTorch with CUDA)", flush=True)
        return 1
    results["device"] = cudl.device_info()
    cfg = gt.TOY if args.toy else gt.GPT2
    batch = 2 if args.toy else args.batch
    results.update(config=cfg.__dict__, batch=batch, args=vars(args))
    log(f"{results['device'].get('gpu')}: config {cfg}, batch {batch} ({batch * cfg.seq} tokens per step)")
    params = gt.init_params(cfg, seed=args.seed)
    log(f"{sum(a.size for a in params.values()) / 1e6:.1f} M parameters initialised; compiling the kernels")
    gt.kernels()
    x, y = gt.Batches(gt.corpus("book"), batch, cfg.seq, seed=args.seed).next()
    if "check" not in args.skip:
        check(cfg, batch, params, x, y, args.split_k, args.arch, args.attn_bwd)
    if "timing" not in args.skip:
        timing(cfg, batch, params, x, y, args)
        free_torch()  # what the section held is garbage now
        free_cupy()
    if args.gemms:
        gemms(cfg, batch, params, args)
        free_cupy()
    if "train" not in args.skip:
        train(cfg, batch, params, args)
    results["failed"] = failed
    results["seconds"] = time.time() - T0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    log(f"wrote {args.out}; {'FAILURES: ' + '; '.join(failed) if failed else 'no failures'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
