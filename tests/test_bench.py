"""cudl.bench, its ceilings and cudl.record without a GPU, and the stored records in benchmarks/.

* bench_pair: `cudl.bench` is replaced by a fake whose "timed" functions return their own time, so the order
  of the calls, the medians and the ratio can be checked exactly.
* bench's loop: CuPy's events are faked with a clock, so the median and the L2 flush before every run are
  checked (a mean, or a loop that never flushes, fails).
* ceilings: `cudl.ceilings()` is faked; each timing must be compared with the ceiling of its precision and
  its traffic (a percentage always of the fp32 rate fails).
* benchmarks/*.json: no percentage above 100 without its reason, every ratio names its baseline, every
  compute-bound record its precision.
"""

from __future__ import annotations

import importlib
import json
import sys
import types

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


# --- the timing loop itself, on a fake CuPy ------------------------------------------------------------


class FakeClock:
    """A fake cupy.cuda: events read a clock that each call of the benchmarked function advances by its next
    duration; every event, flush and call is logged, so the order of the loop can be checked."""

    def __init__(self, durations: list[float]):
        self.now, self.durations, self.log = 0.0, list(durations), []
        clock = self

        class Event:
            def record(self):
                self.t = clock.now
                clock.log.append("record")

            def synchronize(self):
                pass

        self.cuda = types.SimpleNamespace(Event=Event, get_current_stream=lambda: types.SimpleNamespace(
            synchronize=lambda: None), get_elapsed_time=lambda s, e: e.t - s.t)

    def fn(self):
        self.now += self.durations.pop(0)
        self.log.append("fn")


@pytest.fixture
def fake_cupy(monkeypatch):
    def make(durations: list[float]) -> FakeClock:
        clock = FakeClock(durations)
        monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=clock.cuda))
        monkeypatch.setattr(BENCH, "require_gpu", lambda what: None)
        monkeypatch.setattr(BENCH, "flush_l2", lambda: clock.log.append("flush"))
        return clock
    return make


# 1 first call + 5 for the estimate (1 ms each) + 2 warm-up calls (warmup_ms=2), then 5 timed runs
# (min_runs=5, rep_ms=1) whose times differ: median 3, mean 22, quartiles 1.5 and 52
UNTIMED, TIMED = [1.0] * 8, [4.0, 1.0, 100.0, 3.0, 2.0]
LOOP = dict(warmup_ms=2, rep_ms=1, min_runs=5)


def test_bench_reports_the_median_of_the_timed_runs(fake_cupy):
    clock = fake_cupy(UNTIMED + TIMED)
    t = BENCH.bench(clock.fn, bytes=8e6, name="k", **LOOP)
    assert clock.durations == [], "a different number of calls than the loop should make"
    assert t.times_ms == TIMED and t.runs == 5
    assert t.ms == 3.0, f"{t.ms}: not the median of {TIMED} (the mean is 22)"
    assert (t.q1_ms, t.q3_ms) == (1.5, 52.0)
    assert t.gbps == pytest.approx(8e6 / 3.0 / 1e6)


def test_bench_flushes_l2_right_before_every_timed_run(fake_cupy):
    clock = fake_cupy(UNTIMED + TIMED)
    BENCH.bench(clock.fn, **LOOP)
    assert clock.log.count("flush") == len(TIMED)
    assert clock.log[-4 * len(TIMED):] == ["flush", "record", "fn", "record"] * len(TIMED), clock.log
    clock = fake_cupy(UNTIMED + TIMED)
    BENCH.bench(clock.fn, flush=False, **LOOP)
    assert "flush" not in clock.log


def test_bench_flushes_after_setup(fake_cupy):
    """setup runs before the flush: what setup writes must not be left in L2 for the timed run."""
    clock = fake_cupy([1.0] * 5 + TIMED)  # first call, 2 estimates, 2 warm-up calls, 5 timed runs
    BENCH.bench(clock.fn, setup=lambda: clock.log.append("setup"), **LOOP)
    assert clock.log[-5 * len(TIMED):] == ["setup", "flush", "record", "fn", "record"] * len(TIMED), clock.log


