"""Chapter 10's tiny GPT: one model, three implementations of its forward pass.

* `numpy_forward`: float64 NumPy, the reference the tests compare with (no GPU, no
PyTorch);
* `TorchGPT`: PyTorch, for training and as the speed baseline (eager, with a KV cache);
* `BookGPT`: the book's kernels (kernels_src/), with a KV cache: `prefill` runs the
prompt,
  `decode_step` one new token per sequence, entirely on the device (a CUDA graph can hold
  it).

The architecture is GPT-2's with two later changes that Llama made common: RMSNorm instead
of LayerNorm and rotary position embeddings (RoPE) instead of learned ones. No biases. Per
layer: x += proj(attention(rope(qkv(rmsnorm(x)))));  x += down(gelu_tanh(up(rmsnorm(x)))).
Weights are a dict of float32 arrays named as in `weight_shapes`; linear layers are [out,
in].
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:  # PyTorch is optional: the emulator (CI, laptops) runs without it
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

EPS = 1e-5
ROPE_BASE = 10000.0


@dataclass(frozen=True)
class Config:
    vocab: int
    d_model: int = 256
    n_layer: int = 4
    n_head: int = 4
    d_ff: int = 1024
    max_len: int = 256

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


def weight_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, f = cfg.d_model, cfg.d_ff
    shapes: dict[str, tuple[int, ...]] = {"embed": (cfg.vocab, d)}
    for i in range(cfg.n_layer):
        shapes |= {
            f"{i}.norm1": (d,),
            f"{i}.qkv": (3 * d, d),
            f"{i}.proj": (d, d),
            f"{i}.norm2": (d,),
            f"{i}.up": (f, d),
            f"{i}.down": (d, f),
        }
    return shapes | {"norm_f": (d,), "head": (cfg.vocab, d)}


def n_params(cfg: Config) -> int:
    return sum(math.prod(s) for s in weight_shapes(cfg).values())


def random_weights(cfg: Config, seed: int | None = None, xp: Any = np) -> dict[str, Any]:
    """GPT-2's initialization (normal, sd 0.02), norms 1 (plus noise, so a test sees a
    wrong weight)."""
    rng = xp.random.default_rng(seed) if xp is np else xp.random.default_rng(seed or 0)
    w = {}
    for name, shape in weight_shapes(cfg).items():
        if len(shape) == 1:
            w[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            w[name] = (0.02 * rng.standard_normal(shape)).astype(np.float32)
    return w


def round_to_fp16(weights: dict[str, Any]) -> dict[str, Any]:
    """The weights as the book's decode reads them: linear layers rounded to fp16
    (storage), so the reference and the book's forward compute with the same numbers."""
    return {
        k: (
            v.astype(np.float16).astype(np.float32) if v.ndim == 2 and k != "embed" else v
        )
        for k, v in weights.items()
    }


# ---------------------------------------------------------------- text and tokenizer


def book_text() -> str:
    """The book's own chapters (chapters/*.md), concatenated: the training text ships with
    the repository."""
    root = Path(__file__).resolve().parents[2] / "chapters"
    return "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(root.glob("*.md")))


class CharTokenizer:
    """One token per character of the training text (unknown characters map to token
    0)."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> np.ndarray:
        return np.array([self.index.get(c, 0) for c in s], np.int32)

    def decode(self, ids: Any) -> str:
        return "".join(self.chars[int(i)] for i in ids)


# ---------------------------------------------------------------- float64 NumPy reference


def rope_np(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """RoPE, "rotate half" layout, on x [..., tokens, head_dim] in float64."""
    hd = x.shape[-1]
    h = hd // 2
    inv_freq = ROPE_BASE ** (-2.0 * np.arange(h) / hd)
    ang = positions[:, None].astype(np.float64) * inv_freq
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def gelu_tanh_np(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def rmsnorm_np(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def numpy_forward(weights: dict[str, Any], cfg: Config, tokens: np.ndarray) -> np.ndarray:
    """Logits [batch, seq, vocab] of the full causal forward, in float64."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    B, T = tokens.shape
    H, hd = cfg.n_head, cfg.head_dim
    x = w["embed"][tokens]
    pos = np.arange(T)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(cfg.n_layer):
        qkv = rmsnorm_np(x, w[f"{i}.norm1"]) @ w[f"{i}.qkv"].T
        # [B, H, T, hd] each
        q, k, v = qkv.reshape(B, T, 3, H, hd).transpose(2, 0, 3, 1, 4)
        q, k = rope_np(q, pos), rope_np(k, pos)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        att = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, cfg.d_model)
        x = x + att @ w[f"{i}.proj"].T
        h = gelu_tanh_np(rmsnorm_np(x, w[f"{i}.norm2"]) @ w[f"{i}.up"].T)
        x = x + h @ w[f"{i}.down"].T
    return rmsnorm_np(x, w["norm_f"]) @ w["head"].T


