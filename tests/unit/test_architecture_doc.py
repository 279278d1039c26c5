"""docs/architecture.md cannot go stale silently (issue 28 item 8): every file path it names exists in
the tree as it is when the test runs, its app/ map names exactly app/'s modules, each where it lives, and
its plugin-contract table names exactly the Protocols of ``framework/interfaces.py`` (plus the ones it
says live elsewhere), and every process-wide memo of ``memo.SHARED``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "py_scheduler"
DOC = (ROOT / "docs" / "architecture.md").read_text()

_TICKED = re.compile(r"`([^`\s]+)`")
_PATH = re.compile(r"^[\w./-]+/[\w.-]+\.(py|md|toml)$|^[\w-]+\.py$")


def _named_paths() -> set[str]:
    """Every backticked file path, and every ``py_scheduler/...py`` path written out."""
    paths = {t for t in _TICKED.findall(DOC) if _PATH.match(t)}
    return paths | set(re.findall(r"py_scheduler/[\w/]+\.py", DOC))


def _resolve(rel: str) -> Path:
    """A path as the doc writes it: from the repository root (tests/, docs/, py_scheduler/, pyproject.toml)
    or, otherwise, inside the package (``core/cycle.py``)."""
    first = rel.split("/", 1)[0]
    return ROOT / rel if first in {"tests", "docs", "py_scheduler", "bench", "pyproject.toml"} else PKG / rel


def test_every_named_path_exists() -> None:
    named = _named_paths()
    assert len(named) > 40, sorted(named)  # the parser found the doc's paths, not nothing
    missing = sorted(p for p in named if not _resolve(p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_path_parser_sees_a_stale_name() -> None:
    """The check above can fail: a renamed module is reported."""
    assert not _resolve("framework/no_such_module.py").exists()
    assert _PATH.match("framework/no_such_module.py") and _PATH.match("tests/unit/x/test_y.py")
    assert not _PATH.match("plugins.registry") and not _PATH.match("app/")


def _app_rows() -> list[tuple[list[str], list[str]]]:
    """The app/ map's rows: (the subpackages / modules of the first cell, the modules the second names)."""
    section = DOC.split("**app/ by job**", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        # A module is named first in its cell or after a comma or a semicolon; parentheses are prose.
        modules = re.findall(r"(?:^|[,;]\s*)`(\w+)`", re.sub(r"\([^()]*\)", "", cells[1]))
        rows.append((_TICKED.findall(cells[0]), modules))
    return rows


def test_app_map_names_every_app_module_where_it_lives() -> None:
    rows = _app_rows()
    assert rows, "no app/ map table found"
    named: set[str] = set()
    for places, modules in rows:
        for mod in modules:
            homes = [PKG / "app" / p / f"{mod}.py" for p in places if p.endswith("/")]
            homes += [PKG / p for p in places if p == f"app/{mod}.py"]
            assert any(h.exists() for h in homes), (mod, places)
            named.add(str(next(h for h in homes if h.exists()).relative_to(PKG / "app")))
    actual = {str(p.relative_to(PKG / "app")) for p in (PKG / "app").rglob("*.py") if p.name != "__init__.py"}
    assert actual == named, (f"in app/ but not in the map: {sorted(actual - named)}; "
                             f"in the map but not in app/: {sorted(named - actual)}")


def _protocols(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id == "Protocol" for b in n.bases)}


def test_plugin_contract_table_names_every_protocol() -> None:
    section = DOC.split("## The plugin contract", 1)[1].split("**The Handle**", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    in_table: dict[str, str] = {}
    for cell in first_cells:
        where = re.search(r"\(`([\w/]+\.py)`\)", cell)
        for name in re.findall(r"`(\w+)`", re.sub(r"\([^()]*\)", "", cell)):
            in_table[name] = where.group(1) if where else "framework/interfaces.py"
    for name, home in in_table.items():
        assert name in _protocols(PKG / home), f"{name} is not a Protocol of {home}"
    missing = _protocols(PKG / "framework" / "interfaces.py") - set(in_table) - {"Plugin"}
    assert not missing, f"Protocols of framework/interfaces.py missing from the table: {sorted(missing)}"


def test_every_shared_memo_is_named() -> None:
    from py_scheduler.framework import memo

    names = [k for k, v in vars(memo).items() if any(v is s for s in memo.SHARED)]
    assert len(names) == len(memo.SHARED)
    for name in names:
        assert f"`{name}`" in DOC, name
