"""Chapter 9's training pipeline, built from the book's kernels only.

    data = load_digits()                         # host arrays, a fixed train/test split
    model = Model([Dense(64, 128, "gelu"), Dense(128, 10)], seed=0)
    loader = Loader(data["x_train"], data["y_train"], batch=128, steps=300, seed=0)
    opt = AdamW(model, lr=3e-3)
    def step(): train_step(model, loader, opt)   # ~20 launches, no host sync
    twin = torch_twin(model)                     # the same network in PyTorch

Every parameter lives in one flat fp32 buffer (and every gradient in another of the same
layout), so the optimizer is one launch. Activations are row-major matrices: a batch x
features matrix for dense layers, (batch h w) x channels (NHWC) for convolutions.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import cudl

HERE = Path(__file__).parent
THREADS = 256  # 1-D launches: 8 warps per block
TILE = 16  # matmul_3_smem_tiles is 32 x 32; the transposed products use 16 x 16 tiles


class Kernels:
    """Every kernel the pipeline launches, compiled once (earlier chapters' by path)."""

    def __init__(self) -> None:
        load = cudl.load
        self.matmul = load("05-matmul/matmul_3_smem_tiles.cu", "matmul_3_smem_tiles")
        self.matmul_tn = load("09-training/matmul_transposed.cu", "matmul_tn")
        self.matmul_nt = load("09-training/matmul_transposed.cu", "matmul_nt")
        self.bias_gelu = load("03-elementwise/bias_gelu.cu", "bias_gelu_forward<float>")
        self.bias_gelu_backward = load(
            "08-profiling/bias_gelu_backward.cu", "bias_gelu_backward<float>"
        )
        self.bias_add = load("09-training/bias_grad.cu", "bias_add")
        self.bias_grad = load("09-training/bias_grad.cu", "bias_grad")
        self.im2col = load("09-training/conv_nhwc.cu", "im2col_nhwc")
        self.col2im = load("09-training/conv_nhwc.cu", "col2im_nhwc")
        self.softmax_ce = load(
            "09-training/softmax_cross_entropy.cu", "softmax_cross_entropy"
        )
        self.next_batch = load("09-training/gather_rows.cu", "next_batch")
        self.gather_rows = load("09-training/gather_rows.cu", "gather_rows")
        self.gather_labels = load("09-training/gather_rows.cu", "gather_labels")
        self.adamw = load("09-training/adamw.cu", "adamw_step_capturable")


_KERNELS: Kernels | None = None


def kernels() -> Kernels:
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = Kernels()
    return _KERNELS


def _blocks(n: int) -> tuple[int]:
    return ((n + THREADS - 1) // THREADS,)


SPLIT_K_BLOCKS = 264  # split K until about 2 blocks per SM of an H100 (132 SMs)


def split_k(m: int, n: int, k: int) -> int:
    """Slices of K for matmul_tn: enough blocks to fill the GPU, >= 128 rows of K each."""
    tiles = ((m + TILE - 1) // TILE) * ((n + TILE - 1) // TILE)
    return max(1, min(k // 128, SPLIT_K_BLOCKS // tiles))


def gemm(a: Any, b: Any, c: Any, transpose: str = "nn") -> None:
    """c = a b ("nn"), a^T b ("tn") or a b^T ("nt") for row-major 2-D arrays.

    "tn" may split K over blocks that add into c with atomics: c must be zero before
    ("tn" is only used for weight gradients, which train_step zeroes).
    """
    k = kernels()
    if transpose == "nn":
        (m, kk), n = a.shape, b.shape[1]
        k.matmul(((n + 31) // 32, (m + 31) // 32), (32, 32), (m, n, kk, a, b, c))
        return
    if transpose == "tn":
        (kk, m), n = a.shape, b.shape[1]
    else:
        (m, kk), n = a.shape, b.shape[0]
    kernel = k.matmul_tn if transpose == "tn" else k.matmul_nt
    splits = split_k(m, n, kk) if transpose == "tn" else 1
    kernel(
        ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE, splits),
        (TILE, TILE),
        (m, n, kk, a, b, c),
    )


# --------------------------------------------------------------------------------- layers


class Dense:
    """y = act(x W + b) with W stored fan_in x fan_out; act is "gelu" or None.

    With `image=(H, W, C)` it is a convolution with an R x S kernel: the same layer
    applied to the image patches that im2col_nhwc lays out as rows, so fan_in = R S C.
    """

    def __init__(
        self,
        fan_in: int,
        fan_out: int,
        act: str | None = None,
        *,
        image: tuple[int, int, int] | None = None,
        kernel: int = 3,
        stride: int = 1,
        pad: int = 1,
    ) -> None:
        self.act, self.image, self.fan_out = act, image, fan_out
        if image is None:
            self.fan_in, self.in_size, self.pixels = fan_in, fan_in, 1
        else:
            h, w, c = image
            assert fan_in == c, "a convolution's fan_in is its input channels"
            self.r = self.s = kernel
            self.stride, self.pad = stride, pad
            self.p = (h + 2 * pad - kernel) // stride + 1
            self.q = (w + 2 * pad - kernel) // stride + 1
            self.fan_in, self.in_size, self.pixels = (
                kernel * kernel * c,
                h * w * c,
                self.p * self.q,
            )
        self.out_size = self.pixels * fan_out
        self.n_params = self.fan_in * fan_out + fan_out
        self.bufs: dict[int, dict[str, Any]] = {}

    def bind(self, params: Any, grads: Any, offset: int) -> None:
        """Point W, b (and dW, db) at their places in the flat buffers."""
        nw = self.fan_in * self.fan_out
        self.W = params[offset : offset + nw].reshape(self.fan_in, self.fan_out)
        self.b = params[offset + nw : offset + self.n_params]
        self.dW = grads[offset : offset + nw].reshape(self.fan_in, self.fan_out)
        self.db = grads[offset + nw : offset + self.n_params]

    def buffers(self, batch: int) -> dict[str, Any]:
        """Activations and gradients for one batch size, allocated once (for graphs)."""
        if batch not in self.bufs:
            xp, rows = cudl.xp, batch * self.pixels
            b = {"pre": xp.empty((rows, self.fan_out), np.float32)}
            b["out"] = xp.empty_like(b["pre"]) if self.act else b["pre"]
            b["dpre"] = xp.empty_like(b["pre"])
            if self.image is not None:
                b["col"] = xp.empty((rows, self.fan_in), np.float32)
            b["dcol"] = xp.empty((rows, self.fan_in), np.float32)
            b["dx"] = (
                b["dcol"]
                if self.image is None
                else xp.empty((batch, self.in_size), np.float32)
            )
            self.bufs[batch] = b
        return self.bufs[batch]

    def _conv_args(self, batch: int) -> tuple[int, ...]:
        h, w, c = self.image
        return (batch, h, w, c, self.r, self.s, self.p, self.q, self.stride, self.pad)

    def forward(self, x: Any, batch: int) -> Any:
        """x: batch x in_size; returns batch x out_size (NHWC rows for a convolution)."""
        k, b = kernels(), self.buffers(batch)
        if self.image is not None:
            k.im2col(
                _blocks(b["col"].size), (THREADS,), (*self._conv_args(batch), x, b["col"])
            )
            x = b["col"]
        self.x = x.reshape(-1, self.fan_in)
        gemm(self.x, self.W, b["pre"])
        rows = b["pre"].shape[0]
        if self.act == "gelu":
            k.bias_gelu(
                (min(rows, 1024),),
                (128,),
                (b["pre"], self.b, b["out"], rows, self.fan_out),
            )
        else:
            k.bias_add(
                _blocks(b["pre"].size),
                (THREADS,),
                (b["pre"], self.b, b["pre"], rows, self.fan_out),
            )
        return b["out"].reshape(batch, self.out_size)

    def backward(self, dy: Any, batch: int, need_dx: bool = True) -> Any:
        """dy: gradient of the output; fills dW, db; returns the gradient of the input."""
        k, b = kernels(), self.buffers(batch)
        rows = b["pre"].shape[0]
        dy = dy.reshape(rows, self.fan_out)
        if self.act == "gelu":  # db is added into: train_step zeroes every gradient first
            grid = ((self.fan_out + THREADS - 1) // THREADS, (rows + 31) // 32)
            k.bias_gelu_backward(
                grid,
                (THREADS,),
                (dy, b["pre"], self.b, b["dpre"], self.db, rows, self.fan_out, 32),
            )
            dpre = b["dpre"]
        else:
            k.bias_grad(
                ((self.fan_out + 31) // 32,), (32, 8), (dy, self.db, rows, self.fan_out)
            )
            dpre = dy
        gemm(self.x, dpre, self.dW, "tn")  # dW = x^T dpre
        if not need_dx:
            return None
        gemm(dpre, self.W, b["dcol"], "nt")  # d(input rows) = dpre W^T
        if self.image is not None:
            k.col2im(
                _blocks(b["dx"].size),
                (THREADS,),
                (*self._conv_args(batch), b["dcol"], b["dx"]),
            )
        return b["dx"].reshape(batch, self.in_size)


class Model:
    """Layers in order, then softmax cross-entropy; all parameters in one flat buffer."""

    def __init__(self, layers: list[Dense], seed: int = 0) -> None:
        xp = cudl.xp
        self.layers = layers
        self.n_params = sum(layer.n_params for layer in layers)
        self.params = xp.zeros(self.n_params, np.float32)
        self.grads = xp.zeros(self.n_params, np.float32)
        offset = 0
        for layer in layers:
            layer.bind(self.params, self.grads, offset)
            offset += layer.n_params
        rng = np.random.default_rng(seed)
        for layer in layers:  # PyTorch's default: uniform in +-1 / sqrt(fan_in)
            bound = 1 / np.sqrt(layer.fan_in)
            layer.W[...] = xp.asarray(
                rng.uniform(-bound, bound, layer.W.shape), np.float32
            )
            layer.b[...] = xp.asarray(
                rng.uniform(-bound, bound, layer.b.shape), np.float32
            )
        self.classes = layers[-1].out_size
        self.bufs: dict[int, dict[str, Any]] = {}

    def buffers(self, batch: int) -> dict[str, Any]:
        if batch not in self.bufs:
            xp = cudl.xp
            self.bufs[batch] = {
                "loss": xp.empty(batch, np.float32),
                "dlogits": xp.empty((batch, self.classes), np.float32),
            }
        return self.bufs[batch]

    def forward(self, x: Any) -> Any:
        batch = x.shape[0]
        for layer in self.layers:
            x = layer.forward(x, batch)
        return x

    def loss_and_backward(self, logits: Any, targets: Any) -> Any:
        """Per-row losses (a device array); fills self.grads (zeroed here first)."""
        batch, b = logits.shape[0], self.buffers(logits.shape[0])
        kernels().softmax_ce(
            ((batch + 3) // 4,),
            (128,),
            (logits, targets, b["loss"], b["dlogits"], batch, self.classes),
        )
        self.grads.fill(0)
        dy = b["dlogits"]
        for i in reversed(range(len(self.layers))):
            dy = self.layers[i].backward(dy, batch, need_dx=i > 0)
        return b["loss"]


# --------------------------------------------------------------------------------- data


def load_digits(test: int = 360, seed: int = 0) -> dict[str, np.ndarray]:
    """The 1797 8 x 8 digits (UCI, via scikit-learn), pixels in [0, 1], a fixed split."""
    with np.load(HERE / "digits.npz") as f:
        images, labels = f["images"], f["labels"]
    order = np.random.default_rng(seed).permutation(len(labels))
    x = images.reshape(len(labels), 64).astype(np.float32)[order] / 16
    y = labels.astype(np.int32)[order]
    return {
        "x_train": x[test:],
        "y_train": y[test:],
        "x_test": x[:test],
        "y_test": y[:test],
    }


class Loader:
    """The training set in device memory; each batch is gathered there by kernels.

    `order` holds the shuffled row indices of consecutive epochs, `steps` batches in all
    (each epoch drops its last partial batch); next_batch reads the step counter on the
    device, so the launches are the same at every step and a CUDA graph can replay them.
    """

    def __init__(
        self, x: np.ndarray, y: np.ndarray, batch: int, steps: int, seed: int = 0
    ):
        xp = cudl.xp
        self.batch, self.steps, self.cols = batch, steps, x.shape[1]
        self.data, self.labels = xp.asarray(x), xp.asarray(y)
        per_epoch = len(y) // batch
        rng = np.random.default_rng(seed)
        epochs = [
            rng.permutation(len(y))[: per_epoch * batch]
            for _ in range(-(-steps // per_epoch))
        ]
        self.order = xp.asarray(np.concatenate(epochs)[: steps * batch].astype(np.int32))
        self.step = xp.zeros(1, np.int32)  # steps taken: the optimizer's step number
        self.index = xp.empty(batch, np.int32)
        self.x = xp.empty((batch, self.cols), np.float32)
        self.y = xp.empty(batch, np.int32)

    def next(self) -> tuple[Any, Any]:
        k, b = kernels(), self.batch
        k.next_batch((1,), (THREADS,), (self.order, self.index, self.step, b, self.steps))
        k.gather_rows(
            (min(b * self.cols // THREADS + 1, 1024),),
            (THREADS,),
            (self.data, self.index, self.x, b, self.cols),
        )
        k.gather_labels(_blocks(b), (THREADS,), (self.labels, self.index, self.y, b))
        return self.x, self.y


class AdamW:
    """torch.optim.AdamW's update over the flat parameter buffer, one launch per step."""

    def __init__(
        self,
        model: Model,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        xp = cudl.xp
        self.model, self.lr, self.betas, self.eps, self.wd = (
            model,
            lr,
            betas,
            eps,
            weight_decay,
        )
        self.m = xp.zeros_like(model.params)
        self.v = xp.zeros_like(model.params)

    def step(self, step_counter: Any) -> None:
        p, n = self.model.params, self.model.n_params
        blocks = min((n + THREADS - 1) // THREADS, 1024)
        kernels().adamw(
            (blocks,),
            (THREADS,),
            (
                p,
                self.model.grads,
                self.m,
                self.v,
                n,
                self.lr,
                self.betas[0],
                self.betas[1],
                self.eps,
                self.wd,
                step_counter,
            ),
        )


def train_step(model: Model, loader: Loader, opt: AdamW) -> Any:
    """Next batch, forward, loss and gradients, AdamW. Returns the per-row losses."""
    x, y = loader.next()
    loss = model.loss_and_backward(model.forward(x), y)
    opt.step(loader.step)
    return loss


def accuracy(model: Model, x: np.ndarray, y: np.ndarray) -> float:
    logits = model.forward(cudl.xp.asarray(x))
    return float((cudl.to_numpy(logits).argmax(axis=1) == y).mean())


# --------------------------------------------------------------------------------- checks


def _im2col64(x: np.ndarray, layer: Dense) -> np.ndarray:
    """float64 NumPy im2col_nhwc: (batch p q) x (r s c)."""
    h, w, c = layer.image
    xi = np.pad(
        x.reshape(-1, h, w, c), ((0, 0), (layer.pad,) * 2, (layer.pad,) * 2, (0, 0))
    )
    st = layer.stride
    cols = [
        xi[:, r : r + st * layer.p : st, s : s + st * layer.q : st, :]
        for r in range(layer.r)
        for s in range(layer.s)
    ]
    return np.stack(cols, axis=3).reshape(-1, layer.fan_in)


def reference_grads(
    model: Model, x: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray]:
    """Mean loss and the flat gradient of one batch in float64 NumPy (the same math)."""
    from math import erf

    erf_v = np.vectorize(erf)
    params = cudl.to_numpy(model.params).astype(np.float64)
    out, saved, offset = x.astype(np.float64), [], 0
    for layer in model.layers:
        nw = layer.fan_in * layer.fan_out
        W = params[offset : offset + nw].reshape(layer.fan_in, layer.fan_out)
        b = params[offset + nw : offset + layer.n_params]
        offset += layer.n_params
        inp = (
            _im2col64(out, layer)
            if layer.image is not None
            else out.reshape(-1, layer.fan_in)
        )
        pre = inp @ W + b
        act = 0.5 * pre * (1 + erf_v(pre / np.sqrt(2))) if layer.act else pre
        saved.append((inp, pre, W))
        out = act.reshape(x.shape[0], -1)
    m = out.max(axis=1, keepdims=True)
    e = np.exp(out - m)
    p = e / e.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = float(np.mean(np.log(e.sum(axis=1)) + m[:, 0] - out[rows, y]))
    dy = p
    dy[rows, y] -= 1
    dy /= len(y)
    grads = []
    for layer, (inp, pre, W) in zip(reversed(model.layers), reversed(saved)):
        dy = dy.reshape(pre.shape)
        if layer.act:
            dy = dy * (
                0.5 * (1 + erf_v(pre / np.sqrt(2)))
                + pre * np.exp(-(pre**2) / 2) / np.sqrt(2 * np.pi)
            )
        grads.append(np.concatenate([(inp.T @ dy).ravel(), dy.sum(axis=0)]))
        dcol = dy @ W.T
        if layer.image is None:
            dy = dcol
        else:  # col2im: add every patch entry back to the pixel it came from
            h, w, c = layer.image
            dx = np.zeros((x.shape[0], h + 2 * layer.pad, w + 2 * layer.pad, c))
            d = dcol.reshape(x.shape[0], layer.p, layer.q, layer.r, layer.s, c)
            st = layer.stride
            for r in range(layer.r):
                for s in range(layer.s):
                    dx[:, r : r + st * layer.p : st, s : s + st * layer.q : st, :] += d[
                        :, :, :, r, s, :
                    ]
            dy = dx[:, layer.pad : layer.pad + h, layer.pad : layer.pad + w, :]
    return loss, np.concatenate(grads[::-1])


# ------------------------------------------------------------------------------ PyTorch


def torch_twin(model: Model) -> Any:
    """The same network as a torch.nn.Module on the GPU, with copies of its weights.

    Convolutions become nn.Conv2d on NCHW tensors; before a dense layer the NCHW
    activation is permuted to NHWC and flattened, the order in which our layers store it.
    """
    import torch

    layers, prev_image = [], None
    for layer in model.layers:
        W = torch.as_tensor(cudl.to_numpy(layer.W), device="cuda")
        b = torch.as_tensor(cudl.to_numpy(layer.b), device="cuda")
        if layer.image is not None:
            h, w, c = layer.image
            mod = torch.nn.Conv2d(
                c, layer.fan_out, layer.r, layer.stride, layer.pad, device="cuda"
            )
            weight = W.reshape(layer.r, layer.s, c, layer.fan_out).permute(3, 2, 0, 1)
            if prev_image is None:
                layers.append(torch.nn.Unflatten(1, (c, h, w)))  # NCHW = NHWC when c == 1
                assert c == 1, "the first convolution reads a one-channel image"
            prev_image = True
        else:
            if prev_image:
                layers.append(_NHWCFlatten())
                prev_image = False
            mod = torch.nn.Linear(layer.fan_in, layer.fan_out, device="cuda")
            weight = W.T
        with torch.no_grad():
            mod.weight.copy_(weight)
            mod.bias.copy_(b)
        layers.append(mod)
        if layer.act == "gelu":
            layers.append(torch.nn.GELU())
    return torch.nn.Sequential(*layers)


def _nhwc_flatten_class() -> Any:
    import torch

    class NHWCFlatten(torch.nn.Module):
        """NCHW -> NHWC -> one row per image: the order of our NHWC activations."""

        def forward(self, x: Any) -> Any:
            return x.permute(0, 2, 3, 1).flatten(1)

    return NHWCFlatten


# a constructor made on first use, since torch is optional
def _NHWCFlatten() -> Any:  # noqa: N802
    return _nhwc_flatten_class()()


# --------------------------------------------------------------------------- CUDA graphs


def cupy_graph(step: Callable[[], Any]) -> Callable[[], None]:
    """Record one call of `step` (the book's step) as a CUDA graph; returns its replay.

    One warm-up call first (kernels compile, buffers are allocated), then the capture on
    a side stream (the legacy default stream cannot capture). The replay runs on the
    stream that is current when it is called; it keeps `step` (and so the buffers it
    uses) alive. Both calls are real steps: the model trains two steps.
    """
    import cupy

    cupy.cuda.Device().synchronize()  # the weights were written on another stream
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        step()
        stream.synchronize()
        stream.begin_capture()
        step()
        graph = stream.end_capture()

    def replay() -> None:
        graph.launch(cupy.cuda.get_current_stream())

    replay.keep_alive = step  # the graph keeps none of the buffers it uses alive
    return replay


def torch_graph(
    step: Callable[[], Any],
    twin: Any,
    opt: Any,
    reset: Callable[[], Any],
    warmup: int = 3,
) -> Callable[[], Any]:
    """Record one call of a PyTorch training step as a CUDA graph; returns its replay.

    `step` must read its batch from static tensors and `opt` be capturable. The warm-up
    steps are undone (weights, AdamW's state, and whatever `reset()` rewinds, such as a
    batch counter), so the first replay is the first training step. A replay returns
    step's output tensor, which the next replay overwrites (clone it to keep it).
    """
    import torch

    # Warm up on a side stream, as PyTorch's CUDA-graph notes prescribe: autograd and
    # the optimizer allocate their buffers and state, and cuBLAS its workspace.
    initial = [p.detach().clone() for p in twin.parameters()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), warnings.catch_warnings():
        # capturable=True warns when step() runs uncaptured: here that is the point
        warnings.filterwarnings("ignore", message=".*capturable=True.*")
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():  # undo the warm-up
        for p, p0 in zip(twin.parameters(), initial):
            p.copy_(p0)
        for state in opt.state.values():  # AdamW's step, m and v start at zero
            for value in state.values():
                value.zero_()
        reset()
    # cuBLAS keeps a workspace per stream, made at its first use (in the warm-up, outside
    # the graph's memory), and torch.compile's reduce-overhead frees them all whenever it
    # records. So drop them around the capture, as reduce-overhead does: the captured
    # kernels then use a workspace of the graph's own memory pool.
    torch._C._cuda_clearCublasWorkspaces()
    graph = torch.cuda.CUDAGraph()
    # Capture on the warm-up stream, where cuBLAS and cuDNN are already set up; the
    # kernels are recorded, not run
    with torch.cuda.graph(graph, stream=side):
        out = step()
    torch._C._cuda_clearCublasWorkspaces()

    def replay() -> Any:
        graph.replay()
        return out

    # The graph holds raw pointers and keeps nothing alive: the step's tensors (batch,
    # counter), the weights, their gradients and AdamW's state must live as long as it.
    replay.keep_alive = (step, twin, opt, reset)
    return replay


def torch_step(
    twin: Any, opt: Any, loader: Loader, *, graph: bool = False, warmup: int = 3
) -> Callable[..., Any]:
    """A PyTorch training step of `twin` on the batches of `loader`, in the same order.

    The step picks its batch, runs forward, cross-entropy, backward and opt.step(), and
    returns the mean loss as a device tensor. Eager (graph=False): step(model=twin) picks
    the batch by a Python counter (pass a torch.compile'd twin as model). Graphed: the
    batch index is a device counter, the batch is gathered into static tensors, and the
    whole step is one CUDA graph (torch_graph); step() replays it and returns the static
    loss tensor, which the next replay overwrites. opt must be built with capturable=True
    (AdamW's step count then lives on the device).
    """
    import torch
    import torch.nn.functional as F

    batch, steps = loader.batch, loader.steps
    x_all = torch.as_tensor(cudl.to_numpy(loader.data), device="cuda")
    y_all = torch.as_tensor(cudl.to_numpy(loader.labels), device="cuda").long()
    order = torch.as_tensor(cudl.to_numpy(loader.order), device="cuda").long()

    def train(model: Any, x: Any, y: Any) -> Any:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    if not graph:
        taken = [0]

        def eager_step(model: Any = twin) -> Any:
            idx = order[(taken[0] % steps) * batch :][:batch]
            taken[0] += 1
            return train(model, x_all[idx], y_all[idx])

        return eager_step

    if not all(group["capturable"] for group in opt.param_groups):
        raise ValueError("a captured optimizer step needs capturable=True")
    order = order.view(steps, batch)
    counter = torch.zeros(1, dtype=torch.long, device="cuda")  # steps taken, mod steps
    x = torch.empty(batch, x_all.shape[1], device="cuda")  # the static batch
    y = torch.empty(batch, dtype=torch.long, device="cuda")

    def graphed_step() -> Any:  # no host sync and no Python value that changes
        idx = order.index_select(0, counter).view(-1)
        torch.index_select(x_all, 0, idx, out=x)
        torch.index_select(y_all, 0, idx, out=y)
        counter.add_(1).remainder_(steps)
        return train(twin, x, y)

    return torch_graph(graphed_step, twin, opt, reset=counter.zero_, warmup=warmup)


def launches_per_step(step: Callable[[], Any], n: int = 10) -> tuple[float, float]:
    """(kernel launches, CUDA-graph launches) per call of `step`, counted from the CUDA
    runtime and driver calls that torch.profiler records over n calls (after 3 warm-ups).
    A step whose work is all in one graph shows (0, 1); launches the CPU still issues one
    by one show up in the first number."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 acc_events=True) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    kernels = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
               "cuLaunchKernelEx"}
    graphs = {"cudaGraphLaunch", "cuGraphLaunch"}
    names = [e.name for e in prof.events()]
    return (sum(x in kernels for x in names) / n, sum(x in graphs for x in names) / n)
