"""tests/conftest.py's CI rule, run on a tiny suite in a pytest subprocess: with ``CI=true`` every
skip (in a test, by a ``skipif`` marker, or of a whole module) fails the run and names its reason;
``xfail`` stays an expected failure; without CI the same suite passes with its skips."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SUITE = '''
import pytest

def test_passes():
    pass

def test_needs_a_tool():
    pytest.skip("frobnicator is not installed")

@pytest.mark.skipif(True, reason="no frobnicator on PATH")
def test_skipif_marker():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure():
    assert False
'''

MODULE_SKIP = '''
import pytest
pytest.skip("whole module needs the frobnicator", allow_module_level=True)

def test_never_collected():
    pass
'''


def _run(tmp_path: Path, ci: str | None) -> tuple[int, str]:
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_tiny.py").write_text(SUITE)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           "--continue-on-collection-errors", "--rootdir", str(tmp_path), "-c", os.devnull,
                           str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False)
    return done.returncode, done.stdout


def _summary(out: str) -> str:
    return out.strip().splitlines()[-1]  # "1 failed, 1 passed, ... in 0.1s"


@pytest.mark.parametrize("ci", ["TRUE", "1"])
def test_in_ci_every_skip_fails_the_run_and_names_its_reason(tmp_path: Path, ci: str) -> None:
    code, out = _run(tmp_path, ci)
    assert code == 1, out
    summary = _summary(out)
    # the skip in the test body fails its call; the skipif marker fails its setup (an error), the
    # module-level skip its collection (an error); xfail is left alone
    assert re.search(r"\b1 failed\b", summary) and re.search(r"\b2 errors\b", summary), out
    assert re.search(r"\b1 passed\b", summary) and "skipped" not in summary, out
    assert re.search(r"\b1 xfailed\b", summary), out
    assert "skipped in CI (CI=true), which counts as a failure: frobnicator is not installed" in out
    assert "skipped in CI (CI=true), which counts as a failure: no frobnicator on PATH" in out
    assert "skipped in CI (CI=true), which counts as a failure: whole module needs the frobnicator" in out


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_skips_stay_skips(tmp_path: Path, ci: str | None) -> None:
    code, out = _run(tmp_path, ci)
    assert code == 0, out
    summary = _summary(out)
    assert re.search(r"\b1 passed\b", summary) and re.search(r"\b3 skipped\b", summary), out
    assert re.search(r"\b1 xfailed\b", summary), out
    assert not re.search(r"\b\d+ (failed|errors?)\b", summary), out
