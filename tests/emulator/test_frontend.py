"""The emulator's front end (issue 8): what it reads from a source, what it refuses as NVRTC would, the GPU limits
it enforces and the Python boundary. GPU-comparable kernels of the same kinds are in test_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl.compile import global_vars, kernel_names, parse_params

pytestmark = pytest.mark.skipif(cudl.on_gpu(), reason="the CPU emulator's front end")


def sig(src: str, name: str, options=()) -> list[tuple]:
    return [(p.name, p.ctype, p.is_pointer, p.base, p.const) for p in parse_params(src, name, tuple(options))]


# ------------------------------------------------------------------------------ reading the source

def test_pointer_parameters_in_every_style():
    src = """__global__ void k(float *const a, float *__restrict b, const float* __restrict__ c,
                               const float *const __restrict__ d, float e[], int n) {}"""
    assert sig(src, "k") == [("a", "float*", True, "float", False), ("b", "float*", True, "float", False),
                             ("c", "const float*", True, "float", True), ("d", "const float*", True, "float", True),
                             ("e", "float*", True, "float", False), ("n", "int", False, "int", False)]


def test_typedefs_and_macros_are_resolved():
    src = """#define T_IN const float
typedef float real;
using index_t = long long;
typedef real* real_ptr;
extern "C" __global__ void k(T_IN* x, real_ptr y, real a, index_t n) {}"""
    assert sig(src, "k") == [("x", "const float*", True, "float", True), ("y", "float*", True, "float", False),
                             ("a", "float", False, "float", False), ("n", "long long", False, "long long", False)]


def test_nested_launch_bounds_and_attributes():
    src = """#define MAXT 256
__global__ void __launch_bounds__(MAXT, (MAXT > 128 ? 2 : 1)) a(int* x) {}
__global__ __launch_bounds__(min(1024, 4 * 64)) void b(int* x) {}
__global__ void __attribute__((noinline)) c(int* x) {}"""
    assert kernel_names(src) == ["a", "b", "c"]
    assert sig(src, "b") == [("x", "int*", True, "int", False)]


def test_inactive_branches_and_options():
    src = """#if USE_DOUBLE
typedef double real;
#else
typedef float real;
#endif
#ifdef NEVER
__global__ void hidden(real* x) {}
#endif
__global__ void k(real* x) {}"""
    assert kernel_names(src) == ["k"]
    assert sig(src, "k")[0][3] == "float" and sig(src, "k", ["-DUSE_DOUBLE=1"])[0][3] == "double"
    with pytest.raises(cudl.CompileError, match="hidden"):
        parse_params(src, "hidden")


def test_namespaces_and_templates():
    src = """namespace ops { template <typename T, int N = 4>
__global__ void scale(T* __restrict__ x, T s) {} }
namespace { __global__ void anon(int* y) {} }"""
    assert kernel_names(src) == ["ops::scale", "anon"]
    assert sig(src, "scale<double>") == [("x", "double*", True, "double", False),
                                         ("s", "double", False, "double", False)]
    with pytest.raises(cudl.CompileError, match="template kernel: name an instance"):
        parse_params(src, "scale")
    assert sig("__global__ void k(__attribute__((unused)) int a, __align__(16) float* b) {}", "k") == [
        ("a", "int", False, "int", False), ("b", "float*", True, "float", False)]


def test_globals_found_with_their_shapes():
    src = """#define R 2
__constant__ float filt[(2 * R + 1) * (2 * R + 1)];
static __device__ unsigned int counter = 0;
__device__ float helper(float x) { return x; }
__constant__ double m[3][4];
namespace ns { __device__ int in_ns; }
extern "C" { __device__ int in_extern_c; }
__global__ void k(int* y) { static __device__ int calls; const char* s = "{"; y[0] = ++calls + *s; }"""
    g = global_vars(src)
    assert {k: (v.base, v.shape) for k, v in g.items()} == {
        "filt": ("float", (25,)), "counter": ("unsigned int", ()), "m": ("double", (3, 4)), "in_extern_c": ("int", ())}


def test_a_static_variable_in_a_kernel_compiles_and_is_kept():
    """A `static __device__` variable in a function or one in a namespace is no file-scope global (no accessor
    for get_global), but the module keeps it between launches and module_variables lists it."""
    src = """namespace ns { __device__ int base = 10; }
