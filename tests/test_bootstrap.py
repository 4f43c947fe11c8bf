"""The Colab bootstrap cell, run in a fresh virtual environment against a local clone, makes cudl importable."""

from __future__ import annotations

import os
import subprocess
import sys
import venv

import pytest

from cudl import nbtools
from cudl.compile import ROOT


@pytest.mark.timeout(900)
def test_bootstrap_cell_clones_installs_and_imports(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("the repository has no commit to clone yet")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    work = tmp_path / "content"  # Colab's working directory
    work.mkdir()
    cell = nbtools.bootstrap_source(nbtools.repository_url())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(CUDL_REPO_URL=f"file://{ROOT}", CUDL_BACKEND="emulator", MPLBACKEND="Agg")
    proc = subprocess.run([str(python), "-c", cell + "\nprint('cudl from', cudl.__file__)"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=850)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"cudl from {work}/cuda-for-dl/cudl/__init__.py" in proc.stdout
    assert "CPU emulator" in proc.stdout  # cudl.setup() printed its banner
    assert sys.executable != str(python)