def test_bench_checks_precision_and_traffic():
    with pytest.raises(ValueError, match="compute='fp64'"):
        cudl.bench(lambda: None, flops=1, compute="fp64")
    with pytest.raises(ValueError, match="traffic='write'"):
        cudl.bench(lambda: None, bytes=1, traffic="write")
    with pytest.raises(ValueError, match="not both"):
        cudl.bench(lambda: None, bytes=(2, 1), traffic="read")


def test_traffic_of():
    assert BENCH.traffic_of(12) == (12, "copy")  # a number alone: a 1:1 copy, as before
    assert BENCH.traffic_of(12, "read") == (12, "read")
    assert BENCH.traffic_of((8, 4)) == (12, (8.0, 4.0))
    assert BENCH.traffic_of((8, 0)) == (8, "read") and BENCH.traffic_of((4, 4)) == (8, "copy")
    assert BENCH.traffic_of(None) == (None, None)
    with pytest.raises(ValueError):
        BENCH.traffic_of((-1, 4))


# --- ceilings: the right one for each timing -----------------------------------------------------------

CEIL = importlib.import_module("cudl.ceilings")
RECORD = importlib.import_module("cudl.record")
FAKE_CEILINGS = {
    "gpu": "Test GPU", "copy_gbps": 3000.0, "read_gbps": 3300.0,
    "gemm_tflops": {"fp32": 50.0, "tf32": 400.0, "fp16": 700.0, "bf16": 710.0, "int8": 800.0},
    "names": {"copy": "1:1 copy", "read": "read-only stream", "fp32": "cuBLAS fp32 GEMM",
              "fp16": "cuBLAS fp16 GEMM", "int8": "cuBLAS int8 GEMM (torch._int_mm)"},
}


@pytest.fixture
def gpu(monkeypatch):
    """A GPU for cudl.bench.Timing and cudl.record: FAKE_CEILINGS, an empty record of this run's rates."""
    monkeypatch.setattr(importlib.import_module("cudl.backend"), "on_gpu", lambda: True)
    monkeypatch.setattr(RECORD, "on_gpu", lambda: True)
    monkeypatch.setattr(CEIL, "ceilings", lambda refresh=False: FAKE_CEILINGS)
    monkeypatch.setattr(CEIL, "_fastest", {})
    monkeypatch.setattr(importlib.import_module("cudl.env"), "device_info", lambda: {
        "gpu": "Test GPU", "cc": "9.0", "driver": "13.0", "runtime": "13.0", "cupy": "14", "torch": None,
        "numpy": "2"})
    monkeypatch.setenv("CUDL_GIT_COMMIT", "abc1234")
    return FAKE_CEILINGS


def gemm(name: str, tflops: float, compute: str | None = None) -> Timing:
    flops = 2 * 4096**3
    return Timing(name, flops / tflops / 1e9, 0.9, 1.1, 10, flops=flops, compute=compute)


def test_each_precision_against_its_own_ceiling(gpu):
    """A fp16 timing is a percentage of the fp16 GEMM, not of fp32 (that gave 1042% for FlashAttention)."""
    assert gemm("hgemm", 350.0, "fp16").pct_of_ceiling() == (pytest.approx(50.0), "cuBLAS fp16 GEMM")
    assert gemm("sgemm", 25.0, "fp32").pct_of_ceiling() == (pytest.approx(50.0), "cuBLAS fp32 GEMM")
    pct, c = gemm("bf16 gemm", 355.0).ceiling("bf16")  # the precision given at the call wins
    assert (pct, c.key, c.value, c.unit) == (pytest.approx(50.0), "bf16", 710.0, "TFLOP/s")
    assert gemm("tf32 gemm", 200.0, "tf32").pct_of_ceiling()[0] == pytest.approx(50.0)


def test_no_precision_no_flop_percentage(gpu):
    """Without a precision a FLOP rate has no percentage; never a silent fp32."""
    t = gemm("hgemm", 350.0)
    assert t.compute is None and t.pct_of_ceiling() is None
    assert str(t).endswith("350.00 TFLOP/s"), str(t)  # and no "= N% of ..." after it
    assert gemm("fp8 gemm", 900.0, "fp8").pct_of_ceiling() is None  # no fp8 ceiling measured here


