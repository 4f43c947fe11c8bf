"""Chapter 15 (the capstone): one GPT training step on the book's own kernels, and its
PyTorch twin.

The model is GPT-2's: learned token and position embeddings, pre-LN blocks
(x += proj(attention(ln1(x))); x += fc2(gelu(fc(ln2(x))))), a final LayerNorm and an
output head tied to the token embedding, mean cross-entropy over every position,
gradient-norm clipping and AdamW (weight decay on the matrices and embeddings only).
Weights are stored as `x @ W` (W is [in, out]), fp32 master copies in one flat buffer (so
AdamW is chapter 9's one launch per decay group).

Precision. The issue asks for bf16 compute. Chapter 11's GEMM has a bf16 build
(-DHGEMM_BF16), but the attention forward (chapter 12) and backward (15-capstone) are fp16
only, and a bf16 path through them is not a small change; mixing the two would add a
conversion at every attention. So the step computes in fp16 with fp32 accumulation, every
activation between two GEMMs in fp32 (the GEMMs write fp32; LayerNorm, GELU, cross-entropy
and the bias sums run on fp32), fp32 master weights, and a dynamic loss scale: fp16 cannot
hold gradients below 6e-8 (a mean over 16k tokens puts most of them there), so the loss is
multiplied by S (2^12 by default) before the backward and the gradients divided by S in
the clipping kernel; a step whose gradient norm is not finite is skipped and S halved, and
S doubles after `scale_window` good steps.

Kernels (every one loaded by path from kernels_src/, none copied):
  11-tensor-cores/hgemm.py               every product, as A B (fp16 in, fp32 out):
                                         kernel 5 (wgmma + TMA) on sm_90 where N is a
                                         multiple of 256, else kernel 3 (cp.async), or
                                         on sm_75 kernel 1 (WMMA)
  12-flash-attention/flash_attn_2_mma.cu causal attention forward, O and the logsumexp
  15-capstone/flash_attn_bwd_*.cu        attention backward (attention_backward.py)
  07-fusion/fused_rows.cu                the LayerNorm backward's dw, db reduce; the
                                         LayerNorm forward and backward themselves are
                                         gpt_ops' variants of chapter 7's, fused with the
                                         residual add and the fp16 cast (forward) and
                                         with the residual gradient's add (backward)
  03-elementwise/bias_gelu.cu            GELU (gelu_erf) and
                                         08-profiling/bias_gelu_backward.cu its
                                         derivative, included by gpt_ops.cu: the MLP's
                                         bias + GELU and its backward run inside the
                                         fp16 casts that follow them
  09-training/softmax_cross_entropy.cu   loss and dlogits;  adamw.cu
  15-capstone/gpt_ops.cu                 embeddings (forward, deterministic backward),
                                         fp16 casts with the transposes the weight
                                         gradients need and the bias gradients (column
                                         sums of the cast's tiles), the fused
                                         LayerNorms, head split/merge, gradient norm and
                                         clipping, split-K's reduce
Paths (Model's `arch`, by default the GPU's, or on the emulator the GPU it mimics: a T4
unless CUDL_EMULATOR_DEVICE says otherwise): "sm90" as above; "sm80" kernel 3 for every
product; "sm75" (a T4: no cp.async, no mma.sync m16n8k16) kernel 1 in kernel 3's 128 x
128 tile, and the attention kernels' sm_75 builds (two m16n8k8 per k16 step, plain
16-byte copies). Every other kernel of the step is plain CUDA C that sm_75 compiles.
Every GEMM is A B with row-major operands: a weight gradient X^T dY reads the transposed
fp16 copy of X that the forward's cast wrote, and dX = dY W^T reads the fp16 W^T written
next to W after each optimizer step.

Split-K. A block's weight gradient dW = X^T dY has a small output (768 x 768 to
768 x 3072: 18 to 72 tiles of kernel 5's 128 x 256) and a long K (the T = 16384 tokens):
far fewer blocks than SMs, each walking all of K. So K is cut into s slices
(choose_split_k), slice j's product written to its own fp32 partial [M, N] and
split_k_reduce adds the s partials in slice order: deterministic, unlike atomics. On
kernel 5 the slices are s launches on s streams that run at once (one launch of s x tiles
blocks would need a slice index in the kernel): A's slice X^T[:, k0:k1] is a row-strided
view, read through its own tensor map; B's dY[k0:k1] is contiguous. Kernel 3 has no
row-stride parameter: there each slice of A is copied to a contiguous scratch and the
slices run one after another, correct but no faster (what the emulator's test of split-K
runs), so the automatic choice splits only on kernel 5.

    import sys; sys.path.insert(0, str(cudl.compile.KERNELS_DIR / "15-capstone"))
    import gpt_train as gt
    cfg = gt.TOY; params = gt.init_params(cfg, seed=0)
    # split_k=None: s per product (choose_split_k); 1: off
    model = gt.Model(cfg, batch=2, params=params)
    loss = model.step(tokens, targets)          # [batch, seq] int32 each
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import cudl
from cudl.grade import ch12

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import attention_backward as ab  # noqa: E402

OPS = "15-capstone/gpt_ops.cu"
ARCHS = ("sm75", "sm80", "sm90")  # Model's paths: a T4, sm_80+ GPUs, Hopper
# the attention backward's main kernel per path, where its shared memory fits (Model falls
# back to version 2 elsewhere; version 3's exceeds a T4's 64 KiB at any head dimension)
ATTN_BWD = {"sm75": 2, "sm80": 3, "sm90": 3}
# the row-major GEMM of each path, a build of chapter 11's KERNELS: kernel 3 on sm_80+;
# on a T4 kernel 1 (WMMA, sm_70+), as kernel 3's sm_75 build copies through registers
# and its ring hides nothing there (which is faster on a T4 is for a T4 to measure)
GEMMS = {"sm75": "1: WMMA, 128 x 128 tile", "sm80": "3: cp.async pipeline"}
GEMM_TILE, GEMM_STEP = 128, 32  # both: M and N multiples of 128, K of 32
# kernel 5's builds: a 4-deep ring, persistent (one CTA per SM walks the tiles), for a
# whole product; not persistent for a slice of split-K, whose slices run side by side on
# several streams (a persistent grid would hold every SM). Chosen on an H200 over the
# step's GEMM shapes (each build timed per shape; these won at most of them).
GEMM5_OPTIONS = ("-DSTAGES=4", "-DPERSISTENT")
GEMM5_SPLIT_OPTIONS = ("-DSTAGES=4",)
GEMM5_TILE, GEMM5_STEP = (128, 256), 64  # kernel 5: BM x BN tiles, 64 of K per step
# split-K: a slice keeps at least 16 K steps (1024 of K on kernel 5), so that the fill of
# the pipeline and the tile's store (below) stay small beside its main loop
SPLIT_MIN_STEPS = 16
# K steps that an SM spends moving one 128 x 256 fp32 tile (128 KiB) at its share of HBM
# bandwidth: 4.8 TB/s / 132 SMs = 36 GB/s, 3.6 us, while a K step (128 x 256 x 64 x 2 =
# 4.2 MFLOP) takes ~0.7 us at 750 TFLOP/s
TILE_IO_STEPS = 5
LN_EPS = 1e-5
LN_MAX_D = 1024  # residual_layernorm: a row in one warp, 8 float4 per lane


@dataclass(frozen=True)
class Config:
    vocab: int = 256  # byte-level tokens: a multiple of 128 for the GEMM tiles
    d: int = 128
    layers: int = 2
    heads: int = 2
    seq: int = 64

    @property
    def hd(self) -> int:
        return self.d // self.heads


# The emulator's toy size: head dimension 64 (the attention kernels take 64 or 128), so
# d = 128 for 2 heads.
TOY = Config()
# GPT-2 small; its 50257 tokens padded to 256 x 197, the N tile of chapter 11's kernel 5
GPT2 = Config(vocab=50432, d=768, layers=12, heads=12, seq=1024)


def check_config(cfg: Config, batch: int) -> None:
    """The shapes the kernels take: head dimension 64 or 128, GEMM sizes multiples
    of 128."""
    if cfg.d % cfg.heads or cfg.hd not in (64, 128):
        raise ValueError(f"head dimension {cfg.d}/{cfg.heads} must be 64 or 128 "
                         "(the attention kernels)")
    if cfg.d > LN_MAX_D:
        raise ValueError(f"d = {cfg.d} above {LN_MAX_D} "
                         "(residual_layernorm: a row on one warp's registers)")
    # every product's M, N and K is one of T, d, 3d, 4d or V: multiples of 128 suffice
    for name, n in (("d", cfg.d), ("vocab", cfg.vocab), ("batch x seq", batch * cfg.seq)):
        if n % GEMM_TILE:
            raise ValueError(f"{name} = {n} must be a multiple of {GEMM_TILE} "
                             "(the GEMMs' tiles)")


def step_flops(cfg: Config, batch: int) -> float:
    """The FLOPs of one training step, counted as the model needs them (not as a kernel
    spends them). Every weight is used in one product per token forward (2 FLOPs per
    weight and token) and in two backward (dX and dW): 6 per weight and token, over the
    12 d^2 weights of each layer's four matrices and the V d of the tied head. Causal
    attention per layer: Q K^T and P V forward, 2 x 2 S^2 d per sequence, halved by the
    mask; the backward's five products (P recomputed, dV, dP, dQ, dK) are 2.5 times
    that."""
    T, d, S = batch * cfg.seq, cfg.d, cfg.seq
    dense = 6 * T * (12 * cfg.layers * d * d + cfg.vocab * d)
    attention = cfg.layers * batch * 3.5 * (2 * 2 * S * S * d) / 2
    return float(dense + attention)


def param_shapes(cfg: Config) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, shape, decayed) of every parameter, decayed ones first (AdamW runs once per
    group)."""
    d = cfg.d
    out = [("wte", (cfg.vocab, d), True), ("wpe", (cfg.seq, d), True)]
    for i in range(cfg.layers):
        out += [(f"{i}.qkv_w", (d, 3 * d), True), (f"{i}.proj_w", (d, d), True),
                (f"{i}.fc_w", (d, 4 * d), True), (f"{i}.fc2_w", (4 * d, d), True)]
    for i in range(cfg.layers):
        out += [(f"{i}.ln1_w", (d,), False), (f"{i}.ln1_b", (d,), False),
                (f"{i}.qkv_b", (3 * d,), False), (f"{i}.proj_b", (d,), False),
                (f"{i}.ln2_w", (d,), False), (f"{i}.ln2_b", (d,), False),
                (f"{i}.fc_b", (4 * d,), False), (f"{i}.fc2_b", (d,), False)]
    return out + [("lnf_w", (d,), False), ("lnf_b", (d,), False)]


