"""Exercise graders: run a student's kernel on fresh random cases in a child process with a time limit.

Each grader prints exactly one verdict line, which nbval compares with the stored one:
    PASS saxpy: 6/6 cases
    FAIL saxpy: case 3/6 (n=1000): 12 of 1000 elements wrong; worst at [17]: got 3.0, expected 2.5. Hint: ...
    TIMEOUT saxpy: case 2/6 (n=31): saxpy still running after 10 s. Hint: ...
    CRASH saxpy: case 2/6 (n=31): out-of-bounds write to y[31] by thread (31,0,0) of block (0,0,0)
    SLOW saxpy: 1.2 ms, solution 0.31 ms (target <= 2x) on case (n=16777217).   (speed-graded, GPU only)
On a GPU, the kernel also runs on the CPU emulator's cases, whose checks (bounds, divergent barriers and
shuffles, races) catch undefined behaviour a GPU tolerates; PASS needs both. Graders live in
`cudl/grade/chNN.py`, one module per chapter, and register themselves with `@grader`. Call one as
`cudl.grade.saxpy(source)` or `cudl.grade.run("saxpy", source)`; `python -m cudl.grade` grades notebooks.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import pkgutil
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What a case returns: (output, reference) pairs, or (output, reference, scale) or (output, reference, scale,
# rtol); each is compared with cudl.check.compare: |out - ref| <= rtol (|ref| + scale) elementwise. scale is
# the size of the terms a result is a small difference or sum of (sum |terms|, per element or per row), rtol
# the rounding error that computation allows relative to them (cudl.grade.checks); without them the grader's
# rtol and rms(ref).
Pairs = Sequence[tuple[Any, ...]]


def check_pair(pair: tuple[Any, ...], rtol: float | None = None) -> Any:
    """cudl.check.compare of one (out, ref[, scale[, rtol]]) pair; the pair's rtol wins over the grader's."""
    from ..check import compare

    out, ref, *rest = pair
    scale = rest[0] if rest else None
    return compare(out, ref, rtol=rest[1] if len(rest) > 1 else rtol, scale=scale)


class Refuse(Exception):
    """Raised by a grader's `run` for a kernel that computes the right numbers the wrong way (uncoalesced,
    bank-conflicted, one thread doing all the work): the message becomes the FAIL line's reason."""


@dataclass
class Grader:
    name: str
    kernels: tuple[str, ...]  # kernel names the student's source must define (compiled before timing starts)
    cases: list[dict[str, Any]]  # GPU cases; the first ones are the edge cases
    emulator_cases: list[dict[str, Any]]
    run: Callable[[Callable[[str], Any], dict[str, Any]], Pairs]
    hints: tuple[str, ...]  # tiers: the FAIL line gives the first, cudl.grade.hint(name, k) the k-th
    rtol: float | None = None
    time_limit: float | None = None  # seconds one launch may run (default LAUNCH_S)
    options: tuple[str, ...] = field(default_factory=tuple)
    # Speed-graded exercises: dict(case={...}, factor=F, bytes=B, flops=N, compute="fp32"): on a GPU, a correct
    # kernel slower than F times the solution's time on that case gets SLOW instead of PASS, and one faster than
    # the fewest bytes and FLOPs of the case allow (B over the measured copy bandwidth, N over the measured peak
    # of `compute`) FAIL: it cannot have done the work (cudl/grade/speed.py).
    speed: dict[str, Any] | None = None
    solution: str | None = None  # the reference kernel source for speed; default: the one in solutions/

    @property
    def hint(self) -> str:
        return self.hints[0] if self.hints else ""


REGISTRY: dict[str, Grader] = {}


def grader(name: str, *, kernels: Sequence[str], cases: list[dict[str, Any]],
           emulator_cases: list[dict[str, Any]] | None = None, hint: str | Sequence[str] = "",
           rtol: float | None = None, time_limit: float | None = None,
           speed: dict[str, Any] | None = None, solution: str | None = None) -> Callable:
    """Register `run(load, case) -> [(out, ref), ...]` as the grader `name`.

    `hint` is one string or a list of tiers, from a pointer to nearly the answer (the solution is the last step).
    """
    if emulator_cases is not None and len(emulator_cases) != len(cases):
        raise ValueError(f"grader {name}: the stored PASS line counts cases, so both backends need as many")
    if speed is not None and not ({"case", "factor"} <= set(speed) <= {"case", "factor", "bytes", "flops", "compute"}
                                  and speed["factor"] >= 1.5):
        raise ValueError(f"grader {name}: speed=dict(case={{...}}, factor=F, bytes=B, flops=N, compute=...) with "
                         "F >= 1.5 (noise must not make the solution SLOW)")
    hints = (hint,) if isinstance(hint, str) else tuple(hint)

    def wrap(fn: Callable) -> Callable:
        REGISTRY[name] = Grader(name, tuple(kernels), cases, emulator_cases or cases, fn, hints, rtol, time_limit,
                                speed=speed, solution=solution)
        return fn
    return wrap


