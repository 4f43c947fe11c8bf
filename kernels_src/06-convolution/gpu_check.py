"""One GPU run for chapter 6: check every kernel against PyTorch (float64) and time it against cuDNN.

    python3 kernels_src/06-convolution/gpu_check.py     # from the repository root, on a GPU with PyTorch
Prints a short table last: ms, TFLOP/s or GB/s, ratio to cuDNN, registers.
"""

from __future__ import annotations

import traceback

import numpy as np
import torch
import torch.nn.functional as F

import cudl
from cudl.grade.ch06 import out_size

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
D = "06-convolution"
rows: list[str] = []


def cdiv(a, b):
    return (a + b - 1) // b


def tt(a):
    return torch.from_dlpack(a)


def check(name, got, ref, rtol=4e-5):
    c = cudl.compare(got, ref, rtol=rtol)
    print(f"{'OK ' if c.ok else 'BAD'} {name}: {c}", flush=True)


def conv_case(N, C, H, W, K, R, S, stride, pad, dil):
    P, Q = out_size(H, R, stride, pad, dil), out_size(W, S, stride, pad, dil)
    x, w = cudl.randn((N, C, H, W)), cudl.randn((K, C, R, S))
    ref = F.conv2d(tt(x).double(), tt(w).double(), stride=stride, padding=pad, dilation=dil)
    return x, w, P, Q, ref.cpu().numpy()


