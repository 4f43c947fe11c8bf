"""Occupancy: how many blocks and warps of a kernel fit on one SM at once, and which resource runs out first.

    from cudl.occupancy import occupancy, of_kernel
    occupancy(regs_per_thread=40, smem_per_block=0, threads_per_block=256, device="H100")
    of_kernel(k, 256)            # registers and static shared memory as the compiler reported them
    compare([(k, 256), ...])     # on a GPU: this calculator next to the CUDA occupancy API

The rules are those of the CUDA occupancy calculator (`cuda_occupancy.h` in the CUDA toolkit): registers
are allocated per warp in units of 256 and split over the SM's 4 sub-partitions; shared memory is
allocated per block in units of 128 B (256 B before sm_80), plus 1 KiB the driver reserves per block
on sm_80 and newer; and an SM holds at most a fixed number of warps and of blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

WARP = 32


@dataclass(frozen=True)
class SMLimits:
    """What one SM of a compute capability can hold (CUDA C Programming Guide, compute capabilities table)."""

    cc: str
    gpus: str  # examples, for the reader
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes of shared memory an SM can give to blocks (largest carveout)
    smem_per_block: int  # largest shared memory one block may use, after opting in (bytes)
    smem_reserved_per_block: int  # taken by the driver from every block (sm_80+: 1 KiB)
    smem_granularity: int  # a block's shared memory is rounded up to a multiple of this
    regs_per_sm: int = 64 * 1024  # 32-bit registers
    regs_per_block: int = 64 * 1024
    max_regs_per_thread: int = 255
    reg_granularity: int = 256  # registers are allocated per warp, in units of 256
    sub_partitions: int = 4  # an SM is 4 quadrants, each with a quarter of the register file
    max_threads_per_block: int = 1024
    warp_size: int = WARP

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


KIB = 1024
LIMITS: dict[str, SMLimits] = {
    "7.5": SMLimits("7.5", "T4, RTX 20xx", 1024, 16, 64 * KIB, 64 * KIB, 0, 256),
    "8.0": SMLimits("8.0", "A100, A30", 2048, 32, 164 * KIB, 163 * KIB, KIB, 128),
    "8.6": SMLimits("8.6", "A10G, A40, RTX 30xx", 1536, 16, 100 * KIB, 99 * KIB, KIB, 128),
    "8.9": SMLimits("8.9", "L4, L40S, RTX 40xx", 1536, 24, 100 * KIB, 99 * KIB, KIB, 128),
    "9.0": SMLimits("9.0", "H100, H200", 2048, 32, 228 * KIB, 227 * KIB, KIB, 128),
}

RESOURCES = ("warps", "blocks", "registers", "shared memory")  # the order in which ties are named


def limits(device: Any = None) -> SMLimits:
    """SM limits for `device`: None (the current GPU), a compute capability ('8.6', 'sm_86', 8.6),
    a GPU name ('T4', 'NVIDIA H100 80GB HBM3') or an SMLimits."""
    if isinstance(device, SMLimits):
        return device
    if device is None:
        from .backend import on_gpu

        if not on_gpu():
            raise ValueError("there is no GPU to read limits from: name one, e.g. device='T4' or device='9.0' "
                             f"(known compute capabilities: {', '.join(LIMITS)})")
        return device_limits()
    cc = _to_cc(device)
    if cc not in LIMITS:
        raise ValueError(f"no SM limits for compute capability {cc} (known: {', '.join(LIMITS)}); "
                         "on that GPU itself, device=None reads them from the driver")
    return LIMITS[cc]


def _to_cc(device: Any) -> str:
    if isinstance(device, (int, float)) and not isinstance(device, bool):
        return f"{float(device):.1f}"
    text = str(device).strip()
    low = text.lower().removeprefix("sm_").removeprefix("sm")
    if low.replace(".", "").isdigit():
        return low if "." in low else f"{low[:-1]}.{low[-1]}"
    from .ceilings import datasheet

    row = datasheet(text)
    if row is None:
        raise ValueError(f"unknown device {device!r}: give a compute capability such as '8.6' or a GPU name "
                         "from cudl.DATASHEET")
    return f"{row['cc']:.1f}"


def device_limits() -> SMLimits:
    """The current GPU's limits, read from the driver (what the table knows only for its rows)."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    cc = f"{props['major']}.{props['minor']}"
    base = LIMITS.get(cc) or LIMITS["9.0"]
    smem_gran = 256 if props["major"] < 8 else 128  # cuda_occupancy.h: cudaOccSMemAllocationGranularity
    return replace(
        base, cc=cc, gpus=props["name"].decode(),
        max_threads_per_sm=props["maxThreadsPerMultiProcessor"],
        max_blocks_per_sm=props.get("maxBlocksPerMultiProcessor", base.max_blocks_per_sm),
        smem_per_sm=props["sharedMemPerMultiprocessor"],
        smem_per_block=props.get("sharedMemPerBlockOptin", base.smem_per_block),
        smem_reserved_per_block=props.get("reservedSharedMemPerBlock", base.smem_reserved_per_block),
        smem_granularity=smem_gran, regs_per_sm=props["regsPerMultiprocessor"],
        regs_per_block=props["regsPerBlock"], max_threads_per_block=props["maxThreadsPerBlock"],
        warp_size=props["warpSize"])


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, what each resource allows, and which one limits."""

    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    limiters: tuple[str, ...]  # the resources that allow exactly blocks_per_sm (ties are all named)
    blocks_allowed: dict[str, int]  # blocks per SM each resource alone would allow
    regs_per_block: int  # registers allocated to one block (after rounding)
    smem_per_block: int  # shared memory allocated to one block (after rounding, reserve included)
    threads_per_block: int
    cc: str

    @property
    def fraction(self) -> float:
        """Active warps / the most warps an SM can hold."""
        return self.warps_per_sm / self.max_warps_per_sm

    @property
    def limiter(self) -> str:
        return " and ".join(self.limiters)

    def __str__(self) -> str:
        allowed = ", ".join(f"{k} {'-' if v >= 10**6 else v}" for k, v in self.blocks_allowed.items())
        blocks = f"{self.blocks_per_sm} block{'' if self.blocks_per_sm == 1 else 's'}"
        return (f"{blocks} x {self.threads_per_block} threads = {self.warps_per_sm}/"
                f"{self.max_warps_per_sm} warps per SM ({100 * self.fraction:.0f}% occupancy) on sm_"
                f"{self.cc.replace('.', '')}, limited by {self.limiter} (blocks allowed by {allowed})")

    __repr__ = __str__


def occupancy(regs_per_thread: int, smem_per_block: int, threads_per_block: int, device: Any = None) -> Occupancy:
    """Blocks and warps of one kernel resident per SM, from its registers per thread, shared memory per block
    (static + dynamic, bytes) and block size, with the allocation rules of the CUDA occupancy calculator."""
    lim = limits(device)
    if not 1 <= threads_per_block <= lim.max_threads_per_block:
        raise ValueError(f"a block has 1 to {lim.max_threads_per_block} threads, not {threads_per_block}")
    if not 0 <= regs_per_thread <= lim.max_regs_per_thread:
        raise ValueError(f"the compiler gives a thread 0 to {lim.max_regs_per_thread} registers, "
                         f"not {regs_per_thread}")
    if smem_per_block < 0:
        raise ValueError("shared memory per block cannot be negative")
    unlimited = 10**9
    warps_per_block = -(-threads_per_block // lim.warp_size)

    # Threads: an SM holds at most max_threads_per_sm threads, counted in whole warps.
    by_warps = lim.max_warps_per_sm // warps_per_block

    # Registers: allocated per warp in units of 256; each of the 4 sub-partitions holds a quarter of the
    # register file and whole warps only. A block also may not use more than regs_per_block.
    regs_per_warp = _round_up(regs_per_thread * lim.warp_size, lim.reg_granularity)
    regs_block = regs_per_warp * warps_per_block
    if regs_per_warp == 0:
        by_regs = unlimited
    elif max(regs_block, regs_per_warp * _round_up(warps_per_block, lim.sub_partitions)) > lim.regs_per_block:
        by_regs = 0  # the launch fails: "too many resources requested for launch"
    else:
        warps_per_quadrant = (lim.regs_per_sm // lim.sub_partitions) // regs_per_warp
        by_regs = warps_per_quadrant * lim.sub_partitions // warps_per_block

    # Shared memory: the driver reserves a little per block; the total is rounded up to the granularity.
    smem_block = _round_up(smem_per_block + lim.smem_reserved_per_block, lim.smem_granularity)
    if smem_block > lim.smem_per_block + lim.smem_reserved_per_block:
        by_smem = 0  # more than one block may ever use
    else:
        by_smem = lim.smem_per_sm // smem_block if smem_block else unlimited

    allowed = {"warps": by_warps, "blocks": lim.max_blocks_per_sm, "registers": by_regs, "shared memory": by_smem}
    blocks = min(allowed.values())
    limiters = tuple(r for r in RESOURCES if allowed[r] == blocks)
    return Occupancy(blocks, blocks * warps_per_block, lim.max_warps_per_sm, limiters, allowed, regs_block,
                     smem_block, threads_per_block, lim.cc)


def of_kernel(k: Any, threads_per_block: int, dynamic_smem: int = 0, device: Any = None) -> Occupancy:
    """Occupancy of a compiled cudl Kernel (registers and static shared memory as the compiler reports them)."""
    if k.num_regs is None:
        raise ValueError(f"{k.name} runs on the CPU emulator, which has no registers to count: "
                         "pass the numbers to cudl.occupancy.occupancy(...) yourself")
    return occupancy(k.num_regs, k.shared_bytes + dynamic_smem, threads_per_block, device)


def cuda_api(k: Any, threads_per_block: int, dynamic_smem: int = 0) -> int:
    """Blocks per SM according to the driver (cuOccupancyMaxActiveBlocksPerMultiprocessor); GPU only."""
    from .backend import require_gpu

    require_gpu("cudl.occupancy.cuda_api")
    import cupy

    from .kernel import allow_shared

    func = getattr(k._impl, "kernel", k._impl)  # a CuPy Function (RawModule.get_function) or RawKernel.kernel
    if dynamic_smem > 48 * 1024:  # like a launch through cudl: opt in to more dynamic shared memory first
        allow_shared(func, dynamic_smem)
    return cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(func.ptr, threads_per_block, dynamic_smem)


def compare(launches: Sequence[tuple[Any, ...]], device: Any = None, show: bool = True) -> list[dict[str, Any]]:
    """For each (kernel, threads_per_block[, dynamic_smem]): this calculator next to the CUDA occupancy API.

    Prints a table (when `show`) and returns its rows; the column `cuda` is None without a GPU.
    """
    from .backend import on_gpu

    rows = []
    for launch in launches:
        k, threads, dyn = (*launch, 0)[:3]
        occ = of_kernel(k, threads, dyn, device)
        api = cuda_api(k, threads, dyn) if on_gpu() and device is None else None
        rows.append(dict(kernel=k.name, threads=threads, regs=k.num_regs, smem=k.shared_bytes + dyn,
                         blocks=occ.blocks_per_sm, cuda=api, warps=occ.warps_per_sm,
                         occupancy=occ.fraction, limiter=occ.limiter, agree=api is None or api == occ.blocks_per_sm))
    if show:
        print(format_table(rows))
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows of `compare` as an aligned text table."""
    head = ["kernel", "threads", "regs", "smem B", "blocks/SM", "CUDA API", "warps/SM", "occupancy", "limited by"]
    body = [[r["kernel"], r["threads"], r["regs"], r["smem"], r["blocks"], "-" if r["cuda"] is None else r["cuda"],
             r["warps"], f"{100 * r['occupancy']:.0f}%", r["limiter"]] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) if i in (0, 8) else str(x).rjust(w) for i, (x, w) in
                       enumerate(zip(line, widths))) for line in [head, *body]]
    return "\n".join(lines)


