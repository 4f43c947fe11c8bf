"""The attention backward of kernels_src/15-capstone/ on a real GPU, against float64 and torch's SDPA backward.

    make gpu-test                                                    # or, alone:
    CUDL_BACKEND=gpu python -m pytest -q tests/gpu/test_attention_backward_gpu.py
    CUDL_BACKEND=gpu python tests/gpu/test_attention_backward_gpu.py  # timing vs SDPA's backward
    CUDL_BACKEND=gpu python tests/gpu/test_attention_backward_gpu.py --gpt2 --versions 2 3  # the capstone's shape

The tests feed O and L of chapter 12's flash_attn_2_mma (its GPU build) to the backward, at an odd length over
many tiles, and check dQ, dK and dV within attention_backward.error_bounds of a float64 backward; SDPA's own
gradients of the same fp16 inputs are checked against the same reference and printed beside ours.
The script times our three launches against SDPA's backward (torch.autograd.grad of its output, the forward
not timed) at batch 4 x 8 heads, S = 4096, d = 64 and 128, causal and not (--gpt2: the capstone's GPT-2 small
attention, batch 16 x 12 heads, S = 1024, d = 64, causal), for every version (--versions: some), alternating
the two in rounds (cudl.bench_pair), and writes the numbers to $OUT/attn_bwd.json (attn_bwd_gpt2.json) when
OUT is set. Version 3 needs sm_80 or newer (91-113 KiB of shared memory per block): skipped on older GPUs.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import cudl
from cudl.compile import KERNELS_DIR

cupy = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")
F = torch.nn.functional

sys.path.insert(0, str(KERNELS_DIR / "15-capstone"))
import attention_backward as ab  # noqa: E402


def tt(a):
    return torch.from_dlpack(a)


def qkvdo(bh: int, S: int, d: int):
    rng = np.random.default_rng()
    return [cupy.asarray(rng.standard_normal((bh, S, d)).astype(np.float16)) for _ in range(4)]


def runs_here(version: int) -> bool:
    """Version 3 asks for more shared memory per block than a T4 (sm_75) has."""
    return version != 3 or int(cupy.cuda.Device().compute_capability) >= 80


def sdpa_grads(q, k, v, do, causal: bool, batch: int):
    """SDPA's (default backend) dQ, dK, dV of [B, H, S, D] views of our [BH, S, D] arrays."""
    bh, S, d = q.shape
    shape = (batch, bh // batch, S, d)
    tq, tk, tv = (tt(a).view(shape).detach().clone().requires_grad_() for a in (q, k, v))
    o = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    return torch.autograd.grad(o, (tq, tk, tv), tt(do).view(shape))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("version", ab.VERSIONS)
def test_backward_against_float64_and_sdpa(version, d, causal):
    if not runs_here(version):
        pytest.skip("version 3 needs sm_80 or newer (91-113 KiB of shared memory per block)")
    batch, heads, S = 2, 3, 777  # 25 key blocks of 32 (version 2: 13 of 64), the last partial
    q, k, v, do = qkvdo(batch * heads, S, d)
    o, lse = ab.forward(q, k, v, causal)
    got = ab.backward(q, k, v, o, lse, do, causal, version=version)
    theirs = sdpa_grads(q, k, v, do, causal, batch)
    cudl.sync()
    ref = ab.reference(q, k, v, do, causal)
    o_err, lse_err = ab.forward_error_bounds(q, k, v, ref)
    bounds = ab.error_bounds(q, k, v, do, ref, o_err=o_err, lse_err=lse_err, fp16_p=version >= 2)
    bad = []
    for name, ours, sdpa in zip(("dq", "dk", "dv"), got, theirs):
        size = float(np.linalg.norm(ref[name]))
        mine = cudl.to_numpy(ours).astype(np.float64)
        err = float(np.linalg.norm(mine - ref[name])) if np.isfinite(mine).all() else float("nan")
        their = float(np.linalg.norm(sdpa.detach().double().cpu().numpy().reshape(mine.shape) - ref[name]))
        print(f"version {version} d={d} causal={causal} {name}: ours {err / size:.2e}, SDPA {their / size:.2e}, "
              f"bound {bounds[name] / size:.2e} (relative to ||float64||)")
        if not err <= bounds[name]:
            bad.append(f"{name}: error {err / size:.2e} > bound {bounds[name] / size:.2e}")
    assert not bad, "\n".join(bad)


def time_against_sdpa(batch: int = 4, heads: int = 8, S: int = 4096, dims=(64, 128), causals=(False, True),
                      versions=tuple(ab.VERSIONS)) -> dict:
    """Our backward (prep + main + dQ to fp16, each of `versions`) and SDPA's, by default at the sizes of
    chapter 12's targets."""
    results: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": []}
    versions = [v for v in versions if runs_here(v)]
    for d in dims:
        for causal in causals:
            bh = batch * heads
            q, k, v, do = qkvdo(bh, S, d)
            o, lse = ab.forward(q, k, v, causal)
            out = (cupy.empty((bh, S, d), np.float32), cupy.empty((bh, S), np.float32),
                   *(cupy.empty((bh, S, d), np.float16) for _ in range(3)))
            shape = (batch, heads, S, d)
            tq, tk, tv = (tt(a).view(shape).detach().clone().requires_grad_() for a in (q, k, v))
            to = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            tdo = tt(do).view(shape)

            def sdpa_backward():
                torch.autograd.grad(to, (tq, tk, tv), tdo, retain_graph=True)

            # 5 products of 2 S^2 d flops per head (S, dP, dV, dK, dQ); half under the causal mask
            flops = 10 * S * S * d * bh / (2 if causal else 1)
            for version in versions:
                name = ab.VERSIONS[version]

                def ours(version=version):
                    ab.backward(q, k, v, o, lse, do, causal, out=out, version=version)

                pair = cudl.bench_pair(ours, sdpa_backward, rounds=3, flops=flops, compute="fp16",
                                       name=name, baseline_name="SDPA backward")
                ms, base_ms = pair.timing.ms, pair.baseline.ms
                row = dict(version=version, d=d, causal=causal, S=S, bh=bh, ms=ms, sdpa_ms=base_ms,
                           tflops=flops / ms / 1e9, sdpa_tflops=flops / base_ms / 1e9,
                           percent_of_sdpa=100 * pair.ratio, sign=pair.sign())  # +1 faster, -1 slower, 0 noise
                results["runs"].append(row)
                print(f"{name:22} d={d:3} causal={causal!s:5}: {ms:8.2f} ms ({row['tflops']:6.1f} TFLOP/s), "
                      f"SDPA backward {base_ms:7.2f} ms ({row['sdpa_tflops']:6.1f} TFLOP/s): "
                      f"{row['percent_of_sdpa']:5.1f}% of SDPA", flush=True)
    return results


if __name__ == "__main__":
    import argparse

    cli = argparse.ArgumentParser(description="time the attention backward against SDPA's")
    cli.add_argument("--gpt2", action="store_true", help="batch 16 x 12 heads, S = 1024, d = 64, causal")
    cli.add_argument("--versions", type=int, nargs="+", default=list(ab.VERSIONS), choices=list(ab.VERSIONS))
    opts = cli.parse_args()
    shape = dict(batch=16, heads=12, S=1024, dims=(64,), causals=(True,)) if opts.gpt2 else {}
    res = time_against_sdpa(**shape, versions=tuple(opts.versions))
    if os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "attn_bwd_gpt2.json" if opts.gpt2 else "attn_bwd.json")
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
        print("wrote", path)