def k4(nhwc=0, tile=(128, 128, 16, 64, 32, 2, 8, 4)):
    BM, BN, BK, WM, WN, WNITER, TM, TN = tile
    th = 32 * (BM // WM) * (BN // WN)
    c = dict(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, WNITER=WNITER, TM=TM, TN=TN, NUM_THREADS=th, NHWC=nhwc)
    return (
        cudl.load(
            f"{D}/conv2d_4_implicit_gemm.cu",
            "conv2d_4_implicit_gemm",
            options=[f"-D{k}={v}" for k, v in c.items()],
        ),
        th,
        BM,
        BN,
    )


def run_all(x, w, shape, kb=8, tile=None, gemm_opts=()):
    """Launchers for every forward kernel on one NCHW problem (NHWC copies made here)."""
    N, C, H, W, K, R, S, stride, pad, dil = shape
    P, Q = out_size(H, R, stride, pad, dil), out_size(W, S, stride, pad, dil)
    y = cudl.poisoned((N, K, P, Q))
    k1 = cudl.load(f"{D}/conv2d_1_direct.cu", "conv2d_1_direct")
    k2 = cudl.load(f"{D}/conv2d_2_smem_tiled.cu", "conv2d_2_smem_tiled", options=[f"-DKB={kb}"])
    IH, IW = 15 * stride + (R - 1) * dil + 1, 15 * stride + (S - 1) * dil + 1
    im2col = cudl.load(f"{D}/conv2d_3_im2col.cu", "im2col")
    back = cudl.load(f"{D}/conv2d_3_im2col.cu", "cnhw_to_nchw")
    gemm = cudl.load("05-matmul/matmul_8_double_buffered.cu", "matmul_8_double_buffered", options=gemm_opts)
    gbm = 128 if not gemm_opts else int([o for o in gemm_opts if o.startswith("-DBM=")][0][5:])
    gbn = 256 if not gemm_opts else int([o for o in gemm_opts if o.startswith("-DBN=")][0][5:])
    CRS, NPQ = C * R * S, N * P * Q
    col = cudl.xp.empty(CRS * NPQ, dtype=np.float32)
    yt = cudl.xp.empty(K * NPQ, dtype=np.float32)
    ki, th, BM, BN = k4(0, tile or (128, 128, 16, 64, 32, 2, 8, 4))
    kn, thn, BMn, BNn = k4(1, tile or (128, 128, 16, 64, 32, 2, 8, 4))
    xn = cudl.xp.ascontiguousarray(x.transpose(0, 2, 3, 1))
    wn = cudl.xp.ascontiguousarray(w.transpose(0, 2, 3, 1))
    yn = cudl.poisoned((N, P, Q, K))
    args = (N, C, H, W, K, R, S, P, Q, stride, pad, dil)

    def im2col_gemm():
        im2col((cdiv(CRS * NPQ, 256),), (256,), (N, C, H, W, R, S, P, Q, stride, pad, dil, x, col))
        gemm((cdiv(NPQ, gbn), cdiv(K, gbm)), (256,), (K, NPQ, CRS, w, col, yt))
        back((cdiv(N * K * P * Q, 256),), (256,), (N, K, P * Q, yt, y))

    return (
        y,
        yn,
        {
            "1 direct": lambda: k1((cdiv(N * K * P * Q, 256),), (256,), (*args, x, w, y)),
            "2 smem tiled": lambda: k2(
                (cdiv(P, 16) * cdiv(Q, 16), cdiv(K, kb), N),
                (16, 16),
                (*args, x, w, y),
                shared_mem=4 * (IH * IW + kb * R * S),
            ),
            "3 im2col+gemm": im2col_gemm,
            "4 implicit NCHW": lambda: ki((cdiv(NPQ, BN), cdiv(K, BM)), (th,), (*args, x, w, y)),
            "4 implicit NHWC": lambda: kn((cdiv(NPQ, BNn), cdiv(K, BMn)), (thn,), (*args, xn, wn, yn)),
        },
    )


def correctness():
    for shape in [
        (3, 8, 9, 7, 130, 3, 3, 2, 1, 1),
        (1, 7, 10, 12, 4, 2, 4, 2, 3, 3),
        (32, 256, 14, 14, 256, 3, 3, 1, 1, 1),
    ]:
        x, w, P, Q, ref = conv_case(*shape)
        y, yn, fns = run_all(x, w, shape)
        for name, fn in fns.items():
            y.fill(np.nan)
            yn.fill(np.nan)
            fn()
            cudl.sync()
            got = cudl.to_numpy(yn).transpose(0, 3, 1, 2) if "NHWC" in name else y
            check(f"{name} {shape}", got, ref)


def resnet():
    for shape in [
        (32, 256, 14, 14, 256, 3, 3, 1, 1, 1),
        (32, 128, 28, 28, 128, 3, 3, 1, 1, 1),
        (32, 64, 56, 56, 64, 3, 3, 1, 1, 1),
        (32, 512, 7, 7, 512, 3, 3, 1, 1, 1),
    ]:
        N, C, H, W, K, R, S, stride, pad, dil = shape
        x, w = cudl.randn((N, C, H, W)), cudl.randn((K, C, R, S))
        P, Q = out_size(H, R, stride, pad, dil), out_size(W, S, stride, pad, dil)
        flops = 2 * N * K * P * Q * C * R * S
        xt, wt = tt(x), tt(w)
        res = {}
        for bm in (False, True):
            torch.backends.cudnn.benchmark = bm
            res[f"cuDNN NCHW bench={bm}"] = cudl.bench(lambda: F.conv2d(xt, wt, padding=pad), flops=flops)
            xc, wc = xt.to(memory_format=torch.channels_last), wt.to(memory_format=torch.channels_last)
            res[f"cuDNN NHWC bench={bm}"] = cudl.bench(lambda: F.conv2d(xc, wc, padding=pad), flops=flops)
        torch.backends.cudnn.benchmark = False
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                F.conv2d(xt, wt, padding=pad)
                torch.cuda.synchronize()
            print(shape, "cuDNN kernels:", sorted({e.name[:100] for e in prof.events()}))
        except Exception as exc:  # noqa: BLE001
            print("profiler:", exc)
        y, yn, fns = run_all(x, w, shape)
        for name, fn in fns.items():
            if name == "1 direct" and C > 256:
                continue
            res[name] = cudl.bench(fn, flops=flops)
        for tile in [
            (128, 128, 16, 64, 32, 2, 8, 4),
            (64, 128, 16, 32, 64, 2, 8, 4),
            (128, 64, 16, 64, 32, 2, 8, 4),
            (64, 64, 16, 32, 32, 2, 4, 4),
            (128, 256, 16, 64, 64, 4, 8, 4),
            (128, 128, 8, 64, 32, 2, 8, 4),
            (256, 128, 16, 128, 32, 2, 8, 4),
            (128, 128, 16, 64, 64, 4, 8, 4),
        ]:
            for nhwc in (0, 1):
                k, th, BM, BN = k4(nhwc, tile)
                xa = cudl.xp.ascontiguousarray(x.transpose(0, 2, 3, 1)) if nhwc else x
                wa = cudl.xp.ascontiguousarray(w.transpose(0, 2, 3, 1)) if nhwc else w
                t = cudl.bench(
                    lambda: k(
                        (cdiv(N * P * Q, BN), cdiv(K, BM)),
                        (th,),
                        (N, C, H, W, K, R, S, P, Q, stride, pad, dil, xa, wa, y),
                    ),
                    flops=flops,
                )
                res[f"4 {'NHWC' if nhwc else 'NCHW'} {tile} r{k.num_regs} l{k.local_bytes}"] = t
        for kb in (4, 16):
            y2, _, fns2 = run_all(x, w, shape, kb=kb)
            res[f"2 smem KB={kb}"] = cudl.bench(fns2["2 smem tiled"], flops=flops)
        _, _, fns3 = run_all(
            x,
            w,
            shape,
            gemm_opts=(
                "-DBM=128",
                "-DBN=128",
                "-DBK=16",
                "-DWM=64",
                "-DWN=32",
                "-DWNITER=2",
                "-DTM=8",
                "-DTN=4",
                "-DNUM_THREADS=256",
            ),
        )
        res["3 im2col+gemm 128x128"] = cudl.bench(fns3["3 im2col+gemm"], flops=flops)
        base = res["cuDNN NCHW bench=False"]
        print(f"== {shape}: {flops / 1e9:.2f} GFLOP")
        for name, t in res.items():
            print(
                f"  {name:58s} {t.ms:8.4f} ms {t.tflops:7.2f} TFLOP/s  x{t.speedup_over(base):5.2f}",
                flush=True,
            )


def depthwise():
    copy = cudl.ceilings()["copy_gbps"]
    kd = cudl.load(f"{D}/conv2d_5_depthwise.cu", "conv2d_5_depthwise")
    print("== depthwise")
    for N, C, H, W, stride in [
        (32, 32, 112, 112, 1),
        (32, 96, 112, 112, 2),
        (32, 144, 56, 56, 1),
        (32, 144, 56, 56, 2),
        (32, 192, 28, 28, 1),
        (32, 384, 14, 14, 1),
        (32, 576, 14, 14, 1),
        (32, 960, 7, 7, 1),
        (32, 13, 31, 29, 2),
    ]:
        x, w = cudl.randn((N, C, H, W)), cudl.randn((C, 1, 3, 3))
        P, Q = out_size(H, 3, stride, 1), out_size(W, 3, stride, 1)
        y = cudl.poisoned((N, C, P, Q))
        nbytes = 4 * (N * C * H * W + N * C * P * Q + 9 * C)
        fn = lambda: kd(
            (cdiv(N * C * cdiv(P, 4) * cdiv(Q, 4), 256),), (256,), (N, C, H, W, P, Q, stride, 1, x, w, y)
        )  # noqa
        fn()
        ref = F.conv2d(tt(x).double(), tt(w).double(), stride=stride, padding=1, groups=C)
        check(f"depthwise {(N, C, H, W, stride)}", y, ref.cpu().numpy())
        xt, wt = tt(x), tt(w)
        t_dnn = cudl.bench(lambda: F.conv2d(xt, wt, stride=stride, padding=1, groups=C), bytes=nbytes)
        xc = xt.to(memory_format=torch.channels_last)
        t_dnn_cl = cudl.bench(lambda: F.conv2d(xc, wt, stride=stride, padding=1, groups=C), bytes=nbytes)
        t = cudl.bench(fn, bytes=nbytes)
        print(
            f"  {(N, C, H, W, stride)}: ours {t.ms:.4f} ms {t.gbps:6.0f} GB/s ({100 * t.gbps / copy:3.0f}% copy) | "
            f"cuDNN {t_dnn.ms:.4f} ms {100 * t_dnn.gbps / copy:3.0f}% | cuDNN NHWC {100 * t_dnn_cl.gbps / copy:3.0f}% "
            f"| x{t.speedup_over(t_dnn):.2f} regs {kd.num_regs}",
            flush=True,
        )


print(cudl.ceilings(), flush=True)
for part in (correctness, resnet, depthwise):
    try:
        part()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
