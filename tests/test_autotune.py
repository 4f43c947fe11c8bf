"""cudl.autotune without a GPU.

* The emulator path: a real kernel's default build is launched and checked, nothing is timed or cached.
* The GPU path's choices, on the CPU: `on_gpu` and `device_info` are faked, and so is `cudl.bench.bench`, whose
  "timed" function returns its own time (the fake launch returns the candidate's time), so that the real
  `bench_pair` and `Pair.sign()` decide: a measurably faster candidate is chosen, one within the noise is not.
* Candidates that fail to build, to launch or their check are reported and never timed or chosen.
* The cache: written once, reused without timing (but built and checked), tuned again when the shape, the
  source, the GPU or its compute capability change, or with force=True.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

import cudl
from cudl.bench import Timing
from cudl.errors import CompileError, CudlError, KernelFault

AUTOTUNE = importlib.import_module("cudl.autotune")  # the module: `cudl.autotune` is the function
BENCH = importlib.import_module("cudl.bench")

# y = a * x with EPT elements per thread: the candidates differ in a -D define, as a chapter's tiles do.
SCALE_SRC = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    const int base = (blockIdx.x * blockDim.x + threadIdx.x) * EPT;
    for (int j = 0; j < EPT; j++)
        if (base + j < n) y[base + j] = a * x[base + j];
}
"""
SPACE = [dict(EPT=1), dict(EPT=2), dict(EPT=4)]


