"""Softmax and LayerNorm forward in Triton, next to fused_rows.cu: one program per row,
the whole row in one block of values (BLOCK = the next power of two >= cols), statistics
in fp32.

Needs a GPU and PyTorch (tensors in, tensors out). Each launcher writes into outputs it is
given, so that timing measures the kernel, not an allocation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# ------------------------------------------------------------------ softmax
@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # row * cols can pass 2^31
    offs = tl.arange(0, BLOCK)
    inside = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=inside,
                other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))  # padding: exp(-inf) = 0
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * cols + offs, y.to(y_ptr.dtype.element_ty), mask=inside)


# ------------------------------------------------------------------ LayerNorm
@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, cols, eps,
                     BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    inside = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(inside, x - mean, 0.0)  # two passes over the registers, as fused_rows.cu
    rstd = tl.rsqrt(tl.sum(d * d, axis=0) / cols + eps)
    w = tl.load(w_ptr + offs, mask=inside).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=inside).to(tl.float32)
    y = d * rstd * w + b
    tl.store(y_ptr + row * cols + offs, y.to(y_ptr.dtype.element_ty), mask=inside)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


# ------------------------------------------------------------------ launchers
def _launch_shape(cols: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for a row of `cols` values.

    BLOCK is the row rounded up to a power of two; about 8-16 values per thread.
    """
    block = triton.next_power_of_2(cols)
    return block, max(1, min(16, block // 256))


def softmax(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """y = softmax(x) along the last dimension of a contiguous 2-D tensor."""
    rows, cols = x.shape
    block, warps = _launch_shape(cols)
    softmax_kernel[(rows,)](x, y, cols, BLOCK=block, num_warps=warps)
    return y


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor,
              mean: torch.Tensor, rstd: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """y = LayerNorm(x) * w + b along the last dimension.

    mean and rstd (fp32, one per row) are written too.
    """
    rows, cols = x.shape
    block, warps = _launch_shape(cols)
    layernorm_kernel[(rows,)](x, w, b, y, mean, rstd, cols, eps,
                              BLOCK=block, num_warps=warps)
    return y