def test_a_kernel_faster_than_the_library_is_the_ceiling(gpu, tmp_path):
    """int8: the book's GEMM beats torch._int_mm; it is then 100% of itself, named, never 150%."""
    pct, c = gemm("wgmma int8", 1200.0, "int8").ceiling()
    assert pct == pytest.approx(100.0) and c.value == 1200.0
    assert c.name.startswith("wgmma int8: the fastest int8 of this run") and "torch._int_mm" in c.name
    # once recorded, it is the ceiling of the int8 timings that follow in the run
    RECORD.record(gemm("wgmma int8", 1200.0), chapter="13-quantization", shape=(4096,) * 3, dtype="int8",
                  path=tmp_path / "g.json")
    pct, c = gemm("igemm_2_mma", 600.0, "int8").ceiling()
    assert pct == pytest.approx(50.0) and c.value == 1200.0
    assert gemm("hgemm", 350.0, "fp16").pct_of_ceiling()[0] == pytest.approx(50.0)  # other precisions unmoved


def test_memory_ceiling_matches_the_traffic(gpu):
    n = 3e9  # bytes moved in 1 ms: 3,000 GB/s
    copy = Timing("copy-like", 1.0, 1.0, 1.0, 10, bytes=n)
    read = Timing("sum", 1.0, 1.0, 1.0, 10, bytes=n, traffic="read")
    assert copy.pct_of_ceiling() == (pytest.approx(100.0), "1:1 copy")  # default: a 1:1 copy, as before
    assert read.pct_of_ceiling() == (pytest.approx(100 * 3000 / 3300), "read-only stream")
    # 2 bytes read per byte written (vector add): between the two streams, from the linear cost model
    mix = Timing("vector_add", 1.0, 1.0, 1.0, 10, bytes=n, traffic=(2e9, 1e9))
    pct, c = mix.ceiling()
    expected = 3e9 / (2e9 / 3300 + 1e9 * (2 / 3000 - 1 / 3300))
    assert c.key == "mix" and c.value == pytest.approx(expected) and 3000 < c.value < 3300
    assert pct == pytest.approx(100 * 3000 / expected)
    assert CEIL.mix_gbps(1, 1, 3000, 3300) == pytest.approx(3000)  # the copy itself
    assert CEIL.mix_gbps(1, 0, 3000, 3300) == pytest.approx(3300)  # the read stream itself


def test_above_ceiling_says_noise_or_a_slow_ceiling(gpu):
    """A percentage above 100 is explained: inside the timing's half-IQR it is noise, beyond it the ceiling."""
    def at(pct: float, half_iqr_pct: float) -> Timing:
        ms = 1.0 / (pct / 100)  # 3e9 bytes: 3,000 GB/s (the fake copy) in 1 ms
        return Timing("gelu", ms, ms * (1 - half_iqr_pct / 100), ms * (1 + half_iqr_pct / 100), 10, bytes=3e9)

    assert at(99.0, 0.5).above_ceiling() is None
    assert at(100.0, 0.5).above_ceiling() is None
    within = at(100.3, 0.5).above_ceiling()
    assert within.startswith("100.3% of the 1:1 copy, within") and "±0.5%" in within
    beyond = at(102.0, 0.5).above_ceiling()
    assert beyond.startswith("102.0% of the 1:1 copy, above it by more than") and "not the fastest" in beyond
    read = Timing("sum", 1.0, 0.99, 1.01, 10, bytes=3.4e9, traffic="read")  # 3,400 GB/s: 103% of 3,300
    assert read.above_ceiling().startswith("103.0% of the read-only stream, above")
    mix = Timing("vector_add", 1.0, 0.99, 1.01, 10, bytes=3.4e9, traffic=(2.4e9, 1e9))
    assert mix.above_ceiling().startswith("1") and "of the ceiling of its read/write mix, above" in mix.above_ceiling()


def test_roofline_takes_the_closer_ceiling(gpu):
    """Bytes and flops both given: the percentage of the ceiling the kernel comes closest to."""
    t = Timing("fma_intensity", 1.0, 1.0, 1.0, 10, bytes=0.3e9, flops=30e9, compute="fp32")  # 300 GB/s, 30 TFLOP/s
    assert t.pct_of_ceiling() == (pytest.approx(60.0), "cuBLAS fp32 GEMM")
    t = Timing("low intensity", 1.0, 1.0, 1.0, 10, bytes=2.4e9, flops=5e9, compute="fp32")
    assert t.pct_of_ceiling() == (pytest.approx(80.0), "1:1 copy")


