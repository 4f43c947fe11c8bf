"""One GPU run for chapter 12: check every attention kernel (float64 reference, PyTorch's SDPA) and time it
against torch.nn.functional.scaled_dot_product_attention, then measure memory against S.

    python3 kernels_src/12-flash-attention/gpu_check.py     # from the repository root, on a GPU with PyTorch
Problem of the targets: fp16, d = 128, S = 4096, batch x heads = 32 (4 x 8), causal and not. Prints a short
table last (ms, TFLOP/s, % of SDPA); writes every number to $OUT/ch12.json when OUT is set.
"""

from __future__ import annotations

import json
import os
import traceback

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import cudl
from cudl.grade import ch12

BATCH, HEADS, S_BIG, D_BIG = 4, 8, 4096, 128
results: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
summary: list[str] = []


def tt(a):
    return torch.from_dlpack(a)


def qkv(bh: int, S: int, d: int):
    rng = np.random.default_rng()
    return [cudl.xp.asarray(rng.standard_normal((bh, S, d)).astype(np.float16)) for _ in range(3)]


def sdpa(q, k, v, causal: bool):
    """SDPA on [B, H, S, D] views of our [BH, S, D] arrays."""
    bh, S, d = q.shape
    shape = (BATCH, bh // BATCH, S, d) if bh % BATCH == 0 else (1, bh, S, d)
    return F.scaled_dot_product_attention(*(tt(a).view(shape) for a in (q, k, v)), is_causal=causal)


def report(name: str, o, ro, lse=None, rl=None, tol: float = 2e-3) -> bool:
    o = cudl.to_numpy(o).astype(np.float64)
    ro = np.asarray(ro, np.float64).reshape(o.shape)
    err = float(np.linalg.norm(o - ro) / np.linalg.norm(ro)) if np.isfinite(o).all() else float("nan")
    lerr = float(np.abs(cudl.to_numpy(lse) - np.asarray(rl).reshape(-1, o.shape[1])).max()) if lse is not None else 0
    ok = err < tol and lerr < 1e-3
    print(f"{'OK ' if ok else 'BAD'} {name}: O rel err {err:.2e}, LSE max abs err {lerr:.1e}", flush=True)
    results.setdefault("checks", {})[name] = dict(ok=ok, err=err, lse_err=lerr)
    return ok


BUILDS = {  # label: (kernel, build options)
    "2 mma.sync": ("flash_attn_2_mma", {}),
    "2 mma.sync sm75 path": ("flash_attn_2_mma", dict(sm75=True)),
    "3 32 rows/warp": ("flash_attn_3_32rows", {}),
    "4 wgmma": ("flash_attn_4_wgmma", dict(warps=8)),
    "5 overlap": ("flash_attn_5_overlap", dict(warps=12)),
}


def correctness():
    for d in (64, 128):
        for causal in (False, True):
            for bh, S in [(3, 1), (2, 17), (3, 100), (2, 1000)]:
                q, k, v = qkv(bh, S, d)
                ro, rl = ch12.reference(q, k, v, causal)
                for label, (name, build) in BUILDS.items():
                    if name in ch12.HOPPER and d != 128:
                        continue
                    o, lse = ch12.flash_attention(name, q, k, v, causal, **build)
                    cudl.sync()
                    report(f"{label} d={d} causal={causal} bh={bh} S={S}", o, ro, lse, rl)
                if S <= 1000:
                    report(f"naive d={d} causal={causal} bh={bh} S={S}", ch12.naive_attention(q, k, v, causal), ro)
                report(f"SDPA d={d} causal={causal} bh={bh} S={S}", sdpa(q, k, v, causal).reshape(bh, S, d).cpu(), ro)


def flops(S: int, d: int, bh: int, causal: bool) -> float:
    return 4 * bh * S * S * d / (2 if causal else 1)


def timed(label: str, fn, S: int, d: int, bh: int, causal: bool) -> cudl.Timing | None:
    try:
        t = cudl.bench(fn, flops=flops(S, d, bh, causal))
    except Exception as exc:  # noqa: BLE001
        print(f"   {label}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        return None
    print(f"   {label:42s} {t.ms:8.3f} ms {t.tflops:6.1f} TFLOP/s", flush=True)
    return t


def sdpa_backend_name(q, k, v, causal) -> str:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        sdpa(q, k, v, causal)
        torch.cuda.synchronize()
    return "; ".join(sorted({e.name[:90] for e in prof.events()}))


FAST, MB3 = "--use_fast_math", "-DMIN_BLOCKS=3"
SWEEP = [  # kernel, warps, BC, options (runs 1-2 on the H100 narrowed the sweep to these)
    ("flash_attn_2_mma", 8, 64, ()), ("flash_attn_3_32rows", 4, 64, ()),
    (ch12.WGMMA, 8, 64, ("-DMIN_BLOCKS=2",)), (ch12.WGMMA, 16, 64, ()),
    ("flash_attn_5_overlap", 12, 64, ()), ("flash_attn_5_overlap", 8, 64, ()),
    ("flash_attn_5_overlap", 16, 64, ()), ("flash_attn_5_overlap", 12, 64, (FAST,)),
]


def speed():
    bh, S, d = BATCH * HEADS, S_BIG, D_BIG
    q, k, v = qkv(bh, S, d)
    o, lse = cudl.poisoned((bh, S, d), np.float16), cudl.poisoned((bh, S))
    for causal in (False, True):
        print(f"== d={d} S={S} bh={bh} causal={causal}; SDPA runs: {sdpa_backend_name(q, k, v, causal)}", flush=True)
        ref = sdpa(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), causal).reshape(bh, S, d)
        ref = ref.double().cpu().numpy()
        res: dict[str, cudl.Timing | None] = {}
        res["SDPA (default)"] = timed("SDPA (default)", lambda: sdpa(q, k, v, causal), S, d, bh, causal)
        for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                   SDPBackend.MATH):
            def run(be=be):
                with sdpa_kernel(be):
                    return sdpa(q, k, v, causal)
            res[f"SDPA {be.name}"] = timed(f"SDPA {be.name}", run, S, d, bh, causal)
        bufs = (cudl.xp.empty((bh, S, S), np.float32), cudl.xp.empty((bh, S, S), np.float32), o)
        out = ch12.naive_attention(q, k, v, causal, bufs)
        report(f"naive vs SDPA fp32 causal={causal}", out, ref)
        res["1 naive (3 kernels)"] = timed("1 naive (3 kernels)",
                                          lambda: ch12.naive_attention(q, k, v, causal, bufs), S, d, bh, causal)
        bufs = out = None  # 2 S^2 floats per head back to the pool
        best: dict[str, tuple[float, str]] = {}
        for name, warps, bc, opts in SWEEP:
            label = f"{name} w{warps} bc{bc} {' '.join(opts)}".strip()
            try:
                kern = ch12.flash_kernel(name, d, warps=warps, bc=bc, options=opts)
                o.fill(np.nan)
                ch12.flash_launch(kern, q, k, v, o, lse, causal)
                cudl.sync()
                if not report(label + f" causal={causal}", o, ref):
                    continue
            except Exception as exc:  # noqa: BLE001
                print(f"   {label}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            t = timed(f"{label} r{kern.num_regs} l{kern.local_bytes}",
                      lambda: ch12.flash_launch(kern, q, k, v, o, lse, causal), S, d, bh, causal)
            res[label] = t
            if t and (name not in best or t.ms < best[name][0]):
                best[name] = (t.ms, label)
        base = res["SDPA (default)"]
        results.setdefault("speed", {})[f"causal={causal}"] = {
            k: (None if t is None else dict(ms=t.ms, tflops=t.tflops, pct_sdpa=100 * base.ms / t.ms))
            for k, t in res.items()}
        summary.append(f"causal={causal}: SDPA {base.ms:.3f} ms {base.tflops:.0f} TFLOP/s")
        shown = ["SDPA FLASH_ATTENTION", "SDPA CUDNN_ATTENTION", "1 naive (3 kernels)"]
        for key in shown + [b[1] for b in best.values()]:
            t = res.get(key)
            if t is not None:
                summary.append(f"  {key:40s} {t.ms:8.3f} ms {t.tflops:6.1f} TFLOP/s {100 * base.ms / t.ms:5.1f}% SDPA")


