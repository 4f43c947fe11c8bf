"""Speed-graded exercises: the student's kernel against the solution's, timed in the same process on the same GPU.

A grader declares `speed=dict(case={...}, factor=F)`. After every case passed, the grading process runs that
case once with the student's kernels and once with the solution's, records the launches, and times each replay
with `cudl.bench` (warm-up, L2 flush, median of many runs), alternating student and solution for `ROUNDS`
rounds. The verdict is SLOW only if the student's fastest median exceeds F times the solution's slowest one, so
noise cannot turn the solution against itself into SLOW for any F >= MIN_FACTOR.

The solution's source is the one the book publishes: the `*_src` string that the graded cell of
`solutions/NN-slug.ipynb` passes to `cudl.grade.<name>(...)`, read without executing the notebook. Where the
repository's solutions/ folder is missing (a wheel install), speed is not graded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROUNDS = 3  # student/solution pairs of medians: SLOW needs all of them
MIN_FACTOR = 1.5  # (1 + 20%) / (1 - 20%) < 1.5: medians off by 20% cannot make the solution SLOW
SOLUTIONS_DIR = Path(__file__).resolve().parents[2] / "solutions"

Launches = Sequence[tuple[Any, tuple, dict]]


def is_slow(student_ms: Sequence[float], solution_ms: Sequence[float], factor: float) -> bool:
    """SLOW only when even the student's best median is above `factor` times the solution's worst median."""
    return min(student_ms) > factor * max(solution_ms)


def measure(student: Launches, solution: Launches, rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Median times (ms) of replaying each recorded launch sequence, alternated over `rounds` rounds."""
    from cudl.bench import bench_pair

    def replay(launches: Launches) -> Callable[[], None]:
        return lambda: [k(*a, **kw) for k, a, kw in launches] and None

    pair = bench_pair(replay(student), replay(solution), rounds=rounds, warmup_ms=10.0, rep_ms=50.0)
    return {"student": pair.rounds_ms, "solution": pair.baseline_rounds_ms}


@functools.lru_cache(maxsize=1)
def _solution_sources() -> dict[str, str]:
    from cudl.grade.extract import graded_sources

    found: dict[str, str] = {}
    for nb in sorted(SOLUTIONS_DIR.glob("*.ipynb")):
        for cell in graded_sources(nb):
            if cell.source is not None:
                found.setdefault(cell.grader, cell.source)
    return found


def solution_source(name: str) -> str | None:
    """The published solution's kernel source for grader `name` (None where solutions/ is not installed)."""
    return _solution_sources().get(name)
