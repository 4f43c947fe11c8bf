"""Tensor maps for Hopper's Tensor Memory Accelerator (TMA), made on the host with the driver API."""

from __future__ import annotations

from typing import Any

import numpy as np


def tensor_map_2d(a: Any, box: tuple[int, int], swizzle_128b: bool = True) -> Any:
    """The 128-byte CUtensorMap of a row-major 2-D fp16 or int8 CuPy array `a` (rows x cols), read in
    tiles of box = (box_rows, box_cols), as a 16-element uint64 CuPy array a kernel takes by pointer."""
    import cupy
    from cuda.bindings import driver as cu

    rows, cols = a.shape
    types = {np.dtype(np.float16): cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             # TMA moves bytes: int8 travels as UINT8, the kernel reads them as signed
             np.dtype(np.int8): cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
             np.dtype(np.uint8): cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8}
    if a.dtype not in types or not a.flags.c_contiguous:
        raise ValueError(f"tensor_map_2d takes a C-contiguous float16 or int8 array, not {a.dtype} "
                         f"({'' if a.flags.c_contiguous else 'not '}C-contiguous)")
    err, tmap = cu.cuTensorMapEncodeTiled(
        types[a.dtype], 2, a.data.ptr,
        [cu.cuuint64_t(cols), cu.cuuint64_t(rows)], [cu.cuuint64_t(cols * a.itemsize)],
        [cu.cuuint32_t(box[1]), cu.cuuint32_t(box[0])], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzle_128b
        else cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err}")
    words = [int(w) for w in tmap.opaque]
    return cupy.asarray(np.array(words, dtype=np.uint64))
