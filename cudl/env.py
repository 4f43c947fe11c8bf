"""`cudl.setup()`: the banner every notebook prints first, and the `%%gpu` cell magic."""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

import numpy as np

from .backend import backend, fallback_reason, on_gpu


def device_info() -> dict[str, Any]:
    """GPU name, compute capability, SMs, memory, L2 and software versions (host CPU on the emulator).

    In mimic mode (CUDL_MIMIC) `cc` is the mimicked card's, so that chapters take its branches, and `mimics` holds
    its per-block limits (as on the emulator); the rest (SMs, memory, the per-SM limits that occupancy and the
    measurements depend on) stays the real GPU's, whose speed it is, and `real` names it.
    """
    from .mimicry import active

    info, card = _device_info(), active()
    if info["gpu"] == "CPU emulator":  # its limits follow CUDL_EMULATOR_DEVICE as it is now: not cached
        from .emulator import device

        return {**info, "mimics": device()}
    if card is None:
        return info
    return {**info, "cc": card["cc"], "mimics": card, "real": {"gpu": info["gpu"], "cc": info["cc"]}}


@functools.lru_cache(maxsize=1)
def _device_info() -> dict[str, Any]:
    info: dict[str, Any] = {"backend": backend(), "numpy": np.__version__}
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = None
    if not on_gpu():
        # `mimics` (the GPU whose limits the emulator enforces) is added by device_info(), uncached
        info.update(gpu="CPU emulator", cc=None, cpu=platform.processor() or platform.machine())
        return info
    import cupy

    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(cupy.cuda.Device().id)
    info.update(
        gpu=props["name"].decode(), cc=f"{props['major']}.{props['minor']}",
        sms=props["multiProcessorCount"], memory_gib=props["totalGlobalMem"] / 2**30,
        l2_mib=props["l2CacheSize"] / 2**20, smem_per_sm_kib=props["sharedMemPerMultiprocessor"] / 1024,
        regs_per_sm=props["regsPerMultiprocessor"], max_threads_per_sm=props["maxThreadsPerMultiProcessor"],
        driver=_cuda_version(rt.driverGetVersion()), runtime=_cuda_version(rt.runtimeGetVersion()),
        cupy=cupy.__version__, nvrtc=_nvrtc_version(), kernel_format=_kernel_format(),
    )
    return info


def _nvrtc_version() -> str:
    try:
        from cupy.cuda import nvrtc

        major, minor = nvrtc.getVersion()
        return f"{major}.{minor}"
    except Exception:  # an odd CuPy build: the banner says so rather than failing
        return "?"


def _kernel_format() -> str:
    """'cubin' or 'PTX': CuPy builds a cubin when NVRTC knows the GPU's architecture and CUPY_COMPILE_WITH_PTX
    is not set; PTX is compiled again by the driver when loaded, which fails if the driver is older than NVRTC."""
    try:
        from cupy.cuda import compiler

        fmt = compiler._get_arch_for_options_for_nvrtc()[1]  # CuPy's own choice (a private helper)
        return "PTX" if fmt == "ptx" else "cubin"
    except Exception:
        return "PTX" if os.environ.get("CUPY_COMPILE_WITH_PTX", "0") not in ("", "0") else "cubin"


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def driver_problem(info: dict[str, Any]) -> str:
    """One sentence saying what to do when the driver is older than CuPy's CUDA ('' when it is not)."""
    if info.get("backend") != "gpu":
        return ""
    driver = _version_tuple(info["driver"])
    newest = max(_version_tuple(info["runtime"]), _version_tuple(info.get("nvrtc") or "0"))
    if driver >= newest:
        return ""
    built = ".".join(map(str, newest))
    if driver[:1] != newest[:1]:
        fix = (f"install the CuPy for your driver's CUDA {driver[0]} (pip install cupy-cuda{driver[0]}x) "
               "or update the NVIDIA driver")
    elif info.get("kernel_format") == "PTX":
        fix = ("kernels built as PTX will fail to load with CUDA_ERROR_UNSUPPORTED_PTX_VERSION: unset "
               "CUPY_COMPILE_WITH_PTX (so CuPy builds cubins), or update the NVIDIA driver")
    else:
        return ""  # cubins of a newer minor version load on an older driver of the same major version
    return f"cudl: the NVIDIA driver supports CUDA {info['driver']} but CuPy compiles with CUDA {built}: {fix}."


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def max_shared_per_block() -> int:
    """Bytes of shared memory a block may have after opting in: the limit of the card that the emulator or
    mimic mode stands for, else this GPU's (a T4 64 KiB, an A100 163 KiB, sm_86/89 99 KiB, Hopper 227 KiB)."""
    info = device_info()
    if "mimics" in info:
        return info["mimics"]["max_smem_per_block_optin"]
    import cupy

    return cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]


def gpu_name() -> str:
    """The device name, e.g. 'NVIDIA H100 80GB HBM3' ('CPU emulator' without a GPU)."""
    return device_info()["gpu"]


