"""Speed-graded exercises: the student's kernel against the solution's, timed in the same process on the same GPU.

A grader declares `speed=dict(case={...}, factor=F, bytes=B, flops=N, compute="fp16")` (bytes and flops: the
fewest the speed case must move and do; compute: the precision whose measured peak bounds its FLOPs). After
every case passed, the grading process runs that case SETS times with the student's kernels and SETS times
with the solution's, each time on fresh random inputs, recording every launch, a copy of every array it is
given (taken before the first launch that uses it), the variables of its kernels' modules (taken right
after loading) and the references of the case's outputs. Then
`cudl.bench` (warm-up, L2 flush, median) times the replays of these launch sequences, alternating student and
solution for ROUNDS rounds. A leaderboard is gamed by kernels that notice the timing loop; so here

* every timed run is of another input set than the run before (rotated buffers), after the arrays of that
  set were restored untimed to what they held before its first launch (inputs as drawn, outputs poisoned):
  a kernel that skips work for pointers it has seen, or leaves part of it for the next launch, leaves
  poison;
* before every run, timed or not, each variable of the kernels' modules (`__device__`, `__constant__`,
  `__managed__`, `static` in a function: all a kernel keeps between launches besides its arrays, listed from
  the compiled binary's symbol table) is restored untimed to its value right after loading, for the student
  and the solution alike: a kernel that keeps the results of inputs it has seen, however many, finds its
  cache empty at every run (the sets are restored to identical contents, so a kept result would match);
* the student's outputs are checked after every run, timed or not, and after the last one, against the
  case's references (the case's own tolerance): a wrong result is a FAIL, not a speed;
* a median faster than IMPOSSIBLE times the physical bound (bytes over the measured copy bandwidth, FLOPs
  over the measured peak of that precision, cudl.ceilings) is refused as impossible: a kernel that copies
  a cached result instead of computing it is faster than the work allows.

The verdict is SLOW only if the student's fastest median exceeds F times the solution's slowest one, so noise
cannot turn the solution against itself into SLOW for any F >= MIN_FACTOR.

The solution's source is the one the book publishes: the `*_src` string that the graded cell of
`solutions/NN-slug.ipynb` passes to `cudl.grade.<name>(...)`, read without executing the notebook. Where the
repository's solutions/ folder is missing (a wheel install), speed is not graded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import address

ROUNDS = 3  # student/solution pairs of medians: SLOW needs all of them
MIN_FACTOR = 1.5  # (1 + 20%) / (1 - 20%) < 1.5: medians off by 20% cannot make the solution SLOW
SETS = 3  # input sets a timed loop rotates through: no run sees the pointers of the run before
# A median below this fraction of the physical bound is refused. Measured ceilings are ~90% of the datasheet and
# a read-only stream can beat a copy's rate by a few percent, so a real kernel stays well above 0.8.
IMPOSSIBLE = 0.8
SOLUTIONS_DIR = Path(__file__).resolve().parents[2] / "solutions"

Launches = Sequence[tuple[Any, tuple, dict]]


class Gamed(Exception):
    """A timed replay left a wrong result: the kernel does not do all of its work in every launch."""


def _is_array(a: Any) -> bool:
    return isinstance(a, np.ndarray) or (type(a).__name__ == "ndarray" and hasattr(a, "data"))


def _span(a: Any) -> tuple[int, int]:
    """(first byte, end) of an array's memory, NumPy or CuPy."""
    ptr = address(a)
    return ptr, ptr + a.nbytes


class ModuleState:
    """The variables a kernel's module keeps between launches (Kernel.module_variables), as they were when this
    was made (right after loading, before the first launch); restore() copies them back."""

    def __init__(self, kernel: Any):
        self.variables = kernel.module_variables()
        self.initial = [v.copy() for _, v in self.variables]

    def restore(self) -> None:
        for (_, v), copy in zip(self.variables, self.initial):
            v[...] = copy


_STATES: dict[Any, tuple[Any, ModuleState]] = {}  # one per loaded module (kept alive here: ids stay unique)


def module_state(kernel: Any) -> ModuleState | None:
    """The ModuleState of a cudl.Kernel's module, made at the first call for that module: call it right after
    loading (cudl.grade._child does), before the first launch. None for what has no module (a stand-in)."""
    module = getattr(kernel, "module", None)
    if module is None or not hasattr(kernel, "module_variables"):
        return None
    # The emulator may open one library for two Module objects (dlopen shares it): key by the library.
    key = getattr(getattr(module, "lib", None), "_handle", None) or id(module)
    if key not in _STATES:
        _STATES[key] = (module, ModuleState(kernel))
    return _STATES[key][1]


