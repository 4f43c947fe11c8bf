"""Chapter 10 on a GPU, in one run: kernel tests, training the tiny GPT on the book's text, logits
against PyTorch, generated text, prefill and decode speed (book eager, book + CUDA graph, PyTorch
eager) at batch 1 and 8, and the decode roofline of a larger model of the same architecture.

    python kernels_src/10-inference/gpu_check.py [--steps N]

With --sweep it does only this (<= 60 s on an H100): checks every GEMV configuration of
SWEEP against float64 NumPy, times each at the decode shapes of the chapter's larger model
and at 4096 x 4096 against cuBLAS (torch F.linear, fp16) and a device copy of the same
bytes, then times the graphed decode step of that model with the best few, and prints
the tables last.

    python kernels_src/10-inference/gpu_check.py --sweep
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
ROOT = HERE.parents[1]


# (rows per warp, chunks in flight per row and lane, warps per row group, warps per block)
SWEEP = [(1, 4, 1, 8), (1, 2, 1, 4), (1, 8, 1, 4), (1, 16, 1, 4), (2, 4, 1, 4),
         (4, 2, 1, 4), (2, 8, 1, 4), (1, 4, 4, 8), (1, 8, 2, 4), (2, 4, 2, 8), (1, 8, 1, 2)]
# the larger model's matrices (N outputs x K inputs), and 4096 x 4096
BIG = dict(d_model=2048, n_layer=8, n_head=16, d_ff=8192, vocab=32000, max_len=512)
SHAPES = {"qkv": (6144, 2048), "proj": (2048, 2048), "up": (8192, 2048),
          "down": (2048, 8192), "head": (32000, 2048), "4096^2": (4096, 4096)}


def gemv_sweep() -> None:
    import gpt

    import cudl

    cudl.setup()
    configs = [gpt.GemvConfig(*c) for c in SWEEP]
    assert configs[0] == gpt.GEMV_FIRST
    rng = np.random.default_rng()
    # -- correctness first: odd sizes (rows past N, tails of K, the scalar path), a big
    # shape, batch 1, 3 and 11 (two passes over x), the three epilogues; NaN-poisoned y
    small = [(7, 2056, 1, 0), (13, 1032, 3, 1), (5, 100, 2, 2), (37, 264, 11, 0)]
    big = [(6144, 2048, 1, 0), (2048, 8192, 8, 1)] if cudl.on_gpu() else [(96, 1024, 1, 0)]
    for cfg in configs:
        k = cfg.load()
        worst = 0.0
        for N, K, B, mode in small + big:
            W = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
            x = rng.standard_normal((B, K)).astype(np.float32)
            y0 = rng.standard_normal((B, N)).astype(np.float32)
            y = cudl.xp.array(y0) if mode == 1 else cudl.poisoned((B, N))
            grid, block = cfg.grid(N)
            k(grid, block, (cudl.xp.asarray(W), cudl.xp.asarray(x), y, N, K, B, mode))
            r = x.astype(np.float64) @ W.astype(np.float64).T
            ref = {0: r, 1: y0 + r, 2: gpt.gelu_tanh_np(r)}[mode]
            got = cudl.to_numpy(y).astype(np.float64)
            err = np.abs(got - ref).max() / np.abs(ref).max()
            assert np.isfinite(got).all() and err < 1e-5, f"{cfg} {N}x{K} B={B}: {err:.1e}"
            worst = max(worst, err)
        print(f"correct: {cfg}, max relative error {worst:.1e}")
    print("all GEMV configurations correct")
    if not cudl.on_gpu():
        print("emulator: correctness only, no timing")
        return

    import os

    import cupy
    import torch

    os.environ["CUDL_L2_FLUSH"] = "read"  # clean L2 lines: a GEMV of ~10 us pays no write-back
    copy_gbps = cudl.ceilings()["copy_gbps"]
    cases = [(name, N, K, 1) for name, (N, K) in SHAPES.items()] + [("up B=8", 8192, 2048, 8)]
    times: dict[tuple[str, str], object] = {}
    for name, N, K, B in cases:
        W = cupy.random.standard_normal((N, K), dtype=cupy.float32).astype(cupy.float16)
        x = cupy.random.standard_normal((B, K), dtype=cupy.float32)
        y = cupy.empty((B, N), cupy.float32)
        nbytes = N * K * 2
        for cfg in configs:
            k, (grid, block) = cfg.load(), cfg.grid(N)
            times[name, str(cfg)] = cudl.bench(
                lambda: k(grid, block, (W, x, y, N, K, B, 0)), bytes=nbytes, name=str(cfg),
                rep_ms=40, max_runs=300)
        Wt = torch.from_dlpack(W)
        xt = torch.randn(B, K, device="cuda", dtype=torch.float16)
        times[name, "cuBLAS"] = cudl.bench(lambda: torch.nn.functional.linear(xt, Wt),
                                           bytes=nbytes, name="cuBLAS", rep_ms=40, max_runs=300)
        dst = cupy.empty_like(W)
        times[name, "copy"] = cudl.bench(lambda: cupy.copyto(dst, W), bytes=2 * nbytes,
                                         name="copy", rep_ms=40, max_runs=300)
        best = min(times[name, str(c)].ms for c in configs)
        print(f"timed {name} {N}x{K} B={B}: best {best * 1e3:.1f} us, "
              f"cuBLAS {times[name, 'cuBLAS'].ms * 1e3:.1f} us")
    # weight of each shape in one decode step of the larger model: per layer, and the head
    per_step = {"qkv": 8, "proj": 8, "up": 8, "down": 8, "head": 1}

    def step_us(key: str) -> float:
        return sum(n * times[s, key].ms * 1e3 for s, n in per_step.items())

    ranked = sorted(configs, key=lambda c: step_us(str(c)))
    # the write flush (cudl.bench's default, which the stored numbers used), for comparison
    os.environ["CUDL_L2_FLUSH"] = "write"
    write = {}
    for key in [str(configs[0]), str(ranked[0]), "cuBLAS"]:
        N, K = SHAPES["up"]
        W = cupy.random.standard_normal((N, K), dtype=cupy.float32).astype(cupy.float16)
        x = cupy.random.standard_normal((1, K), dtype=cupy.float32)
        y = cupy.empty((1, N), cupy.float32)
        if key == "cuBLAS":
            Wt, xt = torch.from_dlpack(W), torch.randn(1, K, device="cuda", dtype=torch.float16)
            fn = lambda: torch.nn.functional.linear(xt, Wt)  # noqa: E731
        else:
            cfg = next(c for c in configs if str(c) == key)
            k, (grid, block) = cfg.load(), cfg.grid(N)
            fn = lambda: k(grid, block, (W, x, y, N, K, 1, 0))  # noqa: E731
        write[key] = cudl.bench(fn, bytes=N * K * 2, name=key, rep_ms=40, max_runs=300)
    os.environ["CUDL_L2_FLUSH"] = "read"

    # -- the graphed decode step of the larger model with the first and the best configs
    big_cfg = gpt.Config(**BIG)
    torch.manual_seed(1)
    with torch.device("cuda"):
        tb = gpt.TorchGPT(big_cfg).half()
    bb = gpt.BookGPT(tb.weights(cupy), big_cfg, max_batch=8, cache_dtype="float16",
                     prefill=False)
    del tb
    P, steps = 128, 64
    step_rows = []
    for cfg in [configs[0]] + [c for c in ranked[:3] if c != configs[0]]:
        bb.use_gemv(cfg)
        for B in (1, 8):
            bb.batch = B
            bb.pos[:] = P - 1
            bb.start_sampling(steps + 1)
            g = gpt.capture_decode_graph(bb)
            t = gpt.time_book_decode(bb, steps, cached=P, graph=g)
            ms = t.ms
            nbytes = bb.weight_bytes() + bb.cache_bytes(P + steps // 2)
            bound_ms = nbytes / (copy_gbps * 1e9) * 1e3
            step_rows.append((str(cfg), B, ms, 100 * bound_ms / ms))
            print(f"decode step {cfg} B={B}: {ms:.3f} ms")

    print(f"\ncopy bandwidth {copy_gbps:,.0f} GB/s; GEMV timings with CUDL_L2_FLUSH=read")
    print("GEMV at batch 1 (B=8 where named): % of the copy bandwidth / speed-up over cuBLAS")
    head = "".join(f"{name:>17}" for name, *_ in cases)
    print(f"{'config':<40}{'step us':>9}{head}")
    for key in ["copy", "cuBLAS"] + [str(c) for c in ranked]:
        cells = ""
        for name, *_ in cases:
            t = times[name, key]  # copy: read + write bytes, as copy_gbps counts them
            ratio = f"{times[name, 'cuBLAS'].ms / t.ms:>4.2f}x" if key != "copy" else " " * 5
            cells += f"{100 * t.gbps / copy_gbps:>10.0f}% {ratio}"
        us = f"{step_us(key):>9.0f}" if key != "copy" else f"{'':>9}"
        print(f"{key:<40}{us}{cells}")
    print("\nwrite flush (the stored numbers' mode), up 8192x2048 B=1:")
    for key, t in write.items():
        print(f"  {key:<40}{t.ms * 1e3:8.1f} us {100 * t.gbps / copy_gbps:5.0f}% of copy")
    print("\ngraphed decode step of the larger model (ms, % of the bandwidth bound):")
    for key, B, ms, pct in step_rows:
        print(f"  {key:<40} B={B}  {ms:7.3f} ms  {pct:5.1f}%")
    print(f"best GEMV configuration by summed step time: {ranked[0]}")


def decode_breakdown() -> None:
    """The graphed decode step of the larger model with kinds of kernels left out."""
    import cupy
    import gpt
    import torch

    import cudl

    cudl.setup()
    big_cfg = gpt.Config(**BIG)
    torch.manual_seed(1)
    with torch.device("cuda"):
        tb = gpt.TorchGPT(big_cfg).half()
    bb = gpt.BookGPT(tb.weights(cupy), big_cfg, max_batch=8, cache_dtype="float16",
                     prefill=False)
    del tb
    copy_gbps = cudl.ceilings()["copy_gbps"]
    P, steps = 128, 64
    small = {"gather", "rms", "rope", "append", "partial", "combine", "sample", "advance"}
    cases = {"full step": set(), "GEMVs only": small, "no GEMVs": {"gemv"}}
    cases |= {f"without {k}": {k} for k in sorted(small)}
    rows = []
    for B in (1, 8):
        bb.batch = B
        bb.pos[:] = P - 1
        bb.start_sampling(steps + 1)
        for name, kinds in cases.items():
            with gpt.kernels_left_out(bb, kinds):
                g = gpt.capture_decode_graph(bb)
            ms = gpt.time_book_decode(bb, steps, cached=P, graph=g).ms
            rows.append((B, name, ms))
            print(f"B={B} {name}: {ms:.4f} ms")
        nbytes = bb.weight_bytes() + bb.cache_bytes(P + steps // 2)
        print(f"B={B} bound {nbytes / (copy_gbps * 1e9) * 1e3:.4f} ms")
    print(f"\n{'B':>2} {'decode step':<22}{'ms':>9}{'vs full':>9}")
    full = {B: ms for B, name, ms in rows if name == "full step"}
    for B, name, ms in rows:
        print(f"{B:>2} {name:<22}{ms:>9.4f}{ms - full[B]:>+9.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="the GEMV sweep only (<= 60 s)")
    ap.add_argument("--breakdown", action="store_true",
                    help="the decode step with kinds of kernels left out (<= 60 s)")
    args = ap.parse_args()
    if args.sweep:
        gemv_sweep()
        return
    if args.breakdown:
        decode_breakdown()
        return
    if not args.no_tests:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            str(ROOT / "tests/kernels/test_10_inference.py")], cwd=ROOT)
        print("kernel tests on the GPU:", "passed" if r.returncode == 0 else "FAILED")

    import cupy
    import gpt
    import torch

    import cudl

    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    cudl.setup()
    ceil = cudl.ceilings()
    copy_gbps = ceil["copy_gbps"]
    print(f"copy bandwidth {copy_gbps:,.0f} GB/s")

    # -- train
    text = gpt.book_text()
    tok = gpt.CharTokenizer(text)
    data = tok.encode(text)
    cfg = gpt.Config(vocab=tok.vocab)
    print(f"text {len(text):,} characters, vocab {tok.vocab}, {gpt.n_params(cfg) / 1e6:.2f} M parameters")
    torch.manual_seed(0)
    model = gpt.TorchGPT(cfg).cuda()
    split = int(0.9 * len(data))
    t0 = time.perf_counter()
    log = gpt.train(model, data[:split], args.steps, held_out=data[split:], eval_every=50,
                    log_every=250)
    torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    print(f"training: {args.steps} steps in {train_s:.1f} s ({1e3 * train_s / args.steps:.1f} ms/step)")
    print("held-out loss:", " ".join(f"{s}:{v:.3f}" for s, v in log.held_out))
    print(f"kept step {log.best_step}: training / held-out loss %.3f / %.3f" % log.at_best())

    # -- logits: book vs PyTorch fp32 on the same (fp16-rounded) weights
    w = gpt.round_to_fp16(model.weights())
    ref = gpt.TorchGPT(cfg).cuda()
    ref.load_weights(w)
    prompt_text = text[split:split + 200]
    prompt = tok.encode(prompt_text)[None, :]
    with torch.inference_mode():
        logits_t = ref(torch.as_tensor(prompt, device="cuda").long()).float().cpu().numpy()
    for cache in ("float32", "float16"):
        bg = gpt.BookGPT(w, cfg, max_batch=8, cache_dtype=cache)
        got = cudl.to_numpy(bg.prefill(prompt, all_logits=True))
        err = np.abs(got - logits_t).max() / np.abs(logits_t).max()
        print(f"prefill logits, {cache} cache: max |book - torch| / max |torch| = {err:.2e}")

    # -- text
    bg = gpt.BookGPT(w, cfg, max_batch=8, cache_dtype="float16")
    p_text = "## Decode attention\n\nThe "
    out = bg.generate(tok.encode(p_text)[None, :], 200, top_k=1)
    print("greedy:", repr(p_text + tok.decode(out[0])))
    out = bg.generate(tok.encode(p_text)[None, :], 200, top_k=10, temperature=0.8, seed=1)
    print("top-10, T 0.8:", repr(p_text + tok.decode(out[0])))
    # greedy book vs greedy torch: same tokens?
    with torch.inference_mode():
        tt = gpt.torch_generate(ref, torch.as_tensor(tok.encode(p_text)[None, :], device="cuda").long(), 100)
    ob = bg.generate(tok.encode(p_text)[None, :], 100, top_k=1)
    same = int((ob[0] == tt[0].cpu().numpy()).cumprod().sum())
    print(f"greedy tokens identical to PyTorch fp32 for the first {same} of 100")

    # -- speed, tiny model
    t16 = gpt.TorchGPT(cfg).cuda().half()
    t16.load_weights(w)
    steps, P = 200, 48
    for B in (1, 8):
        pr = np.stack([tok.encode(text[split + 1000 * b: split + 1000 * b + P]) for b in range(B)])
        pr_t = torch.as_tensor(pr, device="cuda").long()
        bgB = gpt.BookGPT(w, cfg, max_batch=B, cache_dtype="float16")
        bgB.prefill(pr)
        g = gpt.capture_decode_graph(bgB)
        ms_eager = gpt.time_book_decode(bgB, steps, prompt=pr).ms
        ms_graph = gpt.time_book_decode(bgB, steps, prompt=pr, graph=g).ms
        ms_torch = min(gpt.time_torch_decode(t16, pr_t, steps, cudnn=c).ms for c in (True, False))
        rows += [(f"tiny decode B={B}", "book eager", ms_eager, B / ms_eager * 1e3),
                 (f"tiny decode B={B}", "book graph", ms_graph, B / ms_graph * 1e3),
                 (f"tiny decode B={B}", "torch eager fp16", ms_torch, B / ms_torch * 1e3)]
        # prefill: a full context of 256 tokens per sequence
        prl = np.stack([tok.encode(text[split + 2000 * b: split + 2000 * b + 256]) for b in range(B)])
        prl_t = torch.as_tensor(prl, device="cuda").long()
        prl_d = cupy.asarray(prl)
        tp = cudl.bench(lambda: bgB.prefill(prl_d), name="book prefill", flush=False)
        caches = t16.new_caches(B, 256)
        with torch.inference_mode():
            tpt = cudl.bench(lambda: t16(prl_t, caches, 0), name="torch prefill", flush=False)
        rows += [(f"tiny prefill B={B} x256", "book", tp.ms, B * 256 / tp.ms * 1e3),
                 (f"tiny prefill B={B} x256", "torch eager fp16", tpt.ms, B * 256 / tpt.ms * 1e3)]
    wb = bg.weight_bytes()
    print(f"tiny model: {wb / 1e6:.2f} MB of weights per decode step -> bound "
          f"{wb / (copy_gbps * 1e9) * 1e6:.1f} us/token at copy bandwidth (fits in L2)")

    # -- a larger model of the same architecture: the memory-bound regime
    big = gpt.Config(vocab=32000, d_model=2048, n_layer=8, n_head=16, d_ff=8192, max_len=512)
    torch.manual_seed(1)
    with torch.device("cuda"):
        tb = gpt.TorchGPT(big).half()
    wbig = tb.weights(cupy)
    bb = gpt.BookGPT(wbig, big, max_batch=8, cache_dtype="float16", prefill=False)
    del wbig
    print(f"big model: {gpt.n_params(big) / 1e6:.0f} M parameters")
    P, steps = 128, 256
    for B in (1, 8):
        pr = np.random.default_rng(B).integers(0, big.vocab, (B, P)).astype(np.int32)
        pr_t = torch.as_tensor(pr, device="cuda").long()
        # no prefill here (prefill=False keeps fp32 weight copies out of memory): the cache holds
        # zeros, which costs the same bytes and time as a real prompt's keys and values
        bb.batch = B
        bb.pos[:] = P - 1
        bb.start_sampling(steps + 1)
        g = gpt.capture_decode_graph(bb)
        ms = gpt.time_book_decode(bb, steps, cached=P, graph=g).ms
        byts = bb.weight_bytes() + bb.cache_bytes(P + steps // 2)
        bound_ms = byts / (copy_gbps * 1e9) * 1e3
        ms_torch = min(gpt.time_torch_decode(tb, pr_t, 64, cudnn=c).ms for c in (True, False))
        rows += [(f"big decode B={B}", "book graph", ms, B / ms * 1e3),
                 (f"big decode B={B}", "torch eager fp16", ms_torch, B / ms_torch * 1e3),
                 (f"big decode B={B}", "bandwidth bound", bound_ms, B / bound_ms * 1e3)]
        print(f"big B={B}: {byts / 1e9:.3f} GB per step; book {ms:.3f} ms = "
              f"{100 * bound_ms / ms:.0f}% of the bound")
    # GEMV alone vs cuBLAS (torch F.linear) at batch 1
    for name in ("0.qkv", "0.up", "0.down", "head"):
        W = bb.w16[name]
        N, K = W.shape
        x = cupy.random.standard_normal((1, K), dtype=cupy.float32)
        y = cupy.empty((1, N), cupy.float32)
        bb.batch = 1
        grid, block = bb.gemv_config.grid(N)
        tg = cudl.bench(lambda: bb.k["gemv"](grid, block, (W, x, y, N, K, 1, 0)),
                        bytes=N * K * 2, name=f"gemv {name}")
        Wt = torch.from_dlpack(W)
        xt = torch.randn(1, K, device="cuda", dtype=torch.float16)
        tt = cudl.bench(lambda: torch.nn.functional.linear(xt, Wt), bytes=N * K * 2, name=f"torch {name}")
        print(f"{tg}\n{tt}")

    print(f"\n{'what':<24}{'impl':<20}{'ms/step':>10}{'tokens/s':>12}")
    for what, impl, ms, tps in rows:
        print(f"{what:<24}{impl:<20}{ms:>10.4f}{tps:>12,.0f}")


if __name__ == "__main__":
    import functools

    print = functools.partial(print, flush=True)  # noqa: A001 - progress survives a timeout
    main()
