"""The soak's RSS curve as a PNG: each replica's RSS (MiB) against minutes, the least-squares line over the
window the slope is measured on (the last half of the run; with ``--minutes 120``, the last hour), and the
slope (MiB/min) in the legend. ``bench/soak --plot PNG`` draws it after a run, ``bench/soak --from JSON
--plot PNG`` redraws a saved report (``SoakResult.to_json``) without a bed.

Pure parts (:func:`rss_series`, :func:`window_fit`) are tested in tests/unit/bench/test_soak_plot.py;
:func:`draw` needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_lib.soak import slope_per_minute


@dataclass
class Series:
    """One replica's samples: ``t`` seconds since the start, ``rss`` MiB, ``leader`` at that sample."""

    name: str
    t: list[float]
    rss: list[float]
    leader: list[bool]

    @property
    def role(self) -> str:
        """``leader`` when it led in most samples, else ``standby``."""
        return "leader" if sum(self.leader) * 2 > len(self.leader) else "standby"


def rss_series(doc: dict[str, Any]) -> list[Series]:
    """The report's samples regrouped per replica, in order of first appearance."""
    out: dict[str, Series] = {}
    for s in doc.get("samples") or []:
        for name, r in (s.get("replicas") or {}).items():
            ser = out.setdefault(name, Series(name, [], [], []))
            ser.t.append(float(s["t"]))
            ser.rss.append(float(r["rss_mib"]))
            ser.leader.append(bool(r.get("leader")))
    return list(out.values())


def window_fit(ser: Series, minutes: float) -> tuple[float, float, float, float]:
    """``(t0, t1, slope MiB/min, intercept MiB at t0)`` of the least-squares line over the samples in the
    last half of a ``minutes``-long run (the window ``SoakResult.rss_slope_mib_per_min`` uses)."""
    start = minutes * 60.0 / 2
    pts = [(t, r) for t, r in zip(ser.t, ser.rss, strict=True) if t >= start]
    if len(pts) < 2:
        return start, start, 0.0, pts[0][1] if pts else 0.0
    slope = slope_per_minute(pts)
    mx = sum(t for t, _ in pts) / len(pts)
    my = sum(r for _, r in pts) / len(pts)
    t0, t1 = pts[0][0], pts[-1][0]
    return t0, t1, slope, my + (t0 - mx) / 60.0 * slope


def draw(doc: dict[str, Any], png: Path) -> Path:
    """Write the PNG of the report ``doc`` to ``png``; returns ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = float(doc["minutes"])
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    for ser in rss_series(doc):
        xs = [t / 60 for t in ser.t]
        t0, t1, slope, y0 = window_fit(ser, minutes)
        (line,) = ax.plot(xs, ser.rss, marker=".", lw=1,
                          label=f"{ser.role} ({ser.name}): slope over the last half {slope:+.4f} MiB/min")
        ax.plot([t0 / 60, t1 / 60], [y0, y0 + (t1 - t0) / 60 * slope], color=line.get_color(), ls="--", lw=2)
    ax.axvspan(minutes / 2, minutes, color="0.9", zorder=0, label="window of the slope (last half)")
    churn = doc.get("churn") or {}
    ax.set_title(f"bench/soak: {minutes:g} min, seed {doc.get('seed')}, "
                 f"{churn.get('leader SIGKILLs', 0)} leader kills, {churn.get('pods created', 0)} Pods created, "
                 f"{churn.get('nodes added', 0)} Nodes added", fontsize=9)
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MiB)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return png