class Recorded:
    """One input set of the speed case: its launches, the arrays as they were before the first launch that used
    them, the state of the launched kernels' modules, and the outputs to check with their references."""

    def __init__(self) -> None:
        self.launches: list[tuple[Any, tuple, dict]] = []
        self.initial: list[tuple[Any, Any]] = []  # (array, copy)
        self.states: list[ModuleState] = []
        self.writes: list[tuple[Any, str, Any]] = []  # (kernel, variable, values) the run set with set_global
        self.checks: list[tuple[Any, Any, Any, bool, str]] = []  # (output, reference, bound, exact, name)
        self._seen: set[tuple[int, int]] = set()

    def before(self, args: Sequence[Any], kernel: Any = None) -> None:
        """Called before each recorded launch: keep a copy of every array argument seen for the first time, and
        the state of the kernel's module (as it was after loading)."""
        for a in args:
            if _is_array(a) and _span(a) not in self._seen:
                self._seen.add(_span(a))
                self.initial.append((a, a.copy()))
        state = module_state(kernel)
        if state is not None and all(state is not s for s in self.states):
            self.states.append(state)

    def set_global(self, kernel: Any, name: str, values: Any) -> None:
        """Called when the run fills a module variable (Kernel.set_global): restore() does it again."""
        from cudl.backend import xp

        self.writes.append((kernel, name, xp().asarray(values).copy()))

    def add(self, kernel: Any, args: tuple, kwargs: dict) -> None:
        self.launches.append((kernel, args, kwargs))

    def expect(self, pairs: Sequence[tuple[Any, ...]], rtol: float | None) -> None:
        """Keep, for every pair whose output lives in an array the launches wrote, its reference and the
        tolerance cudl.check.compare applies (the same rules: rtol (|ref| + scale), integers exact, bf16 bits
        decoded), on the device, so that each timed run is checked in a few kernels."""
        from cudl.backend import xp
        from cudl.check import RTOL

        spans = [_span(a) for a, _ in self.initial]
        for k, (out, ref, *rest) in enumerate(pairs):
            if not _is_array(out) or not any(s <= _span(out)[0] < e for s, e in spans):
                continue  # a value computed on the host from an output: checked by the case itself
            ref_h = np.asarray(ref)
            exact = ref_h.dtype.kind in "iub" and np.dtype(out.dtype).kind in "iub"
            if exact:
                self.checks.append((out, xp().asarray(ref_h), None, True, f"output {k + 1}"))
                continue
            e = ref_h.astype(np.float64)
            scale = rest[0] if rest else None
            if scale is None:
                scale = float(np.sqrt(np.mean(e[np.isfinite(e)] ** 2))) if e.size else 0.0
            name = "bfloat16" if out.dtype == np.uint16 else np.dtype(out.dtype).name
            tol = rest[1] if len(rest) > 1 else (rtol if rtol is not None else RTOL.get(name, 1e-5))
            with np.errstate(invalid="ignore"):
                bound = tol * (np.abs(e) + np.abs(np.asarray(scale, np.float64)))
            # float32 on the device (half the memory): widen the bound by the reference's own rounding
            ref32 = e.astype(np.float32)
            bound32 = (np.broadcast_to(bound, e.shape) + np.abs(e - ref32) + 2.0**-23 * np.abs(e)).astype(np.float32)
            self.checks.append((out, xp().asarray(ref32), xp().asarray(bound32), False, f"output {k + 1}"))

    def restore(self) -> None:
        """The arrays as before the first launch, the modules' variables as after loading (then what the run
        filled in with set_global): a device-to-device copy each, untimed."""
        for a, copy in self.initial:
            a[...] = copy
        for state in self.states:
            state.restore()
        for kernel, name, values in self.writes:
            kernel.set_global(name, values)

    def replay(self) -> None:
        for kernel, args, kwargs in self.launches:
            kernel(*args, **kwargs)

    def verify(self, when: str) -> None:
        """Raise Gamed if an output of the last replay is not its reference within the case's tolerance."""
        from cudl.backend import xp

        x = xp()
        for out, ref, bound, exact, name in self.checks:
            got = out.reshape(ref.shape)
            if exact:
                ok = bool((got == ref).all())
            else:
                if got.dtype == np.uint16:  # bf16 bits
                    got = (got.astype(np.uint32) << 16).view(np.float32)
                g = got.astype(np.float32)
                good = (x.abs(g - ref) <= bound) | (x.isinf(ref) & (g == ref))
                ok = bool(good.all())
            if not ok:
                raise Gamed(f"the {when} gave a wrong result ({name} of the speed case differs from its "
                            "reference): a kernel must do all of its work in every launch, whatever it was "
                            "called with before")


