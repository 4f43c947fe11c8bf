"""The attention backward pass of chapter 15 (the capstone): launchers of flash_attn_bwd_prep.cu and of the
main kernel's versions (flash_attn_bwd_1_smem.cu: plain CUDA C; flash_attn_bwd_2_mma.cu: mma.sync;
flash_attn_bwd_3_ldmatrix.cu: ldmatrix, cp.async double buffering, causal skipping, 128 keys), chapter 12's
forward (flash_attn_2_mma, which stores the logsumexp L that the backward needs) loaded from its own
folder through cudl.grade.ch12, a float64 NumPy reference, and the error bounds that the tests check.

Layout as in chapter 12: Q, K, V, O, dO and the gradients are [BH, S, D] fp16 arrays (BH = batch x heads),
L is [BH, S] float32 (natural log), scale defaults to 1 / sqrt(D).

    import sys; sys.path.insert(0, str(cudl.compile.KERNELS_DIR / "15-capstone"))
    import attention_backward as ab
    o, lse = ab.forward(q, k, v, causal=True)
    dq, dk, dv = ab.backward(q, k, v, o, lse, do, causal=True, version=2)
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import cudl
from cudl.grade import ch12

D = "15-capstone"
PREP_ROWS = 8  # flash_attn_bwd_prep: one warp per row, 256 threads
# the main kernel's versions: 1 plain CUDA C, 2 mma.sync, 3 ldmatrix + cp.async (flash_attn_bwd_N_*.cu here)
VERSIONS = {1: "flash_attn_bwd_1_smem", 2: "flash_attn_bwd_2_mma", 3: "flash_attn_bwd_3_ldmatrix"}


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


@functools.cache
def kernels(head_dim: int) -> tuple[Any, Any]:
    """(prep, dq_half): the small kernels around the main one."""
    prep = cudl.load(f"{D}/flash_attn_bwd_prep.cu", "flash_attn_bwd_prep")
    dq_half = cudl.load(f"{D}/flash_attn_bwd_prep.cu", "flash_attn_bwd_dq_half")
    return prep, dq_half


def main_kernel(version: int, head_dim: int, *, sm75: bool = False, source: str | None = None) -> Any:
    """A build of main kernel `version` for one head dimension (64 or 128), from its file or from `source`
    (a test's mutant); `sm75`: version 2's mma as two m16n8k8 (the T4 path) on any GPU. The build carries its
    launch shape: .threads, .keys (per block) and .smem (dynamic shared bytes: version 3 needs 91 KiB at d = 64,
    112.5 KiB at d = 128, more than a T4's 64 KiB)."""
    if head_dim not in (64, 128):
        raise ValueError(f"the backward kernels take head dimension 64 or 128, not {head_dim}")
    if sm75 and version != 2:
        raise ValueError("only version 2 has a T4 path (version 3's shared memory does not fit a T4)")
    name = VERSIONS[version]
    opts = [f"-DHEAD_DIM={head_dim}"]
    br = 32 if head_dim == 128 else 64  # versions 2, 3: registers and shared memory at d = 128
    if version >= 2:
        opts += [f"-DBR={br}", *(["-DTC_SM75"] if sm75 else [])]
    k = _load(source or f"{D}/{name}.cu", name, tuple(opts))
    if version == 1:  # BR = BC = 32, 256 threads, static shared memory
        k.threads, k.keys, k.smem = 256, 32, 0
    elif version == 2:  # 4 warps of 16 keys; ((2 BC + 2 BR) (D + 8) + BR (BC + 8)) halves + 2 BR floats
        k.threads, k.keys = 128, 64
        k.smem = ((2 * 64 + 2 * br) * (head_dim + 8) + br * 72) * 2 + 8 * br
    else:  # 8 warps of 16 keys; K, V, 2 stages of Q, dO: (2 BC + 4 BR) (D + 8) halves, dS^T
        k.threads, k.keys = 256, 128  # BC (BR + 8) halves, 2 stages of L, Dl: 4 BR floats
        k.smem = ((2 * 128 + 4 * br) * (head_dim + 8) + 128 * (br + 8)) * 2 + 16 * br
    return k


@functools.lru_cache(maxsize=32)
def _load(source: str, name: str, options: tuple[str, ...]) -> Any:
    return cudl.load(source, name, options=list(options))


def forward(q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any]:
    """O and L of chapter 12's flash_attn_2_mma (the file in kernels_src/12-flash-attention/, not a copy)."""
    return ch12.flash_attention("flash_attn_2_mma", q, k, v, causal)


def backward(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: bool, scale: float | None = None,
             out: tuple[Any, Any, Any, Any, Any] | None = None, version: int = 1,
             kernel: Any = None) -> tuple[Any, Any, Any]:
    """(dQ, dK, dV) as fp16 [BH, S, D] arrays, by main kernel `version` (or the main_kernel build `kernel`).
    `out` = (dq_acc float32 [BH, S, D], dl float32 [BH, S], dq, dk, dv) to reuse buffers (timing); by default
    NaN-poisoned new ones (the prep kernel zeroes dq_acc itself)."""
    bh, S, d = q.shape
    for name, a in (("k", k), ("v", v), ("o", o), ("do", do)):
        if a.shape != q.shape or a.dtype != np.float16:
            raise ValueError(f"{name} must be float16 of shape {q.shape}, not {a.dtype} {a.shape}")
    if lse.shape != (bh, S):
        raise ValueError(f"lse must have shape {(bh, S)}, not {lse.shape}")
    scale = scale if scale is not None else 1 / math.sqrt(d)
    prep, dq_half = kernels(d)
    main = kernel or main_kernel(version, d)
    if out is None:
        out = (cudl.poisoned((bh, S, d)), cudl.poisoned((bh, S)),
               *(cudl.poisoned((bh, S, d), np.float16) for _ in range(3)))
    dq_acc, dl, dq, dk, dv = out
    rows = bh * S
    prep((cdiv(rows, PREP_ROWS),), 32 * PREP_ROWS, (rows, d, o, do, dl, dq_acc))
    main((cdiv(S, main.keys), bh), main.threads,
         (S, np.float32(scale), int(causal), q, k, v, do, lse, dl, dq_acc, dk, dv), shared_mem=main.smem)
    n = rows * d
    dq_half((cdiv(n, 256),), 256, (n, dq_acc, dq))
    return dq, dk, dv


def reference(q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float | None = None) -> dict[str, np.ndarray]:
    """The forward and backward in float64 on the host: o, lse, p (the probabilities), dp = dO V^T,
    dl = rowsum(dO O), dq, dk, dv (every gradient of sum(dO * O))."""
    q, k, v, do = (cudl.to_numpy(a).astype(np.float64) for a in (q, k, v, do))
    d = q.shape[2]
    scale = scale if scale is not None else 1 / math.sqrt(d)
    o, lse = ch12.reference(q, k, v, causal, scale)
    s = np.einsum("bid,bjd->bij", q, k, optimize=True) * scale
    p = np.exp(s - lse[..., None])  # exp(-inf) = 0 where the causal mask holds
    if causal:
        p = np.tril(p)
    dp = np.einsum("bid,bjd->bij", do, v, optimize=True)
    dl = (do * o).sum(axis=2)
    ds = p * (dp - dl[..., None])  # softmax's Jacobian: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)
    return dict(o=o, lse=lse, p=p, dp=dp, dl=dl,
                dq=np.einsum("bij,bjd->bid", ds, k, optimize=True) * scale,
                dk=np.einsum("bij,bid->bjd", ds, q, optimize=True) * scale,
                dv=np.einsum("bij,bid->bjd", p, do, optimize=True))


U16, U32 = 2.0**-11, 2.0**-24  # unit roundoff of fp16 and fp32 (round to nearest)


def error_bounds(q: Any, k: Any, v: Any, do: Any, ref: dict[str, np.ndarray], scale: float | None = None,
                 o_err: np.ndarray | None = None, lse_err: np.ndarray | None = None,
                 fp16_p: bool = False) -> dict[str, float]:
    """How far (by norm: ||got - ref||) dq, dk, dv of the kernels may lie from `ref` (reference() of the same
    fp16 inputs). First a first-order bound b on each element's rounding error:
      - fp32 dot products of n terms err by at most n u32 times the sum of the terms' magnitudes (the
        atomicAdd order of dQ does not matter to that bound);
      - P = exp(scale S - L) errs relatively by the absolute error of its exponent: the fp32 dot product S,
        the multiply and subtract (version 3's exp2 form, fmaf(S, scale log2 e, -L log2 e), rounds scale log2 e
        and L log2 e too: 3 u32 of |scale S| + |L| in all), L's own error (`lse_err` [BH, S]; default u32 |L|,
        L stored as float32) and expf's (exp2f's) few ulps;
      - Dl = rowsum(dO O) inherits O's error (`o_err` [BH, S, D]; default u16 |O|, O stored as fp16) and
        passes it to every dS of the row: the largest term where dP - Dl cancels;
      - `fp16_p` (versions 2, 3): P and dS round to fp16 before their products, u16 relative each;
      - the fp16 results round once more: u16 relative.
    The norm of an elementwise bound bounds the norm of the error: each result lies within
    u16 (||result|| + ||b||) + ||b|| (absolute, so that a zero gradient, as dQ and dK at S = 1, is checked
    too). That bound adds the magnitudes of O's and the results' roundings, which are independent and as
    often negative as positive, so it lies 10-100 times above the errors; the tolerance returned is the
    smaller of it and 3 times their root-mean-square (a rounding to within +-e, uniform: e / sqrt(3)) plus
    the fp32 part of b: a norm over thousands of such errors stays within a few percent of its rms.
    Inputs exact in fp16 contribute nothing: both sides read the same values."""
    q, k, v, do = (cudl.to_numpy(a).astype(np.float64) for a in (q, k, v, do))
    S, d = q.shape[1], q.shape[2]
    scale = scale if scale is not None else 1 / math.sqrt(d)
    p, dp, dl, o, lse = ref["p"], ref["dp"], ref["dl"], ref["o"], ref["lse"]
    o_err = U16 * np.abs(o) if o_err is None else o_err
    lse_err = U32 * np.abs(lse) if lse_err is None else lse_err
    abs_s = np.einsum("bid,bjd->bij", np.abs(q), np.abs(k), optimize=True) * scale
    x = np.abs(np.einsum("bid,bjd->bij", q, k, optimize=True) * scale) + np.abs(lse)[..., None]
    rel_p = d * U32 * abs_s + 3 * U32 * x + lse_err[..., None] + 4 * U32  # exponent's error, expf's ulps
    err_p = p * rel_p
    err_dp = d * U32 * np.einsum("bid,bjd->bij", np.abs(do), np.abs(v), optimize=True)
    err_dl32 = d * U32 * np.einsum("bid,bid->bi", np.abs(do), np.abs(o))  # Dl's own fp32 sum
    err_dl_o = np.einsum("bid,bid->bi", np.abs(do), o_err)  # O's error, through Dl
    gap = np.abs(dp - dl[..., None])
    ds = p * gap
    err_ds = err_p * gap + p * err_dp + p * err_dl32[..., None] + 3 * U32 * ds  # minus, times P, times scale
    n = S * U32  # the sums over rows (dK, dV) or keys (dQ) in fp32
    b32 = dict(dv=np.einsum("bij,bid->bjd", err_p + n * p, np.abs(do), optimize=True),
               dk=scale * np.einsum("bij,bid->bjd", err_ds + n * ds, np.abs(q), optimize=True),
               dq=scale * np.einsum("bij,bjd->bid", err_ds + n * ds, np.abs(k), optimize=True))
    # fp16 roundings, independent of one another: O's through Dl, and (fp16_p) those of P and dS
    h = U16 if fp16_p else 0.0
    b16 = dict(dv=h * np.einsum("bij,bid->bjd", p, np.abs(do), optimize=True),
               dk=scale * np.einsum("bij,bid->bjd", p * err_dl_o[..., None] + h * ds, np.abs(q), optimize=True),
               dq=scale * (err_dl_o[..., None] * np.einsum("bij,bjd->bid", p, np.abs(k), optimize=True)
                           + h * np.einsum("bij,bjd->bid", ds, np.abs(k), optimize=True)))
    # their variances (a rounding to within +-e, uniform: e^2 / 3): Dl_i's is sum_d dO_id^2 o_err_id^2 / 3;
    # dK_j adds rows i of P_ij Dl_i q_i (independent), dQ_i is Dl_i sum_j P_ij k_j (one error per row)
    var_dl = np.einsum("bid,bid->bi", do**2, o_err**2, optimize=True) / 3
    q2, k2, do2 = ((a**2).sum(axis=2) for a in (q, k, do))  # squared norms of the rows
    var16 = dict(dv=h**2 / 3 * float(np.einsum("bij,bi->", p**2, do2, optimize=True)),
                 dk=scale**2 * float(np.einsum("bij,bi,bi->", p**2, var_dl, q2, optimize=True)
                                     + h**2 / 3 * np.einsum("bij,bi->", ds**2, q2, optimize=True)),
                 dq=scale**2 * float(np.einsum("bi,bid->", var_dl, np.einsum("bij,bjd->bid", p, k)**2)
                                     + h**2 / 3 * np.einsum("bij,bj->", ds**2, k2, optimize=True)))
    out = {}
    for name in ("dq", "dk", "dv"):
        size = float(np.linalg.norm(ref[name]))
        fp32 = float(np.linalg.norm(b32[name]))
        b = float(np.linalg.norm(b32[name] + b16[name]))
        likely = fp32 + 3 * math.sqrt(U16**2 / 3 * size**2 + var16[name])
        out[name] = min(U16 * (size + b) + b, likely)
    return out


def forward_error_bounds(q: Any, k: Any, v: Any, ref: dict[str, np.ndarray],
                         scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(o_err, lse_err) for error_bounds when O and L come from forward(): its O errs by its fp16 P (u16 of
    each term of P V), its rounding to fp16 and the error of its exponents; its L by its fp32 scores (d u32
    of their terms' magnitudes), its sum of S terms and the log."""
    q, k, v = (cudl.to_numpy(a).astype(np.float64) for a in (q, k, v))
    S, d = q.shape[1], q.shape[2]
    scale = scale if scale is not None else 1 / math.sqrt(d)
    p_abs_v = np.einsum("bij,bjd->bid", ref["p"], np.abs(v), optimize=True)
    abs_s = np.einsum("bid,bjd->bij", np.abs(q), np.abs(k), optimize=True) * scale
    lse_err = (d * abs_s.max(axis=2) + 4 * S + np.abs(ref["lse"])) * U32
    o_err = U16 * (np.abs(ref["o"]) + p_abs_v) + 2 * (lse_err[..., None] + S * U32) * p_abs_v
    return o_err, lse_err
