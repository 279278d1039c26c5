"""The wheel as a user gets it: built from this checkout (``pip wheel``, hatchling from PyPI in
pip's build isolation), installed with ``pipx install`` into a PIPX_HOME / PIPX_BIN_DIR of its own
(its venv takes the dependencies from PyPI, through pip's cache), then ``py-scheduler simulate`` run
from there on the bundled example, ``--version``, and ``kubectl py-scheduler`` found by the real
kubectl in PIPX_BIN_DIR. Nothing of this checkout is on the installed commands' path (no
PYTHONPATH, another working directory): what runs is the wheel. About a minute with a warm pip
cache. pipx is installed into this interpreter from PyPI when it is missing."""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
TIMEOUT = 600


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIPX_", "VIRTUAL_ENV", "PIP_"))}
    return {**env, "PIPX_HOME": str(tmp / "pipx-home"), "PIPX_BIN_DIR": str(tmp / "pipx-bin"),
            "PIPX_MAN_DIR": str(tmp / "pipx-man"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
         {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, out)
    (built,) = out.glob("py_scheduler-*.whl")
    return built


def test_wheel_metadata_entry_points_and_bundled_example(wheel: Path) -> None:
    assert wheel.name == f"py_scheduler-{PROJECT['version']}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        dist = f"py_scheduler-{PROJECT['version']}.dist-info"
        meta = email.message_from_bytes(zf.read(f"{dist}/METADATA"))
        entry_points = zf.read(f"{dist}/entry_points.txt").decode()
    assert "py_scheduler/offline/examples/cluster.yaml" in names and "py_scheduler/kubectl_plugin.py" in names
    assert any(n.startswith(f"{dist}/licenses/LICENSE") or n == f"{dist}/LICENSE" for n in names), names
    assert meta["License-Expression"] == "Apache-2.0" or meta["License"] == "Apache-2.0"
    assert set(meta.get_all("Classifier") or []) == set(PROJECT["classifiers"])
    assert {u.split(",", 1)[0] for u in meta.get_all("Project-URL") or []} == set(PROJECT["urls"])
    assert meta["Keywords"] and meta["Author-email"] and meta["Requires-Python"] == ">=3.11"
    assert "py-scheduler = py_scheduler.cli:main" in entry_points
    assert "kubectl-py_scheduler = py_scheduler.kubectl_plugin:main" in entry_points


def test_pipx_install_runs_simulate_and_the_kubectl_plugin(wheel: Path, tmp_path: Path) -> None:
    probe = subprocess.run([sys.executable, "-m", "pipx", "--version"], capture_output=True, check=False)
    if probe.returncode != 0:  # pipx from PyPI, into this interpreter (as the dev tools are)
        _run([sys.executable, "-m", "pip", "install", "-q", "pipx"], dict(os.environ), tmp_path)
    env = _clean_env(tmp_path)
    # --no-compile: no bytecode for ~40 dependencies (a third of the CPU time); the commands compile what they import
    _run([sys.executable, "-m", "pipx", "install", "--python", sys.executable, "--pip-args=--no-compile", str(wheel)],
         env, tmp_path)
    bin_dir = tmp_path / "pipx-bin"
    scheduler, plugin = bin_dir / "py-scheduler", bin_dir / "kubectl-py_scheduler"
    assert scheduler.is_file() and plugin.is_file()

    version = _run([str(scheduler), "--version"], env, tmp_path).stdout
    assert version == f"py-scheduler {PROJECT['version']} (kube-scheduler v1.37.2 default profile)\n"
    table = _run([str(scheduler), "simulate"], env, tmp_path).stdout
    assert "pending Pods scheduled" in table and "h100-1" in table
    doc = json.loads(_run([str(scheduler), "simulate", "-o", "json"], env, tmp_path).stdout)
    venv = tmp_path / "pipx-home" / "venvs" / "py-scheduler"
    assert doc["source"].startswith(str(venv)), doc["source"]  # the wheel's bundled example, not the checkout's
    assert doc["scheduled"] > 0 and doc["scheduled"] + doc["unschedulable"] == len(doc["placements"])

    # the plugin as kubectl finds it: PIPX_BIN_DIR on PATH
    kubectl_env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}
    out = _run(["kubectl", "py-scheduler", "--version"], kubectl_env, tmp_path).stdout
    assert out == f"kubectl py-scheduler {PROJECT['version']} (kube-scheduler v1.37.2 default profile)\n"
    sim = json.loads(_run(["kubectl", "py-scheduler", "simulate", "-o", "json"], kubectl_env, tmp_path).stdout)
    assert sim["placements"] == doc["placements"]
