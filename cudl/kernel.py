"""`cudl.load`: one CUDA C kernel, compiled for the current backend and called like CuPy's RawKernel."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import backend as _backend
from . import mimicry
from .compile import (
    NVRTC_OPTIONS,
    Param,
    format_log,
    global_vars,
    include_options,
    includes_digest,
    kernel_decls,
    nvrtc_variables,
    parse_params,
    preprocess,
    resolve,
    with_line_directive,
)
from .errors import CompileError

# C parameter types and the NumPy types their arguments are converted to.
SCALAR_TYPES: dict[str, type] = {
    "int": np.int32, "int32_t": np.int32, "unsigned": np.uint32, "unsigned int": np.uint32,
    "uint32_t": np.uint32, "long long": np.int64, "long long int": np.int64, "int64_t": np.int64,
    "long": np.int64, "size_t": np.uint64, "uint64_t": np.uint64, "unsigned long long": np.uint64,
    "float": np.float32, "double": np.float64, "bool": np.bool_, "char": np.int8,
    "short": np.int16, "unsigned char": np.uint8, "__half": np.float16, "half": np.float16,
    "long int": np.int64, "unsigned long": np.uint64, "unsigned long int": np.uint64, "long long unsigned": np.uint64,
    "signed char": np.int8, "int8_t": np.int8, "uint8_t": np.uint8, "int16_t": np.int16, "uint16_t": np.uint16,
    "unsigned short": np.uint16, "short int": np.int16, "signed": np.int32, "signed int": np.int32,
    "unsigned long long int": np.uint64, "long long signed": np.int64, "ptrdiff_t": np.int64,
}
# Pointee types whose arrays must have exactly this dtype (vector types and bf16 are not checked).
POINTER_DTYPES: dict[str, tuple[np.dtype, ...]] = {
    k: (np.dtype(v),) for k, v in SCALAR_TYPES.items() if k not in ("bool", "char")
}
POINTER_DTYPES["float"] = (np.dtype(np.float32),)
POINTER_DTYPES["__nv_bfloat16"] = (np.dtype(np.uint16),)  # NumPy has no bfloat16: raw bits


def _dim3(v: int | Sequence[int], what: str) -> tuple[int, int, int]:
    if type(v) is tuple and 0 < len(v) <= 3 and all(type(x) is int and x >= 1 for x in v):
        return v + (1,) * (3 - len(v))  # the common case, without the conversions below
    t = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise ValueError(f"{what} must be 1 to 3 positive integers, got {v!r}")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


class Kernel:
    """A compiled kernel: `k(grid, block, args, shared_mem=0)` launches it on the current backend."""

    def __init__(self, name: str, params: list[Param], shown: str, impl: Any, backend: str, module: Any = None,
                 source: str = "", options: tuple[str, ...] = (), mimics: dict[str, Any] | None = None):
        self.name, self.params, self.shown, self._impl, self.backend = name, params, shown, impl, backend
        self.mimics = mimics  # on a GPU in mimic mode: the card it was built for, whose limits its launches keep
        self.module, self._source, self._options = module, source, options  # module: CuPy RawModule / emulator
        # What convert() checks for each parameter, looked up once rather than on every launch:
        # (param, scalar type or None, allowed pointee dtypes or None).
        self._plan = [(p, SCALAR_TYPES.get(p.base), POINTER_DTYPES.get(p.base)) for p in params]

    # Resource usage as the compiler reports it (None on the emulator: there are no registers to count).
    @property
    def num_regs(self) -> int | None:
        return self._impl.num_regs if self.backend == "gpu" else None

    @property
    def shared_bytes(self) -> int | None:
        """Static shared memory per block in bytes."""
        return self._impl.shared_size_bytes if self.backend == "gpu" else None

    def _static_shared(self) -> int:
        if not hasattr(self, "_static"):
            self._static = self.shared_bytes or 0
        return self._static

    @property
    def local_bytes(self) -> int | None:
        """Local memory (register spills, stack arrays) per thread in bytes."""
        return self._impl.local_size_bytes if self.backend == "gpu" else None

    @property
    def resources(self) -> dict[str, int] | None:
        """{"regs", "shared"} as NVRTC compiles the kernel for sm_80, on the emulator (None where unknown)."""
        if self.backend == "gpu":
            return {"regs": self.num_regs, "shared": self.shared_bytes}
        return getattr(self._impl, "resources", {}).get(self.name)

    def get_global(self, name: str) -> Any:
        """A `__constant__` or `__device__` variable of the kernel's module as an array on this backend (a view:
        writing into it changes what the kernel reads), shaped and typed as the source declares it."""
        var = global_vars(self._source, self._options, self.backend != "gpu").get(name)
        if var is None:
            raise KeyError(f"no __constant__ or __device__ variable {name!r} at file scope of {self.shown}")
        dtype = np.dtype(SCALAR_TYPES.get(var.base, np.uint8))
        if self.backend == "gpu":
            import cupy

            ptr = self.module.get_global(name)
            if var.base not in SCALAR_TYPES:
                raise ValueError(f"{name} is a {var.base}: get_global maps variables of scalar types (bytes of "
                                 "a struct would need its size, which CuPy does not report)")
            if var.shape is None:  # CuPy reports no size: it must come from the declaration
                raise ValueError(f"the size of {name} is not a plain number in {self.shown}: declare it with "
                                 "numbers or #define'd numbers, e.g. __constant__ float w[25]")
            nbytes = int(np.prod(var.shape)) * dtype.itemsize
            flat = cupy.ndarray((nbytes // dtype.itemsize,), dtype, ptr)
        else:
            addr, nbytes = self._impl.global_memory(name)
            raw = np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(addr))
            flat = raw.view(dtype)
        return flat.reshape(var.shape) if var.shape is not None and var.base in SCALAR_TYPES else flat

    def set_global(self, name: str, values: Any) -> None:
        """Copy `values` into a `__constant__` or `__device__` variable (shape and dtype must match)."""
        g = self.get_global(name)
        values = _backend.xp().asarray(values)
        if values.shape != g.shape or values.dtype != g.dtype:
            raise ValueError(f"{name} is {g.dtype}{list(g.shape)}, got {values.dtype}{list(values.shape)}")
        g[...] = values

    def module_variables(self) -> list[tuple[str, Any]]:
        """Every variable the kernel's module keeps from one launch to the next (`__device__`, `__constant__`,
        `__managed__`, `static` ones in functions), as (name, bytes): a uint8 array on this backend that aliases
        it. Read from the compiled binary's symbol table (the CUBIN, the emulator's library), not from the source,
        so that no declaration the compiler kept is missed."""
        if self.backend == "gpu":
            import cupy

            cc = cupy.cuda.Device().compute_capability
            out = []
            for name, size in nvrtc_variables(self._source, self.shown, self._options, f"sm_{cc}"):
                try:
                    ptr = self.module.get_global(name)
                except cupy.cuda.driver.CUDADriverError:
                    if "__nv_" in name or "__cuda" in name:  # the toolkit's own (atomics' helpers): not the kernel's
                        continue
                    raise RuntimeError(f"{self.shown}: the driver finds no variable {name} in its module") from None
                out.append((name, cupy.ndarray((size,), cupy.uint8, ptr)))
            return out
        return self._impl.variables()

    @property
    def max_threads_per_block(self) -> int:
        return self._impl.max_threads_per_block if self.backend == "gpu" else 1024

    def convert(self, args: Sequence[Any]) -> list[Any]:
        """Check arguments against the C signature; turn Python scalars into the declared C type."""
        if len(args) != len(self.params):
            sig = ", ".join(p.ctype + " " + p.name for p in self.params)
            raise TypeError(f"{self.name}({sig}) takes {len(self.params)} arguments, got {len(args)}")
        out = []
        gpu = self.backend == "gpu"
        for (p, kind, want), a in zip(self._plan, args):
            if p.is_pointer and a is None:  # a null pointer
                out.append(np.uint64(0) if gpu else None)
            elif p.is_pointer:
                if gpu and isinstance(a, np.ndarray):
                    raise TypeError(
                        f"argument {p.name!r} of {self.name} is a NumPy array in host memory; "
                        "copy it to the GPU first with cudl.xp.asarray(...)")
                if not hasattr(a, "dtype") or not hasattr(a, "data"):
                    raise TypeError(f"argument {p.name!r} of {self.name} is {p.ctype}: pass an array, "
                                    f"not {type(a).__name__}")
                if want and a.dtype not in want:
                    raise TypeError(f"argument {p.name!r} of {self.name} is {p.ctype} but the array is "
                                    f"{a.dtype}: convert it with .astype({want[0].name})")
                if not p.const and not getattr(getattr(a, "flags", None), "writeable", True):
                    raise TypeError(f"argument {p.name!r} of {self.name} is {p.ctype} (the kernel may write "
                                    "through it) but the array is read-only: pass a writable copy, or declare "
                                    f"the parameter const {p.base}* if the kernel only reads it")
                out.append(a)
            else:
                if kind is None:
                    if isinstance(a, (bool, int, float)):  # its size and type would be guesses
                        raise TypeError(f"argument {p.name!r} of {self.name} is a {p.ctype}, which cudl does not "
                                        "know: pass a NumPy value of that exact type (e.g. np.float32(x))")
                    out.append(a)  # struct or vector type passed by value: trust the caller
                elif hasattr(a, "shape") and getattr(a, "ndim", 0) > 0:
                    raise TypeError(f"argument {p.name!r} of {self.name} is a scalar {p.ctype}, got an array")
                else:
                    out.append(kind(a))
        return out

    def __call__(self, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any],
                 shared_mem: int = 0) -> None:
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        if b[0] * b[1] * b[2] > 1024:
            raise ValueError(f"block {b} has {b[0] * b[1] * b[2]} threads; the limit is 1024 per block")
        if b[1] > 1024 or b[2] > 64 or g[0] > 2**31 - 1 or g[1] > 65535 or g[2] > 65535:
            raise ValueError(f"grid {g} / block {b} exceed CUDA's limits (block y <= 1024, z <= 64; "
                             "grid x < 2^31, y and z <= 65535)")
        if self.backend != "gpu":
            self._check_card(int(shared_mem), b)
        elif self.mimics is not None:
            self._check_card(int(shared_mem), b, self.mimics)
        conv = self.convert(args)
        if self.backend == "gpu":
            # above 48 KiB of shared memory per block, static + dynamic, a kernel must opt in to more dynamic
            # shared memory (the static part is read once: a driver query per launch would cost host time)
            if shared_mem and shared_mem + self._static_shared() > 48 * 1024:
                allow_shared(self._impl, shared_mem)
            self._impl(g, b, tuple(conv), shared_mem=shared_mem)
        else:
            self._impl.launch(self.name, g, b, conv, self.params, shared_mem)

    def _check_card(self, dynamic: int, block: tuple[int, int, int], card: dict[str, Any] | None = None) -> None:
        """A launch as the card the emulator (or mimic mode, `card`) stands for allows it: threads, shared memory
        (static + dynamic, up to the opt-in maximum: cudl opts in above 48 KiB) and registers per block."""
        if card is None:
            from .emulator import device

            card = device()
            why = "the CPU emulator enforces the limits of that GPU: CUDL_EMULATOR_DEVICE picks another"
        else:
            why = f"cudl is mimicking a {card['name']} (CUDL_MIMIC): {mimicry.leave_hint()}"
        threads = block[0] * block[1] * block[2]
        static = (self.resources or {}).get("shared", 0)
        if threads > card["max_threads_per_block"]:
            raise ValueError(f"{self.name}: a block of {threads} threads; a {card['name']} allows at most "
                             f"{card['max_threads_per_block']} ({why})")
        if static + dynamic > card["max_smem_per_block_optin"]:
            raise ValueError(
                f"{self.name} asks for {static + dynamic} bytes of shared memory per block ({static} static + "
                f"shared_mem={dynamic}); a {card['name']} allows at most {card['max_smem_per_block_optin']} "
                f"({why})")
        # Registers as the real GPU's compiler allocated them for the mimicked card's PTX (close to that card's
        # own count); the emulator has none. A launch whose block needs more than the card has fails there.
        regs = self.num_regs if self.backend == "gpu" else None
        if regs and regs * threads > card["regs_per_block"]:
            raise ValueError(f"{self.name}: {regs} registers x {threads} threads = {regs * threads} registers per "
                             f"block; a {card['name']} has {card['regs_per_block']} ({why})")

    def __repr__(self) -> str:
        res = "" if self.backend != "gpu" else (
            f", {self.num_regs} registers, {self.shared_bytes} B static shared, {self.local_bytes} B local")
        return f"<kernel {self.name} from {self.shown} on {self.backend}{res}>"


def allow_shared(func: Any, nbytes: int) -> None:
    """Let a CuPy kernel use `nbytes` of dynamic shared memory: above 48 KiB a kernel must opt in
    (cuFuncSetAttribute). `func` is a RawKernel (its compiled Function is `.kernel`) or a Function from
    RawModule.get_function, which has no property for it, so both go through the driver call."""
    import cupy

    driver = cupy.cuda.driver
    function = func if hasattr(func, "ptr") else func.kernel
    attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)  # 8 in CUDA's cuda.h
    driver.funcSetAttribute(function.ptr, attr, int(nbytes))


@functools.lru_cache(maxsize=256)
def _gpu_module(source: str, shown: str, options: tuple[str, ...], names: tuple[str, ...],
                includes: str = "", ptx_arch: str = "") -> Any:
    import cupy

    # kernels_src/ for shared headers; a full toolkit's headers after CuPy's own: some pip layouts of CUDA 13
    # lack crt/mma.h (needed by WMMA).
    extra = tuple(include_options())
    if ptx_arch:  # mimic mode
        return _PtxModule(source, shown, options, names, ptx_arch)
    if any(o.startswith(("-arch=", "--gpu-architecture=")) for o in options):
        return _arch_module(source, shown, options)
    # CuPy caches binaries by source text and options only: the hash of the included headers, in a comment
    # after the last line, makes an edited header compile anew.
    code = with_line_directive(source, shown) + (f"\n// cudl: includes {includes}\n" if includes else "")
    mod = cupy.RawModule(code=code, options=("-std=c++17", *options, *NVRTC_OPTIONS, *extra),
                         name_expressions=names or None)
    try:
        mod.compile()
    except cupy.cuda.compiler.CompileException as exc:
        raise CompileError(f"{shown} does not compile:\n" + format_log(str(exc), source, shown)) from None
    return mod


def _arch_module(source: str, shown: str, options: tuple[str, ...]) -> Any:
    """A module for the -arch the caller names (e.g. sm_90a for wgmma): CuPy adds its own -arch, so the
    CUBIN comes from NVRTC through cuda-bindings and CuPy loads the file."""
    import tempfile

    import cupy

    from .compile import _nvrtc

    _, cubin, _ = _nvrtc(source, shown, ["-std=c++17", *options], (), "cubin", "(NVRTC)")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    return cupy.RawModule(path=f.name)


class _PtxModule:
    """Mimic mode's module: PTX for the mimicked card's virtual architecture (compute_75), which the driver compiles
    for the real GPU. CuPy cannot build it (it passes NVRTC an -arch of its own, for the real GPU; a second
    -arch is an invalid option), so NVRTC runs here and CuPy's RawModule loads the file (cuModuleLoad takes PTX)."""

    def __init__(self, source: str, shown: str, options: tuple[str, ...], names: tuple[str, ...], arch: str):
        import hashlib
        import os
        from pathlib import Path

        import cupy

        from .compile import ptx_for

        ptx, self.lowered = ptx_for(source, shown, arch, options, names)
        folder = Path(os.environ.get("CUDL_CACHE") or Path.home() / ".cache" / "cudl") / "ptx"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{hashlib.sha256(ptx).hexdigest()[:32]}.ptx"  # by content: a rerun reuses its file
        if not path.is_file():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(ptx)
            os.replace(tmp, path)
        self.arch = arch
        try:
            self.raw = cupy.RawModule(path=str(path))
        except Exception as exc:
            self._explain(exc)
            raise

    def get_function(self, name: str) -> Any:
        try:
            return self.raw.get_function(self.lowered.get(name, name))  # C++ and template names are mangled
        except Exception as exc:  # the driver compiles the PTX when the module is first used
            self._explain(exc)
            raise

    @staticmethod
    def _explain(exc: Exception) -> None:
        """Raise a sentence on what to do when the driver refuses the PTX (else return: the caller re-raises)."""
        if "PTX" not in str(exc):
            return
        from cuda.bindings import nvrtc

        version = ".".join(map(str, nvrtc.nvrtcVersion()[1:]))
        raise RuntimeError(f"mimic mode: the driver cannot load the PTX that NVRTC {version} (cuda-bindings) wrote "
                           f"({exc}); a driver loads PTX of its own CUDA version or older: install the cuda-bindings "
                           "and nvidia-cuda-nvrtc of the driver's CUDA version, or update the driver") from exc

    def get_global(self, name: str) -> Any:
        return self.raw.get_global(name)