def test_ceilings_cache_of_an_older_cudl_is_measured_again(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDL_CACHE", str(tmp_path))
    monkeypatch.setattr(CEIL, "require_gpu", lambda what: None)
    monkeypatch.setattr(importlib.import_module("cudl.env"), "gpu_name", lambda: "Test GPU")
    CEIL._cache_file("Test GPU").write_text(json.dumps({"gpu": "Test GPU", "copy_gbps": 1.0,
                                                         "gemm_tflops": {"fp32": 1.0}}))
    measured = []
    monkeypatch.setattr(CEIL, "_measure", lambda: measured.append(1) or {**FAKE_CEILINGS, "version": CEIL.VERSION})
    assert CEIL.ceilings()["read_gbps"] == 3300.0 and len(measured) == 1  # no read stream in the old cache
    assert CEIL.ceilings()["read_gbps"] == 3300.0 and len(measured) == 1  # the new cache is read


def test_gemm_ceilings_only_where_the_gpu_has_them(monkeypatch):
    """fp32/fp16 everywhere; tf32 and bf16 from sm_80; int8 from sm_75; fp8 from sm_89 (torch faked)."""

    class Tensor:
        def to(self, dtype):
            return self

        def t(self):
            return self

    for cc, expected in (((7, 5), {"fp32", "fp16", "int8"}), ((8, 0), {"fp32", "fp16", "bf16", "tf32", "int8"}),
                         ((9, 0), {"fp32", "fp16", "bf16", "tf32", "int8", "fp8"})):
        matmul = types.SimpleNamespace(allow_tf32=False)
        torch = types.SimpleNamespace(
            cuda=types.SimpleNamespace(get_device_capability=lambda cc=cc: cc),
            backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul)),
            randn=lambda *a, **k: Tensor(), randint=lambda *a, **k: Tensor(), tensor=lambda *a, **k: Tensor(),
            float32="f32", float16="f16", bfloat16="bf16", int8="i8", float8_e4m3fn="e4m3")
        monkeypatch.setitem(sys.modules, "torch", torch)
        asked = []

        def bench(fn, *, flops, compute):
            asked.append(compute)
            return Timing(compute, 1.0, 1.0, 1.0, 10, flops=flops, compute=compute)

        rates, names = CEIL._measure_gemms(bench)
        assert set(rates) == expected == set(names), cc
        assert asked.count("fp8") == (2 if "fp8" in expected else 0)  # bf16 and fp32 outputs
        assert matmul.allow_tf32 is False  # left as it was found


def test_precision_of_dtypes():
    assert CEIL.precision_of("float32") == "fp32" and CEIL.precision_of("float16->float32") == "fp16"
    assert CEIL.precision_of("bfloat16") == "bf16" and CEIL.precision_of("fp8 e5m2") == "fp8"
    assert CEIL.precision_of("int8") == "int8" and CEIL.precision_of("w4") is None


# --- cudl.record -------------------------------------------------------------------------------------


def test_record_takes_the_precision_from_the_dtype(gpu, tmp_path):
    out = tmp_path / "g.json"
    entry = RECORD.record(gemm("flash_attn", 350.0), chapter="12-flash-attention", shape=(1,), dtype="float16",
                          path=out)
    assert (entry["compute"], entry["ceiling_key"], entry["ceiling_value"]) == ("fp16", "fp16", 700.0)
    assert entry["pct_of_ceiling"] == pytest.approx(50.0) and entry["ceiling"] == "cuBLAS fp16 GEMM"
    assert json.loads(out.read_text()) == [dict(entry)]
    # compute= at record time wins over the dtype, and over the timing's own
    entry = RECORD.record(gemm("tf32 gemm", 200.0, "fp32"), chapter="05-matmul", shape=(1,), dtype="float32",
                          compute="tf32", path=out)
    assert entry["compute"] == "tf32" and entry["pct_of_ceiling"] == pytest.approx(50.0)


