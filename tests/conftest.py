"""Test configuration: without a GPU, everything runs on the CPU emulator; GPU-only tests are not collected."""

import os

os.environ.setdefault("CUDL_BACKEND", "emulator")
os.environ.setdefault("MPLBACKEND", "Agg")

# tests/gpu needs a real GPU (`make gpu-test`); tests/mutants holds kernels, not tests.
collect_ignore = ["mutants"] + ([] if os.environ["CUDL_BACKEND"] == "gpu" else ["gpu"])

# Load NVRTC 13 (cuda-bindings) before tests/nvrtc12.py loads libnvrtc.so.12 through ctypes: cuda-pathfinder
# reuses an NVRTC that is already in the process, so the other order compiles CUDA 13 headers with NVRTC 12.
try:
    from cuda.bindings import nvrtc as _nvrtc

    _nvrtc.nvrtcVersion()
except ImportError:
    pass


import random  # noqa: E402
import zlib  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# ------------------------------------------------------------------------------ seeded randomness
# Tests (and the graders and cudl.randn they call) draw "fresh" random inputs with np.random.default_rng().
# A failure on such inputs must be reproducible, so every test runs under a seed derived from one run-wide
# seed and the test's id: CUDL_TEST_SEED=<printed seed> reruns a failing test on the same inputs, alone
# or in any order, with or without xdist. Without CUDL_TEST_SEED each run draws a new run-wide seed, so
# the suite keeps testing fresh inputs (the seed is in the header and in every failure report).
SEED_VAR = "CUDL_TEST_SEED"
_real_default_rng = np.random.default_rng
_seeds: list[np.random.SeedSequence] = []  # the running test's last; the run's own outside tests


def _default_rng(seed=None):
    """np.random.default_rng, with an unseeded call drawing the next child of the running test's seed."""
    if seed is None and _seeds:
        seed = _seeds[-1].spawn(1)[0]
    return _real_default_rng(seed)


def pytest_configure(config):
    # Set before xdist starts its workers, which inherit it: the whole run shares one seed.
    os.environ.setdefault(SEED_VAR, str(random.SystemRandom().randrange(2**32)))
    np.random.default_rng = _default_rng
    _seeds[:] = [np.random.SeedSequence(int(os.environ[SEED_VAR]))]  # draws at import (module-level RNGs)


def pytest_report_header(config):
    return f"random inputs: {SEED_VAR}={os.environ[SEED_VAR]} (set it to rerun on the same inputs)"


def seed_material(nodeid: str) -> list[int]:
    """The seed material of one test: the run-wide seed and a checksum of the test's id."""
    return [int(os.environ[SEED_VAR]), zlib.crc32(nodeid.encode())]


@pytest.fixture(autouse=True)
def _seeded_randomness(request):
    """Seed numpy (default_rng, the legacy global state) and `random` per test, from seed_material()."""
    material = seed_material(request.node.nodeid)
    np.random.seed(material)
    random.seed(str(material))
    _seeds.append(np.random.SeedSequence(material))
    yield
    _seeds.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.sections.append(("random inputs", f"rerun on the same inputs: {SEED_VAR}={os.environ[SEED_VAR]} "
                                                 f"pytest '{item.nodeid}'"))
    return report


@pytest.fixture
def hopper():
    """Skips the test unless it runs on an sm_90 GPU (H100, H200): wgmma and TMA exist nowhere else, and the
    emulator does not run them."""
    import cudl

    if not cudl.on_gpu() or cudl.device_info()["cc"] != "9.0":
        pytest.skip("wgmma and TMA run on sm_90 GPUs only (not on the emulator)")


@pytest.fixture
def mutated_kernel(monkeypatch):
    """`mutated_kernel(slug, name, old, new, race=False, late_copy=False)`: the source of
    kernels_src/<slug>/<name>.cu with the one line `old` replaced by `new` (the line must still be there,
    once). A race mutant (a missing barrier) runs under the emulator's race check; a late-copy mutant (a
    missing cp.async wait_group) fails on the emulator, which lands cp.async data only at the wait. On a
    GPU both are skipped: a race, or a copy still in flight, shows there only by chance."""
    import cudl
    from cudl.compile import KERNELS_DIR

    def make(slug: str, name: str, old: str, new: str, race: bool = False, late_copy: bool = False) -> str:
        if late_copy and cudl.on_gpu():
            pytest.skip("a missing cp.async wait shows on a GPU only by chance (the copy may land in time)")
        if race:
            if cudl.on_gpu():
                pytest.skip("a missing barrier shows on a GPU only by chance")
            monkeypatch.setenv("CUDL_EMULATOR_RACECHECK", "1")
        src = (KERNELS_DIR / slug / f"{name}.cu").read_text()
        assert src.count(old) == 1, f"the line to edit is no longer once in {slug}/{name}.cu: {old!r}"
        return src.replace(old, new)

    return make


# ------------------------------------------------------------------------------ tests that time themselves
# `make test` runs the suite on every core (pytest-xdist); these compare a wall-clock time with a bound (a
# launch's seconds, a startup timeout), so they run alone afterwards (`-m serial`), where a busy neighbour
# cannot make them late. Each of the last three failed in a parallel run on a loaded 2-core machine.
SERIAL = ("tests/emulator/test_speed.py::", "tests/emulator/test_watchdog.py::",
          "tests/test_graders.py::test_hung_kernel_is_reported_within_15_s",
          "tests/test_graders.py::test_solution_passes_well_inside_the_launch_limit",  # launch < 15 s
          "tests/emulator/test_faults.py::test_parallel_compiles_share_the_cache",  # 3 cold builds in 120 s
          "tests/kernels/test_14_multi_gpu.py::test_ray_train_cpu_workers")  # Ray's node startup timeout


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


def pytest_ignore_collect(collection_path, config):
    """Under `-m serial` alone, import no test module without serial tests (some import torch)."""
    if config.getoption("markexpr") == "serial" and collection_path.suffix == ".py":
        rel = collection_path.resolve().relative_to(config.rootpath.resolve()).as_posix()
        return not any(s.startswith(f"{rel}::") for s in SERIAL)
    return None