def limits_table(devices: Sequence[Any] = tuple(LIMITS)) -> str:
    """The per-SM limits of several compute capabilities side by side, as text."""
    lims = [limits(d) for d in devices]
    rows = [("compute capability", [x.cc for x in lims]), ("examples", [x.gpus for x in lims]),
            ("max warps / SM", [x.max_warps_per_sm for x in lims]),
            ("max blocks / SM", [x.max_blocks_per_sm for x in lims]),
            ("registers / SM", [x.regs_per_sm for x in lims]),
            ("shared memory / SM (KiB)", [x.smem_per_sm // KIB for x in lims]),
            ("shared memory / block (KiB)", [x.smem_per_block // KIB for x in lims]),
            ("reserved / block (B)", [x.smem_reserved_per_block for x in lims]),
            ("shared memory unit (B)", [x.smem_granularity for x in lims])]
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(str(r[1][i])) for r in rows) for i in range(len(lims))]
    return "\n".join(r[0].ljust(w0) + "  " + "  ".join(str(v).rjust(w) for v, w in zip(r[1], widths)) for r in rows)


def table_matches_device() -> list[str]:
    """On a GPU whose compute capability is in LIMITS: the fields where the table and the driver disagree."""
    dev = device_limits()
    if dev.cc not in LIMITS:
        return []
    ref = LIMITS[dev.cc]
    return [f"{f.name}: table {getattr(ref, f.name)}, driver {getattr(dev, f.name)}" for f in fields(SMLimits)
            if f.name != "gpus" and getattr(ref, f.name) != getattr(dev, f.name)]

