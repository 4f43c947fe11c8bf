"""`cudl.autotune`: a kernel's build options chosen per GPU and shape from a small declared space.

    opts = lambda c: [f"-D{k}={v}" for k, v in c.items()]
    tuned = cudl.autotune("softmax rows", space=[dict(ROWS=1), dict(ROWS=2), dict(ROWS=4)], default=dict(ROWS=1),
                          build=lambda c: cudl.load("07-fusion/fused_rows.cu", "softmax_rows", options=opts(c)),
                          run=lambda k: k(grid, block, (x, y, m, n)), check=lambda k: check_softmax(k),
                          shape=(m, n), source="07-fusion/fused_rows.cu")
    print(tuned)       # which config won, and by how much over the default
    tuned.kernel       # the chosen build; tuned.table: every candidate's time, or why it failed

Each candidate is built, launched once and checked before it is timed: one that fails (does not compile,
exceeds a resource limit, gives a wrong result) is reported in the table and never chosen. The fastest of one
`cudl.bench` each is then timed in turn with the default (`cudl.bench_pair`) and chosen only if measurably
faster (`Pair.sign()`); otherwise the default stays. The choice is cached under $CUDL_CACHE/autotune, keyed
by GPU, compute capability, NVRTC, shape, and a hash of the sources and the space. On the CPU emulator
nothing is timed: the default is built, launched and checked, and returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backend import on_gpu, sync
from .env import device_info
from .errors import CudlError

# Bumped when the cache's format, or the way a choice is made, changes: choices cached before are then tuned again.
VERSION = 1
NOT_TIMED = "not timed on the emulator"


def _show(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "no options"


def _canon(value: Any) -> str:
    """One text per value whatever its key order: the form a cache key and a cached config are compared in."""
    # NumPy values as the Python values they hold: shape=(np.int64(4096),) and shape=(4096,) are one key
    return json.dumps(value, sort_keys=True, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v))


@dataclass
class Tuned:
    """autotune's result: the chosen config and its build, the default, the gain, and every candidate's row."""

    name: str
    config: dict[str, Any]
    kernel: Any  # build(config)
    default: dict[str, Any]
    gain: float | None  # the default's median time over the chosen config's (1.0: the default kept); None: untimed
    table: list[dict[str, Any]]  # per candidate, in the space's order: config, ms, ratio (default ms / its ms), note
    verdict: str  # why this config, in a sentence computed from the measurements
    gpu: str = ""
    cached: bool = False  # the choice was read from the cache: nothing was timed in this run

    def __str__(self) -> str:
        cached = " (cached: not timed in this run; force=True tunes again)" if self.cached else ""
        return f"autotune {self.name} on {self.gpu}: {self.verdict}{cached}"

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        """A notebook cell that ends with the result shows the sentence and the table."""
        lines = [str(self), "", "| config | ms | default's time / its time | note |", "| --- | --: | --: | --- |"]
        for r in self.table:
            ms = f"{r['ms']:.4g}" if r["ms"] is not None else ""
            ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else ""
            lines.append(f"| {_show(r['config'])} | {ms} | {ratio} | {r['note']} |")
        return "\n".join(lines)


def source_hash(source: str | Sequence[str], space: Sequence[dict[str, Any]]) -> str:
    """A hash of the kernel sources (files under kernels_src/ or CUDA text, with the headers they include) and
    of the space: a choice made for other code, or among other candidates, is not reused."""
    from .compile import includes_digest, resolve

    h = hashlib.sha256()
    for s in [source] if isinstance(source, str) else source:
        text, shown = resolve(s)
        h.update(text.encode() + b"\0")
        if not shown.endswith(".py"):  # a Python launcher (Triton) includes no C headers
            h.update(includes_digest(text, shown).encode() + b"\0")
    h.update(_canon(list(space)).encode())
    return h.hexdigest()[:16]


def cache_path(name: str, key: dict[str, Any]) -> Path:
    root = Path(os.environ.get("CUDL_CACHE") or Path.home() / ".cache" / "cudl")
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())
    return root / "autotune" / f"{slug}-{hashlib.sha256(_canon(key).encode()).hexdigest()[:16]}.json"


def _validate(build: Callable, run: Callable, check: Callable | None, config: dict[str, Any]) -> tuple[Any, str]:
    """Build one candidate, launch it once and check it: (its build, "") or (None, why it failed)."""
    stage = "build"
    try:  # quiet: a check that prints "matches" would print it once per candidate; the table says what failed
        with contextlib.redirect_stdout(io.StringIO()):
            kernel = build(config)
            stage = "launch"
            run(kernel)
            sync()  # a fault the GPU reports late belongs to this candidate, not to the next one
            stage = "check"
            if check is not None:
                check(kernel)
    except Exception as exc:  # any failure rules the candidate out; the table says why
        lines = str(exc).strip().splitlines() or [""]
        line = next((s for s in lines if "error" in s.lower()), lines[0]).strip()  # a compiler log: its error
        return None, f"failed: {stage}: {type(exc).__name__}" + (f": {line[:160]}" if line else "")
    return kernel, ""


def autotune(name: str, space: Sequence[dict[str, Any]], build: Callable[[dict[str, Any]], Any],
             run: Callable[[Any], Any], *, shape: Any, source: str | Sequence[str],
             check: Callable[[Any], Any] | None = None, default: dict[str, Any] | None = None,
             force: bool = False, rounds: int = 3, **bench_kwargs: Any) -> Tuned:
    """Choose `build`'s config from `space` for this GPU and `shape`: see the module's docstring.

    `run(kernel)` launches a build once on prepared inputs (it is what is timed); `check(kernel)` raises if a
    build's output is wrong; `default` (the first config if None) is the config used before tuning;
    `source` names the files (or text) the builds come from. `bench_kwargs` go to cudl.bench (bytes=, flops=).
    """
    space = list(space)
    if not space:
        raise ValueError(f"autotune {name}: the space is empty: list at least the default config")
    if not all(isinstance(c, dict) for c in space):
        raise TypeError(f"autotune {name}: each config of the space is a dict of options, got {space!r}")
    if len({_canon(c) for c in space}) < len(space):
        raise ValueError(f"autotune {name}: the space lists a config twice")
    default = space[0] if default is None else default
    if default not in space:
        raise ValueError(f"autotune {name}: the default {default!r} is not in the space: "
                         + "; ".join(_show(c) for c in space))
    d = space.index(default)
    digest = source_hash(source, space)  # on the emulator too: a misspelled source fails there as well

    if not on_gpu():  # correctness only: the default is built, launched and checked; its errors propagate
        kernel = build(default)
        run(kernel)
        if check is not None:
            check(kernel)
        table = [dict(config=c, ms=None, ratio=None, note=("default, " if i == d else "") + NOT_TIMED)
                 for i, c in enumerate(space)]
        return Tuned(name, default, kernel, default, None, table, f"the default ({_show(default)}) kept: {NOT_TIMED}",
                     device_info()["gpu"])

    info = device_info()
    key = dict(version=VERSION, name=name, gpu=info["gpu"], cc=info["cc"], nvrtc=info.get("nvrtc"),
               shape=json.loads(_canon(shape)), source=digest)
    path = cache_path(name, key)
    stored = _read(path, key) if not force else None
    chosen = next((c for c in space if stored and _canon(c) == _canon(stored["config"])), None)
    if chosen is not None:
        kernel, why = _validate(build, run, check, chosen)  # reused without timing, but never unchecked
        if not why:
            return Tuned(name, chosen, kernel, default, stored["gain"], stored["table"], stored["verdict"],
                         info["gpu"], cached=True)
        print(f"autotune {name}: the cached choice ({_show(chosen)}) {why}; tuning again")
    tuned = _tune(name, space, d, build, run, check, rounds, bench_kwargs)
    tuned.gpu = info["gpu"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed: readers never see half a file
    tmp.write_text(json.dumps(dict(key=key, config=tuned.config, gain=tuned.gain, verdict=tuned.verdict,
                                   table=tuned.table), indent=1, default=str))
    os.replace(tmp, path)
    return tuned


def _read(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):  # no cache yet, or one we cannot read: tune
        return None
    return stored if isinstance(stored, dict) and stored.get("key") == key else None


def _tune(name: str, space: list[dict[str, Any]], d: int, build: Callable, run: Callable, check: Callable | None,
          rounds: int, bench_kwargs: dict[str, Any]) -> Tuned:
    from .bench import bench, bench_pair  # looked up now: the tests replace them with fakes

    default = space[d]
    table = [dict(config=c, ms=None, ratio=None, note="") for c in space]
    kernels: dict[int, Any] = {}
    for i, c in enumerate(space):
        kernels[i], table[i]["note"] = _validate(build, run, check, c)
        if kernels[i] is None:
            del kernels[i]
    if not kernels:
        raise CudlError(f"autotune {name}: every candidate failed:\n"
                        + "\n".join(f"  {_show(r['config'])}: {r['note']}" for r in table))
    # One timing each only picks the candidate to confirm: timed minutes apart, under drifting clocks, two
    # candidates can differ by more than their real difference (bench_pair's docstring).
    times = {i: bench(lambda k=k: run(k), name=_show(space[i]), **bench_kwargs).ms for i, k in kernels.items()}
    for i, ms in times.items():
        table[i].update(ms=ms, ratio=times[d] / ms if d in times else None)
    best = min(times, key=times.__getitem__)
    gain: float | None = 1.0
    if d not in times:  # the default fails here (e.g. its tile exceeds this GPU's shared memory): no comparison
        chosen, gain = best, None
        verdict = (f"{_show(space[best])} chosen, the fastest that passed: the default ({_show(default)}) "
                   f"{table[d]['note']}")
    elif best == d:
        chosen = d
        verdict = f"the default ({_show(default)}) kept: the fastest of the {len(times)} candidates that passed"
    else:
        pair = bench_pair(lambda: run(kernels[best]), lambda: run(kernels[d]), rounds=rounds,
                          name=_show(space[best]), baseline_name=f"default ({_show(default)})", **bench_kwargs)
        lo, hi = min(pair.round_ratios), max(pair.round_ratios)
        how = f"{pair.ratio:.2f}x; {lo:.2f}-{hi:.2f}x in {rounds} rounds of cudl.bench_pair"
        if pair.sign() > 0:
            chosen, gain = best, pair.ratio
            verdict = f"{_show(space[best])} chosen: measurably faster than the default ({_show(default)}), {how}"
        else:
            chosen = d
            verdict = (f"the default ({_show(default)}) kept: the fastest other candidate, {_show(space[best])}, "
                       f"is not measurably faster ({how})")
    for i, r in enumerate(table):
        r["note"] = ", ".join(s for s in ("default" if i == d else "", "chosen" if i == chosen else "", r["note"]) if s)
    return Tuned(name, space[chosen], kernels[chosen], default, gain, table, verdict)