def _mimic_arch(options: tuple[str, ...], card: dict[str, Any], shown: str) -> str:
    """The virtual architecture of mimic mode; an -arch the caller names for a newer card (sm_90a for wgmma) is an
    error, since the mimicked card could not run that build."""
    arch = mimicry.arch()
    for o in options:
        if o.startswith(("-arch=", "--gpu-architecture=")):
            digits = "".join(c for c in o.split("=", 1)[1] if c.isdigit())
            if digits and int(digits) > int(arch.split("_")[1]):
                raise CompileError(f"{shown}: {o} builds for a newer GPU than the {card['name']} (sm_"
                                   f"{arch.split('_')[1]}) that cudl is mimicking, which could not run it; "
                                   f"{mimicry.leave_hint()}")
    return arch


def load(file_or_source: str, name: str, *, options: Sequence[str] = (),
         name_expressions: Sequence[str] = ()) -> Kernel:
    """Compile kernel `name` from a file under kernels_src/ (or CUDA source text) for this backend.

    `name` may be a template instance such as `"gelu<__half>"`; it is then compiled as a name expression.
    """
    source, shown = resolve(file_or_source)
    names = tuple(dict.fromkeys([*name_expressions, *([name] if "<" in name else [])]))
    options = tuple(options)
    gpu = _backend.on_gpu()
    params = parse_params(source, name, options, emulator=not gpu)
    includes = includes_digest(source, shown)  # a missing header fails here, by name, on both backends
    if gpu:  # every kernel by name expression, so that C++ (mangled) names are found too
        found = [d.name for d in kernel_decls(preprocess(source, options)) if d.template is None and d.at_file_scope]
        unique = [k for k in found if found.count(k) == 1]  # an overloaded name is no name expression
        card = mimicry.active()
        arch = _mimic_arch(options, card, shown) if card else ""
        mod = _gpu_module(source, shown, options, tuple(dict.fromkeys([*unique, *names])), includes, arch)
        return Kernel(name, params, shown, mod.get_function(name), "gpu", mod, source, options, card)
    from . import emulator

    mod = emulator.compile_module(source, shown, options, tuple(dict.fromkeys([*names, name])))
    return Kernel(name, params, shown, mod, "emulator", mod, source, options)
