"""The package's layout rules that a grep can check (issue 28, "app/ re-cut by job").

- No module or package under ``py_scheduler`` is named after a standard-library module
  (``sys.stdlib_module_names``): ``app/logging.py`` was one, and a reader (or a tool resolving a
  bare ``import logging``) could not tell which was meant.
- Python's cyclic garbage collector is tuned in one module, ``py_scheduler/app/tuning.py``: every
  call that changes it (``gc.disable``, ``gc.enable``, ``gc.freeze``, ``gc.unfreeze``,
  ``gc.set_threshold``, ``gc.set_debug``) is there, and the others call that module. Reading the
  collector's state (``/debug/memory``) or collecting on request is not tuning.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "py_scheduler"

PENDING_RENAME = {
    "queue": "the scheduling queue package; split along upstream's files by issue 28's item 7",
    "framework/types.py": "PodInfo / NodeInfo / Resource, imported by nearly every module",
}
"""Names that still shadow a stdlib module, relative to the package, with what they are. The list
may only shrink: an entry that no longer exists fails the test, so it is removed with the rename."""

GC_TUNING = {"disable", "enable", "freeze", "unfreeze", "set_threshold", "set_debug"}
GC_HOME = "app/tuning.py"


def _shadowing() -> set[str]:
    out = set()
    for path in PACKAGE.rglob("*"):
        if "__pycache__" in path.parts:
            continue
        name = path.name if path.is_dir() else path.stem if path.suffix == ".py" else ""
        if name in sys.stdlib_module_names:
            out.add(path.relative_to(PACKAGE).as_posix())
    return out


def test_no_module_is_named_after_a_stdlib_module() -> None:
    found = _shadowing()
    assert found, "the walk found none of PENDING_RENAME: it is broken"
    assert not found - PENDING_RENAME.keys(), f"named after stdlib modules: {sorted(found - PENDING_RENAME.keys())}"
    assert not PENDING_RENAME.keys() - found, f"renamed: drop from PENDING_RENAME: {PENDING_RENAME.keys() - found}"


def _gc_tuning_uses(path: Path) -> list[str]:
    """Every ``gc.<tuning>`` in ``path``, called or passed on, also as ``import gc as x`` / ``from gc import f``."""
    tree = ast.parse(path.read_text())
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == "gc")
        elif isinstance(node, ast.ImportFrom) and node.module == "gc":
            functions.update(a.asname or a.name for a in node.names if a.name in GC_TUNING)
    return [f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr in GC_TUNING) or (isinstance(node, ast.Name) and node.id in functions)]


def test_gc_is_tuned_in_one_module() -> None:
    calls = {p.relative_to(PACKAGE).as_posix(): _gc_tuning_uses(p) for p in PACKAGE.rglob("*.py")}
    assert calls.get(GC_HOME), f"{GC_HOME} has no gc tuning: missing, or the walk is broken"
    stray = [c for rel, found in calls.items() if rel != GC_HOME for c in found]
    assert not stray, f"gc tuned outside {GC_HOME} (call py_scheduler.app.tuning instead): {stray}"
