"""The grading process: `python -m cudl.grade._child` reads a job (JSON) on stdin and reports on a pipe.

A fresh interpreter, not a multiprocessing child: it never re-imports the caller's `__main__` (so a plain
script without an `if __name__ == "__main__":` guard can grade), and a crashed CUDA context dies with it.
Every message is one JSON line `[kind, payload]` on the file descriptor the job names; the parent
(`cudl.grade.run`) turns them into a verdict and kills this process when a launch outlives its limit.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

Send = Callable[[str, Any], None]


class _Watched:
    """A kernel whose every launch is announced to the parent and waited for, so a hang has a deadline; with a
    `record` (cudl.grade.speed.Recorded), its arrays are copied before the launch and the launch is kept."""

    def __init__(self, kernel: Any, send: Send, record: Any = None):
        self.kernel, self.send, self.record = kernel, send, record

    def __getattr__(self, name: str) -> Any:  # num_regs, max_threads_per_block, ... of the kernel itself
        return getattr(self.kernel, name)

    def set_global(self, name: str, values: Any) -> None:
        self.kernel.set_global(name, values)
        if self.record is not None:  # replays restore the module's variables: then this again
            self.record.set_global(self.kernel, name, values)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        import cudl

        if self.record is not None:
            launch_args = args[2] if len(args) > 2 else kwargs.get("args", ())
            self.record.before(launch_args, self.kernel)
        self.send("launch", self.kernel.name)
        self.kernel(*args, **kwargs)
        cudl.sync()  # a GPU launch is asynchronous: a hang shows here, inside the announced window
        self.send("launched", None)
        if self.record is not None:
            self.record.add(self.kernel, args, kwargs)


def grade(name: str, source: str, send: Send, speed: bool = False) -> None:
    """Run grader `name` on `source` with this process's backend and report each step through `send`."""
    import cudl
    from cudl.errors import CompileError, EmulatorUnsupported, KernelFault, KernelTimeout
    from cudl.grade import REGISTRY, Refuse, _load_all, check_pair

    _load_all()
    g = REGISTRY[name]
    try:
        kernels = {k: cudl.load(source, k, options=g.options) for k in g.kernels}
    except CompileError as exc:
        send("compile", str(exc))
        return
    except EmulatorUnsupported as exc:  # cannot be graded here at all: say so, do not call it a crash
        send("unsupported", str(exc))
        return
    if speed and g.speed:  # the modules' variables as loaded, before any launch: each timed run starts from them
        from cudl.grade.speed import module_state

        for k in kernels.values():
            module_state(k)
    send("compiled", None)

    def loader(src: str, compiled: dict[str, Any], record: Any = None) -> Callable[[str], Any]:
        def load(kname: str) -> Any:
            k = compiled[kname] if kname in compiled else cudl.load(src, kname, options=g.options)
            return _Watched(k, send, record)
        return load

    cases = g.cases if cudl.on_gpu() else g.emulator_cases
    for i, case in enumerate(cases):
        send("start", i)
        try:
            pairs = g.run(loader(source, kernels), dict(case))
            cudl.sync()
            for pair in pairs:
                c = check_pair(pair, g.rtol)
                if not c.ok:
                    send("fail", (i, str(c)))
                    return
        except KernelTimeout as exc:
            send("timeout", (i, str(exc)))
            return
        except KernelFault as exc:
            send("crash", (i, str(exc)))
            return
        except Refuse as exc:
            send("fail", (i, str(exc)))
            return
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            kind = "crash" if any(s in text for s in ("IllegalAddress", "illegal", "LaunchFailure", "misaligned",
                                                      "cudaError")) else "error"
            send(kind, (i, text if kind == "crash" else traceback.format_exc(limit=3)))
            return
    send("done", len(cases))
    if speed and g.speed and cudl.on_gpu():
        from cudl.grade.speed import Gamed, measure, module_state, physical_bound_ms, record_sets, solution_source

        ref_src = g.solution or solution_source(name)
        if ref_src is None:
            send("timing", None)
            send("end", None)
            return
        i = g.cases.index(g.speed["case"]) if g.speed["case"] in g.cases else -1
        ref_kernels = {k: cudl.load(ref_src, k, options=g.options) for k in g.kernels}
        for k in ref_kernels.values():
            module_state(k)

        try:
            timing: dict[str, Any] = measure(record_sets(g, lambda rec: loader(source, kernels, rec)),
                                             record_sets(g, lambda rec: loader(ref_src, ref_kernels, rec),
                                                         checked=False))
        except (Gamed, Refuse) as exc:
            send("fail", (i, str(exc)))
            return
        except KernelFault as exc:
            send("crash", (i, str(exc)))
            return
        timing["bound_ms"] = physical_bound_ms(g.speed)
        send("timing", timing)
    send("end", None)


def main() -> None:
    """Entry point: the job is {name, source, fd, speed} as JSON on stdin; CUDL_BACKEND comes from the parent."""
    job = json.loads(sys.stdin.read())
    pipe = os.fdopen(job["fd"], "w", buffering=1)

    def send(kind: str, payload: Any = None) -> None:
        pipe.write(json.dumps([kind, payload]) + "\n")
        pipe.flush()

    try:
        # PyTorch is imported before NVRTC runs through cuda.bindings (module variables): cudl.compile._nvrtc
        grade(job["name"], job["source"], send, speed=job.get("speed", False))
    except Exception:  # a bug outside the student's kernel: report it rather than die silently
        send("error", (-1, traceback.format_exc(limit=5)))
    pipe.close()


if __name__ == "__main__":
    main()