def hint(name: str, level: int = 2) -> None:
    """Print hint tier `level` (1 = the pointer in the FAIL line) of grader `name`."""
    _load_all()
    if name not in REGISTRY:
        raise KeyError(f"no grader {name!r}; known: {', '.join(sorted(REGISTRY))}")
    hints = REGISTRY[name].hints
    if not hints:
        print(f"{name}: no hints")
        return
    k = max(1, min(level, len(hints)))
    more = (f" (cudl.grade.hint({name!r}, {k + 1}) gives more)" if k < len(hints)
            else " (that is the last hint: next is the solution notebook)")
    print(f"Hint {k}/{len(hints)} for {name}: {hints[k - 1]}{more}")


def _describe(case: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in case.items() if not k.startswith("_"))


# ------------------------------------------------------------------------------ limits

COMPILE_S = 300.0  # NVRTC on a GPU, g++ on the emulator (first use builds the emulator's runtime too)
# One launch (kernel + sync). The slowest launch of any published solution takes well under a second on the
# emulator and milliseconds on a GPU (tests/test_graders.py checks the margin), so a hang is reported in ~10 s.
LAUNCH_S = 10.0
# On the emulator a launch that makes no progress is stopped by its own watchdog (CUDL_EMULATOR_WATCHDOG, 10 s)
# and reported as TIMEOUT; this outer limit only bounds a kernel that progresses, slowly, under the race check.
EMULATOR_LAUNCH_S = 60.0
CASES_S = 300.0  # all cases together, references included: only against something pathological
# After the cases passed: the speed case run 3 times more for each kernel on fresh inputs (references included),
# then the timing loops, each run restored and checked (cudl/grade/speed.py).
SPEED_S = 300.0


def _cross_check_wanted() -> bool:
    return os.environ.get("CUDL_GRADE_CROSSCHECK", "1") != "0"


def _compiler() -> str | None:
    """The C++ compiler the emulator would use, or None."""
    return shutil.which(os.environ.get("CXX", "g++"))


# ------------------------------------------------------------------------------ parent

@dataclass
class Verdict:
    """One grading result: the status, the line printed (nbval compares it), details such as a compile log."""

    status: str  # PASS FAIL TIMEOUT CRASH SLOW
    line: str
    detail: str = ""
    slowest_launch_s: float = 0.0  # the longest kernel launch seen (calibration of LAUNCH_S)
    timing: dict[str, list[float]] | None = None  # speed-graded: medians in ms of student and solution

    def __bool__(self) -> bool:
        return self.status == "PASS"

    def __repr__(self) -> str:
        return self.line


