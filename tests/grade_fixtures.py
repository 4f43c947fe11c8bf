"""A speed-graded copy of the block_sum grader, for tests only (loaded through CUDL_GRADE_MODULES).

Registered as `block_sum_timed`: the cases of block_sum plus speed=dict(case=..., factor=2); its solution is
the published block_sum solution.
"""

from __future__ import annotations

from cudl.grade import REGISTRY, _load_all, grader
from cudl.grade.speed import solution_source

_load_all()
_g = REGISTRY["block_sum"]
grader("block_sum_timed", kernels=_g.kernels, cases=_g.cases, emulator_cases=_g.emulator_cases, hint=_g.hints,
       speed=dict(case=dict(n=2**24 + 3), factor=2.0, bytes=4 * (2**24 + 3)),  # x (the partials: 1/256 of it)
       solution=solution_source("block_sum"))(_g.run)

# Correct, but one thread of each block adds its 256 elements one after another: tens of times slower.
SERIAL_BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    if (threadIdx.x != 0) return;
    float s = 0.0f;
    for (int j = 0; j < 256; ++j) {
        const int i = blockIdx.x * 256 + j;
        if (i < n) s += x[i];
    }
    partials[blockIdx.x] = s;
}
"""
