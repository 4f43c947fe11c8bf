"""Errors that cudl raises, each with a message that says what to do next."""


class CudlError(Exception):
    """Base class: everything cudl raises on purpose."""


class CompileError(CudlError):
    """A kernel did not compile; the message points at `file:line` with the offending source."""


class EmulatorUnsupported(CudlError):
    """The CPU emulator cannot run this kernel (inline PTX, cp.async, ...)."""


class KernelFault(CudlError):
    """A kernel misbehaved at run time: out-of-bounds access, divergent barrier, crash."""


class KernelTimeout(KernelFault):
    """A launch made no progress (a spin-wait or an endless loop): stopped by the emulator's watchdog."""


class GpuOnly(CudlError):
    """The call measures GPU performance and there is no GPU (the emulator only checks correctness)."""
