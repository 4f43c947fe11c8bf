"""`cudl.bench`: CUDA-event timing with warm-up, an L2 flush before every run, and the median of many runs."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .backend import require_gpu
from .ceilings import PRECISIONS, TRAFFIC, Ceiling

# Bytes written between runs so that no input is still in L2 (H100: 50 MB, H200: 60 MB, RTX 4090: 72 MB).
FLUSH_BYTES = 256 * 1024 * 1024


@dataclass
class Timing:
    """The result of one benchmark: median time and the rates that follow from the bytes and flops given.

    `compute` is the precision of `flops` (fp32, tf32, fp16, bf16, fp8, int8): without it a timing has no
    percentage of a FLOP ceiling (never a silent fp32). `traffic` says which bandwidth ceiling `bytes`
    is compared with: "copy" (1:1, the default), "read" (read-only), or (bytes read, bytes written).
    """

    name: str
    ms: float  # median over runs
    q1_ms: float
    q3_ms: float
    runs: int
    bytes: float | None = None
    flops: float | None = None
    compute: str | None = None
    times_ms: list[float] = field(default_factory=list, repr=False)
    traffic: str | tuple[float, float] | None = None

    @property
    def gbps(self) -> float | None:
        return self.bytes / self.ms / 1e6 if self.bytes else None

    @property
    def tflops(self) -> float | None:
        return self.flops / self.ms / 1e9 if self.flops else None

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3_ms - self.q1_ms) / self.ms if self.ms else 0.0

    def ceiling(self, compute: str | None = None) -> tuple[float, Ceiling] | None:
        """(percent, Ceiling) of the ceiling that bounds this timing, on a GPU; None without one.

        Bytes are compared with the bandwidth ceiling of their traffic, flops with the GEMM ceiling of
        their precision (`compute`, else the timing's own), and where both are known the larger
        percentage wins: that is the roofline (the kernel is bound by whichever it is closer to).
        """
        from .backend import on_gpu
        from .ceilings import compute_ceiling, memory_ceiling

        if not on_gpu():
            return None
        found = []
        if self.gbps is not None and (c := memory_ceiling(self.traffic or "copy")):
            found.append((100 * self.gbps / c.value, c))
        precision = compute or self.compute
        if self.tflops is not None and precision and (c := compute_ceiling(precision, self.tflops, self.name)):
            found.append((100 * self.tflops / c.value, c))
        return max(found, key=lambda f: f[0]) if found else None

    def pct_of_ceiling(self, compute: str | None = None) -> tuple[float, str] | None:
        """(percent, name of the ceiling): `ceiling()` in short."""
        found = self.ceiling(compute)
        return (found[0], found[1].name) if found else None

    def above_ceiling(self) -> str | None:
        """Why this timing passes 100% of its ceiling (a note for cudl.record and the page); None at or below 100%.

        Within the timing's own run-to-run spread (half its interquartile range) it is noise; beyond it, the
        measured ceiling is slower than this traffic can go on this GPU.
        """
        found = self.ceiling()
        if found is None or found[0] <= 100:
            return None
        pct, c = found
        name = {"copy": "the 1:1 copy", "read": "the read-only stream",
                "mix": "the ceiling of its read/write mix"}.get(c.key, c.name)
        half_iqr = 50 * self.spread
        if pct - 100 <= half_iqr:
            return f"{pct:.1f}% of {name}, within this timing's run-to-run spread (±{half_iqr:.1f}%)"
        return (f"{pct:.1f}% of {name}, above it by more than this timing's run-to-run spread "
                f"(±{half_iqr:.1f}%): that measured ceiling is not the fastest this traffic goes on this GPU")

    def speedup_over(self, other: Timing) -> float:
        """How many times faster this is than `other` (>1: faster)."""
        return other.ms / self.ms

    def __str__(self) -> str:
        s = f"{self.name}: {self.ms:.4g} ms (±{50 * self.spread:.1f}%, {self.runs} runs)"
        if self.gbps is not None:
            s += f", {self.gbps:,.0f} GB/s"
        if self.tflops is not None:
            s += f", {self.tflops:.2f} TFLOP/s" + (f" {self.compute}" if self.compute else "")
        pct = self.pct_of_ceiling()
        if pct:
            s += f" = {pct[0]:.0f}% of {pct[1]}"
        return s

    __repr__ = __str__


def traffic_of(bytes: float | tuple[float, float] | None,  # noqa: A002 (the keyword of cudl.bench)
               traffic: str | None = None) -> tuple[float | None, str | tuple[float, float] | None]:
    """(total bytes, traffic) from bench's `bytes` (a number or (read, written)) and `traffic` arguments."""
    if isinstance(bytes, (tuple, list)):
        if traffic is not None:
            raise ValueError("say the traffic once: bytes=(read, written) or traffic=, not both")
        read, written = (float(b) for b in bytes)
        if read < 0 or written < 0 or read + written <= 0:
            raise ValueError(f"bytes={bytes!r}: (bytes read, bytes written), not negative, not both zero")
        return read + written, "read" if written == 0 else "copy" if read == written else (read, written)
    if traffic is not None and traffic not in TRAFFIC:
        raise ValueError(f"traffic={traffic!r}: use one of {TRAFFIC}, or bytes=(read, written)")
    if bytes is None:
        if traffic is not None:
            raise ValueError("traffic= needs bytes=")
        return None, None
    return bytes, traffic or "copy"


def check_precision(compute: str | None) -> None:
    if compute is not None and compute not in PRECISIONS:
        raise ValueError(f"compute={compute!r}: use one of {', '.join(PRECISIONS)}")


_flush_buffer: Any = None
_read_flush: Any = None

# How flush_l2 evicts the inputs (environment variable CUDL_L2_FLUSH):
#   "read" (the default): read a 256 MB buffer (written once, when it is made). The reads evict the inputs
#     and leave L2 full of *clean* lines, which cost nothing to evict, so the timed run starts as it would
#     after any large read-only kernel.
#   "write": fill the buffer before each run, as the book did before 2026-11-25. L2 is then full of dirty
#     lines, and a short read-only kernel that evicts them pays for writing them back: up to L2's size of
#     extra DRAM traffic. tests/gpu/probe_l2_flush.py showed it on an H100 (its output is stored in
#     benchmarks/probe_l2_flush-H100.txt): GEMVs of tens of microseconds ran measurably slower after a
#     write flush than after a read flush, and the read flush agreed with cycling through fresh copies of
#     the inputs (no flush at all) wherever the inputs were larger than L2. Long kernels do not notice.
_READ_FLUSH_SRC = r"""
extern "C" __global__ void cudl_read_flush(const int4* __restrict__ p, long long n, int* sink) {
    int acc = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;  // the buffer is zero: never taken, but the loads must stay
}
"""


def flush_mode() -> str:
    """The flush mode, "write" or "read" (CUDL_L2_FLUSH): see the comment above."""
    import os

    mode = os.environ.get("CUDL_L2_FLUSH", "read")
    if mode not in ("write", "read"):
        raise ValueError(f"CUDL_L2_FLUSH={mode!r}: use 'read' (the default) or 'write'")
    return mode


def flush_l2() -> None:
    """Push L2's contents out with unrelated data, so the next run reads its inputs from device memory."""
    global _flush_buffer, _read_flush
    import cupy

    mode = flush_mode()
    if _flush_buffer is None:
        _flush_buffer = cupy.zeros(FLUSH_BYTES // 4, dtype=cupy.int32)
    if mode == "write":
        _flush_buffer.fill(0)
        return
    if _read_flush is None:
        _read_flush = (cupy.RawKernel(_READ_FLUSH_SRC, "cudl_read_flush"), cupy.zeros(1, dtype=cupy.int32))
    kernel, sink = _read_flush
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    kernel((4 * sms,), (512,), (_flush_buffer, cupy.int64(FLUSH_BYTES // 16), sink))


def bench(fn: Callable[[], Any], *, bytes: float | tuple[float, float] | None = None,  # noqa: A002
          flops: float | None = None, name: str = "", compute: str | None = None, traffic: str | None = None,
          warmup_ms: float = 25.0, rep_ms: float = 100.0, min_runs: int = 10, max_runs: int = 1000,
          flush: bool = True, setup: Callable[[], Any] | None = None) -> Timing:
    """Time `fn` (which launches GPU work) with CUDA events; report the median of many runs.

    `bytes`: the fewest bytes the work must move, for GB/s: a number (compared with a 1:1 copy, or with
    a read-only stream if `traffic="read"`) or (bytes read, bytes written). `flops` for TFLOP/s, and
    `compute` their precision (fp32, tf32, fp16, bf16, fp8, int8): without it the timing shows no
    percentage of a FLOP ceiling; cudl.record then takes the precision from its dtype.
    `setup`, if given, runs before every call of `fn`, untimed, and is waited for (it restores
    the state that `fn` changes, e.g. a KV cache that a decode loop fills).
    """
    check_precision(compute)
    total_bytes, traffic = traffic_of(bytes, traffic)
    require_gpu("cudl.bench")
    import cupy

    stream = cupy.cuda.get_current_stream()

    def prepare() -> None:
        if setup is not None:
            setup()
            stream.synchronize()

    prepare()
    fn()  # first call: compilation, allocation and module load stay out of the numbers
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    if setup is None:
        start.record()
        for _ in range(5):
            fn()
        end.record()
        end.synchronize()
        estimate = max(cupy.cuda.get_elapsed_time(start, end) / 5, 1e-3)
    else:  # each run after its own setup: time them one by one
        first = []
        for _ in range(2):
            prepare()
            start.record()
            fn()
            end.record()
            end.synchronize()
            first.append(cupy.cuda.get_elapsed_time(start, end))
        estimate = max(min(first), 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate))):
        prepare()
        fn()
    runs = max(min_runs, min(max_runs, int(rep_ms / estimate)))
    starts = [cupy.cuda.Event() for _ in range(runs)]
    ends = [cupy.cuda.Event() for _ in range(runs)]
    for s, e in zip(starts, ends):
        prepare()
        if flush:
            flush_l2()
        s.record()
        fn()
        e.record()
    ends[-1].synchronize()
    times = [cupy.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)]
    q = statistics.quantiles(times, n=4)
    return Timing(name or getattr(fn, "__name__", "kernel"), statistics.median(times), q[0], q[2], runs,
                  total_bytes, flops, compute, times, traffic)


@dataclass
class Pair:
    """`bench_pair`'s result: `fn` and its baseline, timed in turn over several rounds."""

    timing: Timing  # fn: ms is the median of its rounds' medians; the quartiles and times pool all runs
    baseline: Timing  # the same for the baseline
    rounds_ms: list[float]  # fn's median in each round, in order
    baseline_rounds_ms: list[float]

    @property
    def ratio(self) -> float:
        """The baseline's time over fn's: >1 when fn is faster; 100 * ratio is fn's % of the baseline."""
        return self.baseline.ms / self.timing.ms

    @property
    def round_ratios(self) -> list[float]:
        """The ratio (baseline time / fn time) of each round."""
        return [b / m for b, m in zip(self.baseline_rounds_ms, self.rounds_ms)]

    def sign(self, at: float = 1.0) -> int:
        """+1 if fn is measurably faster than the baseline (its ratio measurably above `at`, e.g. a target
        of 0.9x), -1 if measurably slower, 0 for no measurable difference: see `measurable`."""
        return measurable(self.timing, self.baseline, self.round_ratios, at)

    def __str__(self) -> str:
        return (f"{self.timing.name}: {self.timing.ms:.4g} ms, {self.baseline.name}: {self.baseline.ms:.4g} ms "
                f"({100 * self.ratio:.1f}% of {self.baseline.name}, medians of {len(self.rounds_ms)} rounds)")

    __repr__ = __str__


def measurable(t: Timing, baseline: Timing, round_ratios: Sequence[float] = (), at: float = 1.0) -> int:
    """+1 if `t` is measurably faster than `baseline`, -1 if measurably slower, 0 if not measurably different;
    with `at`, whether the speed ratio (baseline time / t's time) is measurably above or below `at` (a target
    such as 0.9x a library) instead of 1.

    A difference counts when the ratio of the medians lies outside the run's own noise, taken as the larger
    half interquartile range of the two timings' runs (relative to the median), and, for bench_pair's
    alternating rounds, when every round's ratio lies on the same side of `at`. A verdict sentence ("faster",
    "pays", "meets") is then computed from this sign, never written for one outcome.
    """
    ratio = baseline.ms / t.ms
    noise = max(t.spread, baseline.spread) / 2
    if round_ratios and not (all(r > at for r in round_ratios) or all(r < at for r in round_ratios)):
        return 0
    if ratio > at * (1 + noise):
        return 1
    if ratio < at / (1 + noise):
        return -1
    return 0


def _pooled(name: str, round_ms: list[float], rounds: list[Timing]) -> Timing:
    times = [x for t in rounds for x in t.times_ms]
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [round_ms[0]] * 3
    first = rounds[0]
    return Timing(name, statistics.median(round_ms), q[0], q[2], sum(t.runs for t in rounds), first.bytes,
                  first.flops, first.compute, times, first.traffic)


def bench_pair(fn: Callable[[], Any], baseline: Callable[[], Any], *, rounds: int = 3, name: str = "",
               baseline_name: str = "", **bench_kwargs: Any) -> Pair:
    """Time `fn` and `baseline` in turn, `rounds` times each (baseline first), with `bench(**bench_kwargs)`.

    Under sustained load a GPU lowers its clocks, so a baseline timed once at the start of a run can
    be faster than the same call timed minutes later; alternating the two and taking the medians of the
    rounds compares them under the same clocks. `ratio` = baseline time / fn time.
    """
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: need at least one round")
    name = name or getattr(fn, "__name__", "kernel")
    baseline_name = baseline_name or getattr(baseline, "__name__", "baseline")
    mine: list[Timing] = []
    theirs: list[Timing] = []
    for _ in range(rounds):
        theirs.append(bench(baseline, name=baseline_name, **bench_kwargs))
        mine.append(bench(fn, name=name, **bench_kwargs))
    rounds_ms, baseline_rounds_ms = [t.ms for t in mine], [t.ms for t in theirs]
    return Pair(_pooled(name, rounds_ms, mine), _pooled(baseline_name, baseline_rounds_ms, theirs),
                rounds_ms, baseline_rounds_ms)


def sweep(run: Callable[[Any], Timing], values: Sequence[Any] | Iterable[Any], desc: str = "sweep") -> list[Timing]:
    """Benchmark `run(v)` for each value, with a progress bar."""
    from tqdm import tqdm  # text bar: no ipywidgets needed; the website drops stderr

    return [run(v) for v in tqdm(list(values), desc=desc, leave=False)]
