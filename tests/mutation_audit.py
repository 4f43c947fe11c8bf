"""Mutation audit: put small realistic bugs into cudl one at a time and check that the tests catch each.

    python tests/mutation_audit.py                # every mutation (an hour or more on 2 cores)
    python tests/mutation_audit.py -k compare -k bench  # those whose name contains "compare" or "bench"
    python tests/mutation_audit.py --list         # names, files and the bug in words
    python tests/mutation_audit.py -j 2           # two at a time, each in its own copy
    python tests/mutation_audit.py --repo ../main # audit another checkout with these mutations

Each mutation replaces one exact text of one file (it must be there exactly once) in a temporary copy of
the working tree (git's tracked and untracked files, not the ignored ones) and runs the tests named with it
there (pytest -x on the CPU emulator, under one fixed CUDL_TEST_SEED). It is *killed* when a test fails,
*survived* when all pass (an assertion is missing), *stale* when the text to replace is no longer in the
file once (the code changed: update the entry). The tests first run on the unmutated copy: the mutations
whose tests fail there are reported as errors, since a mutation "killed" by a test that fails anyway proves
nothing. Exit status 1 unless every mutation is killed.

When you fix a bug the tests missed, add its mutation here with the test that now catches it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    old: str  # exact text, present once
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, node ids, `-k EXPR`
    why: str  # the bug, in words


EMU = "cudl/emulator/runtime.cpp"

MUTATIONS = [
    # ---------------------------------------------------- mimic mode (CUDL_MIMIC): a T4's path on a newer GPU
    Mutation("mimic-launch-unchecked", "cudl/kernel.py",
             "        elif self.mimics is not None:", "        elif False:",
             ("tests/test_mimic.py",), "launches in mimic mode are not held to the mimicked card's limits"),
    Mutation("mimic-builds-cubin", "cudl/kernel.py",
             "        return _PtxModule(source, shown, options, names, ptx_arch)", "        pass",
             ("tests/test_mimic.py",), "mimic mode builds for the real GPU instead of the card's PTX"),
    Mutation("mimic-records", "cudl/record.py",
             "    if card is not None:  # the time is the real GPU's", "    if False:  # the time is the real GPU's",
             ("tests/test_mimic.py",), "cudl.record stores a mimic run's times (the real GPU's) as a GPU's numbers"),
    # ------------------------------------------------------------------ cudl.check: what every kernel test relies on
    Mutation("compare-loosened-100x", "cudl/check.py",
             "tol = rtol if rtol is not None else RTOL.get(name, 1e-5)",
             "tol = 100 * (rtol if rtol is not None else RTOL.get(name, 1e-5))",
             ("tests/test_cudl.py", "-k", "compare and not bf16 and not integers"),
             "cudl.compare accepts errors 100x its tolerance (float32 tests must see it, not only bf16's)"),
    Mutation("compare-half-the-array", "cudl/check.py",
             "n_bad = int(np.count_nonzero(bad))",
             "n_bad = int(np.count_nonzero(bad.ravel()[: bad.size // 2]))",
             ("tests/test_cudl.py", "-k", "compare and not bf16 and not integers"),
             "cudl.compare counts wrong elements in the first half of the array only (float32 tests must see it)"),
    Mutation("compare-nan-passes", "cudl/check.py",
             "bad = ~(diff <= tol * (np.abs(e) + scale))",
             "bad = diff > tol * (np.abs(e) + scale)",
             ("tests/test_cudl.py",), "a NaN output (never written) compares as correct"),
    Mutation("poison-with-zeros", "cudl/check.py",
             'return np.nan if dt.kind == "f" else',
             'return 0.0 if dt.kind == "f" else',
             ("tests/test_cudl.py",), "cudl.poisoned fills float outputs with zeros: unwritten elements hide"),
    Mutation("bf16-truncates", "cudl/check.py",
             "rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)",
             "rounded = (u >> 16).astype(np.uint16)",
             ("tests/test_cudl.py",), "float_to_bf16 truncates instead of rounding to nearest even"),
    # ------------------------------------------------------------------ cudl.nbtools: the stale-output guard
    Mutation("stale-guard-compares-hash-with-itself", "cudl/nbtools.py",
             'stamp.get("code_hash") != (now := code_hash(nb, md.stem, root))',
             'stamp.get("code_hash") != (now := stamp.get("code_hash"))',
             ("tests/test_notebooks.py", "-k", "stale"),
             "`nbtools check` compares the stored hash with itself: edited code never makes a notebook stale"),
    Mutation("code-hash-ignores-other-chapters", "cudl/nbtools.py",
             "return own + [extra[n] for n in sorted(extra) if extra[n].resolve() not in mine]",
             "return own",
             ("tests/test_cudl.py", "tests/test_notebooks.py", "-k", "code_hash or stale"),
             "the hash covers the chapter's own folder only, not headers or kernels of other chapters"),
    # ------------------------------------------------------------------ cudl.kernel: argument checks
    Mutation("launch-skips-dtype-check", "cudl/kernel.py",
             "if want and a.dtype not in want:",
             "if False and want and a.dtype not in want:",
             ("tests/test_cudl.py",), "a float64 array passed for a float* is not refused"),
    # ------------------------------------------------------------------ cudl.occupancy
    Mutation("occupancy-forgets-reserved-smem", "cudl/occupancy.py",
             "smem_block = _round_up(smem_per_block + lim.smem_reserved_per_block, lim.smem_granularity)",
             "smem_block = _round_up(smem_per_block, lim.smem_granularity)",
             ("tests/test_occupancy.py",), "the 1 KiB the driver reserves per block (sm_80+) is left out"),
    Mutation("occupancy-registers-not-per-quadrant", "cudl/occupancy.py",
             "by_regs = warps_per_quadrant * lim.sub_partitions // warps_per_block",
             "by_regs = lim.regs_per_sm // regs_per_warp // warps_per_block",
             ("tests/test_occupancy.py",), "registers pooled over the SM instead of split over its 4 quadrants"),
    # ------------------------------------------------------------------ cudl.bench / record (helper "score"'s tests)
    Mutation("bench-mean-not-median", "cudl/bench.py",
             "return Timing(name or getattr(fn, \"__name__\", \"kernel\"), statistics.median(times), q[0], q[2], runs,",
             "return Timing(name or getattr(fn, \"__name__\", \"kernel\"), statistics.mean(times), q[0], q[2], runs,",
             ("tests/test_bench.py", "tests/test_cudl.py"), "cudl.bench reports the mean of the runs"),
    Mutation("bench-never-flushes-l2", "cudl/bench.py",
             "        if flush:\n            flush_l2()\n",
             "",
             ("tests/test_bench.py", "tests/test_cudl.py"), "cudl.bench times every run with a warm L2"),
    Mutation("pct-of-ceiling-always-fp32", "cudl/bench.py",
             'return 100 * self.tflops / c["gemm_tflops"][self.compute], f"cuBLAS {self.compute}"',
             'return 100 * self.tflops / c["gemm_tflops"]["fp32"], f"cuBLAS {self.compute}"',
             ("tests/test_bench.py", "tests/test_cudl.py"),
             "an fp16 kernel's % of ceiling uses the fp32 GEMM rate (what the scoreboard publishes)"),
    Mutation("bench-pair-mean-of-rounds", "cudl/bench.py",
             "return Timing(name, statistics.median(round_ms), q[0], q[2], sum(t.runs for t in rounds), first.bytes,",
             "return Timing(name, statistics.mean(round_ms), q[0], q[2], sum(t.runs for t in rounds), first.bytes,",
             ("tests/test_bench.py",), "bench_pair reports the mean of its rounds' medians"),
    Mutation("record-key-ignores-dtype", "cudl/record.py",
             'key = ("chapter", "kernel", "shape", "dtype")',
             'key = ("chapter", "kernel", "shape")',
             ("tests/test_bench.py", "tests/test_cudl.py", "tests/test_book.py", "-k", "record or scoreboard"),
             "recording the fp16 run of a kernel replaces its fp32 record"),
    # ------------------------------------------------------------------ cudl.autotune (issue 24)
    Mutation("autotune-fastest-without-verdict", "cudl/autotune.py",
             "if pair.sign() > 0:", "if True:",
             ("tests/test_autotune.py",), "autotune takes a candidate faster within the noise over the default"),
    Mutation("autotune-candidates-unchecked", "cudl/autotune.py",
             "            if check is not None:\n                check(kernel)\n    except",
             "            pass\n    except",
             ("tests/test_autotune.py",), "autotune times and chooses a candidate without checking its output"),
    Mutation("autotune-emulator-unchecked", "cudl/autotune.py",
             "        if check is not None:\n            check(kernel)\n        table",
             "        table",
             ("tests/test_autotune.py",), "on the emulator autotune returns the default without checking it"),
    Mutation("autotune-cache-ignores-shape", "cudl/autotune.py",
             "shape=json.loads(_canon(shape)), ", "",
             ("tests/test_autotune.py",), "a choice tuned for one shape is reused for another"),
    Mutation("autotune-cached-choice-unchecked", "cudl/autotune.py",
             "kernel, why = _validate(build, run, check, chosen)", "kernel, why = build(chosen), \"\"",
             ("tests/test_autotune.py",), "a cached choice is returned without being launched and checked"),
    # ------------------------------------------------------------------ graders (helper "grade"'s tests)
    Mutation("slow-against-the-fastest-solution-run", "cudl/grade/speed.py",
             "return min(student_ms) > factor * max(solution_ms)",
             "return min(student_ms) > factor * min(solution_ms)",
             ("tests/test_graders.py", "-k", "speed or slow"),
             "SLOW compares with the solution's best round: noise makes the solution itself SLOW"),
    Mutation("replays-keep-module-variables", "cudl/grade/speed.py",
             "        for state in self.states:\n            state.restore()\n", "",
             ("tests/test_graders.py", "-k", "speed"),
             "timed replays keep the __device__ variables of earlier runs: a kernel's cache of results hits"),
    Mutation("module-snapshot-after-the-cases", "cudl/grade/_child.py",
             "        for k in kernels.values():\n            module_state(k)\n", "",
             ("tests/test_graders.py", "-k", "grading_process_speed"),
             "the student's module variables are kept as the cases left them, not as loaded"),
    Mutation("cubin-variables-skip-constant-memory", "cudl/compile.py",
             'section.startswith((".nv.global", ".nv.constant"))', 'section.startswith(".nv.global")',
             ("tests/emulator/test_frontend.py", "-k", "nvrtc_lists"),
             "__constant__ variables are not listed on a GPU: a cache there survives the replays"),
    # ------------------------------------------------------------------ the CPU emulator (helper "emu"'s tests)
    Mutation("race-check-skips-second-reader", EMU,
             "            if (ck_conflict(c.r2, me, sh)) ck_race(w, r, i, c.r2, me, a);\n",
             "",
             ("tests/emulator/test_races.py",),
             "a write after two other threads' reads is checked against the first reader only"),
    Mutation("shuffle-mask-ignores-lanes-waiting-elsewhere", EMU,
             "if (!((m >> k) & 1) || base[k].state == DONE) continue;",
             "if (!((m >> k) & 1) || base[k].state != AT_WARP) continue;",
             ("tests/emulator/test_faults.py", "tests/emulator/test_conformance.py", "tests/emulator/test_races.py"),
             "a lane named in the mask but waiting at a barrier is treated as exited: no mask message"),
    Mutation("watchdog-at-twice-its-limit", EMU,
             "if (still < limit) continue;",
             "if (still < 2 * limit) continue;",
             ("tests/emulator/test_watchdog.py",), "the watchdog fires after twice CUDL_EMULATOR_WATCHDOG seconds"),
    Mutation("bank-conflicts-8-byte-loads-2-way", EMU,
             "ideal += (nw + 31) / 32;",
             "ideal += (q.n + 31) / 32;",
             ("tests/emulator/test_counters.py",),
             "the ideal wavefronts counted per lane, not per word: 8-byte shared loads look 2-way conflicted"),
    Mutation("global-sectors-of-128-bytes", EMU,
             "for (uintptr_t s = q.addr[l] >> 5; s <= (q.addr[l] + q.size[l] - 1) >> 5 && m < 32 * 5; s++)",
             "for (uintptr_t s = q.addr[l] >> 7; s <= (q.addr[l] + q.size[l] - 1) >> 7 && m < 32 * 5; s++)",
             ("tests/emulator/test_counters.py",), "global requests counted in 128-byte lines, not 32-byte sectors"),
    Mutation("race-check-forgets-writer", EMU,
             "            if (!keep) c.w = me;\n",
             "",
             ("tests/emulator/test_races.py",), "the race check never records a write: read-after-write is missed"),
    # ------------------------------------------------------------------ chapter 15: the T4 path of the training step
    Mutation("gpt-t4-takes-the-sm80-path", "kernels_src/15-capstone/gpt_train.py",
             "    if 10 * major + minor >= 80:\n        return \"sm80\"",
             "    if 10 * major + minor >= 75:\n        return \"sm80\"",
             ("tests/kernels/test_15_gpt_train.py", "-k", "device_arch"),
             "a T4 (cc 7.5) gets the sm80 path: kernel 3's GEMM and the attention's sm_80 builds"),
    Mutation("gpt-sm75-backward-without-its-t4-build", "kernels_src/15-capstone/gpt_train.py",
             "self.attn_bwd = ab.main_kernel(2, cfg.hd, sm75=sm75)",
             "self.attn_bwd = ab.main_kernel(2, cfg.hd)",
             ("tests/kernels/test_15_gpt_train.py", "-k", "sm75_path_compiles_for_a_t4"),
             "the sm75 path launches the attention backward's sm_80 build (m16n8k16: no such mma on a T4)"),
    Mutation("gpt-sm75-gemm-is-kernel-3", "kernels_src/15-capstone/gpt_train.py",
             'GEMMS = {"sm75": "1: WMMA, 128 x 128 tile", "sm80": "3: cp.async pipeline"}',
             'GEMMS = {"sm75": "3: cp.async pipeline", "sm80": "3: cp.async pipeline"}',
             ("tests/kernels/test_15_gpt_train.py", "-k", "sm75_path_compiles_for_a_t4"),
             "the sm75 path's products run on kernel 3 instead of chapter 11's WMMA kernel"),
]


def _copy_tree(repo: Path, dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked files, not the ignored ones) into dest."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                         capture_output=True, check=True).stdout
    for rel in filter(None, out.decode().split("\0")):
        src = repo / rel
        if src.is_file():  # a deleted but still tracked file is skipped
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _pytest(copy: Path, args: tuple[str, ...], seed: str, timeout: int) -> tuple[str, str]:
    """(outcome, last lines): passed, failed or error (no test ran, usage error, timeout)."""
    env = dict(os.environ, PYTHONPATH=str(copy), CUDL_BACKEND="emulator", CUDL_TEST_SEED=seed)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           "--timeout=600", *args]
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "error", f"no result in {timeout} s"
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
    return {0: "passed", 1: "failed", 5: "none"}.get(proc.returncode, "error"), tail


def _first_failure(tail: str) -> str:
    for line in tail.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0]
    return tail.splitlines()[-1] if tail else ""


def audit(mutation: Mutation, copy: Path, seed: str, timeout: int) -> tuple[str, str]:
    """Apply one mutation in `copy`, run its tests, restore the file: (killed|survived|stale|error, detail)."""
    path = copy / mutation.file
    text = path.read_text()
    if text.count(mutation.old) != 1:
        return "stale", f"the text to replace is in {mutation.file} {text.count(mutation.old)} times, not once"
    path.write_text(text.replace(mutation.old, mutation.new))
    try:
        outcome, tail = _pytest(copy, mutation.tests, seed, timeout)
    finally:
        path.write_text(text)
    if outcome == "failed":
        return "killed", _first_failure(tail)
    if outcome in ("passed", "none"):  # no test selected: nothing catches it either
        return "survived", tail.splitlines()[-1] if tail else ""
    return "error", tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", action="append", default=[], help="only mutations whose name contains this (repeatable)")
    ap.add_argument("-j", type=int, default=1, help="mutations run at a time (each in its own copy)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--no-baseline", action="store_true", help="skip the run of the tests without mutation")
    ap.add_argument("--seed", default=os.environ.get("CUDL_TEST_SEED", "20260101"), help="CUDL_TEST_SEED")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds for one mutation's tests")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the checkout to audit (default: this one)")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.k or any(k in m.name for k in args.k)]
    if args.list or not chosen:
        for m in chosen or MUTATIONS:
            print(f"{m.name:48} {m.file:28} {m.why}")
        return 0 if args.list else 2
    width = max(len(m.name) for m in chosen)
    with tempfile.TemporaryDirectory(prefix="cudl-mutation-") as tmp:
        copies = [Path(tmp) / f"copy{i}" for i in range(max(1, min(args.j, len(chosen))))]
        for c in copies:
            _copy_tree(args.repo, c)
        broken: dict[tuple[str, ...], str] = {}  # test selections that fail without any mutation
        if not args.no_baseline:
            runs = sorted({m.tests for m in chosen})
            print(f"baseline: {len(runs)} test selection(s) without mutation ...", flush=True)
            for tests in runs:
                outcome, tail = _pytest(copies[0], tests, args.seed, args.timeout)
                if outcome not in ("passed", "none"):  # none: the tests are not there (yet): survived below
                    broken[tests] = _first_failure(tail)
                    print(f"  fails without mutation: {' '.join(tests)}: {broken[tests]}", flush=True)
        free = list(copies)
        results: dict[str, tuple[str, str, float]] = {}

        def one(m: Mutation) -> None:
            copy = free.pop()
            t0 = time.monotonic()
            try:
                if m.tests in broken:  # a failure there proves nothing about the mutation
                    status, detail = "error", f"its tests fail without the mutation ({broken[m.tests]})"
                else:
                    status, detail = audit(m, copy, args.seed, args.timeout)
            finally:
                free.append(copy)
            results[m.name] = (status, detail, time.monotonic() - t0)
            print(f"{m.name:{width}}  {status.upper():8} {time.monotonic() - t0:6.0f} s  {detail}", flush=True)

        with ThreadPoolExecutor(len(copies)) as pool:
            list(pool.map(one, chosen))
    counts = {s: sum(r[0] == s for r in results.values()) for s in ("killed", "survived", "stale", "error")}
    print(", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(chosen)} mutations")
    for m in chosen:
        if results[m.name][0] != "killed":
            print(f"  {results[m.name][0]}: {m.name} ({m.file}): {m.why}; tests: {' '.join(m.tests)}")
    return 0 if counts["killed"] == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
