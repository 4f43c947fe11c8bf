# CUDA for Deep Learning: `make book` builds the website, `make test` runs the tests (no GPU needed).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(wildcard chapters/*.ipynb) $(wildcard solutions/*.ipynb)

.PHONY: all venv test-extras browser book test lint sync lab execute gpu-test gpu-test-mimic clean

all: book

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	touch $@

venv: $(STAMP)

# PyTorch (CPU build) and Ray Train for the tests that run chapter 14's multi-process code on CPU
# workers (gloo): the ring all-reduce, DDP, the collectives and Ray Train's TorchTrainer. torch 2.13.0
# is pinned because its CPU wheel lies on the CI machines' disk (an unpinned torch from PyPI is a CUDA
# build of several GB); a venv that already has torch keeps it. `make test TEST_EXTRAS=0` skips this
# install, and those tests are then skipped with the reason.
TEST_EXTRAS ?= 1
EXTRAS_STAMP := $(VENV)/.extras-installed

$(EXTRAS_STAMP): $(STAMP)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q "ray[train]"
	touch $@

test-extras: $(if $(filter 1,$(TEST_EXTRAS)),$(EXTRAS_STAMP))

# Debian's chromium for the browser test; installed when missing and we may (root, apt).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium not installed: the browser test will be skipped (install Debian's chromium to run it)"

book: venv
	$(BIN)/jupyter-book build --warningiserror --keep-going .
	@echo "open _build/html/index.html"

lint: venv
	$(BIN)/ruff check cudl tests

# Unit tests, compile tests, notebook checks, and every chapter/solution notebook under the CPU emulator.
# The tests run in parallel, one pytest-xdist worker per CPU (`logical`: `auto` would count physical cores
# only, 1 on a VM whose 2 CPUs are hyperthreads; `make test JOBS=1`: one process, in order):
# tests marked `serial` (they time themselves, see tests/conftest.py) run alone afterwards, and each notebook
# runs whole on one worker (--dist loadscope: its cells share one kernel). The workers share the emulator's
# cache of compiled kernels ($CUDL_CACHE or ~/.cache/cudl), so a kernel built by one is reused by all.
JOBS ?= logical
PARALLEL = $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist $(1))
# Bytecode is compiled once first: where PYTHONDONTWRITEBYTECODE is set (as on the CI machines) every Python process
# of the run (~500 grading processes, the notebook kernels, the workers) would otherwise compile cudl from source
# (0.71 s instead of 0.57 s of CPU to start a grading process).
test: venv test-extras browser lint
	$(BIN)/python -m compileall -q cudl kernels_src tests
	$(BIN)/python -m cudl.nbtools check
	$(BIN)/jupyter-book build --all --warningiserror --keep-going . >/dev/null
	CUDL_BOOK_BUILT=1 CUDL_BACKEND=emulator $(BIN)/pytest -q $(call PARALLEL,worksteal) --timeout=1800 -m "not serial" --durations=20 tests
	CUDL_BOOK_BUILT=1 CUDL_BACKEND=emulator $(BIN)/pytest -q --timeout=1800 -m serial --durations=10 tests
	$(if $(NOTEBOOKS),CUDL_BACKEND=emulator $(BIN)/pytest -q $(call PARALLEL,loadscope) -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-cell-timeout=900 $(NOTEBOOKS))

# Rewrite bootstrap cells from _config.yml, pair chapters/solutions .md -> .ipynb, regenerate exercises.
sync: venv
	$(BIN)/python -m cudl.nbtools sync

# JupyterLab on the whole book (chapters/, exercises/, solutions/); extra options through LAB_ARGS, e.g.
# `make lab LAB_ARGS="--no-browser --port=8899"` on a remote machine. Jupyter refuses to run as root without
# --allow-root (Docker images, cloud notebooks, CI runners run as root), so root gets it, and nobody else.
LAB_STAMP := $(VENV)/.lab-installed
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

$(LAB_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q "jupyterlab>=4"
	touch $@

lab: $(LAB_STAMP)
	$(BIN)/jupyter lab $(LAB_ROOT_FLAG) $(LAB_ARGS)

# On a GPU machine (CuPy installed): re-execute every chapter and solution, store outputs, update benchmarks/.
execute:
	$(PYTHON) -m cudl.nbtools execute $(NOTEBOOKS)

# On a GPU machine: all notebooks pass nbval, every exercise stub and mutant fails, bench agrees with Triton.
gpu-test:
	CUDL_BACKEND=gpu $(PYTHON) -m pytest -q --nbval-lax --nbval-current-env $(NOTEBOOKS)
	CUDL_BACKEND=gpu $(PYTHON) -m pytest -q tests/gpu tests/kernels tests/emulator/test_conformance.py tests/emulator/test_corpus.py tests/emulator/test_ptx.py \
	  tests/test_graders.py tests/test_occupancy.py tests/test_notebooks.py

# On a GPU machine newer than a T4 and an A100: every notebook with a T4's and then an A100's build and limits
# (CUDL_MIMIC, cudl/mimicry.py). It checks correctness and the graders' verdicts; timings are the real GPU's.
gpu-test-mimic:
	status=0; for card in t4 a100; do CUDL_MIMIC=$$card CUDL_BACKEND=gpu $(PYTHON) -m pytest -q -p no:cacheprovider \
	  --nbval-lax --nbval-current-env --nbval-cell-timeout=900 $(NOTEBOOKS) || status=1; done; exit $$status

clean:
	rm -rf _build .pytest_cache
