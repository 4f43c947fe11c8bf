"""Chapter 10 on a GPU, in one run: kernel tests, training the tiny GPT on the book's text, logits
against PyTorch, generated text, prefill and decode speed (book eager, book + CUDA graph, PyTorch
eager) at batch 1 and 8, and the decode roofline of a larger model of the same architecture.

    python kernels_src/10-inference/gpu_check.py [--steps N]
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--no-tests", action="store_true")
    args = ap.parse_args()
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
    losses = gpt.train(model, data[:split], args.steps, log_every=250)
    torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    print(f"training: {args.steps} steps in {train_s:.1f} s ({1e3 * train_s / args.steps:.1f} ms/step)")
    print("loss:", " ".join(f"{s}:{v:.3f}" for s, v in losses))

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
        ms_eager = gpt.time_book_decode(bgB, pr, steps).ms
        ms_graph = gpt.time_book_decode(bgB, pr, steps, graph=g).ms
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
        def run_graph(n=steps):
            bb.pos[:B] = P - 1
            bb.step[:] = 0
            for _ in range(n):
                g.launch()
        t = cudl.bench(run_graph, name="big decode", flush=False, warmup_ms=50, rep_ms=300, min_runs=3)
        ms = t.ms / steps
        byts = bb.weight_bytes() + bb.cache_bytes(P + steps // 2)
        bound_ms = byts / (copy_gbps * 1e9) * 1e3
        ms_torch = min(gpt.time_torch_decode(tb, pr_t, 64, reps=2, cudnn=c).ms for c in (True, False))
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
        tg = cudl.bench(lambda: bb.k["gemv"]((-(-N // 8),), (256,), (W, x, y, N, K, 1, 0)),
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
