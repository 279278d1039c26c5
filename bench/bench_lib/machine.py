"""What a benchmark ran on, recorded beside its figures (``--json``): the machine, its load, the commit.

Every figure of bench/RESULTS.md names its date and machine (issue 21 item 5); this is where they
come from. All fields are best effort (empty when unreadable).
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _mem_total_kib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info() -> dict[str, Any]:
    """``{"nproc", "cpu", "mem_gib", "loadavg" (1, 5, 15 min), "python", "kernel", "commit", "env"}``;
    ``env``: the ``BENCH_*`` variables set (``BENCH_PY_ARGS``, ``BENCH_KUBE_CONTENT_TYPE``...), which
    change what a run measures."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {"nproc": os.cpu_count() or 0, "cpu": _cpu_model(), "mem_gib": round(_mem_total_kib() / 2**20, 1),
            "loadavg": load, "python": platform.python_version(), "kernel": platform.release(),
            "commit": _commit(), "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("BENCH_")}}
