"""`make lab` starts a JupyterLab server that answers, as root too (Docker images and CI runners run as root).

The test runs `make lab` itself (which installs JupyterLab into .venv the first time), with the options the
README gives for a remote machine, waits for the server's HTTP API to answer, then stops it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_answers(tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "python").is_file():
        pytest.skip("needs the project's .venv (make venv)")
    port, token = _free_port(), secrets.token_hex(8)
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token}"
    log = (tmp_path / "lab.log").open("w+")
    # Its own process group, so that stopping make stops the server too.
    proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime")))
    try:
        deadline = time.monotonic() + 600  # the first run installs JupyterLab
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=5) as r:
                    status = json.load(r)
                    break
            except OSError:
                time.sleep(1)
        log.seek(0)
        text = log.read()
        assert status is not None, f"`make lab` did not answer (exit code {proc.poll()}):\n{text[-3000:]}"
        assert "started" in status, status
        assert "--allow-root" not in text or os.geteuid() == 0, "--allow-root is for root only"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/chapters?token={token}", timeout=10) as r:
            names = {c["name"] for c in json.load(r)["content"]}
        assert any(n.endswith(".ipynb") for n in names), names
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()
