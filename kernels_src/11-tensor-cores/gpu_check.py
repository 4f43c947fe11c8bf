"""One GPU run for chapter 11: check every kernel against a float64 product and time it at 4096^3
against cuBLAS (fp16 in, fp32 accumulate, fp32 out: torch.mm(..., out_dtype=torch.float32)) in the
same process.

    python3 kernels_src/11-tensor-cores/gpu_check.py           # the chapter's kernels
    python3 kernels_src/11-tensor-cores/gpu_check.py --sweep   # and every tuning variant (-D flags)
    python3 kernels_src/11-tensor-cores/gpu_check.py --side    # the chapter's picks, each timed in
                                                               # turn with cuBLAS (clocks drift)
    python3 kernels_src/11-tensor-cores/gpu_check.py --tune    # only kernels 1 and 3's variants
                                                               # (fragment double buffering, warp
                                                               # tiles, bands), alternating with
                                                               # cuBLAS, and mma.sync's own peak

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
tc = cudl.kernels_module(f"{D}/hgemm.py")  # the chapter's launcher
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
parser = argparse.ArgumentParser()
parser.add_argument("--sweep", action="store_true", help="time every tuning variant too")
parser.add_argument("--side", action="store_true",
                    help="only the chapter's picks, alternating with cuBLAS (5 rounds, medians)")
parser.add_argument("--tune", action="store_true",
                    help="only kernels 1 and 3's tuning variants, alternating with cuBLAS (5 rounds), "
                         "and the rate of mma.sync alone (mma_peak.cu)")
ARGS = parser.parse_args()
if ARGS.tune:
    ARGS.side = True
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
    # the chapter's pick on the H100 (rounds of 2026-11-25): 64 x 64 warp tiles, fragments ahead
    "3 cp.async 256 k64 s4 fragdbuf": ("hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, 256, 64),
                                       ("-DBN=256", "-DBK=64", "-DSTAGES=4", "-DFRAG_DBUF")),
}
if ARGS.tune:  # round 3: the best builds of rounds 1-2 (H100) again, and their neighbours
    W4 = ("-DBM=128", "-DBN=128", "-DWARPS_N=2")  # 4 warps of 64 x 64, two blocks per SM
    VARIANTS = {
        "1 wmma 128x128 4 warps k64": ("hgemm_1_wmma", "hgemm_1_wmma", 128, (128, 128, 64),
                                       (*W4, "-DBK=64")),
    }
    for bn, bk, st, extra in ((256, 64, 4, ()), (256, 32, 4, ("FRAG_DBUF",)),
                              (256, 32, 6, ("FRAG_DBUF",)), (256, 64, 3, ("FRAG_DBUF",)),
                              (256, 64, 4, ("FRAG_DBUF",)), (256, 64, 4, ("FRAG_DBUF", "GROUP_M=8"))):
        label = " ".join(e.lower().replace("_", "").replace("=", "") for e in extra)
        VARIANTS[f"3 {bn} k{bk} s{st} {label}".rstrip()] = (
            "hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, bn, bk),
            (f"-DBN={bn}", f"-DBK={bk}", f"-DSTAGES={st}", *(f"-D{e}" for e in extra)))
    for bk, st in ((64, 3), (32, 6)):  # 4 warps of 64 x 64 on 128 x 128: two blocks per SM
        VARIANTS[f"3 128 4 warps k{bk} s{st} fragdbuf"] = (
            "hgemm_3_cp_async", "hgemm_3_cp_async", 128, (128, 128, bk),
            ("-DBN=128", "-DWARPS_N=2", f"-DBK={bk}", f"-DSTAGES={st}", "-DFRAG_DBUF"))
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
            # and with the fragments one slice ahead (FRAG_DBUF)
            VARIANTS[f"3 cp.async {bn} k{bk} s{st} fragdbuf"] = (
                "hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, bn, bk),
                (f"-DBN={bn}", f"-DBK={bk}", f"-DSTAGES={st}", "-DFRAG_DBUF"))
    for bk, st in ((32, 4), (32, 6), (64, 3)):  # 4 warps of 64 x 64: two blocks per SM
        VARIANTS[f"3 cp.async 128 4 warps k{bk} s{st} fragdbuf"] = (
            "hgemm_3_cp_async", "hgemm_3_cp_async", 128, (128, 128, bk),
            ("-DBN=128", "-DWARPS_N=2", f"-DBK={bk}", f"-DSTAGES={st}", "-DFRAG_DBUF"))
    VARIANTS["1 wmma 128x128 4 warps k64"] = ("hgemm_1_wmma", "hgemm_1_wmma", 128, (128, 128, 64),
                                              ("-DBM=128", "-DBN=128", "-DWARPS_N=2", "-DBK=64"))
if ARGS.side:
    VARIANTS["1 wmma 128x128 dbuf"] = ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 128, 32),
                                       (*W128, "-DDOUBLE_BUFFER"))
if cc == (9, 0) and not ARGS.tune:
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


def launcher(name, M, N, K, a, b, c):
    """(kernel, launch) of variant `name` through the chapter's launcher (hgemm.py): the entry of
    tc.KERNELS with the variant's kernel, threads and BM (and BN, where the entry fixes it), and the
    variant's options beyond the entry's own."""
    _, kname, th, (bm, bn, bk), opts = VARIANTS[name]
    for key, (_, kk, tt, (mm, nn), _, kopts) in tc.KERNELS.items():
        if (kk, tt, mm) == (kname, th, bm) and (nn == bn or not any(o.startswith("-DBN=") for o in kopts)):
            break
    else:
        raise KeyError(f"{name}: no entry of hgemm.py's KERNELS launches {kname} with {th} threads, BM={bm}")
    run = tc.hgemm(key, a, b, c, tuple(o for o in opts if o not in kopts))
    return run.kernel, run


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
if ARGS.tune:  # the rate of mma.sync alone: warps with no memory traffic (mma_peak.cu)
    peak = cudl.load(f"{D}/mma_peak.cu", "mma_peak")
    for per_sm, chains in ((1, 8), (2, 8)):
        if chains != 8:
            peak = cudl.load(f"{D}/mma_peak.cu", "mma_peak", options=(f"-DCHAINS={chains}",))
        blocks, iters = SMS * per_sm, 4096
        out = cudl.xp.empty(blocks * 256, dtype=np.float32)
        pf = blocks * 8 * iters * chains * 4096  # warps x mma x flops per mma
        t = cudl.bench(lambda: peak((blocks,), 256, (iters, out)), flops=pf, compute="fp16")
        ok_out = bool(np.isfinite(cudl.to_numpy(out)).all())
        print(f"mma.sync alone: {per_sm} x 8 warps/SM, {chains} chains: {t.ms:.3f} ms "
              f"{t.tflops:6.1f} TF/s{'' if ok_out else ' (NaN in out!)'}", flush=True)
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
                    f"of cuBLAS alongside ({bm:.3f} ms, range {min(ref_ms):.3f}-{max(ref_ms):.3f}) "
                    f"regs={getattr(k, 'num_regs', '?')}")
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