MATRICES = ("qkv_w", "proj_w", "fc_w", "fc2_w")


def init_params(cfg: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2's initialisation (float32): N(0, 0.02) matrices and embeddings, the two
    projections into the residual stream N(0, 0.02 / sqrt(2 layers)), LayerNorm weights 1,
    biases 0."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape, _ in param_shapes(cfg):
        kind = name.split(".")[-1]
        if kind.startswith("ln") and kind.endswith("_w"):
            out[name] = np.ones(shape, np.float32)
        elif kind.endswith("_b"):
            out[name] = np.zeros(shape, np.float32)
        else:
            std = (0.02 / math.sqrt(2 * cfg.layers) if kind in ("proj_w", "fc2_w")
                   else 0.02)
            out[name] = (rng.standard_normal(shape, np.float32) * std).astype(np.float32)
    return out


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def choose_split_k(tiles: int, steps: int, sms: int) -> int:
    """Slices s of K for a product of `tiles` output tiles (one block each, one block per
    SM: kernel 5 holds 145 KB of shared memory) and `steps` K steps, on `sms` SMs. Its
    time in K steps of one SM is modelled as

        ceil(tiles s / sms) x (ceil(steps / s) + TILE_IO_STEPS)
        + TILE_IO_STEPS x (s + 1) x tiles / sms

    (waves x (a slice's loop + its tile's store), then the reduce: s partials read, one
    written), and s is the smallest that minimises it, each slice keeping SPLIT_MIN_STEPS
    steps. On an H200 (132 SMs), K = 16384 (256 steps): proj_w's dW (18 tiles) s = 7, one
    wave of 126 blocks, 261 -> 48 steps; qkv_w's (54) s = 2, 261 -> 139; fc_w's and
    fc2_w's (72) s = 5, 3 waves of 360 blocks (of 396 slots), 261 -> 187. The tied head's
    dW (1182 tiles, 9 waves at 99.5%) and every product of K <= 3072 keep s = 1."""
    def cost(s: int) -> float:
        reduce = TILE_IO_STEPS * (s + 1) * tiles / sms if s > 1 else 0.0
        return cdiv(tiles * s, sms) * (cdiv(steps, s) + TILE_IO_STEPS) + reduce

    return min(range(1, max(1, steps // SPLIT_MIN_STEPS) + 1),
               key=lambda s: (cost(s), s))


def k_slices(K: int, s: int, step: int) -> list[tuple[int, int]]:
    """s ranges [k0, k1) that cover 0..K in order, each a whole number of `step`s, their
    step counts differing by one at most (so s need not divide K / step)."""
    steps = K // step
    if K % step or not 1 <= s <= steps:
        raise ValueError(f"split-K: K = {K} in {s} slices of whole {step}-element steps "
                         "is not possible")
    return [(j * steps // s * step, (j + 1) * steps // s * step) for j in range(s)]


def token_segments(tokens: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts) for embedding_backward: the rows sorted by token id (stable, so
    each token's rows keep their order and the sum is the same at every run), and where
    each token's rows begin."""
    flat = np.asarray(tokens, np.int64).ravel()
    order = np.argsort(flat, kind="stable").astype(np.int32)
    starts = np.zeros(vocab + 1, np.int32)
    np.cumsum(np.bincount(flat, minlength=vocab), out=starts[1:])
    return order, starts


@functools.cache
def kernels() -> dict[str, Any]:
    """Every kernel of the step, each compiled once."""
    ops = {n: cudl.load(OPS, n)
           for n in ("embedding_forward", "embedding_backward", "position_backward",
                     "cast_transpose", "bias_grad_reduce", "split_heads", "merge_heads",
                     "block_sum", "grad_unscale_clip", "split_k_reduce")}
    return ops | {
        "res_ln": cudl.load(OPS, "residual_layernorm"),
        "ln_bwd": cudl.load(OPS, "layernorm_backward_add"),
        "ln_reduce": cudl.load("07-fusion/fused_rows.cu",
                               "layernorm_backward_reduce<float>"),
        "xent": cudl.load("09-training/softmax_cross_entropy.cu",
                          "softmax_cross_entropy"),
        "adamw": cudl.load("09-training/adamw.cu", "adamw_step"),
    }


def device_arch() -> str:
    """The path of this GPU (or of the GPU the emulator mimics): "sm90" on Hopper (cc
    9.0), "sm80" from cc 8.0 (and on an emulated H100: wgmma is not emulated), "sm75" on
    a T4; older GPUs lack ldmatrix and mma.sync m16n8k8."""
    info = cudl.device_info()
    cc = info["cc"] if cudl.on_gpu() else info["mimics"]["cc"]
    major, minor = (int(x) for x in cc.split("."))
    if cudl.on_gpu() and cc == "9.0":
        return "sm90"
    if 10 * major + minor >= 80:
        return "sm80"
    if 10 * major + minor >= 75:
        return "sm75"
    raise RuntimeError(f"compute capability {cc}: the step needs 7.5 (a T4) or newer")


@functools.cache
def gemm_kernel(arch: str) -> tuple[Any, int, int]:
    """(kernel, threads, dynamic shared bytes) of path `arch`'s row-major GEMM (sm90's
    kernel 5 is hgemm.py's launcher, made per operand triple)."""
    tc = cudl.kernels_module("11-tensor-cores/hgemm.py")
    build = GEMMS["sm75" if arch == "sm75" else "sm80"]
    file, name, threads, tile, step, opts = tc.KERNELS[build]
    assert tile == (GEMM_TILE, GEMM_TILE) and step == GEMM_STEP, "check_config's tiles"
    k = cudl.load(f"{tc.D}/{file}.cu", name, options=opts)
    return k, threads, tc.shared_bytes(name, opts)


@dataclass
class Hyper:
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_norm: float = 1.0
    loss_scale: float = 2.0**12
    scale_window: int = 200  # good steps before the loss scale doubles
    dynamic: bool = True


class Model:
    """The book's GPT: parameters, AdamW state, fp16 weight copies and the activations of
    one batch of `batch` sequences of cfg.seq tokens, all allocated once. forward_backward
    leaves loss-scaled fp32 gradients in `g`; optimizer_step clips, unscales and applies
    AdamW; step does both. split_k: slices of K for the blocks' weight gradients, None to
    choose per shape (choose_split_k, on kernel 5 only), or a number for all four (1: no
    split-K). arch: the kernels' path (ARCHS), None for this GPU's (device_arch); an
    older path runs on a newer GPU (and any but "sm90" on the emulator). attn_bwd: the
    attention backward's main kernel (attention_backward.VERSIONS), None for the path's
    (ATTN_BWD, or version 2 where that one's shared memory does not fit)."""

    def __init__(self, cfg: Config, batch: int, params: dict[str, np.ndarray],
                 hyper: Hyper | None = None, split_k: int | None = None,
                 arch: str | None = None, attn_bwd: int | None = None):
        check_config(cfg, batch)
        xp = cudl.xp
        self.cfg, self.batch, self.hyper = cfg, batch, hyper or Hyper()
        own = device_arch()
        self.arch = arch or own
        newer = self.arch in ARCHS and ARCHS.index(self.arch) > ARCHS.index(own)
        if self.arch not in ARCHS or newer and (cudl.on_gpu() or self.arch == "sm90"):
            raise ValueError(f"arch {self.arch!r}: this device runs {own} or an older "
                             f"path of {ARCHS}")
        sm75 = self.arch == "sm75"
        self.gemm_rm, self.gemm_threads, self.gemm_smem = gemm_kernel(self.arch)
        self.k = kernels() | {"gemm": self.gemm_rm}
        self.attn_fwd = ch12.flash_kernel("flash_attn_2_mma", cfg.hd, sm75=sm75)
        info = cudl.device_info()
        self.attn_bwd = ab.main_kernel(attn_bwd or ATTN_BWD[self.arch], cfg.hd, sm75=sm75)
        if attn_bwd is None and self.attn_bwd.smem > cudl.max_shared_per_block():
            # version 3 at d = 128 needs 112.5 KiB: more than sm_86/89's 99 KiB
            self.attn_bwd = ab.main_kernel(2, cfg.hd, sm75=sm75)
        self.sms = info.get("sms", 4)
        # chapter 11's kernel 5 needs sm_90a (wgmma, TMA): elsewhere the path's GEMMS
        self.wgmma = self.arch == "sm90"
        self.tc = cudl.kernels_module("11-tensor-cores/hgemm.py") if self.wgmma else None
        self.gemm5: dict[tuple, Any] = {}
        # one flat fp32 buffer per kind, each parameter at an offset aligned to 64
        # floats (16-byte GEMM rows)
        self.offsets: dict[str, tuple[int, tuple[int, ...]]] = {}
        at, self.n_decay = 0, 0
        for name, shape, decay in param_shapes(cfg):
            self.offsets[name] = (at, shape)
            at += cdiv(math.prod(shape), 64) * 64
            if decay:
                self.n_decay = at
        self.n = at
        self.p = xp.zeros(self.n, np.float32)
        for name, a in params.items():
            self.view(self.p, name)[...] = xp.asarray(a, np.float32)
        self.g, self.m, self.v = (xp.zeros(self.n, np.float32) for _ in range(3))
        self.t = 0  # AdamW steps taken
        self.scale, self.good_steps, self.skipped = self.hyper.loss_scale, 0, 0
        # fp16 weights and their transposes, rewritten from p after every update
        self.w16 = {n: xp.zeros(s, np.float16) for n, s, _ in self.matrices()}
        self.wt16 = {n: xp.zeros(s[::-1], np.float16) for n, s, _ in self.matrices()}
        self.cast_weights()
        T, C, L, H, S = batch * cfg.seq, cfg.d, cfg.layers, cfg.heads, cfg.seq
        f32 = lambda *s: xp.zeros(s, np.float32)  # noqa: E731
        f16 = lambda *s: xp.zeros(s, np.float16)  # noqa: E731
        heads = (batch * H, S, cfg.hd)
        self.tokens, self.targets = xp.zeros(T, np.int32), xp.zeros(T, np.int32)
        self.order, self.starts = xp.zeros(T, np.int32), xp.zeros(cfg.vocab + 1, np.int32)
        # activations kept for the backward, per layer
        # the residual stream entering each layer, and leaving
        self.res = [f32(T, C) for _ in range(L + 1)]
        self.mid = [f32(T, C) for _ in range(L)]  # after the attention half of each layer
        # ln1 / ln2 mean, rstd
        self.stats = [(f32(T), f32(T), f32(T), f32(T)) for _ in range(L + 1)]
        self.h1, self.h1t = [f16(T, C) for _ in range(L)], [f16(C, T) for _ in range(L)]
        self.qkv = [tuple(f16(*heads) for _ in range(3)) for _ in range(L)]
        self.o = [f16(*heads) for _ in range(L)]
        self.lse = [f32(batch * H, S) for _ in range(L)]
        self.orow = [f16(T, C) for _ in range(L)]
        self.orowt = [f16(C, T) for _ in range(L)]
        self.h2, self.h2t = [f16(T, C) for _ in range(L)], [f16(C, T) for _ in range(L)]
        # fc's output before bias and GELU
        self.fc = [f32(T, 4 * C) for _ in range(L)]
        self.a16 = [f16(T, 4 * C) for _ in range(L)]
        self.a16t = [f16(4 * C, T) for _ in range(L)]
        self.hf = f16(T, C)
        self.logits, self.dlogits = f32(T, cfg.vocab), f32(T, cfg.vocab)
        self.losses = f32(T)
        self.dl16, self.dl16t = f16(T, cfg.vocab), f16(cfg.vocab, T)
        # scratch, reused by every layer
        self.w32 = f32(T, 4 * C)  # GEMM outputs up to 4C wide
        self.d32 = f32(T, C)
        self.d16 = f16(T, 4 * C)
        self.dres = f32(T, C)  # the gradient of the residual stream
        self.do16 = f16(*heads)
        self.bwd_out = (f32(*heads), f32(batch * H, S), *(f16(*heads) for _ in range(3)))
        # layernorm_backward_add: 43 registers (ptxas, sm_90), so 7 blocks of C / 4 = 192
        # threads fit an SM; 6 per SM is one wave with 6 x 192 x 32 B = 37 KB of x and dy
        # in flight per SM. Each block writes its dw, db partials: [parts, C] fp32, 4.9 MB
        # at GPT-2's 792 x 768, 2% of the 200 MB a call moves.
        self.ln_parts = min(6 * self.sms, T)
        self.ln_dw, self.ln_db = f32(self.ln_parts, C), f32(self.ln_parts, C)
        # per-tile column sums of a gradient (cast_transpose's or merge_heads'),
        # for bias_grad_reduce
        self.bias_parts = max(cdiv(T, 32), batch * cdiv(S, 32))
        self.bias_buf = f32(self.bias_parts, 4 * C)  # up to fc_b, 4C wide
        self.norm_parts = 2 * self.sms
        self.norm_buf, self.norm_sq = f32(self.norm_parts), f32(1)
        # split-K of the blocks' weight gradients dW [M, N] = X^T dY, K = T: s fp32
        # partials [s, M, N] of the largest (47 MB at GPT-2 small's automatic choice),
        # streams for kernel 5's slices, a contiguous copy of A's slice for GEMMS'
        if split_k is not None and split_k < 1:
            raise ValueError(f"split_k = {split_k}: a number of slices (1: no split-K) "
                             "or None (automatic)")
        self.split_k = split_k
        self.splits = {w: self.split_for(m, n, T)
                       for w, (m, n) in self.dw_shapes().items()}
        shapes = zip(self.dw_shapes().values(), self.splits.values())
        split = [(m, n, s) for (m, n), s in shapes if s > 1]
        self.partials = f32(max([s * m * n for m, n, s in split], default=1))
        self.a_slice = f16(max([m * cdiv(T // GEMM_STEP, s) * GEMM_STEP
                                for m, n, s in split if not self.kernel5(n)], default=1))
        # a split that leaves a slice without a whole K step fails here, not mid-step
        for _, n, s in split:
            k_slices(T, s, GEMM5_STEP if self.kernel5(n) else GEMM_STEP)
        self.streams: list[Any] = []
        if any(self.kernel5(n) for _, n, _ in split):
            import cupy

            s_max = max(s for _, _, s in split)
            self.streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(s_max - 1)]
            self.events = [cupy.cuda.Event(disable_timing=True) for _ in range(s_max)]

    # ------------------------------------------------------------------ parameters
    def matrices(self) -> list[tuple[str, tuple[int, ...], bool]]:
        """The parameters that are GEMM operands: the tied embedding and the four matrices
        of each layer."""
        return [(n, s, d) for n, s, d in param_shapes(self.cfg)
                if n == "wte" or n.split(".")[-1] in MATRICES]

    def view(self, flat: Any, name: str) -> Any:
        at, shape = self.offsets[name]
        return flat[at:at + math.prod(shape)].reshape(shape)

    def params(self) -> dict[str, np.ndarray]:
        return {n: cudl.to_numpy(self.view(self.p, n)).copy() for n in self.offsets}

    def gradients(self) -> dict[str, np.ndarray]:
        """The gradients of the mean loss that forward_backward left (unscaled, before
        clipping), float64."""
        return {n: cudl.to_numpy(self.view(self.g, n)).astype(np.float64) / self.scale
                for n in self.offsets}

    def cast_weights(self) -> None:
        for name, shape, _ in self.matrices():
            self.cast(self.view(self.p, name), self.w16[name], self.wt16[name], *shape)

    # ------------------------------------------------------------------ launch helpers
    @staticmethod
    def part(buf: Any, rows: int, cols: int) -> Any:
        """The first rows x cols elements of a scratch buffer as a contiguous [rows, cols]
        array."""
        return buf.reshape(-1)[:rows * cols].reshape(rows, cols)

    def grid(self, n: int) -> int:
        return min(cdiv(n, 256), 32 * self.sms)

    def kernel5(self, N: int) -> bool:
        """Whether a product of N columns runs on kernel 5 (Hopper, N a multiple of its
        256-wide tile)."""
        return self.wgmma and N % GEMM5_TILE[1] == 0

    def dw_shapes(self) -> dict[str, tuple[int, int]]:
        """[M, N] of each block matrix's weight gradient (its K is the T tokens)."""
        C = self.cfg.d
        return {"qkv_w": (C, 3 * C), "proj_w": (C, C), "fc_w": (C, 4 * C),
                "fc2_w": (4 * C, C)}

    def split_for(self, M: int, N: int, K: int) -> int:
        """Slices of K for a weight gradient: Model(split_k=...), else choose_split_k on
        kernel 5, else 1."""
        if self.split_k is not None:
            return self.split_k
        # GEMMS' slices run one after another: no gain to pay the copies for
        if not self.kernel5(N):
            return 1
        tiles = (M // GEMM5_TILE[0]) * (N // GEMM5_TILE[1])
        return choose_split_k(tiles, K // GEMM5_STEP, self.sms)

    def gemm(self, a: Any, b: Any, c: Any, M: int, N: int, K: int,
             split: bool = False) -> None:
        """C [M, N] fp32 = A [M, K] B [K, N], fp16 row-major operands: chapter 11's
        kernel 5 (wgmma + TMA) on Hopper where N is a multiple of its 256-wide tile,
        else the path's GEMMS build (kernel 3, or kernel 1 on sm75). split: a block's
        weight gradient, computed over slices of K (split_for) when that pays."""
        s = self.split_for(M, N, K) if split else 1
        if s > 1:
            self.gemm_split(a.reshape(M, K), b.reshape(K, N), c, M, N, K, s)
        elif not self.kernel5(N):
            self.k["gemm"]((N // GEMM_TILE, M // GEMM_TILE), self.gemm_threads,
                           (M, N, K, a, b, c), shared_mem=self.gemm_smem)
        else:
            self.launcher5(a.reshape(M, K), b.reshape(K, N), c.reshape(M, N))()

    def launcher5(self, a: Any, b: Any, c: Any,
                  options: tuple[str, ...] = GEMM5_OPTIONS) -> Any:
        """Kernel 5's launch of C = A B. It reads A and B through tensor maps that hold
        their addresses (and A's row stride: A may be a column range of a matrix): one
        launcher per operand triple and build, made on first use (the step's buffers are
        allocated once, so a few dozen, and a few more per slice of split-K)."""
        key = (a.data.ptr, a.strides, b.data.ptr, c.data.ptr, a.shape, b.shape, options)
        run = self.gemm5.get(key)
        if run is None:
            run = self.tc.hgemm("5: wgmma + TMA", a, b, c, options=options)
            self.gemm5[key] = run
        return run

    def gemm_split(self, a: Any, b: Any, c: Any, M: int, N: int, K: int, s: int) -> None:
        """C = sum over s slices [k0, k1) of K of A[:, k0:k1] B[k0:k1], each slice's
        product into its own fp32 partial, then split_k_reduce adds the partials in slice
        order (the same bits at every run)."""
        parts = self.partials[:s * M * N].reshape(s, M, N)
        five = self.kernel5(N)
        bounds = k_slices(K, s, GEMM5_STEP if five else GEMM_STEP)
        if five:
            # s launches on s streams at once: slice 0 on the current stream, the others
            # beside it. The launchers first: a new one copies its tensor maps to the GPU
            # on the current stream, and a slice's stream must wait for that copy too (a
            # kernel that read a map still in flight faulted with an illegal instruction)
            import cupy

            runs = [self.launcher5(a[:, k0:k1], b[k0:k1], parts[j], GEMM5_SPLIT_OPTIONS)
                    for j, (k0, k1) in enumerate(bounds)]
            main = cupy.cuda.get_current_stream()
            self.events[0].record(main)
            for st in self.streams[:s - 1]:
                st.wait_event(self.events[0])
            for j, run in enumerate(runs):
                if j == 0:
                    run()
                    continue
                with self.streams[j - 1]:
                    run()
                    self.events[j].record(self.streams[j - 1])
            for j in range(1, s):
                main.wait_event(self.events[j])
        else:
            # kernels 1 and 3 read rows K apart: each slice of A goes through a
            # contiguous copy
            for j, (k0, k1) in enumerate(bounds):
                a_j = self.part(self.a_slice, M, k1 - k0)
                a_j[...] = a[:, k0:k1]
                self.k["gemm"]((N // GEMM_TILE, M // GEMM_TILE), self.gemm_threads,
                               (M, N, k1 - k0, a_j, b[k0:k1], parts[j]),
                               shared_mem=self.gemm_smem)
        n = M * N
        self.k["split_k_reduce"]((self.grid(n // 4),), 256, (parts, s, n, c))

    @staticmethod
    def row_block(units: int) -> int:
        """Threads of a one-row-per-block kernel: `units` rounded up to a warp, at most
        1024."""
        return min(1024, cdiv(units, 32) * 32)

    def cast(self, x: Any, y: Any, yt: Any, rows: int, cols: int, scale: float = 1.0,
             db: str = "", gelu_bias: Any = None, pre: Any = None) -> None:
        """y = fp16(v) (and yt = y^T), v = scale x, or scale gelu(x + gelu_bias), or with
        pre too scale x gelu'(pre + gelu_bias); with `db`, that parameter's gradient = the
        column sums of v."""
        colsum = self.bias_buf if db else None
        self.k["cast_transpose"]((cdiv(cols, 64), cdiv(rows, 32)), (32, 8),
                                 (x, pre, gelu_bias, y, yt, colsum, rows, cols, scale))
        if db:
            self.bias_reduce(cdiv(rows, 32), cols, db)

    def bias_reduce(self, parts: int, cols: int, name: str) -> None:
        self.k["bias_grad_reduce"]((cdiv(cols, 32),), (32, 32),
                                   (self.bias_buf, parts, cols, self.view(self.g, name)))

    def stream(self, i: int) -> tuple:
        """(x, y, bias, out) of the residual add that the LayerNorm reading res[i]
        performs: res[i] = mid[i - 1] + fc2's output (in d32) + fc2_b; res[0] (the
        embeddings) as it is."""
        if i == 0:
            return (self.res[0], None, None, None)
        return (self.mid[i - 1], self.d32, self.view(self.p, f"{i - 1}.fc2_b"),
                self.res[i])

    def layernorm(self, name: str, h: Any, ht: Any, mean: Any, rstd: Any, x: Any,
                  y: Any = None, bias: Any = None, out: Any = None) -> None:
        """h = fp16 LayerNorm(v) (and ht = h^T), v = x, or x + y + bias written to out:
        the residual add before the LayerNorm and the cast after it, in one pass."""
        T, C = x.shape
        w, b = self.view(self.p, name + "_w"), self.view(self.p, name + "_b")
        self.k["res_ln"]((cdiv(T, 16),), 128,
                         (x, y, bias, out, w, b, h, ht, mean, rstd, T, C, LN_EPS),
                         shared_mem=16 * (C + 2) * 2)

    def layernorm_backward(self, dy: Any, x: Any, name: str, mean: Any, rstd: Any,
                           dx: Any, add: bool = False) -> None:
        """dx = LayerNorm's input gradient (add: dx += it, the residual stream's
        gradient); its w, b gradients."""
        T, C = x.shape
        self.k["ln_bwd"]((self.ln_parts,), self.row_block(C // 4),
                         (dy, x, self.view(self.p, name + "_w"), mean, rstd,
                          dx if add else None, dx, self.ln_dw, self.ln_db, T, C))
        # 32 lanes of parts per column (the kernel's shared sums hold 32): 17 loads
        # per thread, not 66
        self.k["ln_reduce"]((cdiv(C, 32),), (32, 32),
                            (self.ln_dw, self.ln_db, self.view(self.g, name + "_w"),
                             self.view(self.g, name + "_b"), self.ln_parts, C))

    def split(self, rows: Any, parts: int, a: Any, b: Any = None, c: Any = None,
              bias: Any = None) -> None:
        """fp32 rows [T, parts C] (+ bias) -> `parts` fp16 head arrays
        [batch heads, seq, hd]."""
        cfg = self.cfg
        self.k["split_heads"]((self.batch * cfg.seq,), self.row_block(parts * cfg.d // 8),
                              (rows, bias, a, b, c,
                               self.batch, cfg.seq, cfg.heads, cfg.hd, parts))

    def merge(self, parts: int, a: Any, b: Any, c: Any, y: Any, yt: Any = None,
              db: str = "") -> None:
        """fp16 heads -> fp16 rows y [T, parts C] (and yt = y^T); with `db`, that
        parameter's gradient = the column sums of y."""
        cfg = self.cfg
        colsum = self.bias_buf if db else None
        self.k["merge_heads"]((cdiv(cfg.seq, 32), self.batch * cfg.heads, parts), 256,
                              (a, b, c, y, yt, colsum,
                               self.batch, cfg.seq, cfg.heads, cfg.hd, parts))
        if db:
            self.bias_reduce(self.batch * cdiv(cfg.seq, 32), parts * cfg.d, db)

    # ------------------------------------------------------------------ the step
    def load_batch(self, tokens: np.ndarray, targets: np.ndarray) -> None:
        """Copy a batch ([batch, seq] int32 tokens and targets) and its token segments to
        the device."""
        xp = cudl.xp
        tokens = np.asarray(tokens, np.int32).reshape(-1)
        self.tokens[...] = xp.asarray(tokens)
        self.targets[...] = xp.asarray(np.asarray(targets, np.int32).reshape(-1))
        order, starts = token_segments(tokens, self.cfg.vocab)
        self.order[...], self.starts[...] = xp.asarray(order), xp.asarray(starts)

    def forward(self) -> None:
        """The loss of the loaded batch: per-token losses in self.losses, dlogits (of the
        mean) in self.dlogits."""
        cfg, k, p = self.cfg, self.k, self.p
        T, C, S = self.batch * cfg.seq, cfg.d, cfg.seq
        k["embedding_forward"]((self.grid(T * C),), 256,
                               (self.tokens, self.view(p, "wte"), self.view(p, "wpe"),
                                self.res[0], T, S, C))
        y32 = self.part(self.w32, T, C)
        for i in range(cfg.layers):
            mean1, rstd1, mean2, rstd2 = self.stats[i]
            self.layernorm(f"{i}.ln1", self.h1[i], self.h1t[i], mean1, rstd1,
                           *self.stream(i))
            qkv32 = self.part(self.w32, T, 3 * C)
            self.gemm(self.h1[i], self.w16[f"{i}.qkv_w"], qkv32, T, 3 * C, C)
            q, kk, v = self.qkv[i]
            self.split(qkv32, 3, q, kk, v, bias=self.view(p, f"{i}.qkv_b"))
            ch12.flash_launch(self.attn_fwd, q, kk, v, self.o[i], self.lse[i], True)
            self.merge(1, self.o[i], None, None, self.orow[i], self.orowt[i])
            self.gemm(self.orow[i], self.w16[f"{i}.proj_w"], y32, T, C, C)
            # mid = res[i] + y32 + proj_b, then ln2 of it, in one pass
            self.layernorm(f"{i}.ln2", self.h2[i], self.h2t[i], mean2, rstd2,
                           self.res[i], y32, self.view(p, f"{i}.proj_b"), self.mid[i])
            self.gemm(self.h2[i], self.w16[f"{i}.fc_w"], self.fc[i], T, 4 * C, C)
            # a = gelu(fc + fc_b), straight to fp16 (and transposed): fc2's operands
            self.cast(self.fc[i], self.a16[i], self.a16t[i], T, 4 * C,
                      gelu_bias=self.view(p, f"{i}.fc_b"))
            # fc2's output: res[i + 1] = mid + it + fc2_b, added by the next
            # LayerNorm (ln1 or lnf)
            self.gemm(self.a16[i], self.w16[f"{i}.fc2_w"], self.d32, T, C, 4 * C)
        meanf, rstdf = self.stats[cfg.layers][:2]
        self.layernorm("lnf", self.hf, None, meanf, rstdf, *self.stream(cfg.layers))
        self.gemm(self.hf, self.wt16["wte"], self.logits, T, cfg.vocab, C)
        k["xent"]((cdiv(T, 4),), 128,
                  (self.logits, self.targets, self.losses, self.dlogits, T, cfg.vocab))

    def backward(self) -> None:
        """Loss-scaled gradients of the mean loss into self.g (every slot written; wte's
        added to)."""
        cfg, k, p, g = self.cfg, self.k, self.p, self.g
        T, C, V = self.batch * cfg.seq, cfg.d, cfg.vocab
        g[...] = 0  # wte (the head's dW, then the embedding backward) adds into its slot
        self.cast(self.dlogits, self.dl16, self.dl16t, T, V, self.scale)
        # the tied head's dW = dlogits^T hf
        self.gemm(self.dl16t, self.hf, self.view(g, "wte"), V, C, T)
        self.gemm(self.dl16, self.w16["wte"], self.d32, T, C, V)
        meanf, rstdf = self.stats[cfg.layers][:2]
        self.layernorm_backward(self.d32, self.res[cfg.layers], "lnf", meanf, rstdf,
                                self.dres)
        g16 = self.part(self.d16, T, C)
        for i in reversed(range(cfg.layers)):
            mean1, rstd1, mean2, rstd2 = self.stats[i]
            # MLP half: res[i + 1] = mid + fc2(gelu(fc(ln2(mid))))
            self.cast(self.dres, g16, None, T, C, db=f"{i}.fc2_b")
            self.gemm(self.a16t[i], g16, self.view(g, f"{i}.fc2_w"), 4 * C, C, T,
                      split=True)
            self.gemm(g16, self.wt16[f"{i}.fc2_w"], self.w32, T, 4 * C, C)
            # dfc = da gelu'(fc + fc_b) in fp16 for the GEMMs, its column sums
            # fc_b's gradient
            self.cast(self.w32, self.d16, None, T, 4 * C, db=f"{i}.fc_b",
                      gelu_bias=self.view(p, f"{i}.fc_b"), pre=self.fc[i])
            self.gemm(self.h2t[i], self.d16, self.view(g, f"{i}.fc_w"), C, 4 * C, T,
                      split=True)
            self.gemm(self.d16, self.wt16[f"{i}.fc_w"], self.d32, T, C, 4 * C)
            self.layernorm_backward(self.d32, self.mid[i], f"{i}.ln2", mean2, rstd2,
                                    self.dres, add=True)
            # attention half: mid = res[i] + proj(attention(ln1(res[i])))
            self.cast(self.dres, g16, None, T, C, db=f"{i}.proj_b")
            self.gemm(self.orowt[i], g16, self.view(g, f"{i}.proj_w"), C, C, T,
                      split=True)
            self.gemm(g16, self.wt16[f"{i}.proj_w"], self.d32, T, C, C)
            self.split(self.d32, 1, self.do16)
            q, kk, v = self.qkv[i]
            dq, dk, dv = ab.backward(q, kk, v, self.o[i], self.lse[i], self.do16, True,
                                     out=self.bwd_out, kernel=self.attn_bwd)
            d16 = self.part(self.d16, T, 3 * C)
            # fp16 rows and the qkv bias gradient
            self.merge(3, dq, dk, dv, d16, db=f"{i}.qkv_b")
            self.gemm(self.h1t[i], d16, self.view(g, f"{i}.qkv_w"), C, 3 * C, T,
                      split=True)
            self.gemm(d16, self.wt16[f"{i}.qkv_w"], self.d32, T, C, 3 * C)
            self.layernorm_backward(self.d32, self.res[i], f"{i}.ln1", mean1, rstd1,
                                    self.dres, add=True)
        k["embedding_backward"]((V,), 128, (self.dres, self.order, self.starts,
                                            self.view(g, "wte"), C))
        k["position_backward"]((self.grid(cfg.seq * C),), 256,
                               (self.dres, self.view(g, "wpe"), self.batch, cfg.seq, C))

    def forward_backward(self, tokens: np.ndarray, targets: np.ndarray) -> None:
        self.load_batch(tokens, targets)
        self.forward()
        self.backward()

    def grad_norm_sq(self) -> None:
        """||g||^2 (loss-scaled) into self.norm_sq, in two launches of block_sum (a fixed
        order)."""
        self.k["block_sum"]((self.norm_parts,), 256, (self.g, self.n, 1, self.norm_buf))
        self.k["block_sum"]((1,), 256, (self.norm_buf, self.norm_parts, 0, self.norm_sq))

    def optimizer_step(self) -> float:
        """Clip and unscale the gradients, AdamW, refresh the fp16 weights; the unscaled
        gradient norm (a step whose norm is not finite is skipped, and the loss scale
        halved)."""
        h = self.hyper
        self.grad_norm_sq()
        # the step's one host sync
        norm = math.sqrt(float(cudl.to_numpy(self.norm_sq)[0])) / self.scale
        if not math.isfinite(norm):
            if not h.dynamic:
                raise FloatingPointError(f"gradient norm {norm} "
                                         f"at loss scale {self.scale}")
            self.scale, self.good_steps = self.scale / 2, 0
            self.skipped += 1
            return norm
        self.k["grad_unscale_clip"]((self.grid(self.n),), 256,
                                    (self.g, self.n, self.norm_sq, 1 / self.scale,
                                     h.max_norm))
        self.t += 1
        for lo, hi, wd in ((0, self.n_decay, h.weight_decay),
                           (self.n_decay, self.n, 0.0)):
            self.k["adamw"]((self.grid(hi - lo),), 256,
                            (self.p[lo:hi], self.g[lo:hi], self.m[lo:hi], self.v[lo:hi],
                             hi - lo, h.lr, h.betas[0], h.betas[1], h.eps, wd, self.t))
        self.cast_weights()
        self.good_steps += 1
        if h.dynamic and self.good_steps % h.scale_window == 0:
            self.scale = min(self.scale * 2, 2.0**24)
        return norm

    def loss(self) -> float:
        return float(cudl.to_numpy(self.losses).astype(np.float64).mean())

    def step(self, tokens: np.ndarray, targets: np.ndarray) -> float:
        """One training step on a batch; the batch's mean loss (before the update)."""
        self.forward_backward(tokens, targets)
        self.optimizer_step()
        return self.loss()

    def eval_loss(self, tokens: np.ndarray, targets: np.ndarray) -> float:
        """The mean loss of a batch, forward only (held-out data)."""
        self.load_batch(tokens, targets)
        self.forward()
        return self.loss()


# ----------------------------------------------------------------------------------- data


def corpus(kind: str = "book") -> np.ndarray:
    """Bytes of a text available offline, as int32 tokens (< 256): "book", the book's
    chapters (chapters/*.md, as chapter 10 trains on), or "stdlib", the Python standard
    library's .py sources."""
    if kind == "book":
        root = HERE.parents[1] / "chapters"
        text = b"\n\n".join(p.read_bytes() for p in sorted(root.glob("*.md")))
    elif kind == "stdlib":
        import sysconfig

        root = Path(sysconfig.get_paths()["stdlib"])
        text = b"\n\n".join(p.read_bytes() for p in sorted(root.glob("*.py")))
    else:
        raise ValueError(f"corpus {kind!r}: 'book' or 'stdlib'")
    return np.frombuffer(text, np.uint8).astype(np.int32)


class Batches:
    """Random windows of a token array, the same sequence for every consumer built with
    the same seed: the last `held_out` fraction is the validation split, never
    trained on."""

    def __init__(self, data: np.ndarray, batch: int, seq: int, seed: int = 0,
                 held_out: float = 0.1):
        cut = int(len(data) * (1 - held_out))
        self.train, self.val = data[:cut], data[cut:]
        self.batch, self.seq, self.rng = batch, seq, np.random.default_rng(seed)

    def windows(self, data: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        starts = rng.integers(0, len(data) - self.seq - 1, self.batch)
        idx = starts[:, None] + np.arange(self.seq + 1)
        chunk = data[idx]
        return chunk[:, :-1].astype(np.int32), chunk[:, 1:].astype(np.int32)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        return self.windows(self.train, self.rng)

    def validation(self, n: int, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """n fixed held-out batches (the same at every call)."""
        rng = np.random.default_rng(seed)
        return [self.windows(self.val, rng) for _ in range(n)]


# ----------------------------------------------------------------------------------- twin

try:  # PyTorch is optional: the emulator (CI, laptops) may run without it
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


if torch is not None:

    class _Round(torch.autograd.Function):
        """Round to fp16 where the book does: the forward value (`fwd`) and/or the
        gradient (`bwd`, times the loss scale, so that fp16's range is the one the book's
        scaled gradients see)."""

        @staticmethod
        def forward(ctx, x, fwd: bool, bwd: bool, scale: float):
            ctx.bwd, ctx.scale = bwd, scale
            return x.half().to(x.dtype) if fwd else x.clone()

        @staticmethod
        def backward(ctx, g):
            if ctx.bwd:
                g = (g * ctx.scale).half().to(g.dtype) / ctx.scale
            return g, None, None, None

    class Twin:
        """The same model in PyTorch (same parameter layout, names and init), the
        reference of the tests and the baseline of the timings. `dtype` float64/float32
        for references; `autocast` (torch.bfloat16, or torch.float16 with a GradScaler
        that starts at the book's loss scale) for the speed baseline; `fp16_at_book_sites`
        rounds to fp16 exactly where the book's step does (GEMM and attention operands,
        the gradients the book casts), to measure what fp16
        alone costs."""

        def __init__(self, cfg: Config, params: dict[str, np.ndarray],
                     device: str = "cpu", dtype: Any = None, autocast: Any = None,
                     fp16_at_book_sites: bool = False, loss_scale: float = 2.0**12,
                     hyper: Hyper | None = None):
            self.cfg, self.autocast, self.device = cfg, autocast, device
            dtype = dtype or torch.float32
            self.p = {n: torch.tensor(a, dtype=dtype, device=device, requires_grad=True)
                      for n, a in params.items()}
            self.round, self.scale = fp16_at_book_sites, loss_scale
            h = hyper or Hyper()
            decay = [self.p[n] for n, _, d in param_shapes(cfg) if d]
            rest = [self.p[n] for n, _, d in param_shapes(cfg) if not d]
            self.max_norm = h.max_norm
            # fp16's range needs the loss scaled (as the book's step does); bf16's not
            self.scaler = (torch.amp.GradScaler(device.split(":")[0],
                                                init_scale=h.loss_scale)
                           if autocast == torch.float16 else None)
            self.opt = torch.optim.AdamW([dict(params=decay, weight_decay=h.weight_decay),
                                          dict(params=rest, weight_decay=0.0)],
                                         lr=h.lr, betas=h.betas, eps=h.eps,
                                         fused=device != "cpu" and dtype == torch.float32)

        def r(self, x, fwd: bool = True, bwd: bool = False):
            return _Round.apply(x, fwd, bwd, self.scale) if self.round else x

        def loss(self, tokens, targets):
            """The mean cross-entropy of a batch ([batch, seq] tokens and targets, NumPy
            or torch)."""
            return self.losses(tokens, targets).mean()

        def losses(self, tokens, targets):
            """The cross-entropy of every token of a batch ([batch seq], float32 or the
            twin's dtype)."""
            cfg, p, r = self.cfg, self.p, self.r
            tokens, targets = (torch.as_tensor(np.asarray(a), dtype=torch.long,
                                               device=self.device)
                               if not torch.is_tensor(a) else a
                               for a in (tokens, targets))
            B, S, C, H = *tokens.shape, cfg.d, cfg.heads
            ctx = (torch.autocast(self.device.split(":")[0], dtype=self.autocast)
                   if self.autocast else torch.autocast("cpu", enabled=False))
            with ctx:
                x = p["wte"][tokens] + p["wpe"][:S]
                for i in range(cfg.layers):
                    h = r(F.layer_norm(x, (C,), p[f"{i}.ln1_w"], p[f"{i}.ln1_b"], LN_EPS))
                    qkv = r(h @ r(p[f"{i}.qkv_w"]), False, True) + p[f"{i}.qkv_b"]
                    q, k, v = (r(t, True, True).view(B, S, H, cfg.hd).transpose(1, 2)
                               for t in qkv.split(C, -1))
                    o = r(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                          True, True)
                    o = o.transpose(1, 2).reshape(B, S, C)
                    x = x + r(o @ r(p[f"{i}.proj_w"]), False, True) + p[f"{i}.proj_b"]
                    h = r(F.layer_norm(x, (C,), p[f"{i}.ln2_w"], p[f"{i}.ln2_b"], LN_EPS))
                    a = r(F.gelu(r(h @ r(p[f"{i}.fc_w"]), False, True) + p[f"{i}.fc_b"]))
                    x = x + r(a @ r(p[f"{i}.fc2_w"]), False, True) + p[f"{i}.fc2_b"]
                h = r(F.layer_norm(x, (C,), p["lnf_w"], p["lnf_b"], LN_EPS))
                logits = r(h @ r(p["wte"]).t(), False, True)
            logits = logits if logits.dtype == torch.float64 else logits.float()
            return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1),
                                   reduction="none")

        def forward_backward(self, tokens, targets) -> float:
            self.opt.zero_grad(set_to_none=True)
            loss = self.loss(tokens, targets)
            (self.scaler.scale(loss) if self.scaler else loss).backward()
            return loss.detach()

        def optimizer_step(self) -> Any:
            if self.scaler:
                self.scaler.unscale_(self.opt)  # clip the true gradients
            norm = torch.nn.utils.clip_grad_norm_(list(self.p.values()), self.max_norm)
            if self.scaler:
                self.scaler.step(self.opt)  # skipped when a gradient overflowed
                self.scaler.update()
            else:
                self.opt.step()
            return norm

        def step(self, tokens, targets) -> Any:
            loss = self.forward_backward(tokens, targets)
            self.optimizer_step()
            return loss

        def gradients(self) -> dict[str, np.ndarray]:
            return {n: t.grad.detach().double().cpu().numpy() for n, t in self.p.items()}

        def params(self) -> dict[str, np.ndarray]:
            return {n: t.detach().double().cpu().numpy() for n, t in self.p.items()}
