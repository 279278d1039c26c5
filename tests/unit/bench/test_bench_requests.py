"""bench/requests runs: its server answers, every Binding goes through Kube.bind, and it prints the
CPU per request it measured."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_bench_requests_prints_cpu_per_request() -> None:
    out = subprocess.run([sys.executable, str(REPO / "bench" / "requests"), "--requests", "40", "--concurrency", "10",
                          "--repeat", "1"], capture_output=True, text=True, timeout=120, check=True).stdout
    m = re.search(r"40 Bindings, 10 at a time: ([0-9.]+) us CPU per request", out)
    assert m is not None, out
    assert float(m.group(1)) > 0