# ---------------------------------------------------------------- PyTorch

if torch is not None:

    def rope_torch(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """RoPE on x [batch, heads, tokens, head_dim] at `positions` [tokens]; fp32
        angles."""
        hd = x.shape[-1]
        h = hd // 2
        inv_freq = ROPE_BASE ** (
            -torch.arange(0, h, device=x.device, dtype=torch.float32) * 2 / hd
        )
        ang = positions.float()[:, None] * inv_freq
        c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    class Block(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            d = cfg.d_model
            self.cfg = cfg
            self.norm1, self.norm2 = nn.RMSNorm(d, eps=EPS), nn.RMSNorm(d, eps=EPS)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.up = nn.Linear(d, cfg.d_ff, bias=False)
            self.down = nn.Linear(cfg.d_ff, d, bias=False)

        def forward(self, x, positions, cache=None, start: int = 0):
            B, T, _ = x.shape
            H, hd = self.cfg.n_head, self.cfg.head_dim
            q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)
            q, k = rope_torch(q, positions), rope_torch(k, positions)
            if cache is not None:  # write this step's keys and values; attend over all
                kc, vc = cache
                kc[:B, :, start : start + T] = k
                vc[:B, :, start : start + T] = v
                k, v = kc[:B, :, : start + T], vc[:B, :, : start + T]
            # causal for a prompt (which starts at position 0); one new token sees all
            # keys
            att = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
            x = x + self.proj(att.transpose(1, 2).reshape(B, T, -1))
            return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))

    class TorchGPT(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            self.cfg = cfg
            self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
            self.norm_f = nn.RMSNorm(cfg.d_model, eps=EPS)
            self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
            for _name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, caches=None, start: int = 0):
            T = idx.shape[1]
            positions = torch.arange(start, start + T, device=idx.device)
            x = self.embed(idx)
            for i, blk in enumerate(self.blocks):
                x = blk(x, positions, None if caches is None else caches[i], start)
            return self.head(self.norm_f(x))

        def new_caches(self, batch: int, max_len: int, dtype=None):
            H, hd = self.cfg.n_head, self.cfg.head_dim
            p = next(self.parameters())
            return [
                tuple(
                    torch.zeros(
                        batch, H, max_len, hd, device=p.device, dtype=dtype or p.dtype
                    )
                    for _ in range(2)
                )
                for _ in range(self.cfg.n_layer)
            ]

        def weights(self, xp: Any = np) -> dict[str, Any]:
            """The weights in `weight_shapes` naming, float32, as NumPy arrays (or CuPy,
            through DLPack)."""
            sd = {
                k: (
                    v.detach().float().cpu().numpy()
                    if xp is np
                    else xp.from_dlpack(v.detach().float())
                )
                for k, v in self.state_dict().items()
            }
            w = {
                "embed": sd["embed.weight"],
                "norm_f": sd["norm_f.weight"],
                "head": sd["head.weight"],
            }
            for i in range(self.cfg.n_layer):
                for part in ("norm1", "norm2", "qkv", "proj", "up", "down"):
                    w[f"{i}.{part}"] = sd[f"blocks.{i}.{part}.weight"]
            return w

        def load_weights(self, w: dict[str, Any]) -> None:
            sd = {
                "embed.weight": w["embed"],
                "norm_f.weight": w["norm_f"],
                "head.weight": w["head"],
            }
            for i in range(self.cfg.n_layer):
                for part in ("norm1", "norm2", "qkv", "proj", "up", "down"):
                    sd[f"blocks.{i}.{part}.weight"] = w[f"{i}.{part}"]
            p = next(self.parameters())
            self.load_state_dict(
                {k: torch.as_tensor(v).to(p.device, p.dtype) for k, v in sd.items()}
            )

    @torch.no_grad()
    def eval_loss(model: TorchGPT, data: Any, windows: int = 128, seed: int = 1) -> float:
        """Cross-entropy (nats per character) of next-character prediction on `windows`
        windows of `data` [tokens] (a torch tensor on the model's device) at fixed random
        starts: the same windows at every call with the same seed."""
        T = model.cfg.max_len
        g = torch.Generator(device="cpu").manual_seed(seed)
        starts = torch.randint(0, len(data) - T - 1, (windows,), generator=g)
        idx = starts.to(data.device)[:, None] + torch.arange(T + 1, device=data.device)
        chunk = data[idx]
        was_training = model.training
        model.eval()
        logits = model(chunk[:, :-1])
        model.train(was_training)
        return F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1)
        ).item()

    @dataclass
    class TrainLog:
        """What `train` measured: (step, loss) pairs and the step of the weights kept."""

        batch: list[tuple[int, float]]  # the loss of the training batch
        train: list[tuple[int, float]]  # eval_loss on the training text
        held_out: list[tuple[int, float]]  # eval_loss on the held-out text
        best_step: int  # the lowest held-out loss: the weights the model ends with

        def at_best(self) -> tuple[float, float]:
            """(training, held-out) loss of the kept weights."""
            return dict(self.train)[self.best_step], dict(self.held_out)[self.best_step]

    def train(
        model: TorchGPT,
        data: np.ndarray,
        steps: int,
        held_out: np.ndarray | None = None,
        eval_every: int = 100,
        batch: int = 64,
        lr: float = 3e-3,
        seed: int = 0,
        log_every: int = 100,
    ) -> TrainLog:
        """Next-character prediction on random windows of `data`; AdamW, one-cycle
        schedule, bf16 autocast. Every `eval_every` steps (and at the end) the loss on
        fixed windows of `data` and of `held_out` is evaluated; the model ends with the
        weights of the lowest held-out loss (early stopping by checkpoint; the last
        weights without `held_out`)."""
        g = torch.Generator(device="cpu").manual_seed(seed)
        dev = next(model.parameters()).device
        data_t = torch.as_tensor(data, dtype=torch.long, device=dev)
        held_t = None
        if held_out is not None:
            held_t = torch.as_tensor(held_out, dtype=torch.long, device=dev)
        T = model.cfg.max_len
        opt = torch.optim.AdamW(
            model.parameters(),
            lr=lr,
            betas=(0.9, 0.95),
            weight_decay=0.1,
            fused=dev.type == "cuda",
        )
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, lr, total_steps=steps, pct_start=0.05
        )
        log = TrainLog([], [], [], steps)
        best, best_state = math.inf, None
        model.train()
        for step in range(1, steps + 1):
            starts = torch.randint(0, len(data) - T - 1, (batch,), generator=g).to(dev)
            idx = starts[:, None] + torch.arange(T + 1, device=dev)
            chunk = data_t[idx]
            with torch.autocast(
                dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"
            ):
                logits = model(chunk[:, :-1])
            loss = F.cross_entropy(
                logits.float().view(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1)
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % log_every == 0 or step == 1 or step == steps:
                log.batch.append((step, loss.item()))
            if held_t is not None and (step % eval_every == 0 or step == steps):
                log.train.append((step, eval_loss(model, data_t)))
                log.held_out.append((step, eval_loss(model, held_t)))
                if log.held_out[-1][1] < best:
                    best, log.best_step = log.held_out[-1][1], step
                    best_state = {
                        k: v.detach().clone() for k, v in model.state_dict().items()
                    }
        if best_state is not None:
            model.load_state_dict(best_state)
        model.eval()
        return log

    @torch.no_grad()
    def torch_generate(model: TorchGPT, prompt: Any, steps: int, caches=None) -> Any:
        """Greedy decoding with a KV cache in PyTorch eager: prefill, then one token per
        step (attention without cuDNN's kernel, which was the slower choice for a decode
        loop in this chapter's runs)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        B, P = prompt.shape
        caches = caches or model.new_caches(B, P + steps)
        with sdpa_kernel(
            [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        ):
            logits = model(prompt, caches, 0)[:, -1]
            out = []
            for s in range(steps):
                tok = logits.argmax(-1, keepdim=True)
                out.append(tok)
                logits = model(tok, caches, P + s)[:, -1]
        return torch.cat(out, 1)

    class StaticDecoder:
        """PyTorch's fast decode, as gpt-fast does it: a greedy step of `model` with a
        static KV cache (max_len positions, attention over all of them with a mask), the
        token and the position in device tensors, so that the whole step is one CUDA graph
        (torch.cuda.graph). compile=True runs torch.compile on the step first (Inductor
        fuses the elementwise work) and graphs the compiled step. start(prompt) runs the
        prompt eagerly into the cache; replay() makes one token per sequence into
        `tok`."""

        def __init__(
            self, model: TorchGPT, batch: int, max_len: int, compile: bool = False
        ):
            p = next(model.parameters())
            self.model = model
            self.caches = model.new_caches(batch, max_len)
            self.tok = torch.zeros(batch, 1, dtype=torch.long, device=p.device)
            self.pos = torch.zeros(1, dtype=torch.long, device=p.device)
            self.keys = torch.arange(max_len, device=p.device)
            self._step = (
                torch.compile(self.step, fullgraph=True) if compile else self.step
            )
            self.graph = None

        def step(self) -> None:
            m, B = self.model, self.tok.shape[0]
            H, hd = m.cfg.n_head, m.cfg.head_dim
            mask = (self.keys <= self.pos).view(1, 1, 1, -1)  # keys written so far
            x = m.embed(self.tok)
            for blk, (kc, vc) in zip(m.blocks, self.caches):
                qkv = blk.qkv(blk.norm1(x)).view(B, 1, 3, H, hd).permute(2, 0, 3, 1, 4)
                q, k = rope_torch(qkv[0], self.pos), rope_torch(qkv[1], self.pos)
                kc.index_copy_(2, self.pos, k)
                vc.index_copy_(2, self.pos, qkv[2])
                att = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
                x = x + blk.proj(att.transpose(1, 2).reshape(B, 1, -1))
                x = x + blk.down(F.gelu(blk.up(blk.norm2(x)), approximate="tanh"))
            logits = m.head(m.norm_f(x))[:, -1]
            self.tok.copy_(logits.argmax(-1, keepdim=True))
            self.pos.add_(1)

        @torch.inference_mode()
        def start(self, prompt: Any) -> None:
            logits = self.model(prompt, self.caches, 0)[:, -1]
            self.tok.copy_(logits.argmax(-1, keepdim=True))
            self.pos.fill_(prompt.shape[1])

        @torch.inference_mode()
        def capture(self) -> None:
            """Warm up on a side stream (compilation, cuBLAS handles), then record one
            step; the warm-up's writes lie past the position that start() sets next."""
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._step()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step()

        def replay(self) -> None:
            self.graph.replay()


# ---------------------------------------------------------------- the book's kernels


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class GemvConfig:
    """How gemv.cu is compiled and launched: output rows per warp, 16-byte chunks in
    flight per row and lane, warps that share a row group, warps per block."""

    rows: int = 1
    unroll: int = 4
    ksplit: int = 1
    warps: int = 8

    def __str__(self) -> str:
        r, u, k, w = self.rows, self.unroll, self.ksplit, self.warps
        return f"rows={r} unroll={u} ksplit={k} warps={w}"

    def options(self) -> tuple[str, ...]:
        r, u, k = self.rows, self.unroll, self.ksplit
        return (f"-DROWS={r}", f"-DUNROLL={u}", f"-DKSPLIT={k}")

    def grid(self, n_rows: int) -> tuple[tuple[int], tuple[int]]:
        """(grid, block) for a matrix of n_rows output rows."""
        per_block = self.rows * self.warps // self.ksplit
        return (_cdiv(n_rows, per_block),), (32 * self.warps,)

    def load(self) -> Any:
        import cudl

        return cudl.load("10-inference/gemv.cu", "gemv_f16", options=self.options())


# the chapter's first GEMV configuration, and the one the decode step uses. The H100
# sweep of gpu_check.py --sweep timed eleven; the graphed step of the larger model ran
# about as fast at batch 1 with each of the four it tried there, and fastest with this
# one at batch 8 (the K split gives the batch's extra arithmetic more warps)
GEMV_FIRST = GemvConfig(rows=1, unroll=4, ksplit=1, warps=8)
GEMV = GemvConfig(rows=2, unroll=4, ksplit=2, warps=8)


class BookGPT:
    """The model served by the book's kernels, with a KV cache of `cache_dtype` ("float16"
    or "float32").

    Decode-step projections: gemv.cu on fp16 weights (fused residual add and GELU).
    Prefill projections: chapter 5's matmul_6_vectorized on fp32 copies of the weights
    ([in, out]: C = A B), prefill residual adds through the array library (CuPy / NumPy).
    Activations are fp32 everywhere.
    """

    def __init__(
        self,
        weights: dict[str, Any],
        cfg: Config,
        max_batch: int,
        max_len: int | None = None,
        cache_dtype: str = "float16",
        chunk: int = 64,
        prefill: bool = True,
        gemv: GemvConfig = GEMV,
    ):
        import cudl

        self.gemv_config = gemv

        self.cfg, self.B = cfg, max_batch
        self.L = max_len or cfg.max_len
        self.chunk = chunk
        xp = self.xp = cudl.xp
        self.cache_dtype = np.dtype(cache_dtype)
        T = "__half" if cache_dtype == "float16" else "float"
        src = "10-inference/"
        self.k = {
            "gather": cudl.load("09-training/gather_rows.cu", "gather_rows"),
            "rms": cudl.load("07-fusion/fused_rows.cu", "rmsnorm_forward<float>"),
            "matmul": cudl.load(
                "05-matmul/matmul_6_vectorized.cu", "matmul_6_vectorized"
            ),
            "gelu": cudl.load(
                "03-elementwise/activations.cu", "gelu_tanh_forward<float>"
            ),
            "rope": cudl.load(src + "rope.cu", "rope<float>"),
            "append": cudl.load(src + "kv_cache.cu", f"kv_append<{T}>"),
            "prefill": cudl.load(src + "prefill_attention.cu", f"prefill_attention<{T}>"),
            "partial": cudl.load(
                src + "decode_attention.cu", f"decode_attention_partial<{T}>"
            ),
            "combine": cudl.load(src + "decode_attention.cu", "decode_attention_combine"),
            "gemv": self.gemv_config.load(),
            "sample": cudl.load(src + "sampling.cu", "sample_top_k"),
            "advance": cudl.load(src + "sampling.cu", "advance"),
        }

        def f32(a):
            return xp.ascontiguousarray(xp.asarray(a, dtype=np.float32))

        self.w = {k: f32(v) for k, v in weights.items() if v.ndim == 1 or k == "embed"}
        self.w16 = {
            k: xp.ascontiguousarray(xp.asarray(v).astype(np.float16))
            for k, v in weights.items()
            if v.ndim == 2 and k != "embed"
        }
        # prefill's GEMM operands: the fp16-rounded weights, transposed, in fp32
        self.wT = (
            {k: xp.ascontiguousarray(v.astype(np.float32).T) for k, v in self.w16.items()}
            if prefill
            else {}
        )
        d, H, hd = cfg.d_model, cfg.n_head, cfg.head_dim
        B, L = max_batch, self.L
        self.cache = [
            (
                xp.zeros((B, H, L, hd), self.cache_dtype),
                xp.zeros((B, H, L, hd), self.cache_dtype),
            )
            for _ in range(cfg.n_layer)
        ]
        self.chunks = _cdiv(L, chunk)
        z = lambda *s: xp.zeros(s, np.float32)  # noqa: E731
        self.x, self.h, self.qkv, self.att = z(B, d), z(B, d), z(B, 3 * d), z(B, d)
        self.ff, self.logits, self.rstd = (
            z(B, cfg.d_ff),
            z(B, cfg.vocab),
            z(B * max(L, 1)),
        )
        self.o_part, self.ml_part = z(B, H, self.chunks, hd), z(B, H, self.chunks, 2)
        self.tokens = xp.zeros(B, np.int32)
        self.pos = xp.zeros(B, np.int32)
        self.step = xp.zeros(1, np.int32)
        self.u_now = z(B)
        # flat [steps, batch] buffers for up to L steps, allocated once: a CUDA graph of
        # decode_step holds their addresses
        self.u_all = z((L + 1) * B)
        self.history = xp.zeros(L * B, np.int32)
        self.batch = B
        self.top_k, self.temperature = 1, 0.0
        self.sms = 4
        if cudl.on_gpu():
            import cupy

            self.sms = cupy.cuda.Device().attributes["MultiProcessorCount"]

    def use_gemv(self, config: GemvConfig) -> None:
        """Switch the decode step's GEMV configuration (capture a new graph after)."""
        self.gemv_config, self.k["gemv"] = config, config.load()

    # -- small helpers: one launch each
    def _grid(self, n: int, block: int = 256) -> int:
        return max(1, min(_cdiv(n, block), 32 * self.sms))

    def _rms(self, x, w, y, rows: int) -> None:
        d = self.cfg.d_model
        threads = max(32, min(1024, _cdiv(_cdiv(d, 8), 32) * 32))
        self.k["rms"]((rows,), (threads,), (x, w, y, self.rstd, rows, d, EPS))

    def _matmul(self, a, name: str, c, M: int) -> None:
        K, N = self.wT[name].shape
        self.k["matmul"](
            (_cdiv(N, 128), _cdiv(M, 128)), (256,), (M, N, K, a, self.wT[name], c)
        )

    def _gemv(self, name: str, x, y, mode: int) -> None:
        N, K = self.w16[name].shape
        grid, block = self.gemv_config.grid(N)
        self.k["gemv"](grid, block, (self.w16[name], x, y, N, K, self.batch, mode))

    # -- the prompt
    def prefill(self, tokens: Any, all_logits: bool = False) -> Any:
        """Run prompts tokens [batch, P] from position 0; fill the cache; return the
        logits of the last token of each prompt [batch, vocab] (of every token, [batch, P,
        vocab], with all_logits)."""
        xp, cfg, k = self.xp, self.cfg, self.k
        tokens = xp.asarray(tokens, dtype=np.int32)
        B, P = tokens.shape
        assert B <= self.B and P <= self.L
        self.batch = B
        d, H, hd, R = cfg.d_model, cfg.n_head, cfg.head_dim, B * P
        x, h = xp.empty((R, d), np.float32), xp.empty((R, d), np.float32)
        qkv, att = xp.empty((R, 3 * d), np.float32), xp.empty((R, d), np.float32)
        ff, ff2 = xp.empty((R, cfg.d_ff), np.float32), xp.empty((R, cfg.d_ff), np.float32)
        tmp = xp.empty((R, d), np.float32)
        start = xp.zeros(B, np.int32)
        ids = xp.ascontiguousarray(tokens.reshape(-1))
        k["gather"]((self._grid(R * d),), (256,), (self.w["embed"], ids, x, R, d))
        scale = 1.0 / math.sqrt(hd)
        for i in range(cfg.n_layer):
            kc, vc = self.cache[i]
            self._rms(x, self.w[f"{i}.norm1"], h, R)
            self._matmul(h, f"{i}.qkv", qkv, R)
            k["rope"](
                (self._grid(R * 2 * H * hd // 2),),
                (256,),
                (qkv, start, R, P, 2 * H, hd, 3 * d, math.log2(ROPE_BASE)),
            )
            k["append"](
                (self._grid(R * d),), (256,), (qkv, kc, vc, start, B, P, H, hd, self.L)
            )
            k["prefill"](
                (_cdiv(P, 8), H, B),
                (256,),
                (qkv, 3 * d, kc, vc, start, att, P, H, hd, self.L, scale),
            )
            self._matmul(att, f"{i}.proj", tmp, R)
            x += tmp
            self._rms(x, self.w[f"{i}.norm2"], h, R)
            self._matmul(h, f"{i}.up", ff, R)
            k["gelu"]((self._grid(R * cfg.d_ff),), (256,), (ff, ff2, R * cfg.d_ff))
            self._matmul(ff2, f"{i}.down", tmp, R)
            x += tmp
        if all_logits:
            self._rms(x, self.w["norm_f"], h, R)
            out = xp.empty((R, cfg.vocab), np.float32)
            self._matmul(h, "head", out, R)
            logits = out.reshape(B, P, cfg.vocab)
        else:
            last = xp.ascontiguousarray(x.reshape(B, P, d)[:, -1])
            self._rms(last, self.w["norm_f"], self.h, B)
            self._gemv("head", self.h, self.logits, 0)
            logits = self.logits[:B]
        self.pos[:B] = P - 1  # the position of the last token processed
        return logits

    # -- sampling and one decode step
    def start_sampling(
        self,
        steps: int,
        top_k: int = 1,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> None:
        """Uniform numbers for `steps` tokens, then pick the first token from the
        prefill's logits."""
        xp, B = self.xp, self.batch
        assert steps <= self.L
        self.top_k, self.temperature = top_k, temperature
        self.u_all[:] = xp.asarray(
            np.random.default_rng(seed).random(self.u_all.size).astype(np.float32)
        )
        self.history[:] = 0
        self.u_now[:B] = self.u_all[:B]
        self.step[:] = 0
        self._sample_and_advance()

    def _sample_and_advance(self) -> None:
        B = self.batch
        self.k["sample"](
            (B,),
            (256,),
            (
                self.logits,
                self.u_now,
                self.tokens,
                self.cfg.vocab,
                self.top_k,
                self.temperature,
            ),
        )
        self.k["advance"](
            (1,),
            (max(32, _cdiv(B, 32) * 32),),
            (
                self.tokens,
                self.history,
                self.u_all,
                self.u_now,
                self.pos,
                self.step,
                B,
                self.L,
            ),
        )

    def decode_step(self) -> None:
        """Tokens self.tokens at positions self.pos -> logits, next tokens, positions + 1.
        Device only: no host copies, the same arguments at every step (a graph can hold
        it)."""
        cfg, k, B = self.cfg, self.k, self.batch
        d, H, hd = cfg.d_model, cfg.n_head, cfg.head_dim
        k["gather"](
            (self._grid(B * d),), (256,), (self.w["embed"], self.tokens, self.x, B, d)
        )
        for i in range(cfg.n_layer):
            kc, vc = self.cache[i]
            self._rms(self.x, self.w[f"{i}.norm1"], self.h, B)
            self._gemv(f"{i}.qkv", self.h, self.qkv, 0)
            k["rope"](
                (self._grid(B * H * hd),),
                (256,),
                (self.qkv, self.pos, B, 1, 2 * H, hd, 3 * d, math.log2(ROPE_BASE)),
            )
            k["append"](
                (self._grid(B * d),),
                (256,),
                (self.qkv, kc, vc, self.pos, B, 1, H, hd, self.L),
            )
            k["partial"](
                (self.chunks, H, B),
                (128,),
                (
                    self.qkv,
                    3 * d,
                    kc,
                    vc,
                    self.pos,
                    self.o_part,
                    self.ml_part,
                    H,
                    hd,
                    self.L,
                    self.chunk,
                    1.0 / math.sqrt(hd),
                ),
            )
            k["combine"](
                (H, B), (128,), (self.o_part, self.ml_part, self.att, H, hd, self.chunks)
            )
            self._gemv(f"{i}.proj", self.att, self.x, 1)
            self._rms(self.x, self.w[f"{i}.norm2"], self.h, B)
            self._gemv(f"{i}.up", self.h, self.ff, 2)
            self._gemv(f"{i}.down", self.ff, self.x, 1)
        self._rms(self.x, self.w["norm_f"], self.h, B)
        self._gemv("head", self.h, self.logits, 0)
        self._sample_and_advance()

    def generate(
        self,
        prompt: Any,
        steps: int,
        top_k: int = 1,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> np.ndarray:
        """Prefill, then steps - 1 decode steps: the `steps` new tokens [batch, steps]
        (host array)."""

        self.prefill(prompt)
        self.start_sampling(steps, top_k, temperature, seed)
        for _ in range(steps - 1):
            self.decode_step()
        return self.generated(steps)

    def generated(self, steps: int) -> np.ndarray:
        """The first `steps` sampled tokens of each sequence [batch, steps] (host
        array)."""
        import cudl

        return (
            cudl.to_numpy(self.history[: steps * self.batch])
            .reshape(steps, self.batch)
            .T.copy()
        )

    def weight_bytes(self) -> int:
        """Bytes of weights one decode step reads: fp16 linear layers, fp32 norms, B
        embedding rows."""
        lin = sum(v.size * 2 for v in self.w16.values())
        norms = sum(v.size * 4 for k, v in self.w.items() if k != "embed")
        return lin + norms + self.batch * self.cfg.d_model * 4

    def cache_bytes(self, length: int) -> int:
        """Bytes of the KV cache one decode step reads at `length` cached tokens."""
        cfg = self.cfg
        return (
            2
            * cfg.n_layer
            * self.batch
            * length
            * cfg.d_model
            * self.cache_dtype.itemsize
        )


# ---------------------------------------------------------------- timing (GPU only)


def capture_decode_graph(model: BookGPT) -> Any:
    """A CUDA graph of one decode step (CuPy stream capture); `graph.launch()` replays it
    on the current stream. It holds the batch size and buffer addresses of `model`."""
    import cupy

    # load every module first: nothing may load or allocate in a capture
    model.decode_step()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        model.decode_step()
        graph = stream.end_capture()
    stream.synchronize()
    return graph


@contextlib.contextmanager
def kernels_left_out(model: BookGPT, kinds: set[str]) -> Any:
    """Inside the block the launches of `kinds` (keys of model.k) do nothing: a graph
    captured there times the decode step without them (their outputs keep old values)."""
    saved = dict(model.k)
    for kind in kinds:
        model.k[kind] = lambda *args, **kwargs: None
    try:
        yield
    finally:
        model.k.update(saved)


def per_step(t: Any, steps: int, name: str, nbytes: float | None = None) -> Any:
    """The cudl Timing `t` of `steps` decode steps as a Timing of one step."""
    from cudl.bench import Timing

    # a decode step's bytes are reads (weights and cache): its ceiling is a read stream
    return Timing(name, t.ms / steps, t.q1_ms / steps, t.q3_ms / steps, t.runs, nbytes,
                  times_ms=[x / steps for x in t.times_ms],
                  traffic="read" if nbytes else None)


def time_book_decode(
    model: BookGPT,
    steps: int,
    prompt: Any = None,
    cached: int | None = None,
    graph: Any = None,
    name: str = "book decode",
    nbytes: float | None = None,
) -> Any:
    """A Timing of one decode step (all sequences of the batch) from cudl.bench of `steps`
    greedy steps, eager or through `graph` (capture_decode_graph). The untimed setup of
    every run restarts the generation: the prefill of `prompt` [batch, P], or, for a
    model without prefill weights, positions set back to `cached` - 1 over whatever the
    cache holds (the same bytes read, the same time; call start_sampling before capturing
    the graph)."""
    import cudl

    def setup() -> None:
        if prompt is not None:
            model.prefill(prompt)
            model.start_sampling(steps + 1)
        else:
            model.pos[: model.batch] = cached - 1
            model.step[:] = 0

    def run() -> None:
        for _ in range(steps):
            if graph is not None:
                graph.launch()
            else:
                model.decode_step()

    t = cudl.bench(run, setup=setup, flush=False, warmup_ms=0, rep_ms=0, min_runs=3,
                   name=name)
    return per_step(t, steps, name, nbytes)


def time_torch_decode(
    model: Any,
    prompt: Any,
    steps: int,
    cudnn: bool = True,
    name: str = "PyTorch eager decode",
    nbytes: float | None = None,
) -> Any:
    """The same for the PyTorch model in eager mode, with its KV cache (greedy): the
    untimed setup runs the prompt. cudnn=False keeps scaled_dot_product_attention off
    cuDNN's kernel (flash, memory-efficient or math instead)."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    import cudl

    B, P = prompt.shape
    caches = model.new_caches(B, P + steps + 1)
    backends = [
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ]
    state = {}

    def setup() -> None:
        state["tok"] = model(prompt, caches, 0)[:, -1].argmax(-1, keepdim=True)

    def run() -> None:
        tok = state["tok"]
        for s in range(steps):
            tok = model(tok, caches, P + s)[:, -1].argmax(-1, keepdim=True)

    with (
        torch.inference_mode(),
        contextlib.nullcontext() if cudnn else sdpa_kernel(backends),
    ):
        t = cudl.bench(run, setup=setup, flush=False, warmup_ms=0, rep_ms=0, min_runs=3,
                       name=name)
    return per_step(t, steps, name, nbytes)


def time_torch_static_decode(
    dec: Any, prompt: Any, steps: int, name: str = "PyTorch static cache, CUDA graph",
    nbytes: float | None = None,
) -> Any:
    """A Timing of one decode step of a captured StaticDecoder `dec`: the untimed setup
    runs the prompt, then `steps` replays of the graph are timed (as time_book_decode
    does)."""
    import cudl

    def setup() -> None:
        dec.start(prompt)

    def run() -> None:
        for _ in range(steps):
            dec.replay()

    with torch.inference_mode():
        t = cudl.bench(run, setup=setup, flush=False, warmup_ms=0, rep_ms=0, min_runs=3,
                       name=name)
    return per_step(t, steps, name, nbytes)