def test_record_refuses_a_flop_rate_without_a_precision(gpu, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="dtype='w4' names no precision.*compute="):
        RECORD.record(gemm("w4 gemm", 300.0), chapter="13-quantization", shape=(1,), dtype="w4", path=tmp_path / "g")
    with pytest.raises(ValueError, match="compute='fp64'"):
        RECORD.record(gemm("x", 1.0), chapter="c", shape=1, dtype="float64", compute="fp64", path=tmp_path / "g")
    # memory-bound with such a dtype is fine (no FLOP ceiling needed), and so is w4 with compute=
    gemv = Timing("gemv_w4", 1.0, 1.0, 1.0, 10, bytes=1.5e9)
    entry = RECORD.record(gemv, chapter="13-quantization", shape=(1,), dtype="w4", path=tmp_path / "g")
    assert entry["compute"] is None and entry["pct_of_ceiling"] == pytest.approx(50.0)
    assert RECORD.record(gemm("w4 gemm", 350.0), chapter="13-quantization", shape=(1,), dtype="w4",
                         compute="fp16", path=tmp_path / "g")["pct_of_ceiling"] == pytest.approx(50.0)
    # the emulator refuses too (no record is written there, but the mistake shows before a GPU run)
    monkeypatch.setattr(RECORD, "on_gpu", lambda: False)
    with pytest.raises(ValueError, match="names no precision"):
        RECORD.record(gemm("w4 gemm", 300.0), chapter="13-quantization", shape=(1,), dtype="w4")


def test_record_says_why_a_percentage_is_missing_or_above_100(gpu, tmp_path):
    out = tmp_path / "g.json"
    entry = RECORD.record(gemm("fp8 gemm", 900.0), chapter="13", shape=(1,), dtype="fp8 e4m3", path=out)
    assert entry["pct_of_ceiling"] is None and entry["note"] == "no measured fp8 ceiling on this GPU"
    fast = Timing("row_sum", 1.0, 1.0, 1.0, 10, bytes=3.1e9)  # 3,100 GB/s: above the 1:1 copy
    with pytest.warns(UserWarning, match="above its ceiling.*note="):
        entry = RECORD.record(fast, chapter="04", shape=(1,), dtype="float32", path=out)
    assert entry["pct_of_ceiling"] > 100 and entry["note"] is None  # the benchmarks check will ask for a note
    read = Timing("row_sum", 1.0, 1.0, 1.0, 10, bytes=3.1e9, traffic="read")
    entry = RECORD.record(read, chapter="04", shape=(1,), dtype="float32", path=out)
    assert entry["pct_of_ceiling"] < 100 and entry["traffic"] == "read" and entry["ceiling"] == "read-only stream"


def test_record_baseline_kinds(gpu, tmp_path):
    out, t = tmp_path / "g.json", Timing("split-K", 1.0, 1.0, 1.0, 10, bytes=1e9)
    kinds = {"PyTorch softmax": "library", "torch.sum": "library", "cuBLAS (fp32 out)": "library",
             "cuDNN conv2d NHWC": "library", "Triton LayerNorm": "library", "SDPA (default)": "library",
             "torch._scaled_mm e4m3, fp32 out": "library", "chunk 4096: 16 blocks": "previous",
             "3: sequential addressing": "previous"}
    for name, kind in kinds.items():
        assert RECORD.baseline_kind_of(name) == kind, name
        entry = RECORD.record(t, chapter="10", shape=(1,), dtype="float16", baseline=Timing(name, 2.0, 2, 2, 10),
                              path=out)
        assert entry["baseline_kind"] == kind and entry["ratio"] == 2.0
    entry = RECORD.record(t, chapter="10", shape=(1,), dtype="float16", baseline=Timing("v1", 2.0, 2, 2, 10),
                          baseline_kind="library", path=out)  # said explicitly: kept
    assert entry["baseline_kind"] == "library"
    with pytest.raises(ValueError, match="baseline_kind"):
        RECORD.record(t, chapter="10", shape=(1,), dtype="float16", baseline_kind="library", path=out)


def test_record_shows_one_line_in_a_notebook(gpu, tmp_path):
    """cudl.record at the end of a cell printed a 25-line dict (chapters 9 and 10): now one line."""
    from IPython.lib.pretty import pretty

    entry = RECORD.record(Timing("AdamW", 0.185, 0.18, 0.19, 10, bytes=4.7e8), chapter="09-training",
                          shape=(1,), dtype="float32", path=tmp_path / "g.json")
    assert entry["chapter"] == "09-training"  # still a dict
    for shown in (repr(entry), pretty(entry)):
        assert shown == "recorded 09-training: AdamW, 0.185 ms (85% of 1:1 copy)", shown


