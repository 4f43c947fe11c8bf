// fa_bwd_common.cuh: what versions 2 and 3 of the attention backward share, written once.
// A kernel includes it after defining D (the head dimension).
#pragma once
#include <cuda_fp16.h>

// The end of a block: a lane's share of its warp's dK and dV, fp32 mma.sync accumulators
// (the lane's keys key0 and key0 + 8, columns 2t and 2t + 1 of each 8-column tile),
// rounded to fp16 and stored two columns at a time; keys past S are not stored.
__device__ __forceinline__ void store_dk_dv(__half* dK, __half* dV, const float (*dk)[4],
                                            const float (*dv)[4], size_t head, int key0,
                                            int S, int t) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int key = key0 + 8 * h;
        if (key >= S) continue;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            const size_t i = (head + key) * D + 8 * dt + 2 * t;
            *reinterpret_cast<__half2*>(dK + i) =
                __floats2half2_rn(dk[dt][2 * h], dk[dt][2 * h + 1]);
            *reinterpret_cast<__half2*>(dV + i) =
                __floats2half2_rn(dv[dt][2 * h], dv[dt][2 * h + 1]);
        }
    }
}
