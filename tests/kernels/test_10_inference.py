"""Chapter 10 kernels (kernels_src/10-inference/) against float64 NumPy references.

RoPE (in place, fp32 and fp16, only the rotated heads change), the KV-cache append (only the new
positions change, positions past the cache are dropped), split-K decode attention and causal prefill
attention (cache slots past the sequence hold NaN: reading one shows up), top-k sampling (ties, NaN
logits, the inverse-transform draw), the fp16-weight GEMV with its three epilogues, and the whole
tiny GPT served by the book's kernels against a float64 NumPy forward of the same weights. Fresh random
inputs, NaN-poisoned outputs, sizes that are multiples of nothing. Emulator by default, GPU under
`make gpu-test`.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import cudl
from cudl.compile import KERNELS_DIR

sys.path.insert(0, str(KERNELS_DIR / "10-inference"))
import gpt  # noqa: E402

SRC = "10-inference/"
CT = {"float32": "float", "float16": "__half"}
RTOL = {"float32": 2e-5, "float16": 2e-3}


def host(a) -> np.ndarray:
    return cudl.to_numpy(a).astype(np.float64)


# ---------------------------------------------------------------- RoPE

@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("rows,seq,heads,head_dim", [(1, 1, 1, 2), (6, 3, 3, 10), (5, 5, 2, 64),
                                                     (7, 1, 4, 128)])
def test_rope(rows, seq, heads, head_dim, dtype):
    rng = np.random.default_rng()
    row_stride = 3 * heads * head_dim + 1  # more than the rotated heads; not a multiple of anything
    x = rng.standard_normal((rows, row_stride)).astype(dtype)
    batch = -(-rows // seq)
    start = rng.integers(0, 300, batch).astype(np.int32)
    xd = cudl.xp.array(x)  # a copy: on the emulator asarray would share x
    cudl.load(SRC + "rope.cu", f"rope<{CT[dtype]}>")(
        (3,), (64,), (xd, cudl.xp.asarray(start), rows, seq, heads, head_dim, row_stride,
                      math.log2(gpt.ROPE_BASE)))
    got = host(xd)
    positions = start[np.arange(rows) // seq] + np.arange(rows) % seq
    heads_in = x[:, :heads * head_dim].astype(np.float64).reshape(rows, heads, head_dim)
    ref = np.stack([gpt.rope_np(heads_in[:, h], positions) for h in range(heads)], 1)
    cudl.check(got[:, :heads * head_dim], ref.reshape(rows, -1), rtol=RTOL[dtype] * 5, name="rope")
    assert np.array_equal(got[:, heads * head_dim:], x[:, heads * head_dim:]), "rope wrote past its heads"


# ---------------------------------------------------------------- KV cache

@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("batch,seq,heads,head_dim,max_len", [(1, 1, 1, 1, 1), (2, 5, 3, 7, 9),
                                                              (3, 1, 2, 64, 33)])
def test_kv_append(batch, seq, heads, head_dim, max_len, dtype):
    rng = np.random.default_rng()
    width = heads * head_dim
    qkv = rng.standard_normal((batch * seq, 3 * width)).astype(np.float32)
    start = rng.integers(0, max_len, batch).astype(np.int32)
    start[-1] = max_len - 1  # the last sequence's later tokens fall off the cache: dropped
    xp = cudl.xp
    kc = cudl.poisoned((batch, heads, max_len, head_dim), dtype)
    vc = cudl.poisoned((batch, heads, max_len, head_dim), dtype)
    cudl.load(SRC + "kv_cache.cu", f"kv_append<{CT[dtype]}>")(
        (2,), (128,), (xp.asarray(qkv), kc, vc, xp.asarray(start), batch, seq, heads, head_dim, max_len))
    ref_k = np.full((batch, heads, max_len, head_dim), np.nan)
    ref_v = ref_k.copy()
    for r in range(batch * seq):
        b, p = r // seq, start[r // seq] + r % seq
        if p < max_len:
            ref_k[b, :, p] = qkv[r, width:2 * width].reshape(heads, head_dim)
            ref_v[b, :, p] = qkv[r, 2 * width:].reshape(heads, head_dim)
    for got, ref, name in ((kc, ref_k, "k"), (vc, ref_v, "v")):
        got = host(got)
        assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{name}: wrong positions written"
        ok = ~np.isnan(ref)
        # a copy with one rounding to the cache's type (__float2half_rn: to nearest even, as NumPy's cast), so
        # the bits are known exactly; a relative tolerance failed on fp16 subnormals (|x| < 6.1e-5: a few in
        # a thousand draws of this size)
        want = ref[ok].astype(np.float32).astype(dtype).astype(np.float64)
        assert np.array_equal(got[ok], want), f"{name}: wrong values (not the input rounded once to {dtype})"


# ---------------------------------------------------------------- attention

def attention64(q: np.ndarray, k: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Softmax(q k^T / sqrt(d)) v over the first n keys, float64; q [d], k, v [len, d]."""
    s = k[:n].astype(np.float64) @ q.astype(np.float64) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max())
    return p @ v[:n].astype(np.float64) / p.sum()


