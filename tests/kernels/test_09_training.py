"""Chapter 9 kernels (kernels_src/09-training/) against float64 NumPy references.

softmax_cross_entropy (loss per row and dlogits in one kernel; large logits, odd class counts, batch 1,
targets out of range), adamw_step (the update of torch.optim.AdamW, followed over several steps from
m = v = 0 by a float64 model of the same formula), bias_grad (column sums) and the data loader's
gather_rows / gather_labels. Fresh random inputs, NaN-poisoned outputs. Runs on the CPU emulator by
default and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl.check import compare

SCE = "09-training/softmax_cross_entropy.cu"


def softmax_ce64(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Loss per row and the gradient of the mean loss, in float64."""
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=1, keepdims=True)
    loss = np.log(s[:, 0]) + m[:, 0] - x[np.arange(len(t)), t]
    grad = e / s
    grad[np.arange(len(t)), t] -= 1.0
    return loss, grad / len(t)


def assert_grad(grad, ref: np.ndarray, batch: int) -> None:
    """dlogits within 1e-5 relative, or a few fp32 ulps of the one-hot's 1 / batch absolute.

    softmax - 1 at the target cancels: a confident row has p = 1 - 1e-12, which fp32 rounds to 1,
    so that entry is 0 where float64 says -1e-12 / batch (PyTorch's fp32 kernels do the same).
    """
    got = cudl.to_numpy(grad).astype(np.float64)
    err = np.abs(got - ref)
    bad = ~(err <= 1e-5 * np.abs(ref) + 3e-7 / batch)  # NaN is bad
    worst = np.unravel_index(np.nan_to_num(err, nan=np.inf).argmax(), err.shape)
    assert not bad.any(), f"dlogits: {bad.sum()} wrong, worst {err[worst]} at {worst}"


