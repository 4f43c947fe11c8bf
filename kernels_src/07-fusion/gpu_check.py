"""One GPU run for chapter 7: check every kernel against PyTorch (float64), then time it against PyTorch
and the Triton kernels at 32768 x 4096 (fp32, fp16), with a few launch shapes to tune from.

    python3 kernels_src/07-fusion/gpu_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import cudl

sys.path.insert(0, str(Path(__file__).parent))
import triton_rows  # noqa: E402

xp = cudl.xp
F32 = "07-fusion/fused_rows.cu"
TORCH_DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CT = {"float32": "float", "float16": "__half", "bfloat16": "bfloat16"}
rows_t = []


def threads_for(cols: int, per_thread: int = 8) -> int:
    want = max(-(-cols // per_thread), -(-cols // 16))
    return max(32, min(1024, -(-want // 32) * 32))


def tt(a, dt):  # cupy array -> torch tensor of dtype name dt
    return torch.from_dlpack(a.view(xp.int16)).view(torch.bfloat16) if dt == "bfloat16" else torch.from_dlpack(a)


def new(shape, dt):
    return xp.empty(shape, np.uint16 if dt == "bfloat16" else dt)


def err(got, ref):
    g, r = got.double(), ref.double()
    return float((g - r).norm() / r.norm())


def line(*a):
    s = " | ".join(str(x) for x in a)
    print(s, flush=True)
    rows_t.append(s)


def main():
    torch.manual_seed(0)
    R, C = 32768, 4096
    sms = cudl.device_info()["sms"]
    for dt in ("float32", "float16", "bfloat16"):
        tdt = TORCH_DT[dt]
        # --- correctness on odd shapes and the big one
        for r, c in ((7, 1), (5, 33), (3, 1000), (64, 4097), (9, 16384), (R, C)):
            xt = (torch.randn(r, c, device="cuda") * 30).to(tdt)  # large magnitude: exp overflows w/o max
            x = xp.from_dlpack(xt.view(torch.int16)).view(np.uint16) if dt == "bfloat16" else xp.from_dlpack(xt)
            ref = torch.softmax(xt.double(), -1)
            for vpt in (8,):
                y = new((r, c), dt)
                y.fill(0x7FC1 if dt == "bfloat16" else np.nan)
                k = cudl.load(F32, f"softmax<{CT[dt]}>")
                k((r,), (threads_for(c, vpt),), (x, y, r, c))
                e = err(tt(y, dt), ref)
                assert e < (1e-5 if dt == "float32" else 1e-2), (dt, r, c, e)
            w = (torch.randn(c, device="cuda")).to(tdt)
            b = (torch.randn(c, device="cuda")).to(tdt)
            wx = xp.from_dlpack(w.view(torch.int16)).view(np.uint16) if dt == "bfloat16" else xp.from_dlpack(w)
            bx = xp.from_dlpack(b.view(torch.int16)).view(np.uint16) if dt == "bfloat16" else xp.from_dlpack(b)
            y = new((r, c), dt)
            mean, rstd = xp.empty(r, np.float32), xp.empty(r, np.float32)
            cudl.load(F32, f"layernorm_forward<{CT[dt]}>")((r,), (threads_for(c, 8),),
                                                          (x, wx, bx, y, mean, rstd, r, c, 1e-5))
            ref = F.layer_norm(xt.double(), (c,), w.double(), b.double(), 1e-5)
            e = err(tt(y, dt), ref)
            assert e < (1e-5 if dt == "float32" else 1e-2), ("ln", dt, r, c, e)
            cudl.load(F32, f"rmsnorm_forward<{CT[dt]}>")((r,), (threads_for(c, 8),), (x, wx, y, rstd, r, c, 1e-5))
            ref = F.rms_norm(xt.double(), (c,), w.double(), 1e-5)
            e = err(tt(y, dt), ref)
            assert e < (1e-5 if dt == "float32" else 1e-2), ("rms", dt, r, c, e)
            # backward
            xd = xt.double().requires_grad_()
            wd, bd = w.double().requires_grad_(), b.double().requires_grad_()
            out = F.layer_norm(xd, (c,), wd, bd, 1e-5)
            dyt = torch.randn(r, c, device="cuda").to(tdt)
            out.backward(dyt.double())
            cudl.load(F32, f"layernorm_forward<{CT[dt]}>")((r,), (threads_for(c, 8),),
                                                          (x, wx, bx, y, mean, rstd, r, c, 1e-5))
            dyx = xp.from_dlpack(dyt.view(torch.int16)).view(np.uint16) if dt == "bfloat16" else xp.from_dlpack(dyt)
            P = min(r, 2 * sms)
            dx, dwp, dbp = new((r, c), dt), xp.empty((P, c), np.float32), xp.empty((P, c), np.float32)
            dw, db = new(c, dt), new(c, dt)
            cudl.load(F32, f"layernorm_backward<{CT[dt]}>")((P,), (threads_for(c, 16),),
                                                           (dyx, x, wx, mean, rstd, dx, dwp, dbp, r, c))
            cudl.load(F32, f"layernorm_backward_reduce<{CT[dt]}>")(((c + 31) // 32,), (32, 8),
                                                                  (dwp, dbp, dw, db, P, c))
            for got, refg, nm in ((dx, xd.grad, "dx"), (dw, wd.grad, "dw"), (db, bd.grad, "db")):
                e = err(tt(got, dt), refg)
                assert e < (1e-5 if dt == "float32" else 2e-2), ("bwd", nm, dt, r, c, e)
        print(f"{dt}: all kernels match PyTorch (float64)", flush=True)
    for name in ("softmax_1_three_pass.cu:softmax_three_pass", "softmax_2_online.cu:softmax_online"):
        f, k = name.split(":")
        xt = torch.randn(R, C, device="cuda") * 30
        y = xp.full((R, C), np.nan, np.float32)
        cudl.load("07-fusion/" + f, k)((R // 8,), (256,), (xp.from_dlpack(xt), y, R, C))
        assert err(torch.from_dlpack(y), torch.softmax(xt.double(), -1)) < 1e-5
    xt = torch.randn(R, C, device="cuda")
    y = xp.empty((R, C), np.float32)
    m, rs = xp.empty(R, np.float32), xp.empty(R, np.float32)
    w, b = xp.asarray(np.random.randn(C).astype(np.float32)), xp.asarray(np.random.randn(C).astype(np.float32))
    cudl.load("07-fusion/layernorm_1_welford.cu", "layernorm_welford")((R,), (256,), (xp.from_dlpack(xt), w, b, y, m, rs,
                                                                                  R, C, 1e-5))
    assert err(torch.from_dlpack(y), F.layer_norm(xt.double(), (C,), torch.from_dlpack(w).double(),
                                                    torch.from_dlpack(b).double(), 1e-5)) < 1e-5
    print("versions 1, 2 and Welford match", flush=True)

    # ------------------------------------------------------------------ timing
    copy = cudl.ceilings()["copy_gbps"]
    line("copy GB/s", f"{copy:.0f}")
    for dt in ("float32", "float16"):
        tdt, s = TORCH_DT[dt], np.dtype(dt).itemsize
        xt = torch.randn(R, C, device="cuda").to(tdt)
        x = xp.from_dlpack(xt)
        y = xp.empty((R, C), dt)
        yt = torch.from_dlpack(y)
        N = R * C
        b2 = 2 * N * s
        res = {}
        res["torch softmax"] = cudl.bench(lambda: torch.softmax(xt, -1),
                                          bytes=b2)
        res["triton softmax"] = cudl.bench(lambda: triton_rows.softmax(xt, yt), bytes=b2)
        for vpt in (4, 8, 16):
            k = cudl.load(F32, f"softmax<{CT[dt]}>")
            th = threads_for(C, vpt)
            res[f"cuda softmax vpt{vpt} t{th}"] = cudl.bench(lambda: k((R,), (th,), (x, y, R, C)), bytes=b2)
        if dt == "float32":
            for f, kn in (("softmax_1_three_pass.cu", "softmax_three_pass"), ("softmax_2_online.cu", "softmax_online")):
                k1 = cudl.load("07-fusion/" + f, kn)
                for th in (128, 256):
                    res[f"{kn} t{th}"] = cudl.bench(lambda: k1((R // (th // 32),), (th,), (x, y, R, C)), bytes=b2)

            def unfused():
                mm = xt.amax(-1, keepdim=True)
                z = xt - mm
                e = torch.exp(z)
                ss = e.sum(-1, keepdim=True)
                return e / ss
            res["unfused 5 ops"] = cudl.bench(unfused, bytes=b2)
        w = torch.randn(C, device="cuda").to(tdt)
        bb = torch.randn(C, device="cuda").to(tdt)
        wx, bx = xp.from_dlpack(w), xp.from_dlpack(bb)
        mean, rstd = torch.empty(R, device="cuda"), torch.empty(R, device="cuda")
        mx, rx = xp.from_dlpack(mean), xp.from_dlpack(rstd)
        res["torch layernorm"] = cudl.bench(lambda: F.layer_norm(xt, (C,), w, bb, 1e-5), bytes=b2)
        res["triton layernorm"] = cudl.bench(lambda: triton_rows.layernorm(xt, w, bb, yt, mean, rstd), bytes=b2)
        for vpt in (4, 8, 16):
            k = cudl.load(F32, f"layernorm_forward<{CT[dt]}>")
            th = threads_for(C, vpt)
            res[f"cuda layernorm vpt{vpt} t{th}"] = cudl.bench(
                lambda: k((R,), (th,), (x, wx, bx, y, mx, rx, R, C, 1e-5)), bytes=b2)
        if dt == "float32":
            kw = cudl.load("07-fusion/layernorm_1_welford.cu", "layernorm_welford")
            for th in (256, 512):
                res[f"welford t{th}"] = cudl.bench(lambda: kw((R,), (th,), (x, wx, bx, y, mx, rx, R, C, 1e-5)),
                                                   bytes=b2)
        res["torch rmsnorm"] = cudl.bench(lambda: F.rms_norm(xt, (C,), w, 1e-5), bytes=b2)
        for vpt in (4, 8, 16):
            k = cudl.load(F32, f"rmsnorm_forward<{CT[dt]}>")
            th = threads_for(C, vpt)
            res[f"cuda rmsnorm vpt{vpt} t{th}"] = cudl.bench(lambda: k((R,), (th,), (x, wx, y, rx, R, C, 1e-5)),
                                                             bytes=b2)
        # backward
        dyt = torch.randn(R, C, device="cuda").to(tdt)
        dyx = xp.from_dlpack(dyt)
        b3 = 3 * N * s
        res["torch layernorm bwd"] = cudl.bench(
            lambda: torch.ops.aten.native_layer_norm_backward(dyt, xt, [C], mean, rstd, w, bb, [True, True, True]),
            bytes=b3)
        kb = cudl.load(F32, f"layernorm_backward<{CT[dt]}>")
        kr = cudl.load(F32, f"layernorm_backward_reduce<{CT[dt]}>")
        dx = xp.empty((R, C), dt)
        dw, db = xp.empty(C, dt), xp.empty(C, dt)
        for vpt in (8, 16):
            for per_sm in (1, 2, 4, 8):
                th = threads_for(C, vpt)
                P = per_sm * sms
                dwp, dbp = xp.empty((P, C), np.float32), xp.empty((P, C), np.float32)

                def bwd(P=P, th=th, dwp=dwp, dbp=dbp):
                    kb((P,), (th,), (dyx, x, wx, mx, rx, dx, dwp, dbp, R, C))
                    kr(((C + 31) // 32,), (32, 8), (dwp, dbp, dw, db, P, C))
                res[f"cuda ln bwd vpt{vpt} t{th} P{per_sm}xSM"] = cudl.bench(bwd, bytes=b3)
        print(f"regs: softmax {cudl.load(F32, f'softmax<{CT[dt]}>').num_regs}, bwd {kb.num_regs}, "
              f"bwd local {kb.local_bytes}", flush=True)
        for k, t in res.items():
            line(dt, k, f"{t.ms:.4f} ms", f"{t.gbps:.0f} GB/s", f"{100 * t.gbps / copy:.0f}%")
    # sweep snapshot
    for C2 in (128, 512, 2048, 8192, 16384):
        R2 = (2**27) // C2
        xt = torch.randn(R2, C2, device="cuda")
        yt = torch.empty_like(xt)
        x, y = xp.from_dlpack(xt), xp.from_dlpack(yt)
        k = cudl.load(F32, "softmax<float>")
        for vpt in (4, 8, 16):
            th = threads_for(C2, vpt)
            t = cudl.bench(lambda: k((R2,), (th,), (x, y, R2, C2)), bytes=8 * R2 * C2)
            line("sweep", C2, f"cuda vpt{vpt}", f"{t.gbps:.0f}")
        line("sweep", C2, "torch", f"{cudl.bench(lambda: torch.softmax(xt, -1), bytes=8 * R2 * C2).gbps:.0f}")
        line("sweep", C2, "triton", f"{cudl.bench(lambda: triton_rows.softmax(xt, yt), bytes=8 * R2 * C2).gbps:.0f}")
    print("\n".join(rows_t))


if __name__ == "__main__":
    main()
