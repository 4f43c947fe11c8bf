"""Tensor maps for Hopper's Tensor Memory Accelerator (TMA), made on the host with the driver API."""

from __future__ import annotations

from typing import Any

import numpy as np


def tensor_map_args(shape: tuple[int, int], strides: tuple[int, int], itemsize: int, ptr: int,
                    box: tuple[int, int]) -> tuple[list[int], list[int], list[int]]:
    """(globalDim, globalStrides, boxDim) of cuTensorMapEncodeTiled for a 2-D array (innermost first), or a
    ValueError that names the TMA rule the array breaks: elements contiguous within a row, rows a multiple of
    16 bytes apart (and not overlapping), the first element 16-byte aligned (CUDA driver API)."""
    rows, cols = shape
    row_bytes, elem_bytes = strides
    if elem_bytes != itemsize:
        raise ValueError(f"TMA reads rows of contiguous elements: the column stride is {elem_bytes} bytes, "
                         f"not the item size {itemsize}")
    if row_bytes % 16 or not cols * itemsize <= row_bytes < 2**40:
        raise ValueError(f"TMA needs rows a multiple of 16 bytes apart and at least a row's {cols * itemsize} "
                         f"bytes: the row stride is {row_bytes} bytes")
    if ptr % 16:
        raise ValueError(f"TMA needs the first element 16-byte aligned: the address is {ptr:#x}")
    if not (0 < rows <= 2**32 and 0 < cols <= 2**32 and 0 < box[0] <= 256 and 0 < box[1] <= 256):
        raise ValueError(f"TMA takes 1 to 2^32 rows and columns and boxes of 1 to 256: {shape}, box {box}")
    return [cols, rows], [row_bytes], [box[1], box[0]]


def tensor_map_2d(a: Any, box: tuple[int, int], swizzle_128b: bool = True) -> Any:
    """The 128-byte CUtensorMap of a 2-D fp16 or int8 CuPy array `a` (rows x cols), read in tiles of box =
    (box_rows, box_cols), as a 16-element uint64 CuPy array a kernel takes by pointer. `a` may be a view
    whose rows are strided, as the column range a[:, k0:k1] of a row-major matrix (tensor_map_args' rules).
    The map is copied to the GPU on the current stream: a kernel launched on another stream must wait for it."""
    import cupy
    from cuda.bindings import driver as cu

    types = {np.dtype(np.float16): cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             # TMA moves bytes: int8 travels as UINT8, the kernel reads them as signed
             np.dtype(np.int8): cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
             np.dtype(np.uint8): cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8}
    if a.dtype not in types or a.ndim != 2:
        raise ValueError(f"tensor_map_2d takes a 2-D float16 or int8 array, not {a.ndim}-D {a.dtype}")
    dims, strides, box_dim = tensor_map_args(a.shape, a.strides, a.itemsize, a.data.ptr, box)
    err, tmap = cu.cuTensorMapEncodeTiled(
        types[a.dtype], 2, a.data.ptr, [cu.cuuint64_t(d) for d in dims], [cu.cuuint64_t(s) for s in strides],
        [cu.cuuint32_t(b) for b in box_dim], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzle_128b
        else cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err}")
    words = [int(w) for w in tmap.opaque]
    return cupy.asarray(np.array(words, dtype=np.uint64))