def test_emulator_builds_and_checks_the_default_and_times_nothing(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("timed or cached on the emulator")

    monkeypatch.setattr(BENCH, "bench", never)
    monkeypatch.setattr(BENCH, "bench_pair", never)
    monkeypatch.setattr(AUTOTUNE, "cache_path", never)  # nothing measured, so nothing to cache
    n = 1000
    x, y = cudl.randn(n), cudl.poisoned(n)
    built, checked = [], []

    def build(c):
        built.append(c)
        return c, cudl.load(SCALE_SRC, "scale", options=[f"-DEPT={c['EPT']}"])

    def run(k):
        c, kern = k
        kern((-(-n // (128 * c["EPT"])),), (128,), (x, y, np.float32(3.0), n))

    def check(k):
        checked.append(k[0])
        cudl.check(y, 3.0 * x.astype(np.float64))

    tuned = cudl.autotune("scale", SPACE, build, run, check=check, default=SPACE[1], shape=n, source=SCALE_SRC)
    assert tuned.config == SPACE[1] and tuned.default == SPACE[1] and tuned.gain is None
    assert built == [SPACE[1]] and checked == [SPACE[1]]  # the default only, built and checked once
    assert tuned.kernel[0] == SPACE[1]
    assert [r["ms"] for r in tuned.table] == [None] * 3
    assert all(AUTOTUNE.NOT_TIMED in r["note"] for r in tuned.table) and "default" in tuned.table[1]["note"]
    assert "not timed on the emulator" in str(tuned) and "EPT=2" in str(tuned)

    # the emulator still catches a wrong default: its check's error reaches the caller
    def wrong(k):
        raise AssertionError("y does not match the reference")

    with pytest.raises(AssertionError, match="does not match"):
        cudl.autotune("scale", SPACE, build, run, check=wrong, shape=n, source=SCALE_SRC)


# ---------------------------------------------------------------------------------------- the GPU path, faked

class FakeBuild:
    """A 'compiled' candidate: each launch returns the candidate's time (ms), which the fake bench reports."""

    def __init__(self, config, ms):
        self.config, self.ms = config, ms

    def __repr__(self):
        return f"FakeBuild({self.config})"


class Timed(list):
    """The names of the timed calls, in order, and the fake GPU's facts (a test may change them)."""

    info: dict
    kwargs: list  # the keywords of each timed call


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """A fake GPU: on_gpu, device_info and cudl.bench.bench replaced; returns the names of the timed calls."""
    monkeypatch.setenv("CUDL_CACHE", str(tmp_path))
    monkeypatch.setattr(AUTOTUNE, "on_gpu", lambda: True)
    timed = Timed()
    timed.kwargs = []
    timed.info = dict(gpu="Test GPU", cc="9.0", nvrtc="12.8")
    monkeypatch.setattr(AUTOTUNE, "device_info", lambda: timed.info)

    def bench(fn, *, name="", **kwargs):
        ms = fn()
        timed.append(name)
        timed.kwargs.append(kwargs)
        # runs spread by +-2% around the median: bench_pair's noise threshold is then 2%
        return Timing(name, ms, 0.98 * ms, 1.02 * ms, 4, kwargs.get("bytes"), None, None,
                      [0.98 * ms, ms, ms, 1.02 * ms])

    monkeypatch.setattr(BENCH, "bench", bench)
    return timed


def tune(times, *, check=None, fail_build=(), fail_launch=(), built=None, fault_late=(), pending=None, **kwargs):
    """autotune over SPACE (default EPT=1) where EPT=e takes times[e] ms."""
    def build(c):
        if built is not None:
            built.append(c["EPT"])
        if c["EPT"] in fail_build:
            raise CompileError("<kernel source> does not compile:\n<kernel source>:5: error: identifier \"EPT\" "
                               "is undefined\n    for (int j...")
        return FakeBuild(c, times[c["EPT"]])

    def run(k):
        if k.config["EPT"] in fail_launch:
            raise ValueError("scale asks for 300000 bytes of shared memory per block")
        if k.config["EPT"] in fault_late:  # reported at the next wait for the GPU
            pending.append("an illegal memory access was encountered")
        return k.ms

    kwargs = dict(shape=(1000,), source=SCALE_SRC, default=SPACE[0]) | kwargs
    return cudl.autotune("scale", kwargs.pop("space", SPACE), build, run, check=check, **kwargs)


def test_a_measurably_faster_candidate_is_chosen(gpu):
    tuned = tune({1: 1.0, 2: 0.8, 4: 0.9}, bytes=8000)
    assert tuned.config == dict(EPT=2) and isinstance(tuned.kernel, FakeBuild) and tuned.kernel.config == tuned.config
    assert tuned.gain == pytest.approx(1.25)  # bench_pair's medians: 1.0 / 0.8
    # one timing per candidate, then the fastest in turn with the default, baseline first, 3 rounds
    assert gpu[:3] == ["EPT=1", "EPT=2", "EPT=4"]
    assert gpu[3:] == ["default (EPT=1)", "EPT=2"] * 3
    assert gpu.kwargs == [dict(bytes=8000)] * 9  # bench's keywords reach every timing
    assert [r["ms"] for r in tuned.table] == [1.0, 0.8, 0.9]
    assert [r["ratio"] for r in tuned.table] == pytest.approx([1.0, 1.25, 1.0 / 0.9])
    assert tuned.table[0]["note"] == "default" and tuned.table[1]["note"] == "chosen"
    assert "EPT=2 chosen: measurably faster than the default (EPT=1), 1.25x; 1.25-1.25x in 3 rounds" in str(tuned)
    assert "Test GPU" in str(tuned)
    md = tuned._repr_markdown_()
    assert "| EPT=2 | 0.8 | 1.250 | chosen |" in md and md.count("\n| EPT=") == 3


def test_within_the_noise_the_default_is_kept(gpu):
    # 1% faster, with runs spread by +-2%: no measurable difference, so the default stays
    tuned = tune({1: 1.0, 2: 0.99, 4: 1.2})
    assert tuned.config == dict(EPT=1) and tuned.kernel.config == dict(EPT=1) and tuned.gain == 1.0
    assert gpu[3:] == ["default (EPT=1)", "EPT=2"] * 3  # it was confirmed, not assumed
    assert "default (EPT=1) kept" in str(tuned) and "EPT=2, is not measurably faster (1.01x" in str(tuned)
    assert tuned.table[0]["note"] == "default, chosen" and tuned.table[1]["note"] == ""


def test_a_default_that_is_fastest_needs_no_pair(gpu):
    tuned = tune({1: 0.5, 2: 0.8, 4: 0.9})
    assert tuned.config == dict(EPT=1) and tuned.gain == 1.0 and len(gpu) == 3
    assert "fastest of the 3 candidates" in str(tuned)


def test_failing_candidates_are_reported_never_timed_or_chosen(gpu, capsys):
    space = [*SPACE, dict(EPT=8)]
    checked = []

    def check(k):  # EPT=2 is the fastest but wrong
        checked.append(k.config["EPT"])
        print("✓ output matches the reference")  # as cudl.check does: not once per candidate on the page
        if k.config["EPT"] == 2:
            raise AssertionError("output does not match the reference: 17 of 1000 elements")

    tuned = tune({1: 1.0, 2: 0.1, 4: 0.5, 8: 0.2}, space=space, check=check, fail_build={4}, fail_launch={8})
    assert tuned.config == dict(EPT=1)  # the only one left
    assert checked == [1, 2]  # a build that fails to compile or to launch is not checked
    assert gpu == ["EPT=1"]  # only what passed is timed
    notes = {r["config"]["EPT"]: r["note"] for r in tuned.table}
    assert notes[2] == "failed: check: AssertionError: output does not match the reference: 17 of 1000 elements"
    assert notes[4] == 'failed: build: CompileError: <kernel source>:5: error: identifier "EPT" is undefined'
    assert notes[8].startswith("failed: launch: ValueError: scale asks for 300000 bytes")
    assert all(tuned.table[i]["ms"] is None for i in (1, 2, 3))
    assert capsys.readouterr().out == ""


def test_a_fault_reported_at_the_next_sync_rules_out_its_own_candidate(gpu, monkeypatch):
    # a GPU reports a fault (an illegal address) when the queued launch is waited for, not when it is made:
    # the wait belongs to the candidate's own trial, or the fault would be blamed on the next candidate
    pending: list[str] = []

    def sync():
        if pending:
            raise KernelFault(pending.pop())

    monkeypatch.setattr(AUTOTUNE, "sync", sync)
    tuned = tune({1: 1.0, 2: 0.5, 4: 0.9}, fault_late={2}, pending=pending)
    assert tuned.table[1]["note"] == "failed: launch: KernelFault: an illegal memory access was encountered"
    assert tuned.table[2]["note"] == "chosen" and tuned.config == dict(EPT=4) and "EPT=2" not in gpu


def test_a_failing_default_leaves_the_fastest_that_passed(gpu):
    tuned = tune({1: 1.0, 2: 0.9, 4: 0.7}, fail_launch={1})
    assert tuned.config == dict(EPT=4) and tuned.gain is None and len(gpu) == 2
    assert "the default (EPT=1) failed: launch" in str(tuned)
    assert tuned.table[2]["ratio"] is None  # no default time to compare with


def test_clear_errors(gpu):
    with pytest.raises(CudlError, match="every candidate failed") as err:
        tune({1: 1.0, 2: 1.0, 4: 1.0}, fail_build={1, 4}, fail_launch={2})
    assert "EPT=1: failed: build" in str(err.value) and "EPT=2: failed: launch" in str(err.value)
    assert "EPT=4: failed: build" in str(err.value)
    with pytest.raises(ValueError, match="the space is empty"):
        tune({}, space=[])
    with pytest.raises(ValueError, match="not in the space"):
        tune({1: 1.0}, default=dict(EPT=3))
    with pytest.raises(ValueError, match="twice"):
        tune({1: 1.0}, space=[dict(EPT=1), dict(EPT=1)])
    with pytest.raises(FileNotFoundError):  # a misspelled source file is not hashed as if it were text
        tune({1: 1.0}, source="07-fusion/no_such_file.cu")
    assert gpu == []


# ---------------------------------------------------------------------------------------------------- the cache

def test_the_choice_is_cached_and_reused_without_timing(gpu, tmp_path):
    tuned = tune({1: 1.0, 2: 0.8, 4: 0.9})
    files = list((tmp_path / "autotune").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["config"] == dict(EPT=2)
    del gpu[:]
    built, checked = [], []
    again = tune({1: 1.0, 2: 0.8, 4: 0.9}, built=built, check=lambda k: checked.append(k.config["EPT"]))
    assert gpu == [] and again.cached and "(cached" in str(again)  # nothing timed
    assert built == [2] and checked == [2]  # but the chosen build is built and checked
    assert again.config == tuned.config and again.gain == tuned.gain and again.table == tuned.table
    # force=True tunes again (and the new times make another choice)
    forced = tune({1: 1.0, 2: 0.9, 4: 0.5}, force=True)
    assert forced.config == dict(EPT=4) and not forced.cached and gpu[:3] == ["EPT=1", "EPT=2", "EPT=4"]
    assert tune({1: 1.0, 2: 0.9, 4: 0.5}).config == dict(EPT=4)  # the forced choice replaced the old one


def test_a_numpy_shape_is_the_same_key_as_its_python_value(gpu):
    tune({1: 1.0, 2: 0.8, 4: 0.9}, shape=(1000,))
    assert tune({1: 1.0, 2: 0.8, 4: 0.9}, shape=(np.int64(1000),)).cached and len(gpu) == 9


@pytest.mark.parametrize("change", ["shape", "source", "gpu", "cc", "space", "nvrtc"])
def test_the_cache_key_holds_what_the_choice_depends_on(gpu, change):
    tune({1: 1.0, 2: 0.8, 4: 0.9})
    del gpu[:]
    kwargs: dict = {}
    if change == "shape":
        kwargs["shape"] = (2000,)
    elif change == "source":
        kwargs["source"] = SCALE_SRC + "// edited\n"
    elif change == "space":
        kwargs["space"] = [*SPACE, dict(EPT=8)]
    else:
        gpu.info[change] = {"gpu": "Other GPU", "cc": "8.0", "nvrtc": "13.0"}[change]
    tune({1: 1.0, 2: 0.8, 4: 0.9, 8: 2.0}, **kwargs)
    assert gpu[:3] == ["EPT=1", "EPT=2", "EPT=4"]  # tuned again, not read back


def test_a_cached_choice_that_now_fails_is_tuned_again(gpu, capsys):
    tune({1: 1.0, 2: 0.8, 4: 0.9})
    del gpu[:]

    def check(k):
        if k.config["EPT"] == 2:
            raise AssertionError("wrong")

    tuned = tune({1: 1.0, 2: 0.8, 4: 0.9}, check=check)
    assert tuned.config == dict(EPT=4) and not tuned.cached and "EPT=1" in gpu
    assert "cached choice (EPT=2) failed: check" in capsys.readouterr().out
