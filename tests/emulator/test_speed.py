"""Loose lower bounds on the emulator's throughput (a quarter of issue 3's targets, so CI is not flaky)."""

from __future__ import annotations

import pytest
from bench_emulator import TARGETS, measure  # tests/emulator is on sys.path (pytest rootdir import)

import cudl

pytestmark = pytest.mark.skipif(cudl.on_gpu(), reason="emulator throughput")


def test_throughput_lower_bounds():
    rates = measure(n_plain=1 << 21, n_sync=1 << 17)
    for kind, rate in rates.items():
        assert rate >= TARGETS[kind] / 4, f"{kind}: {rate / 1e6:.2f} M threads/s < {TARGETS[kind] / 4e6:.1f}"