@pytest.mark.parametrize("threads", [32, 128])
@pytest.mark.parametrize("scale", [1.0, 60.0])
@pytest.mark.parametrize("shape", [(1, 1), (1, 10), (3, 7), (64, 10), (37, 97), (5, 1000)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_softmax_cross_entropy(shape, scale, threads):
    batch, classes = shape
    rng = np.random.default_rng()
    x = (scale * rng.standard_normal(shape)).astype(np.float32)
    x += np.float32(rng.uniform(-100, 100))  # a shift: logsumexp must not overflow
    t = rng.integers(0, classes, batch).astype(np.int32)
    xp = cudl.xp
    loss, grad = cudl.poisoned(batch), cudl.poisoned(shape)
    rows_per_block = threads // 32
    cudl.load(SCE, "softmax_cross_entropy")(((batch + rows_per_block - 1) // rows_per_block,), (threads,),
                                           (xp.asarray(x), xp.asarray(t), loss, grad, batch, classes))
    ref_loss, ref_grad = softmax_ce64(x, t)
    # The loss is a difference of numbers as large as the logits, so its fp32 error is a few ulps
    # of the largest logit, however small the loss (a confident right answer has loss ~1e-12).
    err = np.abs(cudl.to_numpy(loss).astype(np.float64) - ref_loss)
    assert np.all(err <= 1e-6 * (1 + np.abs(x).max() + np.log(classes))), f"loss: worst error {err.max()}"
    assert_grad(grad, ref_grad, batch)
    assert np.allclose(cudl.to_numpy(grad).sum(axis=1), 0, atol=1e-6 / batch)  # softmax sums to 1


def test_softmax_cross_entropy_bad_target():
    """A target outside [0, classes) gives loss NaN and the plain softmax / batch as its gradient."""
    batch, classes = 4, 9
    rng = np.random.default_rng()
    x = rng.standard_normal((batch, classes)).astype(np.float32)
    t = np.array([0, classes, -1, classes - 1], np.int32)
    xp = cudl.xp
    loss, grad = cudl.poisoned(batch), cudl.poisoned((batch, classes))
    cudl.load(SCE, "softmax_cross_entropy")((1,), (128,), (xp.asarray(x), xp.asarray(t), loss, grad,
                                                          batch, classes))
    got = cudl.to_numpy(loss)
    assert np.isnan(got[1]) and np.isnan(got[2]) and np.isfinite(got[[0, 3]]).all()
    x64 = x.astype(np.float64)
    soft = np.exp(x64 - x64.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    ref_loss, ref_grad = softmax_ce64(x, np.array([0, 0, 0, classes - 1]))
    ref_grad[1:3] = soft[1:3] / batch
    assert_grad(grad, ref_grad, batch)
    assert compare(got[[0, 3]], ref_loss[[0, 3]], rtol=1e-5).ok


# ------------------------------------------------------------------------------------------------- AdamW
def adamw64(p, g, m, v, *, lr, beta1, beta2, eps, weight_decay, step):
    """torch.optim.AdamW's update (decoupled weight decay, bias-corrected moments) in float64."""
    p = p * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


HYPER = [dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1),
         dict(lr=3e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.0),
         # large lr, decay and eps: decay after the update, or eps inside the sqrt, move p visibly
         dict(lr=0.3, beta1=0.5, beta2=0.9, eps=1e-2, weight_decay=0.5)]


@pytest.mark.parametrize("hyper", HYPER, ids=["torch-defaults-wd0.1", "no-decay", "large"])
@pytest.mark.parametrize("n, grid", [(1, 1), (1000, 4), (4099, 17)])
def test_adamw_steps(n, grid, hyper):
    """Six steps from m = v = 0 with fresh gradients, each checked against float64 from the start.

    p and m are sums of terms of either sign (p - decay - update, beta1 m + (1 - beta1) g) that can cancel
    to near zero, where fp32 is off by rounding relative to the terms, not to the result: each is compared
    relative to the sizes of all the terms that went into it (`scale`), accumulated over the steps."""
    rng = np.random.default_rng()
    p64 = rng.standard_normal(n)
    m64, v64 = np.zeros(n), np.zeros(n)
    p_terms, m_terms = np.abs(p64), np.zeros(n)
    xp = cudl.xp
    p = xp.asarray(p64.astype(np.float32))
    m, v = xp.zeros(n, np.float32), xp.zeros(n, np.float32)
    kern = cudl.load("09-training/adamw.cu", "adamw_step")
    lr, beta1, beta2, eps = hyper["lr"], hyper["beta1"], hyper["beta2"], hyper["eps"]
    for step in range(1, 7):
        g32 = (rng.standard_normal(n) * rng.uniform(0.01, 10)).astype(np.float32)
        kern((grid,), (256,), (p, xp.asarray(g32), m, v, n, lr, beta1, beta2, eps, hyper["weight_decay"], step))
        p_before = np.abs(p64)
        p64, m64, v64 = adamw64(p64, g32.astype(np.float64), m64, v64, step=step, **hyper)
        m_terms = beta1 * m_terms + (1 - beta1) * np.abs(g32)
        update = lr * m_terms / (1 - beta1**step) / (np.sqrt(v64 / (1 - beta2**step)) + eps)
        p_terms = p_terms + p_before + update
        for name, got, ref, scale in (("p", p, p64, p_terms), ("m", m, m64, m_terms), ("v", v, v64, None)):
            c = compare(got, ref, rtol=2e-5, scale=scale)
            assert c.ok, f"step {step}, {name}: {c}"


def test_adamw_late_step_and_poison():
    """Step 1000 from given moments (bias corrections near 1), and a NaN beyond n stays untouched."""
    n = 3000
    rng = np.random.default_rng()
    p0, g, m0 = (rng.standard_normal(n) for _ in range(3))
    v0 = rng.uniform(0, 2, n)
    xp = cudl.xp
    bufs = [xp.asarray(np.append(a, np.nan).astype(np.float32)) for a in (p0, g, m0, v0)]
    hyper = HYPER[0]
    cudl.load("09-training/adamw.cu", "adamw_step")((3,), (256,), (*bufs, n, hyper["lr"], hyper["beta1"],
                                                                    hyper["beta2"], hyper["eps"],
                                                                    hyper["weight_decay"], 1000))
    f32 = [a.astype(np.float32).astype(np.float64) for a in (p0, g, m0, v0)]
    refs = adamw64(*f32, step=1000, **hyper)
    for name, got, ref in zip("pmv", (bufs[0], bufs[2], bufs[3]), refs):
        got = cudl.to_numpy(got)
        assert np.isnan(got[n]), f"{name}[n] was written"
        c = compare(got[:n], ref, rtol=2e-5)
        assert c.ok, f"{name}: {c}"


# ---------------------------------------------------------------------------------------------- bias_grad
@pytest.mark.parametrize("shape", [(1, 1), (1, 257), (33, 1), (70, 300), (256, 10), (1000, 33)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_grad(shape):
    rows, cols = shape
    dy = np.random.default_rng().standard_normal(shape).astype(np.float32)
    db = cudl.poisoned(cols)
    cudl.load("09-training/bias_grad.cu", "bias_grad")(((cols + 31) // 32,), (32, 8),
                                                       (cudl.xp.asarray(dy), db, rows, cols))
    # A column sum of mixed signs can cancel to near zero: its rounding is relative to sum |dy|.
    c = compare(db, dy.astype(np.float64).sum(axis=0), rtol=1e-5, scale=np.abs(dy).astype(np.float64).sum(axis=0))
    assert c.ok, c


def test_bias_grad_is_deterministic():
    """No atomics: two launches give the same bits."""
    dy = cudl.xp.asarray(np.random.default_rng().standard_normal((300, 70)).astype(np.float32))
    k = cudl.load("09-training/bias_grad.cu", "bias_grad")
    a, b = cudl.poisoned(70), cudl.poisoned(70)
    k((3,), (32, 8), (dy, a, 300, 70))
    k((3,), (32, 8), (dy, b, 300, 70))
    assert np.array_equal(cudl.to_numpy(a), cudl.to_numpy(b))


# ------------------------------------------------------------------------------------------------- gather
@pytest.mark.parametrize("grid", [1, 64])
@pytest.mark.parametrize("dataset, batch, cols", [(1, 1, 1), (97, 37, 33), (500, 128, 64), (50, 3, 1)])
def test_gather_rows_and_labels(dataset, batch, cols, grid):
    rng = np.random.default_rng()
    data = rng.standard_normal((dataset, cols)).astype(np.float32)
    labels = rng.integers(0, 10, dataset).astype(np.int32)
    index = rng.integers(0, dataset, batch).astype(np.int32)  # with repeats, like sampling
    xp = cudl.xp
    out, out_labels = cudl.poisoned((batch, cols)), cudl.poisoned(batch, np.int32)
    idx = xp.asarray(index)
    cudl.load("09-training/gather_rows.cu", "gather_rows")((grid,), (256,), (xp.asarray(data), idx, out,
                                                                            batch, cols))
    cudl.load("09-training/gather_rows.cu", "gather_labels")((grid,), (256,), (xp.asarray(labels), idx,
                                                                              out_labels, batch))
    assert np.array_equal(cudl.to_numpy(out), data[index])
    assert np.array_equal(cudl.to_numpy(out_labels), labels[index])


# --------------------------------------------------------------------------------- later additions
def test_next_batch_wraps_and_counts():
    """The cursor copies batch (step % steps) of `order` and adds one to the counter, every call."""
    xp, batch, steps = cudl.xp, 37, 3
    order = np.random.default_rng().permutation(batch * steps).astype(np.int32)
    index, step = cudl.poisoned(batch, np.int32), xp.asarray(np.array([0], np.int32))
    k = cudl.load("09-training/gather_rows.cu", "next_batch")
    for s in range(7):
        k((1,), (256,), (xp.asarray(order), index, step, batch, steps))
        want = order[(s % steps) * batch:(s % steps + 1) * batch]
        assert np.array_equal(cudl.to_numpy(index), want), f"call {s}"
        assert int(cudl.to_numpy(step)[0]) == s + 1


def test_adamw_capturable_matches_adamw_step():
    """The device-counter version gives the same bits as the scalar one at the same step."""
    n, xp = 1500, cudl.xp
    rng = np.random.default_rng()
    p, g, m, v = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    a = [xp.asarray(t.copy()) for t in (p, g, m, v)]
    b = [xp.asarray(t.copy()) for t in (p, g, m, v)]
    h = HYPER[0]
    hyper = (h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"])
    cudl.load("09-training/adamw.cu", "adamw_step")((4,), (256,), (*a, n, *hyper, 7))
    cudl.load("09-training/adamw.cu", "adamw_step_capturable")(
        (4,), (256,), (*b, n, *hyper, xp.asarray(np.array([7], np.int32))))
    for x, y in zip(a, b):
        assert np.array_equal(cudl.to_numpy(x), cudl.to_numpy(y))


@pytest.mark.parametrize("shape", [(1, 1), (70, 33), (256, 10)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_add(shape):
    rows, cols = shape
    rng = np.random.default_rng()
    x, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    y = cudl.poisoned(shape)
    cudl.load("09-training/bias_grad.cu", "bias_add")((3,), (256,), (cudl.xp.asarray(x), cudl.xp.asarray(b),
                                                                     y, rows, cols))
    assert compare(y, x.astype(np.float64) + b, rtol=1e-6).ok


@pytest.mark.parametrize("kind", ["tn", "nt"])
@pytest.mark.parametrize("mnk", [(1, 1, 1), (17, 33, 5), (64, 10, 128), (100, 37, 300)], ids=str)
def test_matmul_transposed(kind, mnk):
    m, n, k = mnk
    rng = np.random.default_rng()
    a = rng.standard_normal((k, m) if kind == "tn" else (m, k)).astype(np.float32)
    b = rng.standard_normal((k, n) if kind == "tn" else (n, k)).astype(np.float32)
    ref = (a.T.astype(np.float64) @ b) if kind == "tn" else (a.astype(np.float64) @ b.T)
    c = cudl.poisoned((m, n))
    cudl.load("09-training/matmul_transposed.cu", f"matmul_{kind}")(
        ((n + 15) // 16, (m + 15) // 16), (16, 16), (m, n, k, cudl.xp.asarray(a), cudl.xp.asarray(b), c))
    cudl.check(c, ref, name=f"matmul_{kind}")


@pytest.mark.parametrize("n, h, w, c, rs, stride, pad", [(2, 8, 8, 1, 3, 1, 1), (3, 8, 8, 5, 3, 2, 1),
                                                           (1, 5, 7, 2, 2, 1, 0), (2, 6, 6, 3, 3, 3, 2)])
def test_im2col_col2im_nhwc(n, h, w, c, rs, stride, pad):
    """im2col against NumPy slicing; col2im is its adjoint: <im2col(x), d> == <x, col2im(d)>."""
    p, q = (h + 2 * pad - rs) // stride + 1, (w + 2 * pad - rs) // stride + 1
    rng = np.random.default_rng()
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    xi = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))).astype(np.float64)
    ref = np.stack([xi[:, r:r + stride * p:stride, s:s + stride * q:stride, :]
                    for r in range(rs) for s in range(rs)], axis=3).reshape(n * p * q, rs * rs * c)
    xp, args = cudl.xp, (n, h, w, c, rs, rs, p, q, stride, pad)
    col = cudl.poisoned(ref.shape)
    cudl.load("09-training/conv_nhwc.cu", "im2col_nhwc")(((col.size + 255) // 256,), (256,),
                                                         (*args, xp.asarray(x), col))
    assert np.array_equal(cudl.to_numpy(col), ref.astype(np.float32))
    d = rng.standard_normal(ref.shape).astype(np.float32)
    dx = cudl.poisoned(x.shape)
    cudl.load("09-training/conv_nhwc.cu", "col2im_nhwc")(((x.size + 255) // 256,), (256,),
                                                         (*args, xp.asarray(d), dx))
    lhs = (ref * d).sum()
    rhs = (x.astype(np.float64) * cudl.to_numpy(dx)).sum()
    assert abs(lhs - rhs) <= 1e-5 * (np.abs(ref * d).sum() + 1)


@pytest.mark.parametrize("splits", [2, 5, 64])
@pytest.mark.parametrize("mnk", [(9, 16, 1000), (20, 3, 77)], ids=str)
def test_matmul_tn_split_k(mnk, splits):
    """gridDim.z slices of K add into a zeroed C (more slices than 16-row tiles of K included)."""
    m, n, k = mnk
    rng = np.random.default_rng()
    a, b = rng.standard_normal((k, m)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = cudl.xp.zeros((m, n), np.float32)
    cudl.load("09-training/matmul_transposed.cu", "matmul_tn")(
        ((n + 15) // 16, (m + 15) // 16, splits), (16, 16), (m, n, k, cudl.xp.asarray(a), cudl.xp.asarray(b), c))
    cudl.check(c, a.T.astype(np.float64) @ b, name=f"matmul_tn, {splits} slices")