class _Job:
    """One grading process (`python -m cudl.grade._child`) and what its messages have said so far."""

    def __init__(self, g: Grader, source: str, backend: str, launch_s: float, speed: bool):
        self.g, self.backend, self.launch_s = g, backend, launch_s
        self.cases = g.cases if backend == "gpu" else g.emulator_cases
        read, write = os.pipe()
        env = dict(os.environ, CUDL_BACKEND=backend)
        if backend != "gpu":  # graders' small cases also run the emulator's race check (cudl/emulator/README.md)
            env["CUDL_EMULATOR_RACECHECK"] = "1"
        root = str(Path(__file__).resolve().parents[2])  # cudl importable even when not installed
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "cudl.grade._child"], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=self.stderr, env=env, pass_fds=(write,))
        os.close(write)
        self.fd, self.buf, self.eof = read, b"", False
        self.messages: list[list[Any]] = []
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(dict(name=g.name, source=source, fd=write, speed=speed)).encode())
            self.proc.stdin.close()
        except BrokenPipeError:  # the process died at start: step() reports it
            pass
        now = time.monotonic()
        self.deadline, self.launch_deadline, self.launch_start = now + COMPILE_S, None, 0.0
        self.current, self.kernel, self.slowest = -1, "", 0.0
        self.verdict: Verdict | None = None
        self.passed = ""
        self.timing: dict[str, list[float]] | None = None

    def read(self) -> None:
        """Take what the pipe holds (call when select says it is readable)."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.eof = True
        *lines, self.buf = (self.buf + chunk).split(b"\n")
        for ln in lines:
            try:
                msg = json.loads(ln)
            except ValueError:
                continue
            if isinstance(msg, list) and len(msg) == 2:  # else not ours: an emulated kernel is native code
                self.messages.append(msg)

    def where(self, i: int) -> str:
        n = len(self.cases)
        return f"case {i + 1}/{n} ({_describe(self.cases[i])})" if 0 <= i < n else "before the first case"

    def step(self) -> None:
        """Apply the messages received so far; decide on a deadline or the process's death."""
        g, hint = self.g, f" Hint: {self.g.hint}" if self.g.hint else ""
        while self.messages and self.verdict is None:
            kind, payload = self.messages.pop(0)
            now = time.monotonic()
            if kind == "compile":
                first = next((ln for ln in payload.splitlines()[1:] if "error" in ln), payload.splitlines()[0])
                self.verdict = Verdict("FAIL", f"FAIL {g.name}: does not compile: {first.strip()}", payload)
            elif kind == "unsupported":
                self.verdict = Verdict("UNSUPPORTED", f"FAIL {g.name}: cannot be graded on the CPU emulator: "
                                       f"{payload.splitlines()[0]}")
            elif kind == "compiled":
                self.deadline = now + CASES_S
            elif kind == "start":
                self.current = payload
            elif kind == "launch":
                self.kernel, self.launch_start, self.launch_deadline = payload, now, now + self.launch_s
            elif kind == "launched":
                self.slowest = max(self.slowest, now - self.launch_start)
                self.launch_deadline = None
            elif kind in ("fail", "crash", "error", "timeout"):
                i, msg = payload
                if kind == "timeout":  # the emulator's watchdog saw no progress
                    self.verdict = Verdict("TIMEOUT", f"TIMEOUT {g.name}: {self.where(i)}: "
                                           f"{msg.strip().splitlines()[0]}")
                elif kind == "fail":
                    self.verdict = Verdict("FAIL", f"FAIL {g.name}: {self.where(i)}: {msg}.{hint}")
                elif kind == "crash":
                    self.verdict = Verdict("CRASH", f"CRASH {g.name}: {self.where(i)}: "
                                           f"{msg.strip().splitlines()[-1]}")
                else:
                    self.verdict = Verdict("FAIL", f"FAIL {g.name}: {self.where(i)}: "
                                           f"{msg.strip().splitlines()[-1]}", msg)
            elif kind == "done":
                self.deadline = now + SPEED_S
                self.passed = f"PASS {g.name}: {payload}/{payload} cases"
            elif kind == "timing":
                self.timing = payload
            elif kind == "end":
                self.verdict = Verdict("PASS", self.passed, timing=self.timing)
        if self.verdict is not None:
            self.verdict.slowest_launch_s = self.slowest
            return
        now = time.monotonic()
        if self.launch_deadline is not None and now > self.launch_deadline:
            self.verdict = Verdict("TIMEOUT", f"TIMEOUT {g.name}: {self.where(self.current)}: {self.kernel} still "
                                   f"running after {self.launch_s:.0f} s. Hint: does every thread leave its loops, "
                                   f"and does every thread reach each __syncthreads()?")
        elif now > self.deadline:
            self.verdict = Verdict("TIMEOUT", f"TIMEOUT {g.name}: {self.where(self.current)}: grading took too long")
        elif self.eof and self.proc.poll() is not None:
            self.stderr.seek(0)
            tail = self.stderr.read().decode(errors="replace").strip()
            self.verdict = Verdict("CRASH", f"CRASH {g.name}: {self.where(self.current)}: the grading process died "
                                   f"(exit code {self.proc.returncode}); the kernel probably accessed memory it does "
                                   f"not own.{hint}", tail[-2000:])

    def close(self) -> None:
        """Kill the process if it still runs and release the pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        os.close(self.fd)
        self.stderr.close()


def _wait(jobs: list[_Job], until: Callable[[], bool]) -> None:
    """Feed every job its messages until `until()` holds."""
    while not until():
        live = [j for j in jobs if j.verdict is None and not j.eof]
        ready = select.select([j.fd for j in live], [], [], 0.2)[0] if live else []
        if not live:
            time.sleep(0.05)
        for j in jobs:
            if j.fd in ready:
                j.read()
            if j.verdict is None:
                j.step()


def run(name: str, source: str, *, time_limit: float | None = None, quiet: bool = False,
        cross_check: bool | None = None) -> Verdict | None:
    """Grade `source` with grader `name` and print the verdict line (return it instead when `quiet`).

    On a GPU the kernel also runs on the CPU emulator's cases with its checks (when g++ is there), and
    PASS needs both; `cross_check=False` (or CUDL_GRADE_CROSSCHECK=0) turns that off.
    """
    from ..backend import backend, on_gpu

    _load_all()
    if name not in REGISTRY:
        raise KeyError(f"no grader {name!r}; known: {', '.join(sorted(REGISTRY))}")
    g = REGISTRY[name]
    gpu = on_gpu()
    launch_s = time_limit or g.time_limit or (LAUNCH_S if gpu else EMULATOR_LAUNCH_S)
    jobs = [_Job(g, source, backend(), launch_s, speed=gpu and g.speed is not None)]
    skipped = ""
    if gpu and (_cross_check_wanted() if cross_check is None else cross_check):
        if _compiler():
            jobs.append(_Job(g, source, "emulator", time_limit or g.time_limit or EMULATOR_LAUNCH_S,
                             speed=False))
        else:
            skipped = " (the CPU emulator's check was skipped: no C++ compiler, e.g. apt install g++)"
    try:
        _wait(jobs, lambda: jobs[0].verdict is not None and (jobs[0].verdict.status != "PASS"
                                                           or all(j.verdict is not None for j in jobs)))
    finally:
        for j in jobs:
            j.close()
    verdict = _combine(g, [j.verdict for j in jobs], skipped)  # type: ignore[misc]
    if quiet:
        return verdict
    print(verdict.line)
    if verdict.detail:
        print(verdict.detail)
    if not verdict:
        raise NotPassed(f"{name}: {verdict.status} (see the line above)")
    return None


class NotPassed(Exception):
    """Raised by a graded cell whose kernel did not pass, so that nbval, Run All and `nbconvert --execute`
    fail whatever output the notebook stored; IPython shows this one line, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mNotPassed: {self}\x1b[0m"]


def _combine(g: Grader, verdicts: list[Verdict], skipped: str) -> Verdict:
    """The GPU's verdict, unless the emulator's checks found what the GPU tolerated; then SLOW if slow."""
    v = verdicts[0]
    if v.status == "UNSUPPORTED":
        v.status = "FAIL"
    if v.status != "PASS":
        return v
    if len(verdicts) > 1:
        emu = verdicts[1]
        if emu.status == "UNSUPPORTED" or emu.line.startswith(f"FAIL {g.name}: does not compile"):
            skipped = f" (the CPU emulator's check was skipped: {emu.line.split(': ', 1)[-1]})"
        elif emu.status != "PASS":
            emu.line += " [found by the CPU emulator's checks; the GPU gave the right numbers this time]"
            emu.slowest_launch_s = max(emu.slowest_launch_s, v.slowest_launch_s)
            return emu
    v.line += skipped
    if v.timing and g.speed:
        from .speed import IMPOSSIBLE, impossible, is_slow

        stu, sol, bound = v.timing["student"], v.timing["solution"], v.timing.get("bound_ms")
        if impossible(stu, bound):
            v.status = "FAIL"
            v.line = (f"FAIL {g.name}: {min(stu):.3g} ms on case ({_describe(g.speed['case'])}) is faster than this "
                      f"GPU can move its bytes or do its FLOPs ({bound:.3g} ms at the measured ceilings; below "
                      f"{IMPOSSIBLE:g}x of that is impossible): the timed runs did not do the work (a result "
                      "kept from an earlier call, or work skipped?)")
        elif is_slow(stu, sol, g.speed["factor"]):
            v.status = "SLOW"
            v.line = (f"SLOW {g.name}: {min(stu):.3g} ms, solution {max(sol):.3g} ms (target <= "
                      f"{g.speed['factor']:g}x) on case ({_describe(g.speed['case'])}).")
            if g.hint:
                v.line += f" Hint: {g.hint}"
    return v


@functools.lru_cache(maxsize=1)
def _load_all() -> None:
    """Import every chapter's graders, and the modules named in CUDL_GRADE_MODULES (an instructor's own)."""
    for mod in pkgutil.iter_modules(__path__):
        if mod.name.startswith("ch"):
            importlib.import_module(f"{__name__}.{mod.name}")
    for extra in filter(None, os.environ.get("CUDL_GRADE_MODULES", "").split(",")):
        importlib.import_module(extra.strip())


def __getattr__(name: str) -> Callable[..., Verdict | None]:
    if name.startswith("__"):
        raise AttributeError(name)
    _load_all()
    if name in REGISTRY:
        return functools.partial(run, name)
    raise AttributeError(f"cudl.grade has no grader {name!r}")