def memory():
    """Peak bytes each method allocates beyond Q, K, V, for S = 1k ... 16k at bh = 32, d = 128."""
    bh, d = BATCH * HEADS, D_BIG
    kern = ch12.flash_kernel("flash_attn_2_mma", d)
    mem = {}
    for S in (1024, 2048, 4096, 8192, 16384):
        q, k, v = qkv(bh, S, d)
        row = {"flash_attn_2_mma (O + LSE)": bh * S * d * 2 + bh * S * 4,
               "naive kernels (S, P, O)": 2 * bh * S * S * 4 + bh * S * d * 2}
        for label, be in [("SDPA (default)", None), ("SDPA MATH", SDPBackend.MATH)]:
            if be == SDPBackend.MATH and S > 8192:
                continue
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            if be is None:
                out = sdpa(q, k, v, False)
            else:
                with sdpa_kernel(be):
                    out = sdpa(q, k, v, False)
            torch.cuda.synchronize()
            row[label] = torch.cuda.max_memory_allocated() - before
            del out
        o, lse = cudl.poisoned((bh, S, d), np.float16), cudl.poisoned((bh, S))
        t = cudl.bench(lambda: ch12.flash_launch(kern, q, k, v, o, lse, False), flops=flops(S, d, bh, False))
        row["flash_attn_2_mma ms"] = t.ms
        mem[S] = row
        print(f"   S={S}: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" if "ms" not in k else f"{k} {v:.2f}"
                                       for k, v in row.items()), flush=True)
        q = k = v = o = lse = None
        cudl.xp.get_default_memory_pool().free_all_blocks()
    results["memory"] = mem


print(results, flush=True)
for part in (correctness, speed, memory):
    try:
        part()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "ch12.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
bad = [k for k, c in results.get("checks", {}).items() if not c["ok"]]
print(f"== checks: {len(results.get('checks', {})) - len(bad)} OK, {len(bad)} BAD {bad[:5]}")
print("\n".join(summary))
