"""Chapter 11 (Tensor Cores): the one launcher of the chapter's GEMM kernels, shared by
the chapter, its gpu_check.py and its tests.

    tc = cudl.kernels_module("11-tensor-cores/hgemm.py")
"""

from __future__ import annotations

import cudl

D = "11-tensor-cores"

# name: (file, kernel, threads, (BM, BN), K step, options). Kernels 4 and 5 need sm_90a.
KERNELS = {
    "1: WMMA": ("hgemm_1_wmma", "hgemm_1_wmma", 128, (64, 64), 32, ()),
    "1: WMMA, 128 x 128 tile": ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 128), 32,
                                ("-DBM=128", "-DBN=128", "-DWARPS_N=4")),
    "1: WMMA, 128 x 256 tile": ("hgemm_1_wmma", "hgemm_1_wmma", 256, (128, 256), 32,
                                ("-DBM=128", "-DBN=256", "-DWARPS_N=4")),
    "1: WMMA, 128 x 128 tile, 4 warps": ("hgemm_1_wmma", "hgemm_1_wmma", 128, (128, 128),
                                         32,
                                         ("-DBM=128", "-DBN=128", "-DWARPS_N=2")),
    "2: mma.sync + ldmatrix": ("hgemm_2_mma_ldmatrix", "hgemm_2_mma_ldmatrix", 256,
                               (128, 128), 32, ()),
    "3: cp.async pipeline": ("hgemm_3_cp_async", "hgemm_3_cp_async", 256, (128, 128), 32,
                             ()),
    "3: cp.async pipeline, 4 warps": ("hgemm_3_cp_async", "hgemm_3_cp_async", 128,
                                      (128, 128), 32, ("-DWARPS_N=2",)),
    "4: wgmma": ("hgemm_4_wgmma", "hgemm_4_wgmma", 256, (128, 256), 64,
                 ("-arch=sm_90a",)),
    "5: wgmma + TMA": ("hgemm_4_wgmma", "hgemm_5_wgmma_tma", 384, (128, 256), 64,
                       ("-arch=sm_90a",)),
}


def shared_bytes(kernel: str, options=()) -> int:
    """Dynamic shared memory of a launch (kernels 3 to 5 keep their rings there)."""
    d = dict(o[2:].split("=") for o in options if o.startswith("-D") and "=" in o)
    if kernel == "hgemm_3_cp_async":
        st, bn = int(d.get("STAGES", 3)), int(d.get("BN", 128))
        bk = int(d.get("BK", 32))
        return st * (128 + bn) * bk * 2
    if "wgmma" in kernel:
        st = int(d.get("STAGES", 4))
        return st * (128 * 64 + 64 * 256) * 2 + 1024 + 16 * st
    return 0


def hgemm(name: str, A, B, C, options=()):
    """Check the shapes; return a launcher of `name` for C = A B (fp16 in, fp32 out)."""
    file, kernel, threads, (bm, bn), bk, opts = KERNELS[name]
    opts = (*opts, *options)
    defines = dict(o[2:].split("=") for o in opts if o.startswith("-D") and "=" in o)
    bn, bk = int(defines.get("BN", bn)), int(defines.get("BK", bk))  # tunable in kernel 3
    (M, K), (K2, N) = A.shape, B.shape
    if K != K2 or C.shape != (M, N):
        raise ValueError(f"shapes do not match: A {A.shape}, B {B.shape}, C {C.shape}")
    if M % bm or N % bn or K % bk:
        raise ValueError(f"kernel {name!r} has no bounds checks: it needs M a multiple "
                         f"of {bm}, N of {bn} and K of {bk}; got M={M}, N={N}, K={K}. "
                         "Pad the matrices with zeros (hgemm_padded) or use cuBLAS.")
    k = cudl.load(f"{D}/{file}.cu", kernel, options=opts)
    grid, smem = (N // bn, M // bm), shared_bytes(kernel, opts)
    if "-DPERSISTENT" in opts:  # kernel 5: one block per SM, each loops over tiles
        grid = (min(cudl.device_info()["sms"], grid[0] * grid[1]),)
    if kernel == "hgemm_5_wgmma_tma":  # TMA reads through tensor maps made on the host
        from cudl.tma import tensor_map_2d
        ma, mb = tensor_map_2d(A, (bm, 64)), tensor_map_2d(B, (64, 64))
        args = (M, N, K, ma, mb, C)
    else:
        args = (M, N, K, A, B, C)

    def run():
        return k(grid, threads, args, shared_mem=smem)

    run.kernel = k  # its registers, for the tables of gpu_check.py
    return run
