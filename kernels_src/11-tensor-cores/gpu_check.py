"""One GPU run for chapter 11: check every kernel against a float64 product and time it at 4096^3
against cuBLAS (fp16 in, fp32 accumulate, fp32 out: torch.mm(..., out_dtype=torch.float32)) in the
same process.

    python3 kernels_src/11-tensor-cores/gpu_check.py           # the chapter's kernels
    python3 kernels_src/11-tensor-cores/gpu_check.py --sweep   # and every tuning variant (-D flags)
    python3 kernels_src/11-tensor-cores/gpu_check.py --side    # the chapter's picks, each timed in
                                                               # turn with cuBLAS (clocks drift)

Each variant is first checked on three shapes (fresh random fp16 inputs, NaN-poisoned C, relative error
by norm vs float64 < 1e-3); only the correct ones are timed. Prints a table last: ms, TFLOP/s, % of
cuBLAS (fp32 out), registers. The wgmma kernels (4, 5) run on sm_90 only.
"""

from __future__ import annotations

import argparse
import time
import traceback

import numpy as np
import torch

import cudl

D = "11-tensor-cores"
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
parser = argparse.ArgumentParser()
parser.add_argument("--sweep", action="store_true", help="time every tuning variant too")
parser.add_argument("--side", action="store_true",
                    help="only the chapter's picks, alternating with cuBLAS (5 rounds, medians)")
ARGS = parser.parse_args()
SWEEP = ARGS.sweep
cc = torch.cuda.get_device_capability()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
T0 = time.time()

# name: (file, kernel, threads, (BM, BN, BK), options); "persistent" kernels get one block per SM
W128 = ("-DBM=128", "-DBN=128", "-DWARPS_N=4")
VARIANTS: dict[str, tuple] = {
    "1 wmma 64x64": ("hgemm_1_wmma", "hgemm_1_wmma", 128, (64, 64, 32), ()),
    "1 wmma 128x128": ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 128, 32), W128),
    "2 mma+ldmatrix": ("hgemm_2_mma_ldmatrix", "hgemm_2_mma_ldmatrix", 256, (128, 128, 32), ()),
    "3 cp.async 128 s3": ("hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, 128, 32), ()),
}
if SWEEP:
    VARIANTS["1 wmma 64x64 dbuf"] = ("hgemm_1_wmma", "hgemm_1_wmma", 128, (64, 64, 32),
                                     ("-DDOUBLE_BUFFER",))
    VARIANTS["1 wmma 128x128 dbuf"] = ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 128, 32),
                                       (*W128, "-DDOUBLE_BUFFER"))
    VARIANTS["1 wmma 128x128 4 warps dbuf"] = ("hgemm_1_wmma", "hgemm_1_wmma", 128, (128, 128, 32),
                                               ("-DBM=128", "-DBN=128", "-DWARPS_N=2",
                                                "-DDOUBLE_BUFFER"))
    VARIANTS["1 wmma 128x256"] = ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 256, 32),
                                  ("-DBM=128", "-DBN=256", "-DWARPS_N=4"))
    VARIANTS["2 sm75 path"] = ("hgemm_2_mma_ldmatrix", "hgemm_2_mma_ldmatrix", 256, (128, 128, 32),
                               ("-DHGEMM_SM75",))
    # kernel 3: tile width x K step x ring depth, as far as 227 KiB of shared memory allow
    for bn, bk, stages in ((128, 32, (2, 4, 6)), (256, 32, (2, 3, 4, 6)), (128, 64, (2, 3, 4)),
                           (256, 64, (2, 3, 4))):
        for st in stages:
            VARIANTS[f"3 cp.async {bn} k{bk} s{st}"] = (
                "hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, bn, bk),
                (f"-DBN={bn}", f"-DBK={bk}", f"-DSTAGES={st}"))
if ARGS.side:
    VARIANTS["1 wmma 128x128 dbuf"] = ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 128, 32),
                                       (*W128, "-DDOUBLE_BUFFER"))