extern "C" __global__ void k(int* y) { static __device__ int calls; y[0] = ns::base + calls++; }"""
    k = cudl.load(src, "k")
    y = np.zeros(1, np.int32)
    k(1, 1, (y,))
    k(1, 1, (y,))
    assert y[0] == 11
    found = dict(k.module_variables())
    assert found["_ZZ1kE5calls"].view(np.int32)[0] == 2 and found["_ZN2ns4baseE"].view(np.int32)[0] == 10


STATEFUL = """#define SLOTS 4
typedef unsigned long long u64;
__device__ u64 keys[SLOTS], next_slot;  // an array and a second declarator
static __device__ int hidden = 7;       // internal linkage
__constant__ float w[3] = {1.5f, 2.5f, 3.5f};
__device__ __managed__ int managed;
__device__ const int ro = 5;            // read-only: nothing to keep
/* __device__ int commented_out; */
extern "C" __global__ void k(float* out) {
    out[0] = keys[2] + next_slot + hidden + w[1] + managed + ro;
    ++next_slot;
}
"""


def test_module_variables_are_read_from_the_library():
    """Every writable variable of the module, from the library's symbol table (whatever the declaration looks
    like), as bytes that alias it: a write there is what the next launch reads."""
    k = cudl.load(STATEFUL, "k")
    found = {name: v for name, v in k.module_variables()}
    sizes = {n: v.nbytes for n, v in found.items() if "hidden" in n or n in ("keys", "next_slot", "w", "managed")}
    assert sizes == {"keys": 32, "next_slot": 8, "_ZL6hidden": 4, "w": 12, "managed": 4}, found.keys()
    assert not [n for n in found if "ro" == n or "commented" in n]
    assert found["w"].view(np.float32).tolist() == [1.5, 2.5, 3.5]
    out = np.zeros(1, np.float32)
    found["keys"].view(np.uint64)[2] = 100
    found["next_slot"].view(np.uint64)[0] = 10
    found["managed"].view(np.int32)[0] = 1000
    k(1, 1, (out,))
    assert out[0] == 100 + 10 + 7 + 2.5 + 1000 + 5
    assert found["next_slot"].view(np.uint64)[0] == 11  # the launch's write, seen through the view


def test_module_variables_of_the_race_checks_library_too(monkeypatch):
    """Under the race check launches run in an instrumented library with its own copies of the variables:
    both are listed."""
    monkeypatch.setenv("CUDL_EMULATOR_RACECHECK", "1")
    k = cudl.load(STATEFUL.replace("int ro = 5", "int ro = 6"), "k")
    slots = [v for name, v in k.module_variables() if name == "next_slot"]
    assert len(slots) == 2
    for v in slots:
        v.view(np.uint64)[0] = 40
    out = np.zeros(1, np.float32)
    k(1, 1, (out,))
    assert out[0] == 40 + 7 + 2.5 + 6 and sorted(int(v.view(np.uint64)[0]) for v in slots) == [40, 41]


def test_nvrtc_lists_every_variable_a_module_keeps():
    """On a GPU the names and sizes come from the CUBIN NVRTC builds: C++ names as the driver knows them (static
    ones in functions, namespaces), no string literal of printf."""
    pytest.importorskip("cuda.bindings")
    from cudl.compile import nvrtc_variables

    src = STATEFUL.replace("++next_slot;", 'static __device__ int calls; ++calls; printf("%d", calls);') + \
        "namespace ns { __device__ double d[2]; }\n"
    found = dict(nvrtc_variables(src, "stateful.cu", (), "sm_80"))
    assert found == {"keys": 32, "next_slot": 8, "hidden": 4, "w": 12, "managed": 4, "ro": 4, "_ZZ1kE5calls": 4,
                     "_ZN2ns1dE": 16}, found


def test_module_variables_on_a_gpu_with_a_stand_in_cupy(monkeypatch):
    """The GPU branch: the CUBIN's names for this device's architecture, each looked up in the loaded module
    (cuModuleGetGlobal through CuPy) and viewed as bytes; the toolkit's own helpers may be missing there, a
    variable of the kernel may not."""
    pytest.importorskip("cuda.bindings")
    import sys
    import types

    from cudl.kernel import Kernel

    class DriverError(Exception):
        pass

    looked_up, missing = [], {"__nv_helper"}

    class Module:
        def get_global(self, name):
            looked_up.append(name)
            if name in missing:
                raise DriverError(name)
            return f"ptr:{name}"

    cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(compute_capability="90"),
                                 driver=types.SimpleNamespace(CUDADriverError=DriverError))
    fake = types.SimpleNamespace(cuda=cuda, uint8="u8", ndarray=lambda shape, dtype, ptr: (shape, dtype, ptr))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    src = "__device__ char __nv_helper;  // named as the toolkit's own (atomicExch's, CUDA 13)\n" + STATEFUL
    k = Kernel("k", [], "stateful.cu", None, "gpu", Module(), src, ())
    got = dict(k.module_variables())
    assert got["keys"] == ((32,), "u8", "ptr:keys") and got["w"] == ((12,), "u8", "ptr:w")
    assert "__nv_helper" in looked_up and "__nv_helper" not in got and len(got) == len(looked_up) - 1
    missing.add("keys")
    with pytest.raises(RuntimeError, match="no variable keys"):
        k.module_variables()


def test_only_requested_kernels_when_another_cannot_get_an_entry_point():
    src = """__global__ void over(float* x) { x[0] = 1; }
