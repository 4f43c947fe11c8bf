"""Probe (issue 23): chapter 10's decode against PyTorch's fast decode (static KV cache, whole step
in a CUDA graph, optionally torch.compile'd first, as gpt-fast does), on the chapter's 534M model.

Run on a GPU:  python3 tests/gpu/probe_ch10_static.py
"""

import sys
import time

import numpy as np
import torch

import cudl
from cudl.compile import KERNELS_DIR

sys.path.insert(0, str(KERNELS_DIR / "10-inference"))
import gpt  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
big = gpt.Config(vocab=32000, d_model=2048, n_layer=8, n_head=16, d_ff=8192, max_len=512)
torch.manual_seed(1)
with torch.device("cuda"):
    big_torch = gpt.TorchGPT(big).half()
import cupy  # noqa: E402

big_book = gpt.BookGPT(big_torch.weights(cupy), big, max_batch=8, cache_dtype="float16", prefill=False)
copy_gbps = cudl.ceilings()["copy_gbps"]
print(f"copy {copy_gbps:.0f} GB/s on {cudl.gpu_name()}")
P, steps = 128, 256

# correctness first: the static graphed step must make the tokens that eager greedy decoding makes
pr_t = torch.as_tensor(np.random.default_rng(0).integers(0, big.vocab, (1, P)), device="cuda")
ref = gpt.torch_generate(big_torch, pr_t, 32)[0].cpu().numpy()
for compiled in (False, True):
    t0 = time.time()
    dec = gpt.StaticDecoder(big_torch, 1, P + 40, compile=compiled)
    dec.capture()
    dec.start(pr_t)
    got = []
    for _ in range(32):
        got.append(int(dec.tok[0, 0]))  # the token of this step, then the next one
        dec.replay()
    same = int(np.cumprod(np.array(got) == ref).sum())
    print(f"static decoder compile={compiled}: {same}/32 greedy tokens as eager "
          f"(setup {time.time() - t0:.1f} s)", flush=True)

for B in (1, 8):
    big_book.batch = B
    big_book.pos[:] = P - 1
    big_book.start_sampling(steps + 1)
    graph = gpt.capture_decode_graph(big_book)
    step_bytes = big_book.weight_bytes() + big_book.cache_bytes(P + steps // 2)
    bound_ms = step_bytes / (copy_gbps * 1e9) * 1e3
    rows = {"book graph": gpt.time_book_decode(big_book, steps, cached=P, graph=graph, name="book")}
    pr_t = torch.as_tensor(np.random.default_rng(B).integers(0, big.vocab, (B, P)), device="cuda")
    rows["torch eager"] = min((gpt.time_torch_decode(big_torch, pr_t, 64, cudnn=c) for c in (True, False)),
                              key=lambda t: t.ms)
    for compiled in (False, True):
        dec = gpt.StaticDecoder(big_torch, B, P + steps + 1, compile=compiled)
        dec.capture()
        rows[f"torch static graph compile={compiled}"] = gpt.time_torch_static_decode(dec, pr_t, steps)
    for k, t in rows.items():
        print(f"B={B} {k:<35} {t.ms:.3f} ms  {100 * bound_ms / t.ms:5.1f}% of bound ({bound_ms:.3f} ms)  "
              f"spread {100 * t.spread:.1f}%", flush=True)