if cc == (9, 0):
    K4 = ("hgemm_4_wgmma", "hgemm_4_wgmma", 256, (128, 256, 64))
    K5 = ("hgemm_4_wgmma", "hgemm_5_wgmma_tma", 384, (128, 256, 64))
    VARIANTS["4 wgmma s4"] = (*K4, ("-DSTAGES=4", "-DIN_FLIGHT=1"))
    VARIANTS["5 wgmma+tma s4"] = (*K5, ("-DSTAGES=4",))
    if SWEEP:  # a stage is 48 KiB: 5 stages (241 KiB) do not fit the 227 KiB of a block
        for st in (2, 3):
            VARIANTS[f"4 wgmma s{st}"] = (*K4, (f"-DSTAGES={st}", "-DIN_FLIGHT=1"))
            VARIANTS[f"5 wgmma+tma s{st}"] = (*K5, (f"-DSTAGES={st}",))
        for st in (3, 4):
            VARIANTS[f"4 wgmma s{st} 2 in flight"] = (*K4, (f"-DSTAGES={st}", "-DIN_FLIGHT=2"))
        VARIANTS["4 wgmma s4 2 in flight group8"] = (*K4, ("-DSTAGES=4", "-DIN_FLIGHT=2",
                                                            "-DGROUP_M=8"))
        for extra in (("-DGROUP_M=8",), ("-DGROUP_M=16",), ("-DSETMAXNREG",),
                      ("-DGROUP_M=8", "-DSETMAXNREG"), ("-DPERSISTENT",),
                      ("-DPERSISTENT", "-DGROUP_M=8"), ("-DPERSISTENT", "-DGROUP_M=16"),
                      ("-DPERSISTENT", "-DGROUP_M=8", "-DSETMAXNREG")):
            label = " ".join(e[2:].lower().replace("group_m=", "group") for e in extra)
            VARIANTS[f"5 wgmma+tma s4 {label}"] = (*K5, ("-DSTAGES=4", *extra))
        VARIANTS["5 wgmma+tma s3 persistent group8"] = (*K5, ("-DSTAGES=3", "-DPERSISTENT",
                                                              "-DGROUP_M=8"))
    if ARGS.side:
        VARIANTS["4 wgmma s4 2 in flight"] = (*K4, ("-DSTAGES=4", "-DIN_FLIGHT=2"))
        for extra in (("-DGROUP_M=8",), ("-DPERSISTENT",), ("-DPERSISTENT", "-DGROUP_M=16")):
            label = " ".join(e[2:].lower().replace("group_m=", "group") for e in extra)
            VARIANTS[f"5 wgmma+tma s4 {label}"] = (*K5, ("-DSTAGES=4", *extra))


def defines(opts) -> dict[str, str]:
    return dict((*o[2:].split("="),) if "=" in o else (o[2:], "1") for o in opts if o.startswith("-D"))


def smem_bytes(kname, opts) -> int:
    d = defines(opts)
    st = int(d.get("STAGES", 3))
    if kname == "hgemm_3_cp_async":
        return st * (128 + int(d.get("BN", 128))) * int(d.get("BK", 32)) * 2
    if "wgmma" in kname:
        return st * (128 * 64 * 2 + 64 * 256 * 2) + 1024 + 16 * st
    return 0


