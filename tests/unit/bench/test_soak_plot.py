"""bench/bench_lib/soak_plot.py: the per-replica series and the last-half fit the soak's PNG draws."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.bench_lib.soak_plot import rss_series, window_fit

REPO = Path(__file__).resolve().parents[3]


def _doc(minutes: int = 10) -> dict[str, Any]:
    """Two replicas sampled every minute: the leader grows 1 MiB/min for 5 min then stays flat, the
    standby grows 0.5 MiB/min throughout."""
    samples = []
    for m in range(minutes + 1):
        samples.append({"t": 60.0 * m, "replicas": {
            "a": {"rss_mib": 100.0 + min(m, 5), "leader": True},
            "b": {"rss_mib": 90.0 + 0.5 * m, "leader": False}}})
    return {"minutes": minutes, "seed": 1, "churn": {"pods created": 7}, "samples": samples}


def test_series_per_replica_with_roles() -> None:
    a, b = rss_series(_doc())
    assert (a.name, a.role, b.name, b.role) == ("a", "leader", "b", "standby")
    assert a.t[:3] == [0.0, 60.0, 120.0] and a.rss[:3] == [100.0, 101.0, 102.0]


def test_fit_covers_the_last_half_only() -> None:
    a, b = rss_series(_doc())
    t0, t1, slope, y0 = window_fit(a, 10)
    assert (t0, t1) == (300.0, 600.0) and slope == pytest.approx(0.0) and y0 == pytest.approx(105.0)
    assert window_fit(b, 10)[2] == pytest.approx(0.5)



def test_from_needs_plot(tmp_path: Path) -> None:
    """``--from`` only redraws: without ``--plot`` it is a usage error, and nothing runs."""
    out = subprocess.run([sys.executable, str(REPO / "bench" / "soak"), "--from", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "--from needs --plot" in out.stderr


def test_redraw_from_a_saved_report(tmp_path: Path) -> None:
    report, png = tmp_path / "soak.json", tmp_path / "soak.png"
    report.write_text(json.dumps(_doc()))
    out = subprocess.run([sys.executable, str(REPO / "bench" / "soak"), "--from", str(report), "--plot", str(png)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