def banner() -> str:
    """One line that says where the notebook's kernels run."""
    i = device_info()
    if i["backend"] == "gpu" and "mimics" in i:
        r, m = i["real"], i["mimics"]
        return (f"cudl: mimicking a {m['name']} on {r['gpu']}: speed numbers are the real GPU's. Kernels are built "
                f"as PTX for compute_{m['cc'].replace('.', '')} and held to a {m['name']}'s limits "
                f"({m['max_threads_per_block']} threads, {m['max_smem_per_block_optin'] // 1024} KiB shared memory "
                f"per block); chapters see compute capability {m['cc']}; cudl.record stores "
                f"nothing (unset CUDL_MIMIC to leave the mode) | driver CUDA {i['driver']}, CuPy {i['cupy']} "
                f"(NVRTC {i['nvrtc']}) | backend: gpu")
    if i["backend"] == "gpu":
        return (f"cudl: {i['gpu']} (sm_{i['cc'].replace('.', '')}, {i['sms']} SMs, {i['memory_gib']:.0f} GiB, "
                f"L2 {i['l2_mib']:.0f} MiB) | driver CUDA {i['driver']}, runtime {i['runtime']}, "
                f"CuPy {i['cupy']} (NVRTC {i['nvrtc']}, kernels built as {i['kernel_format']}), "
                f"PyTorch {i['torch'] or 'not installed'} | backend: gpu")
    m = i["mimics"]
    return (f"cudl: no GPU, running on the CPU emulator ({fallback_reason()}). Kernels run correctly but "
            "slowly, and cells that measure GPU performance (%%gpu) are skipped. Limits enforced: a "
            f"{m['name']}'s ({m['max_threads_per_block']} threads and {m['max_smem_per_block_optin'] // 1024} KiB "
            "shared memory per block).")


def _gpu_cell(line: str, cell: str) -> None:
    """%%gpu: run the cell on a GPU; on the emulator print why it is skipped instead."""
    if on_gpu():
        from IPython import get_ipython

        result = get_ipython().run_cell(cell, store_history=False)
        if not result.success:  # keep the failure visible to "Run all" and to nbval
            raise RuntimeError("this %%gpu cell failed: see the error above") from None
    else:
        print("⏭  skipped on the CPU emulator: this cell measures GPU performance. "
              "Run the notebook on a GPU (e.g. Colab's T4) to see the numbers.")


def setup() -> None:
    """Print the banner and register %%gpu in IPython (cudl.device_info() returns the same facts)."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            ip.register_magic_function(_gpu_cell, magic_kind="cell", magic_name="gpu")
    except ImportError:
        pass
    print(banner())
    problem = driver_problem(device_info())
    if problem:
        print(problem)


GLUE_MARKDOWN = "`"  # a glued text holding this is Markdown too (a sentence that names `long_scoreboard`)


def glue(name: str, value: Any, fmt: str = "") -> None:
    """Store a computed value (formatted with `fmt`) so the prose can cite it as {glue:}`name`.

    Same output format as myst_nb.glue (which we do not import: it is not installed on Colab).
    """
    from IPython.display import display

    text = format(value, fmt) if fmt else str(value)
    prefix = "application/papermill.record/"  # hidden in the notebook, read by Jupyter Book
    data = {prefix + "text/plain": text}
    if GLUE_MARKDOWN in text:  # code spans: {glue:} renders text/markdown as inline Markdown, text/plain literally
        data[prefix + "text/markdown"] = text
    display(data, raw=True, metadata={"scrapbook": {"name": name, "mime_prefix": prefix}})


def span(values: Any, fmt: str = ".0f") -> str:
    """"lo-hi" of `values` formatted with `fmt`, or one number where both ends print the same (prose
    such as "at {glue:}`pct`% of the copy bandwidth" must not read "89-89")."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def show(file_or_source: str, *, lines: tuple[int, int] | None = None, start: str | None = None,
         stop: str | None = None, header: bool = False, language: str = "cuda") -> None:
    """Display a kernel file of kernels_src/ (or source text) as highlighted code, in the notebook and on the site.

    The output is Markdown holding a fenced code block: myst-nb renders it with the book's highlighting, and
    Jupyter/Colab render it as code too. `lines=(first, last)` shows only those lines (1-based, inclusive).
    `start`/`stop` pick a part by text instead, which survives edits above it: from the first line holding
    `start` to the line before the next one holding `stop` (or the end). `header=True` shows the file's
    leading comment block first, as a block of its own (what the file is, before the part of it shown); with
    the whole file shown, which begins with that block anyway, it is not shown twice.
    """
    from IPython.display import display

    from .compile import resolve

    def emit(body: str) -> None:
        fence = "````" if "```" in body else "```"
        display({"text/markdown": f"{fence}{language}\n{body}\n{fence}", "text/plain": body}, raw=True)

    text, shown = resolve(file_or_source)
    src = text.rstrip("\n").splitlines()
    if header and (lines is not None or start is not None or stop is not None):
        emit("\n".join(src[: next((i for i, line in enumerate(src) if not line.startswith("//")), len(src))]))
    if lines is not None:
        src = src[lines[0] - 1 : lines[1]]
    if start is not None or stop is not None:
        a = 0
        if start is not None:
            a = next((i for i, line in enumerate(src) if start in line), None)
            if a is None:
                raise ValueError(f"cudl.show: no line of {shown} holds {start!r}")
        b = next((i for i, line in enumerate(src) if stop is not None and i > a and stop in line), len(src))
        src = src[a:b]
    emit("\n".join(src))