def launcher(name, M, N, K, a, b, c):
    f, kname, th, (bm, bn, bk), opts = VARIANTS[name]
    assert M % bm == 0 and N % bn == 0 and K % bk == 0, (name, M, N, K)
    if "wgmma" in kname:
        opts = ("-arch=sm_90a", *opts)
    k = cudl.load(f"{D}/{f}.cu", kname, options=opts)
    grid = (N // bn, M // bm)
    if "PERSISTENT" in defines(opts):
        grid = (min(SMS, (N // bn) * (M // bm)),)
    sm = smem_bytes(kname, opts)
    if kname == "hgemm_5_wgmma_tma":
        from cudl.tma import tensor_map_2d
        ma, mb = tensor_map_2d(a, (128, 64)), tensor_map_2d(b, (64, 64))
        return k, lambda: k(grid, th, (M, N, K, ma, mb, c), shared_mem=sm)
    return k, lambda: k(grid, th, (M, N, K, a, b, c), shared_mem=sm)


def rel_err(name, M, N, K):
    a16 = torch.randn(M, K, device="cuda").half()
    b16 = torch.randn(K, N, device="cuda").half()
    ref = a16.double() @ b16.double()
    c = cudl.poisoned((M, N))
    _, run = launcher(name, M, N, K, cudl.xp.asarray(a16), cudl.xp.asarray(b16), c)
    run()
    cudl.sync()
    got = torch.from_dlpack(c).double()
    return float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))  # NaN if C is not all written


print(cudl.gpu_name(), "cc", cc, "SMs", SMS, "variants", len(VARIANTS), flush=True)
# (2560, 4096, 512): 320 tiles of 128 x 256, more than one round of a persistent grid, 20 tile rows
# (not a multiple of GROUP_M)
SHAPES = ((1024, 1024, 1024), (384, 768, 4096), (2560, 4096, 512))
ok: list[str] = []
for name in VARIANTS:
    try:
        errs = [rel_err(name, *s) for s in SHAPES]
        good = all(e < 1e-3 for e in errs)  # False for NaN
        print(f"{'OK ' if good else 'BAD'} {name}: rel err {' '.join(f'{e:.1e}' for e in errs)}",
              flush=True)
        if good:
            ok.append(name)
    except Exception:
        print(f"ERR {name}:\n{traceback.format_exc()[-1500:]}", flush=True)
print(f"checked in {time.time() - T0:.0f} s", flush=True)

n = 4096
flops = 2 * n**3
rows: list[str] = []
a16, b16 = torch.randn(n, n, device="cuda").half(), torch.randn(n, n, device="cuda").half()
t_blas = cudl.bench(lambda: torch.mm(a16, b16, out_dtype=torch.float32), flops=flops,
                    name="cuBLAS fp32 out", compute="fp16")
t_blas16 = cudl.bench(lambda: torch.matmul(a16, b16), flops=flops, name="cuBLAS fp16 out",
                      compute="fp16")
rows.append(f"{'cuBLAS fp32 out':36s} {t_blas.ms:7.3f} ms {t_blas.tflops:6.1f} TF/s 100.0%")
rows.append(f"{'cuBLAS fp16 out (torch.matmul)':36s} {t_blas16.ms:7.3f} ms {t_blas16.tflops:6.1f} TF/s "
            f"{100 * t_blas.ms / t_blas16.ms:5.1f}%")
a, b = cudl.xp.asarray(a16), cudl.xp.asarray(b16)
c = cudl.xp.empty((n, n), dtype=np.float32)
if ARGS.side:  # each kernel and cuBLAS in turn, 5 rounds; medians
    def blas():
        return torch.mm(a16, b16, out_dtype=torch.float32)
    for name in ok:
        k, run = launcher(name, n, n, n, a, b, c)
        p = cudl.bench_pair(run, blas, rounds=5, flops=flops, compute="fp16", rep_ms=40)
        km, bm, ref_ms = p.timing.ms, p.baseline.ms, p.baseline_rounds_ms
        rows.append(f"{name:36s} {km:7.3f} ms {flops / km / 1e9:6.1f} TF/s {100 * p.ratio:5.1f}% "
                    f"of cuBLAS alongside ({bm:.3f} ms, range {min(ref_ms):.3f}-{max(ref_ms):.3f})")
        print(rows[-1], flush=True)
    ok = []
for name in ok:
    try:
        k, run = launcher(name, n, n, n, a, b, c)
        t = cudl.bench(run, flops=flops, name=name, compute="fp16", warmup_ms=10, rep_ms=50)
        rows.append(f"{name:36s} {t.ms:7.3f} ms {t.tflops:6.1f} TF/s {100 * t_blas.ms / t.ms:5.1f}% "
                    f"regs={k.num_regs}")
        print(rows[-1], flush=True)
    except Exception:
        print(f"ERR timing {name}:\n{traceback.format_exc()[-1500:]}", flush=True)
t_again = cudl.bench(lambda: torch.mm(a16, b16, out_dtype=torch.float32), flops=flops,
                     name="cuBLAS fp32 out", compute="fp16")
rows.append(f"{'cuBLAS fp32 out, again at the end':36s} {t_again.ms:7.3f} ms {t_again.tflops:6.1f} TF/s "
            f"{100 * t_blas.ms / t_again.ms:5.1f}%")
print(f"\ntotal {time.time() - T0:.0f} s")
print("\n".join(["", f"{'variant':36s}    time        rate    % of cuBLAS (fp32 out)", *rows]))
