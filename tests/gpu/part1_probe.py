"""One-off GPU probe for the Part I chapters (helper part1-chapters): the SASS, Nsight Compute and
compute-sanitizer facts the chapters' new cells produce, run the same way. Prints a short table."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cudl
from cudl.ncu import ncu
from cudl.sass import access_widths, opcodes, sass

t0 = time.time()
print(cudl.banner())
listing = sass("01-first-kernel/vector_add.cu", "vector_add")
print("vector_add global ops:", sorted({op for op in opcodes(listing or "") if op.startswith(("LDG", "STG"))}))
for name in ("matmul_5_2d_blocktile", "matmul_6_vectorized", "matmul_7_warptile", "matmul_8_double_buffered"):
    listing = sass(f"05-matmul/{name}.cu", name)
    if listing:
        ops = opcodes(listing)
        print(name, access_widths(listing), "FFMA", ops.count("FFMA"), "total", len(ops))
print(f"[{time.time() - t0:.0f}s]")

S = 4096
LAUNCH = {"matmul_5_2d_blocktile": ((256,), (128, 128)), "matmul_6_vectorized": ((256,), (128, 128)),
          "matmul_7_warptile": ((256,), (128, 128)), "matmul_8_double_buffered": ((256,), (128, 256))}
SHARED = ["bank_conflicts_ld", "bank_conflicts_st",
          "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
          "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"]
for name, (block, (bm, bn)) in LAUNCH.items():
    grid = ((S + bn - 1) // bn, (S + bm - 1) // bm)
    code = f"""
A, B, C = cudl.randn(({S}, {S})), cudl.randn(({S}, {S})), cudl.poisoned(({S}, {S}))
cudl.load("05-matmul/{name}.cu", "{name}")({grid}, {block}, ({S}, {S}, {S}, A, B, C))
"""
    r = ncu(code, kernel=name, metrics=SHARED)
    if r:
        print(name, {k: r.get(k) for k in SHARED}, "stalls", r.stalls(), "dur_us", r.duration_us)
print(f"[{time.time() - t0:.0f}s]")

info = cudl.device_info()
sms = info["sms"]
for kname in ("copy_grid_stride", "copy_grid_stride_ilp4"):
    code = f"""
n = {2**26}
src, dst = cudl.randn(n), cudl.poisoned(n)
k = cudl.load("02-execution-model/copy_inflight.cu", "{kname}")
k(({sms * 2},), (128,), (src, dst, n))
"""
    r = ncu(code, kernel=kname)
    if r:
        print(kname, "dram%", r.dram_pct, "occ", r.occupancy_pct, "stalls", r.stalls())
wave = sms * (info["max_threads_per_sm"] // 256)
NCU_GELU = """
n = 2**26
x, y = cudl.randn(n).astype(np.float16), xp.empty(n, np.float16)
k = cudl.load("03-elementwise/{file}", "{name}<__half>", name_expressions=["{name}<__half>"])
k(({grid},), (256,), (x, y, n))
"""
for file, name in (("activations.cu", "gelu_erf_forward"), ("gelu_vectorized.cu", "gelu_forward_vec")):
    r = ncu(NCU_GELU.format(file=file, name=name, grid=8 * wave), kernel=name,
            metrics=["sectors_per_request", "smsp__inst_executed.sum"])
    if r:
        print(name, r.get("sectors_per_request"), r.get("smsp__inst_executed.sum"), "dram%", r.dram_pct)
NCU_TREE = """
n = 2**24
x, partials = cudl.randn(n), xp.empty(n // 256, np.float32)
k = cudl.load("04-reductions/{file}", "{name}")
k((n // 256,), (256,), (x, partials, n), shared_mem={shared})
"""
for file, name, shared in (("sum_2_interleaved.cu", "sum_interleaved", 1024),
                           ("sum_3_sequential.cu", "sum_sequential", 1024),
                           ("sum_4_shuffle.cu", "sum_shuffle", 0)):
    r = ncu(NCU_TREE.format(file=file, name=name, shared=shared), kernel=name,
            metrics=["smsp__thread_inst_executed_per_inst_executed.ratio", "smsp__inst_executed.sum"])
    if r:
        print(name, r.get("smsp__thread_inst_executed_per_inst_executed.ratio"), r.get("smsp__inst_executed.sum"))
print(f"[{time.time() - t0:.0f}s]")

from cudl.compile import resolve  # noqa: E402

racy_src = (resolve("04-reductions/sum_3_sequential.cu")[0].replace("sum_sequential", "sum_racy")
            .replace("        }\n        __syncthreads();\n", "        }\n"))
assert racy_src.count("__syncthreads()") == 1
RACY_SCRIPT = """
import sys
import cudl
k = cudl.load(open(sys.argv[1]).read(), "sum_racy")
x, out = cudl.randn(1024), cudl.poisoned(4)
k((4,), (256,), (x, out, 1024), shared_mem=256 * 4)
cudl.sync()
"""
sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
with tempfile.TemporaryDirectory() as tmp:
    Path(tmp, "racy.cu").write_text(racy_src)
    Path(tmp, "racy.py").write_text(RACY_SCRIPT)
    root = str(Path(cudl.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    try:
        proc = subprocess.run([sanitizer, "--tool", "racecheck", "--print-limit", "2", sys.executable,
                               "racy.py", "racy.cu"], cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=200)
        out = proc.stdout + proc.stderr
        print("\n".join([ln for ln in out.splitlines() if ln.startswith("=========")][:16]))
    except Exception as exc:  # noqa: BLE001
        print("sanitizer failed:", exc)
print(f"[{time.time() - t0:.0f}s] done")