__global__ void over(double* x) { x[0] = 2; }
extern "C" __global__ void fine(int* y) { y[threadIdx.x] = threadIdx.x; }"""
    y = np.zeros(8, np.int32)
    cudl.load(src, "fine")(1, 8, (y,))
    np.testing.assert_array_equal(y, np.arange(8))


def test_extern_shared_in_other_orders():
    src = """extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y) {
    extern float __shared__ a[];
    extern __shared__ __align__(16) float b[];
    a[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = b[blockDim.x - 1 - threadIdx.x];
}"""
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    cudl.load(src, "k")(1, 32, (x, y), shared_mem=128)
    np.testing.assert_array_equal(y, x[::-1])


# ------------------------------------------------------------------------------ NVRTC parity

@pytest.mark.parametrize("line,nvrtc_says", [
    ("#include <stdio.h>", 'cannot open source file "stdio.h"'),
    ("#include <algorithm>", 'cannot open source file "algorithm"'),
    ("__device__ uint twice(uint x) { return 2 * x; }", 'identifier "uint" is undefined'),
])
def test_sources_nvrtc_rejects_are_rejected(line, nvrtc_says):
    src = f'{line}\nextern "C" __global__ void k(int* x) {{ x[0] = 1; }}\n'
    with pytest.raises(cudl.CompileError, match="NVRTC") as e:
        cudl.load(src, "k")
    assert nvrtc_says in str(e.value) and "<kernel source>:1:" in str(e.value)


INF = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = -INFINITY; }\n'


def test_infinity_names_the_cause_and_the_option_works():
    with pytest.raises(cudl.CompileError, match="CUDART_INF_F"):
        cudl.load(INF, "k")
    x = np.zeros(4, np.float32)
    cudl.load(INF, "k", options=["-DINFINITY=__int_as_float(0x7f800000)"])(1, 4, (x,))
    assert np.all(x == -np.inf)


def test_infinity_hint_without_nvrtc(monkeypatch):
    monkeypatch.setenv("CUDL_EMULATOR_NVRTC", "0")
    with pytest.raises(cudl.CompileError, match="g\\+\\+(.|\n)*CUDART_INF_F"):
        cudl.load(INF + "// without NVRTC\n", "k")


def test_math_constants_header():
    src = '#include <math_constants.h>\nextern "C" __global__ void k(float* x) { x[0] = CUDART_INF_F; }\n'
    x = np.zeros(1, np.float32)
    cudl.load(src, "k")(1, 1, (x,))
    assert x[0] == np.inf


def test_nvrtc_reports_resources():
    src = 'extern "C" __global__ void k(float* x) { __shared__ float s[300]; s[threadIdx.x] = 1; x[0] = s[3]; }'
    r = cudl.load(src, "k").resources
    assert r["shared"] == 1200 and r["regs"] > 0


def test_dynamic_parallelism_refused():
    src = """__global__ void child(int* x) { x[0] = 1; }
__global__ void parent(int* x) { child<<<1, 1>>>(x); }"""
    with pytest.raises(cudl.EmulatorUnsupported, match="dynamic parallelism"):
        cudl.load(src, "parent")


def test_unsupported_code_in_an_inactive_branch_is_fine():
    src = """#define LANE_ASM(l) asm volatile("mov.u32 %0, %%laneid;" : "=r"(l))
extern "C" __global__ void lane(int* out) {
#ifdef USE_PTX
    unsigned l; LANE_ASM(l);
#else
    unsigned l = threadIdx.x % 32;
#endif
    out[threadIdx.x] = l;
}"""
    out = np.zeros(64, np.int32)
    cudl.load(src, "lane")(1, 64, (out,))
    np.testing.assert_array_equal(out, np.arange(64) % 32)
    with pytest.raises(cudl.EmulatorUnsupported, match=r"inline PTX asm: mov.u32 \(<kernel source>:4\)"):
        cudl.load(src, "lane", options=["-DUSE_PTX"])


def test_host_code_launch_named():
    src = """__global__ void k(int* x) { x[0] = 1; }
int main() { int* x; k<<<1, 1>>>(x); return 0; }"""
    with pytest.raises(cudl.CompileError, match=r"<kernel source>:2: a kernel launch <<<...>>> in host code"):
        cudl.load(src, "k")


def test_grid_sync_refused_at_the_sync():
    src = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(int* x) {
    cg::grid_group g = cg::this_grid();
    x[g.thread_rank()] = 1;
    g.sync();
}"""
    with pytest.raises(cudl.EmulatorUnsupported, match=r"grid sync at <kernel source>:6"):
        cudl.load(src, "k")(2, 32, (np.zeros(64, np.int32),))


def test_cg_errors_name_the_kernels_line():
    src = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(int* x) {
    cg::thread_block block = cg::this_thread_block();
    if (block.thread_rank() < 8) block.sync();
    x[0] = 1;
}"""
    with pytest.raises(cudl.KernelFault, match="<kernel source>:5"):
        cudl.load(src, "k")(1, 32, (np.zeros(1, np.int32),))


# ------------------------------------------------------------------------------ limits of the mimicked GPU

def test_device_info_names_the_mimicked_gpu():
    assert cudl.device_info()["mimics"]["name"] == "Tesla T4"
    assert "Tesla T4" in cudl.banner()


def test_static_shared_memory_above_48_kib_refused():
    src = 'extern "C" __global__ void k(float* x) { __shared__ float s[12289]; s[threadIdx.x] = 1; x[0] = s[5]; }'
    with pytest.raises(cudl.CompileError, match="too much shared data"):
        cudl.load(src, "k")


def test_dynamic_shared_memory_above_the_opt_in_limit_refused():
    src = 'extern "C" __global__ void k(float* x) { extern __shared__ float s[]; s[0] = 1; x[0] = s[0]; }'
    k = cudl.load(src, "k")
    k(1, 1, (np.zeros(1, np.float32),), shared_mem=64 * 1024)
    with pytest.raises(ValueError, match="Tesla T4 allows at most 65536"):
        k(1, 1, (np.zeros(1, np.float32),), shared_mem=64 * 1024 + 4)


def test_block_limits():
    k = cudl.load('extern "C" __global__ void k(int* x) { }', "k")
    with pytest.raises(ValueError, match="1024"):
        k(1, (32, 33), (np.zeros(1, np.int32),))
    with pytest.raises(ValueError, match="z <= 64"):
        k(1, (1, 1, 65), (np.zeros(1, np.int32),))


# ------------------------------------------------------------------------------ the Python boundary

SCALE = """typedef float real;
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, real a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}"""


def test_read_only_output_refused_read_only_input_accepted():
    k = cudl.load(SCALE, "scale")
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    x.flags.writeable = False
    k(1, 8, (x, y, 3.0, 8))  # a read-only input is fine; the typedef'd scalar arrives as 3.0
    np.testing.assert_array_equal(y, 3 * x)
    y.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        k(1, 8, (x, y, 3.0, 8))


def test_python_scalar_for_an_unknown_type_refused():
    src = 'struct P { float a; }; extern "C" __global__ void k(P p, float* y) { y[0] = p.a; }'
    with pytest.raises(TypeError, match="np.float32"):
        cudl.load(src, "k")(1, 1, (1.5, np.zeros(1, np.float32)))


def test_set_global_checks_shape_and_dtype():
    src = '__constant__ float w[4];\nextern "C" __global__ void k(float* y) { y[threadIdx.x] = w[threadIdx.x]; }'
    k = cudl.load(src, "k")
    with pytest.raises(ValueError, match=r"float32\[4\]"):
        k.set_global("w", np.zeros(5, np.float32))
    with pytest.raises(KeyError, match="nope"):
        k.get_global("nope")


def test_device_info_follows_the_emulated_device(monkeypatch):
    """device_info()'s `mimics` is the device the emulator enforces now: a test that set CUDL_EMULATOR_DEVICE
    while device_info() was first called must not leave its GPU to every later test of the process."""
    monkeypatch.setenv("CUDL_EMULATOR_DEVICE", "H100")
    assert cudl.device_info()["mimics"]["name"] == "NVIDIA H100"
    monkeypatch.delenv("CUDL_EMULATOR_DEVICE")
    assert cudl.device_info()["mimics"]["name"] == "Tesla T4"
