"""cudl.bench_pair without a GPU: `cudl.bench` is replaced by a fake whose "timed" functions return their
own time, so the order of the calls, the medians and the ratio can be checked exactly."""

from __future__ import annotations

import importlib

import pytest

import cudl
from cudl.bench import Timing, bench_pair

BENCH = importlib.import_module("cudl.bench")  # the module: `cudl.bench` is the function


class Timed:
    """A fake kernel: each call logs its name and returns the next of its per-round median times."""

    def __init__(self, name: str, times_ms: list[float], log: list[str]):
        self.__name__, self.times, self.log = name, list(times_ms), log

    def __call__(self) -> float:
        self.log.append(self.__name__)
        return self.times.pop(0)


@pytest.fixture
def fake_bench(monkeypatch):
    """cudl.bench.bench replaced: one call of fn is one 'round', its return value the median; the
    keyword arguments of every call are kept."""
    calls: list[dict] = []

    def bench(fn, *, name="", flops=None, bytes=None, compute="fp32", runs=4, **kwargs):
        ms = fn()
        calls.append(dict(name=name, flops=flops, bytes=bytes, compute=compute, **kwargs))
        # four runs around the median, so that the pooled quartiles have something to pool
        return Timing(name, ms, 0.9 * ms, 1.1 * ms, runs, bytes, flops, compute,
                      [0.9 * ms, ms, ms, 1.1 * ms])

    monkeypatch.setattr(BENCH, "bench", bench)
    return calls


def test_bench_pair_alternates_baseline_first(fake_bench):
    log: list[str] = []
    mine, blas = Timed("mine", [3.0, 1.0, 2.0], log), Timed("blas", [10.0, 40.0, 20.0], log)
    p = bench_pair(mine, blas, rounds=3, flops=2e9, compute="fp16", rep_ms=50)
    assert log == ["blas", "mine"] * 3
    assert [c["name"] for c in fake_bench] == ["blas", "mine"] * 3
    # every keyword reaches every call of cudl.bench
    assert all(c["flops"] == 2e9 and c["compute"] == "fp16" and c["rep_ms"] == 50 for c in fake_bench)
    assert p.rounds_ms == [3.0, 1.0, 2.0] and p.baseline_rounds_ms == [10.0, 40.0, 20.0]


def test_bench_pair_medians_and_ratio(fake_bench):
    log: list[str] = []
    p = bench_pair(Timed("mine", [3.0, 1.0, 2.0], log), Timed("blas", [10.0, 40.0, 20.0], log),
                   flops=2e9, name="kernel 3", baseline_name="cuBLAS")
    assert len(log) == 6  # rounds=3 by default
    assert p.timing.ms == 2.0 and p.baseline.ms == 20.0  # medians of the rounds, not means (2, 23.3)
    assert p.ratio == pytest.approx(10.0)  # the baseline takes 10x as long: 1000% of it
    assert (p.timing.name, p.baseline.name) == ("kernel 3", "cuBLAS")
    assert p.timing.runs == 12 and len(p.timing.times_ms) == 12  # 3 rounds of 4 runs, pooled
    assert p.timing.q1_ms < p.timing.ms < p.timing.q3_ms
    assert p.timing.tflops == pytest.approx(1.0)  # 2 GFLOP in 2 ms, from the bench keywords
    assert "1000.0% of cuBLAS" in str(p) and "3 rounds" in str(p)
    # slower than the baseline: ratio below 1, and the same as Timing.speedup_over
    p = bench_pair(Timed("mine", [4.0, 5.0, 6.0, 50.0, 5.0], log), Timed("blas", [1.0] * 5, log), rounds=5)
    assert p.ratio == pytest.approx(0.2) and p.ratio == p.timing.speedup_over(p.baseline)


def test_bench_pair_one_round_and_no_round(fake_bench):
    log: list[str] = []
    p = bench_pair(Timed("mine", [2.0], log), Timed("blas", [1.0], log), rounds=1)
    assert log == ["blas", "mine"] and p.ratio == pytest.approx(0.5)
    with pytest.raises(ValueError, match="rounds=0"):
        bench_pair(Timed("mine", [], log), Timed("blas", [], log), rounds=0)


def test_bench_pair_is_exported_and_needs_a_gpu():
    assert cudl.bench_pair is bench_pair
    if cudl.on_gpu():
        pytest.skip("the CPU's message only")
    with pytest.raises(cudl.GpuOnly):
        bench_pair(lambda: None, lambda: None)


def test_measurable_uses_the_runs_noise_and_the_rounds():
    from cudl.bench import Pair, Timing, measurable

    def timing(ms, q1, q3):
        return Timing("t", ms, q1, q3, 10)

    # 4% faster, runs spread +-1% (IQR 2%): measurable
    assert measurable(timing(1.0, 0.99, 1.01), timing(1.04, 1.03, 1.05)) == 1
    assert measurable(timing(1.04, 1.03, 1.05), timing(1.0, 0.99, 1.01)) == -1
    # 4% faster, but the runs spread +-5%: inside the noise
    assert measurable(timing(1.0, 0.95, 1.05), timing(1.04, 0.99, 1.09)) == 0
    # tight runs, but the rounds disagree on the side: no measurable difference
    pair = Pair(timing(1.0, 0.999, 1.001), timing(1.04, 1.039, 1.041), [1.0, 1.0, 1.0], [1.06, 1.05, 0.98])
    assert pair.round_ratios[2] < 1 < pair.round_ratios[0]
    assert pair.sign() == 0
    pair.baseline_rounds_ms = [1.06, 1.05, 1.03]
    assert pair.sign() == 1
