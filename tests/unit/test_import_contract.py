"""The import contract of docs/architecture.md, enforced by ``lint-imports`` (import-linter, configured in
pyproject.toml), and the framework Protocols through which app, offline and the core reach plugin-owned
outputs (issue 28 item 4).

- The package keeps every contract.
- The contract is not vacuous: the layering before issue 28 (app / offline / core importing plugin
  modules, plugins importing each other, a helper importing a plugin) breaks the two contracts issue 28
  added, each naming the offending import; this is checked on a copy of the package with such imports
  injected (the imports 458e1a3 had).
- docs/architecture.md names every contract of pyproject.toml.
- The plugins satisfy the Protocols the app, offline and the core find them by.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"
FORBIDDEN = "App, offline and core reach plugins only through the registry and the framework's Protocols"
INDEPENDENT = "Plugins are independent of each other (shared code in plugins.helpers)"

# (file to append to, the import, the edge lint-imports reports): the kinds of imports 458e1a3 had.
INJECTED = [
    ("app/__init__.py", "from py_scheduler.plugins.dynamic_resources import ALLOCATIONS_KEY",
     "py_scheduler.app -> py_scheduler.plugins.dynamic_resources"),
    ("offline/__init__.py", "from py_scheduler.plugins.topology_placement import NAME",
     "py_scheduler.offline -> py_scheduler.plugins.topology_placement"),
    ("core/__init__.py", "from py_scheduler.plugins.gang_scheduling import NAME",
     "py_scheduler.core -> py_scheduler.plugins.gang_scheduling"),
    ("plugins/gpu/__init__.py", "from py_scheduler.plugins.dynamic_resources import STATE_KEY",
     "py_scheduler.plugins.gpu -> py_scheduler.plugins.dynamic_resources"),
    ("plugins/volume_zone.py", "from py_scheduler.plugins.volume_binding import binder",
     "py_scheduler.plugins.volume_zone -> py_scheduler.plugins.volume_binding.binder"),
    ("plugins/helpers/__init__.py", "from py_scheduler.plugins import node_affinity",
     "py_scheduler.plugins.helpers -> py_scheduler.plugins.node_affinity"),
]


def _contracts() -> list[str]:
    with CONFIG.open("rb") as f:
        return [c["name"] for c in tomllib.load(f)["tool"]["importlinter"]["contracts"]]


def _lint(package_parent: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the repository's configuration on the ``py_scheduler`` under ``package_parent``."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(CONFIG)!r}, no_cache=True, no_logo=True))")
    env = {**os.environ, "PYTHONPATH": str(package_parent), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_package_keeps_every_contract(tmp_path: Path) -> None:
    out = _lint(ROOT, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in out.stdout


def test_the_old_layering_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "py_scheduler", tmp_path / "pkg" / "py_scheduler",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for rel, line, _ in INJECTED:
        with (tmp_path / "pkg" / "py_scheduler" / rel).open("a") as f:
            f.write(f"\n{line}  # noqa\n")
    out = _lint(tmp_path / "pkg", tmp_path)
    text = " ".join(out.stdout.split())  # import-linter wraps long lines
    assert out.returncode == 1, text
    assert f"{FORBIDDEN} BROKEN" in text and f"{INDEPENDENT} BROKEN" in text
    assert "Layers point down KEPT" in text
    for _, _, edge in INJECTED:
        assert edge in text, (edge, text)


def test_architecture_doc_names_every_contract() -> None:
    doc = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    for name in _contracts():
        assert f"**{name}**" in doc, name


@pytest.mark.parametrize(("entry", "protocol"), [
    ("py_scheduler.plugins.gpu.filter:GPUFilter", "GPUInventoryReporter"),
    ("py_scheduler.plugins.topology_placement:TopologyPlacement", "ExplainNoter"),
    ("py_scheduler.plugins.dynamic_resources:DynamicResources", "AllocationReporter"),
    ("py_scheduler.plugins.gang_scheduling:GangScheduling", "py_scheduler.core.ports:PodGroupSource"),
])
def test_plugins_provide_their_outputs_through_protocols(entry: str, protocol: str) -> None:
    """What app, offline and the core read from a plugin they find by these Protocols (isinstance)."""
    module, cls = entry.split(":")
    proto_module, proto = protocol.split(":") if ":" in protocol else ("py_scheduler.framework.interfaces", protocol)
    plugin_cls = getattr(importlib.import_module(module), cls)
    assert isinstance(plugin_cls.__new__(plugin_cls), getattr(importlib.import_module(proto_module), proto))


def test_dynamic_resources_state_is_what_gpu_score_reads() -> None:
    """GPUScore reads DynamicResources' cycle state through the framework's key and Protocol."""
    from py_scheduler.framework.interfaces import DRA_STATE_KEY, ClaimAllocationState
    from py_scheduler.plugins import dynamic_resources as dra

    assert dra.STATE_KEY == DRA_STATE_KEY
    assert isinstance(dra.DRAState(), ClaimAllocationState)