def random_cache(rng, batch, heads, max_len, head_dim, lens, dtype):
    """Caches with random values in slots 0 .. len - 1 of each sequence and NaN after them."""
    k = rng.standard_normal((batch, heads, max_len, head_dim)) * 2
    v = rng.standard_normal((batch, heads, max_len, head_dim))
    for b, n in enumerate(lens):
        k[b, :, n:] = v[b, :, n:] = np.nan
    return k.astype(dtype), v.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("heads,head_dim,max_len,chunk", [(1, 32, 1, 64), (3, 40, 70, 16), (2, 128, 200, 64),
                                                          (4, 64, 37, 5)])
def test_decode_attention(heads, head_dim, max_len, chunk, dtype):
    rng = np.random.default_rng()
    batch = 3
    pos = np.array([0, max_len - 1, rng.integers(0, max_len)], np.int32)  # len 1, full, random
    q_stride = 3 * heads * head_dim + 3
    q = rng.standard_normal((batch, q_stride)).astype(np.float32)
    kc, vc = random_cache(rng, batch, heads, max_len, head_dim, pos + 1, dtype)
    chunks = -(-max_len // chunk)
    xp = cudl.xp
    o_part = cudl.poisoned((batch, heads, chunks, head_dim))
    ml_part = cudl.poisoned((batch, heads, chunks, 2))
    out = cudl.poisoned((batch, heads * head_dim))
    cudl.load(SRC + "decode_attention.cu", f"decode_attention_partial<{CT[dtype]}>")(
        (chunks, heads, batch), (128,), (xp.asarray(q), q_stride, xp.asarray(kc), xp.asarray(vc),
                                         xp.asarray(pos), o_part, ml_part, heads, head_dim, max_len, chunk,
                                         1 / math.sqrt(head_dim)))
    cudl.load(SRC + "decode_attention.cu", "decode_attention_combine")(
        (heads, batch), (128,), (o_part, ml_part, out, heads, head_dim, chunks))
    ref = np.stack([np.concatenate([
        attention64(q[b, h * head_dim:(h + 1) * head_dim], kc[b, h], vc[b, h], pos[b] + 1)
        for h in range(heads)]) for b in range(batch)])
    cudl.check(out, ref, rtol=RTOL["float32"] * 5, name="decode attention")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("seq,heads,head_dim,starts", [(1, 1, 32, (0, 0)), (13, 3, 48, (0, 5)),
                                                       (40, 2, 128, (0, 0)), (9, 2, 20, (3, 0))])
def test_prefill_attention(seq, heads, head_dim, starts, dtype):
    rng = np.random.default_rng()
    batch = len(starts)
    start = np.array(starts, np.int32)
    max_len = int(start.max()) + seq + 2
    q_stride = 3 * heads * head_dim
    q = rng.standard_normal((batch * seq, q_stride)).astype(np.float32)
    kc, vc = random_cache(rng, batch, heads, max_len, head_dim, start + seq, dtype)
    xp = cudl.xp
    out = cudl.poisoned((batch * seq, heads * head_dim))
    cudl.load(SRC + "prefill_attention.cu", f"prefill_attention<{CT[dtype]}>")(
        (-(-seq // 8), heads, batch), (256,), (xp.asarray(q), q_stride, xp.asarray(kc), xp.asarray(vc),
                                               xp.asarray(start), out, seq, heads, head_dim, max_len,
                                               1 / math.sqrt(head_dim)))
    ref = np.zeros((batch * seq, heads * head_dim))
    for b in range(batch):
        for t in range(seq):
            for h in range(heads):
                ref[b * seq + t, h * head_dim:(h + 1) * head_dim] = attention64(
                    q[b * seq + t, h * head_dim:(h + 1) * head_dim], kc[b, h], vc[b, h], start[b] + t + 1)
    cudl.check(out, ref, rtol=RTOL["float32"] * 5, name="prefill attention")


# ---------------------------------------------------------------- sampling

def sample64(z: np.ndarray, u: float, k: int, temperature: float) -> tuple[int, set[int]]:
    """The token the sampler must return, and the tokens acceptable when u sits on a boundary."""
    z = np.where(np.isnan(z), -np.inf, z).astype(np.float64)
    order = np.lexsort((np.arange(len(z)), -z))  # larger first, ties: smaller id first
    if temperature <= 0:
        k = 1
    top = order[:min(k, len(z))]
    w = np.exp((z[top] - z[top[0]]) / temperature) if len(top) > 1 else np.ones(1)
    cum = np.cumsum(w)
    j = min(int(np.searchsorted(cum, u * cum[-1], side="right")), len(top) - 1)
    near = {int(top[i]) for i in range(len(top)) if abs(cum[i] - u * cum[-1]) < 1e-4 * cum[-1]}
    return int(top[j]), near | ({int(top[j + 1])} if near and j + 1 < len(top) else set())


@pytest.mark.parametrize("vocab,k,temperature", [(1, 1, 0.0), (7, 3, 1.0), (100, 64, 0.7), (1000, 1, 1.0),
                                                 (1000, 40, 0.0), (1000, 40, 1.3), (4099, 5, 0.5)])
def test_sample_top_k(vocab, k, temperature):
    rng = np.random.default_rng()
    batch = 5
    z = np.round(rng.standard_normal((batch, vocab)) * 2, 1).astype(np.float32)  # rounding: ties
    if vocab > 10:
        z[0, 3] = np.nan  # never a candidate
        z[1, vocab - 1] = z[1].max()  # a tie for the first place: the smaller id wins
    u = rng.random(batch).astype(np.float32)
    u[2] = 0.0
    tokens = cudl.poisoned(batch, np.int32)
    cudl.load(SRC + "sampling.cu", "sample_top_k")((batch,), (256,), (cudl.xp.asarray(z), cudl.xp.asarray(u),
                                                                     tokens, vocab, k, temperature))
    got = cudl.to_numpy(tokens)
    for b in range(batch):
        want, near = sample64(z[b], float(u[b]), k, temperature)
        assert got[b] == want or got[b] in near, f"row {b}: token {got[b]}, expected {want}"


def test_advance():
    batch, steps = 3, 4
    xp = cudl.xp
    token = xp.asarray(np.array([5, 6, 7], np.int32))
    history = cudl.poisoned((steps, batch), np.int32)
    u_all = xp.asarray(np.random.default_rng().random((steps + 1, batch)).astype(np.float32))
    u_now, pos = cudl.poisoned(batch), xp.asarray(np.array([0, 10, 3], np.int32))
    step = xp.asarray(np.array([1], np.int32))
    cudl.load(SRC + "sampling.cu", "advance")((1,), (32,), (token, history, u_all, u_now, pos, step, batch, steps))
    assert cudl.to_numpy(history)[1].tolist() == [5, 6, 7]
    assert np.array_equal(cudl.to_numpy(u_now), cudl.to_numpy(u_all)[2])
    assert cudl.to_numpy(pos).tolist() == [1, 11, 4] and int(cudl.to_numpy(step)[0]) == 2


# ---------------------------------------------------------------- GEMV

def gemv_check(N: int, K: int, batch: int, mode: int, config) -> None:
    rng = np.random.default_rng()
    W = (rng.standard_normal((N, K)) / math.sqrt(K)).astype(np.float16)
    x = rng.standard_normal((batch, K)).astype(np.float32)
    y0 = rng.standard_normal((batch, N)).astype(np.float32)
    y = cudl.xp.array(y0) if mode == 1 else cudl.poisoned((batch, N))
    grid, block = config.grid(N)
    config.load()(grid, block, (cudl.xp.asarray(W), cudl.xp.asarray(x), y, N, K, batch, mode))
    ref = x.astype(np.float64) @ W.astype(np.float64).T
    ref = {0: ref, 1: y0 + ref, 2: gpt.gelu_tanh_np(ref)}[mode]
    # float32 rounding is relative to the terms, not to a result that cancellation brought near zero: the
    # products |x_k w_k| summed (plus |y| for the residual add); GELU's 0.5 z (1 + tanh(u)) loses the bits
    # of 1 + tanh(u) where tanh is near -1 (z around -3), an error relative to |z|, itself within the terms
    terms = np.abs(x.astype(np.float64)) @ np.abs(W.astype(np.float64)).T + (np.abs(y0) if mode == 1 else 0)
    cudl.check(y, ref, rtol=1e-5, scale=terms, name=f"gemv mode {mode} {config}")


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("N,K,batch", [(1, 1, 1), (37, 100, 3), (20, 64, 1), (9, 1000, 11), (64, 256, 8),
                                         (5, 8, 2), (3, 2056, 1), (17, 1030, 9)])
def test_gemv(N, K, batch, mode):
    gemv_check(N, K, batch, mode, gpt.GEMV)


# the other configurations of gpu_check.py --sweep: rows past N, K-split warps, batch > 8
@pytest.mark.parametrize("config", [gpt.GemvConfig(*c) for c in [(1, 4, 1, 8), (2, 4, 1, 4), (4, 2, 1, 4),
                                                                 (1, 4, 4, 8), (2, 4, 2, 8), (1, 8, 1, 2)]])
@pytest.mark.parametrize("N,K,batch,mode", [(7, 2056, 1, 0), (13, 1032, 9, 1), (5, 100, 2, 2)])
def test_gemv_configs(N, K, batch, mode, config):
    gemv_check(N, K, batch, mode, config)


def test_kernels_left_out_skips_launches_and_restores_them():
    cfg = gpt.Config(vocab=20, d_model=32, n_layer=1, n_head=2, d_ff=64, max_len=24)
    model = gpt.BookGPT(gpt.random_weights(cfg, seed=0), cfg, max_batch=2)
    model.prefill(np.random.default_rng().integers(0, cfg.vocab, (2, 5)).astype(np.int32))
    model.start_sampling(4)
    before = cudl.to_numpy(model.logits).copy()
    with gpt.kernels_left_out(model, {"gemv", "advance"}):
        model.decode_step()
    assert np.array_equal(before, cudl.to_numpy(model.logits), equal_nan=True)
    assert int(cudl.to_numpy(model.step)[0]) == 1  # start_sampling's advance only
    model.decode_step()
    assert not np.array_equal(before, cudl.to_numpy(model.logits))
    assert int(cudl.to_numpy(model.step)[0]) == 2


# ---------------------------------------------------------------- the whole model

@pytest.mark.parametrize("cache_dtype", ["float32", "float16"])
def test_book_gpt_matches_numpy(cache_dtype):
    """Prefill logits of every prompt token, then three greedy decode steps, against a float64 forward."""
    cfg = gpt.Config(vocab=29, d_model=48, n_layer=2, n_head=2, d_ff=72, max_len=24)
    w = gpt.round_to_fp16(gpt.random_weights(cfg))
    w = {k: (v * 10 if v.ndim == 2 else v) for k, v in w.items()}  # larger logits: argmax is not a tie
    w = gpt.round_to_fp16(w)
    rng = np.random.default_rng()
    prompt = rng.integers(0, cfg.vocab, (2, 7)).astype(np.int32)
    model = gpt.BookGPT(w, cfg, max_batch=2, cache_dtype=cache_dtype, chunk=4)
    rtol = 1e-4 if cache_dtype == "float32" else 2e-2  # fp16 cache: 11-bit significands of k and v
    logits = model.prefill(prompt, all_logits=True)
    cudl.check(logits, gpt.numpy_forward(w, cfg, prompt), rtol=rtol, name="prefill logits")
    model.prefill(prompt)
    steps = 4
    model.start_sampling(steps, top_k=1)
    seqs = prompt
    for s in range(steps - 1):
        ref = gpt.numpy_forward(w, cfg, seqs)[:, -1]
        got = model.generated(s + 1)[:, s]
        # Greedy: the largest logit, or one within the logits' tolerance of it (a near tie that the model's
        # rounding may break either way); the reference then follows the model's choice.
        margin = rtol * (np.abs(ref).max(-1) + np.sqrt((ref**2).mean(-1)))
        chosen = ref[np.arange(len(got)), got]
        assert (chosen >= ref.max(-1) - margin).all(), f"step {s}: greedy token {got}, expected {ref.argmax(-1)}"
        seqs = np.concatenate([seqs, got[:, None].astype(np.int32)], 1)
        model.decode_step()
        ref = gpt.numpy_forward(w, cfg, seqs)[:, -1]
        cudl.check(model.logits, ref, rtol=rtol, name=f"decode step {s + 1} logits")
    assert cudl.to_numpy(model.pos).tolist() == [prompt.shape[1] + steps - 1] * 2


def test_generate_is_reproducible_and_runs_past_its_buffers():
    """The same seed gives the same sampled text; decode steps past the history buffer record nothing
    and write nothing out of bounds (a benchmark runs any number of steps)."""
    cfg = gpt.Config(vocab=17, d_model=32, n_layer=1, n_head=1, d_ff=40, max_len=12)
    w = gpt.round_to_fp16(gpt.random_weights(cfg, seed=3))
    model = gpt.BookGPT(w, cfg, max_batch=3)
    prompt = np.random.default_rng().integers(0, cfg.vocab, (3, 4)).astype(np.int32)
    a = model.generate(prompt, 6, top_k=5, temperature=1.0, seed=7)
    b = model.generate(prompt, 6, top_k=5, temperature=1.0, seed=7)
    assert a.shape == (3, 6) and np.array_equal(a, b)
    assert ((0 <= a) & (a < cfg.vocab)).all()
    for _ in range(cfg.max_len + 3):  # positions past max_len: appends dropped, attention clamped
        model.decode_step()
    assert np.isfinite(cudl.to_numpy(model.logits)[:3]).all()
    assert int(cudl.to_numpy(model.step)[0]) == 6 + cfg.max_len + 3