# --- the stored records: benchmarks/*.json ----------------------------------------------------------------

STORED = [(f"{p.name}[{i}] {r.get('chapter')}: {r.get('kernel')}", r)
          for p in sorted(RECORD.BENCH_DIR.glob("*.json")) for i, r in enumerate(json.loads(p.read_text()))]


def record_problems(r: dict) -> list[str]:
    """What is wrong with one stored record (the checks of issue 23)."""
    problems = []
    pct = r.get("pct_of_ceiling")
    if pct is not None and pct > 100 and not r.get("note"):
        problems.append(f"{pct:.1f}% of {r.get('ceiling')} and no note saying why")
    if r.get("ratio") is not None and not (r.get("baseline") and r.get("baseline_kind") in RECORD.BASELINE_KINDS):
        problems.append(f"a ratio against baseline {r.get('baseline')!r} of kind {r.get('baseline_kind')!r}")
    if r.get("flops") and r.get("compute") not in CEIL.PRECISIONS:
        problems.append(f"a FLOP rate and precision {r.get('compute')!r}")
    if pct is not None:
        rate = r.get("tflops") if r.get("ceiling_unit") == "TFLOP/s" else r.get("gbps")
        if not (r.get("ceiling") and r.get("ceiling_value") and rate):
            problems.append("a percentage without its ceiling's name and value")
        elif abs(100 * rate / r["ceiling_value"] - pct) > 1e-6 * pct:
            problems.append(f"{pct:.2f}% is not {rate:.4g} / {r['ceiling_value']:.4g}")
        if r.get("ceiling_unit") == "TFLOP/s" and r.get("ceiling_key") != r.get("compute"):
            problems.append(f"a {r.get('compute')} rate against the {r.get('ceiling_key')} ceiling")
    elif (r.get("flops") or r.get("bytes")) and not r.get("note"):
        problems.append("a rate without a percentage and no note saying why")
    return problems


def test_record_problems_bite():
    good = {"pct_of_ceiling": 50.0, "ceiling": "cuBLAS fp16 GEMM", "ceiling_value": 700.0, "ceiling_unit": "TFLOP/s",
            "ceiling_key": "fp16", "tflops": 350.0, "flops": 1e12, "compute": "fp16", "ratio": 1.1,
            "baseline": "SDPA", "baseline_kind": "library"}
    assert record_problems(good) == []
    bad = {"compute": None, "pct_of_ceiling": 1042.0, "ceiling_key": "fp32", "ceiling_value": 33.6,
           "baseline_kind": None}
    for change, words in ((dict(pct_of_ceiling=101.0, ceiling_value=350 / 1.01), "no note"),
                          (dict(baseline_kind=None), "a ratio"), (dict(baseline=None), "a ratio"),
                          (dict(compute=None), "precision None"), (bad, "precision None"),
                          (dict(ceiling_key="fp32"), "against the fp32 ceiling"), (dict(ceiling_value=None), "value"),
                          (dict(pct_of_ceiling=40.0), "is not"), (dict(pct_of_ceiling=None), "no note")):
        assert any(words in p for p in record_problems({**good, **change})), (change, words)


@pytest.mark.parametrize("where,r", STORED or [pytest.param("", {}, marks=pytest.mark.skip("no records"))],
                         ids=[w for w, _ in STORED] or None)
def test_stored_record(where: str, r: dict):
    assert not record_problems(r), f"{where}: " + "; ".join(record_problems(r))

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
    # against a target of 0.9x: a ratio of 0.95 (runs +-1%) is measurably above it, 0.85 below, 0.905 inside
    assert measurable(timing(1.0, 0.99, 1.01), timing(0.95, 0.94, 0.96), at=0.9) == 1
    assert measurable(timing(1.0, 0.99, 1.01), timing(0.85, 0.84, 0.86), at=0.9) == -1
    assert measurable(timing(1.0, 0.99, 1.01), timing(0.905, 0.9, 0.91), at=0.9) == 0
    assert pair.sign(at=1.05) == 0  # rounds 1.06, 1.05, 1.03 are not all above 1.05
    pair.baseline_rounds_ms = [0.95, 0.95, 0.95]
    pair.timing, pair.baseline = timing(1.0, 0.999, 1.001), timing(0.95, 0.949, 0.951)
    assert pair.sign() == -1 and pair.sign(at=0.9) == 1
