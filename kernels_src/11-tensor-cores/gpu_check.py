"""One GPU run for chapter 11: check every kernel against a float64 product and time it at 4096^3
against cuBLAS (torch.matmul, fp16 in, fp32 accumulate) in the same process.

    python3 kernels_src/11-tensor-cores/gpu_check.py     # from the repository root, on a GPU with PyTorch
Prints a short table last: ms, TFLOP/s, % of cuBLAS, registers. The wgmma kernels run on sm_90 only.
"""

from __future__ import annotations

import traceback

import numpy as np
import torch

import cudl

D = "11-tensor-cores"
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
rows: list[str] = []
cc = torch.cuda.get_device_capability()
# name: (file, kernel, threads, (BM, BN), options, tma)
W128 = ("-DBM=128", "-DBN=128", "-DWARPS_N=4")
VARIANTS = {
    "1 wmma 64": ("hgemm_1_wmma", "hgemm_1_wmma", 128, (64, 64), (), False),
    "1 wmma 128": ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 128), W128, False),
    "2 mma+ldmatrix": ("hgemm_2_mma_ldmatrix", "hgemm_2_mma_ldmatrix", 256, (128, 128), (), False),
    "2 sm75 path": ("hgemm_2_mma_ldmatrix", "hgemm_2_mma_ldmatrix", 256, (128, 128),
                    ("-DHGEMM_SM75",), False),
    "3 sm75 path": ("hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, 128), ("-DHGEMM_SM75",), False),
}
for bn in (128, 256):
    for st in (3, 4):
        VARIANTS[f"3 cp.async {bn} s{st}"] = ("hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, bn),
                                             (f"-DBN={bn}", f"-DSTAGES={st}"), False)
if cc == (9, 0):
    for st in (3, 4):
        VARIANTS[f"4 wgmma s{st}"] = ("hgemm_4_wgmma", "hgemm_4_wgmma", 256, (128, 256),
                                     ("-arch=sm_90a", f"-DSTAGES={st}"), False)
        VARIANTS[f"5 wgmma+tma s{st}"] = ("hgemm_4_wgmma", "hgemm_5_wgmma_tma", 384, (128, 256),
                                         ("-arch=sm_90a", f"-DSTAGES={st}"), True)


def smem_bytes(kname, opts) -> int:
    d = dict(o[2:].split("=") for o in opts if o.startswith("-D") and "=" in o)
    st = int(d.get("STAGES", 3))
    if kname == "hgemm_3_cp_async":
        return st * (128 + int(d.get("BN", 128))) * 32 * 2
    if "wgmma" in kname:
        return st * (128 * 64 * 2 + 64 * 256 * 2) + 1024 + 16 * st
    return 0


def launcher(name, M, N, K, a, b, c, extra=()):
    f, kname, th, (bm, bn), opts, tma = VARIANTS[name]
    opts = (*opts, *extra)
    k = cudl.load(f"{D}/{f}.cu", kname, options=opts)
    grid = (N // bn, M // bm)
    sm = smem_bytes(kname, opts)
    if tma:
        from cudl.tma import tensor_map_2d
        ma, mb = tensor_map_2d(a, (128, 64)), tensor_map_2d(b, (64, 64))
        return k, lambda: k(grid, th, (M, N, K, ma, mb, c), shared_mem=sm)
    return k, lambda: k(grid, th, (M, N, K, a, b, c), shared_mem=sm)


def rel_err(name, M, N, K, extra=()):
    a16 = torch.randn(M, K, device="cuda").half()
    b16 = torch.randn(K, N, device="cuda").half()
    ref = (a16.double() @ b16.double())
    c = cudl.poisoned((M, N))
    _, run = launcher(name, M, N, K, cudl.xp.asarray(a16), cudl.xp.asarray(b16), c, extra)
    run()
    cudl.sync()
    got = torch.from_dlpack(c).double()
    return float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))


print(cudl.gpu_name(), "cc", cc, flush=True)
ok: dict[str, tuple] = {}
for name in VARIANTS:
    for extra in ((), ("-DB_LBO=1024", "-DB_SBO=8192")) if "wgmma" in name else ((),):
        try:
            errs = [rel_err(name, *s, extra) for s in ((1024, 1024, 1024), (256, 512, 192), (384, 768, 4096))]
            good = all(e < 1e-3 for e in errs)
            print(f"{'OK ' if good else 'BAD'} {name} {extra}: rel err {errs}", flush=True)
            if good:
                ok[name] = extra
                break
        except Exception:
            print(f"ERR {name} {extra}:\n{traceback.format_exc()[-1500:]}", flush=True)

# fp16 accumulation error, for the chapter: cuBLAS with fp16 reduction allowed vs not (K = 4096)
a16 = torch.randn(256, 4096, device="cuda").half()
b16 = torch.randn(4096, 256, device="cuda").half()
ref = a16.double() @ b16.double()
print("fp32-accum cuBLAS err", float(torch.linalg.norm((a16 @ b16).double() - ref) / torch.linalg.norm(ref)))

n = 4096
flops = 2 * n**3
a16, b16 = torch.randn(n, n, device="cuda").half(), torch.randn(n, n, device="cuda").half()
t_blas = cudl.bench(lambda: torch.matmul(a16, b16), flops=flops, name="cuBLAS fp16 out", compute="fp16")
try:
    t_blas32 = cudl.bench(lambda: torch.mm(a16, b16, out_dtype=torch.float32), flops=flops,
                          name="cuBLAS fp32 out", compute="fp16")
    rows.append(f"{'cuBLAS fp32 out':24s} {t_blas32.ms:7.3f} ms {t_blas32.tflops:6.1f} TF/s "
                f"{100 * t_blas.ms / t_blas32.ms:5.1f}%")
except Exception as e:
    print("no out_dtype:", e)
rows.append(f"{'cuBLAS (torch.matmul)':24s} {t_blas.ms:7.3f} ms {t_blas.tflops:6.1f} TF/s 100.0%")
a, b = cudl.xp.asarray(a16), cudl.xp.asarray(b16)
c = cudl.xp.empty((n, n), dtype=np.float32)
for name, extra in ok.items():
    try:
        k, run = launcher(name, n, n, n, a, b, c, extra)
        t = cudl.bench(run, flops=flops, name=name, compute="fp16")
        rows.append(f"{name:24s} {t.ms:7.3f} ms {t.tflops:6.1f} TF/s {100 * t_blas.ms / t.ms:5.1f}% "
                    f"regs={k.num_regs} {' '.join(extra)}")
        print(rows[-1], flush=True)
    except Exception:
        print(f"ERR timing {name}:\n{traceback.format_exc()[-1500:]}", flush=True)
print("\n".join(["", "variant                   time        rate    % of cuBLAS", *rows]))
