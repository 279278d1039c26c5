""".ci/install-tools (called by .ci/run): Chromium is installed with apt-get when missing, nothing is
installed when it is there, and a machine that cannot install it fails loudly. Run with stand-in
``apt-get``/``chromium``/``kubectl`` on a PATH of their own, so nothing is installed for real."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "install-tools"
BASH = "/bin/bash"


def _stub(bin_dir: Path, name: str, body: str = "exit 0") -> None:
    path = bin_dir / name
    path.write_text(f"#!{BASH}\n{body}\n")
    path.chmod(0o755)


def _run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": str(bin_dir), "HOME": str(bin_dir)})


def _apt_get(bin_dir: Path, log: Path) -> None:
    """An apt-get that logs its arguments and, for `install chromium`, puts a chromium on PATH."""
    _stub(bin_dir, "apt-get", f'echo "$*" >> {log}\n'
                              f'case " $* " in *" install "*" chromium "*) printf "#!{BASH}\\nexit 0\\n" > '
                              f'{bin_dir}/chromium; /bin/chmod 755 {bin_dir}/chromium;; esac')


def test_chromium_missing_is_installed_with_apt_get(tmp_path: Path) -> None:
    log = tmp_path / "apt.log"
    _stub(tmp_path, "kubectl")
    _apt_get(tmp_path, log)
    done = _run(tmp_path)
    if os.geteuid() != 0:
        assert done.returncode == 1 and "run as root" in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "update -qq" and calls[1].startswith("install -y") and calls[1].endswith(" chromium"), calls
    assert "installing chromium with apt-get" in done.stderr and f"chromium: {tmp_path}/chromium" in done.stderr


def test_nothing_installed_when_chromium_is_there(tmp_path: Path) -> None:
    log = tmp_path / "apt.log"
    for tool in ("kubectl", "chromium"):
        _stub(tmp_path, tool)
    _apt_get(tmp_path, log)
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert not log.exists()


def test_no_apt_get_fails_and_names_what_is_missing(tmp_path: Path) -> None:
    _stub(tmp_path, "kubectl")
    done = _run(tmp_path)
    assert done.returncode == 1
    assert "missing chromium and no apt-get" in done.stderr, done.stderr


def test_ci_run_installs_the_tools_and_makes_skips_fail() -> None:
    run = (REPO / ".ci" / "run").read_text()
    assert "export CI=" in run and run.index("bash .ci/install-tools") < run.index("make test")