def record_sets(g: Any, make_load: Callable[[Recorded], Callable[[str], Any]], sets: int = SETS,
                checked: bool = True) -> list[Recorded]:
    """`sets` runs of grader g's speed case on fresh inputs, each checked like a case (raises Gamed), with the
    launches and the arrays recorded, and the references on the device if the timed runs will be `checked`;
    make_load(rec) gives the `load` of one run (its kernels call rec.before(args) before and rec.add(...) after
    each launch: cudl.grade._child._Watched)."""
    import cudl
    from cudl.grade import check_pair

    out = []
    for _ in range(sets):
        rec = Recorded()
        pairs = g.run(make_load(rec), dict(g.speed["case"]))
        cudl.sync()
        for pair in pairs:
            c = check_pair(pair, g.rtol)
            if not c.ok:
                raise Gamed(f"run {len(out) + 1} of the speed case on fresh inputs (before timing): {c}")
        if checked:
            rec.expect(pairs, g.rtol)
        out.append(rec)
    return out


def _as_sets(launches: Sequence[Any]) -> list[Recorded]:
    """Sets as given, or one set of bare launches (kernel, args, kwargs): replayed as is, nothing restored."""
    if launches and isinstance(launches[0], Recorded):
        return list(launches)
    rec = Recorded()
    rec.launches = list(launches)
    return [rec]


class Rotation:
    """Input sets replayed in turn; the turn carries over from one timing loop to the next, so that no run, not
    even a loop's first, has the input of the run before."""

    def __init__(self, sets: Sequence[Recorded]):
        self.sets, self.cur = list(sets), len(sets) - 1  # the last set was recorded last


def time_sets(rotation: Rotation, check: bool, name: str) -> Any:
    """cudl.bench of replaying the sets in turn, each restored untimed before its run (and the previous run's
    outputs checked, if `check`), then the last run checked; returns the Timing."""
    from cudl.bench import bench

    sets = rotation.sets
    state = {"cur": rotation.cur, "runs": 0}

    def setup() -> None:
        if check and state["runs"]:
            sets[state["cur"]].verify(f"run {state['runs']} of a timing loop")
        state["cur"] = (state["cur"] + 1) % len(sets)
        sets[state["cur"]].restore()

    def run() -> None:
        sets[state["cur"]].replay()
        state["runs"] += 1

    t = bench(run, setup=setup, name=name, warmup_ms=10.0, rep_ms=50.0)
    rotation.cur = state["cur"]
    if check and state["runs"]:
        import cudl

        cudl.sync()
        sets[state["cur"]].verify(f"last run ({state['runs']}) of a timing loop")
    return t


def measure(student: Sequence[Any], solution: Sequence[Any], rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Median times (ms) of the student's and the solution's sets (Recorded, or one list of bare launches each),
    solution first, alternated over `rounds` rounds: a GPU that lowers its clocks under load slows both alike.
    The student's outputs are checked after every run (raises Gamed)."""
    mine, theirs = Rotation(_as_sets(student)), Rotation(_as_sets(solution))
    times: dict[str, list[float]] = {"student": [], "solution": []}
    for _ in range(rounds):
        times["solution"].append(time_sets(theirs, check=False, name="solution").ms)
        times["student"].append(time_sets(mine, check=True, name="student").ms)
    return times


def is_slow(student_ms: Sequence[float], solution_ms: Sequence[float], factor: float) -> bool:
    """SLOW only when even the student's best median is above `factor` times the solution's worst median."""
    return min(student_ms) > factor * max(solution_ms)


def physical_bound_ms(speed: dict[str, Any], ceilings: Callable[[], dict[str, Any]] | None = None) -> float | None:
    """The shortest time the speed case can take on this GPU: its bytes over the measured copy bandwidth, its FLOPs
    over the measured peak of its precision (cudl.ceilings), whichever is longer; None if it declares neither."""
    if not speed.get("bytes") and not speed.get("flops"):
        return None
    if ceilings is None:
        from cudl.ceilings import ceilings
    c = ceilings()
    t = 0.0
    if speed.get("bytes") and c.get("copy_gbps"):
        t = max(t, speed["bytes"] / (c["copy_gbps"] * 1e9) * 1e3)
    peak = c.get("gemm_tflops", {}).get(speed.get("compute", "fp32"))
    if speed.get("flops") and peak:
        t = max(t, speed["flops"] / (peak * 1e12) * 1e3)
    return t or None


def impossible(student_ms: Sequence[float], bound_ms: float | None) -> bool:
    """Whether the student's fastest median is below IMPOSSIBLE times the physical bound."""
    return bool(bound_ms) and min(student_ms) < IMPOSSIBLE * bound_ms  # type: ignore[operator]


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
