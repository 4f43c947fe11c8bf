"""Grades the challenge solutions of chapters 06-08 and their slow-but-correct variants
(tests/gpu/slow_variants/NN-slug/<grader>__<variant>.cu) with the speed-graded graders, on a GPU, to check
the graders' `speed` factors: every solution PASSes, and a clearly naive variant gets SLOW.
Run: CUDL_BACKEND=gpu python tests/gpu/time_part2_challenges.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cudl.grade import REGISTRY, _load_all, run  # noqa: E402
from cudl.grade.extract import graded_sources  # noqa: E402

CHALLENGES = {"depthwise_nhwc": "06-convolution", "add_rmsnorm": "07-fusion", "bias_add_residual": "08-profiling"}


def main() -> None:
    _load_all()
    rows = []
    for name, slug in CHALLENGES.items():
        src = next(c.source for c in graded_sources(ROOT / "solutions" / f"{slug}.ipynb") if c.grader == name)
        slow = sorted((Path(__file__).parent / "slow_variants" / slug).glob(f"{name}__*.cu"))
        variants = [("solution", src)] + [(p.stem.split("__")[1], p.read_text()) for p in slow]
        for label, source in variants:
            v = run(name, source, quiet=True)
            print(v.line, flush=True)
            t = v.timing or {}
            ratio = (min(t["student"]) / min(t["solution"])) if t.get("student") and t.get("solution") else None
            rows.append((name, label, v.status, ratio))
    print(f"\n{'grader':<20} {'variant':<20} {'verdict':<8} {'x solution':>10}  (factor)")
    for name, label, status, ratio in rows:
        r = f"{ratio:10.2f}" if ratio is not None else f"{'-':>10}"
        print(f"{name:<20} {label:<20} {status:<8} {r}  ({REGISTRY[name].speed['factor']:g})")


if __name__ == "__main__":
    main()
