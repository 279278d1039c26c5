"""Drain vs cores for both schedulers (issue 32 item 5's plot) from ``bench/throughput --cores-matrix``
JSON lines.

:func:`series` is pure (records in, points out) and unit-tested; :func:`draw` imports matplotlib (the
``bench`` extra) only when called. One panel per workload: x = CPUs the scheduler was pinned to,
y = median drain in Pods/s (first -> last binding of the backlog), one line per scheduler.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

Series = dict[str, dict[str, list[tuple[int, float]]]]
"""``{workload: {kind: [(cores, median drain Pods/s), ...] sorted by cores}}``."""

NAMES = {"py": "py-scheduler", "kube": "kube-scheduler"}


def series(records: Iterable[Mapping[str, Any]], latest: bool = False) -> Series:
    """Median drain per (workload, kind, cores) over every round of every ``cores-matrix`` record
    given (a later rerun of a workload adds rounds to the same points; with ``latest`` it replaces
    them: a point takes the rounds of the last record that has it, so a rerun after a change is not
    mixed with the runs before); timed-out and unpinned runs and records of other modes are left out."""
    points: dict[tuple[str, str, int], list[float]] = {}
    for rec in records:
        if latest:
            mine = {(str(r.get("workload", rec.get("workload"))), str(r["scheduler"]), int(r.get("cores") or 0))
                    for r in rec.get("runs") or [] if rec.get("mode") == "cores-matrix"}
            for key in mine:
                points.pop(key, None)
        if rec.get("mode") != "cores-matrix":
            continue
        for run in rec.get("runs") or []:
            cores = int(run.get("cores") or 0)
            if run.get("timed_out") or cores < 1:
                continue
            key = (str(run.get("workload", rec.get("workload"))), str(run["scheduler"]), cores)
            points.setdefault(key, []).append(float(run.get("pods_per_second") or 0.0))
    out: Series = {}
    for (workload, kind, cores), drains in sorted(points.items()):
        out.setdefault(workload, {}).setdefault(kind, []).append((cores, statistics.median(drains)))
    return out


def draw(data: Series, path: Path, title: str = "") -> Path:
    """Write the PNG of ``data`` to ``path`` (one panel per workload, up to 4 per row)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(data)
    cols = min(4, max(1, len(names)))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, workload in zip(axes.flat, names, strict=False):
        for kind, pts in sorted(data[workload].items()):
            ax.plot([c for c, _ in pts], [d for _, d in pts], marker="o", label=NAMES.get(kind, kind))
        ax.set_title(workload, fontsize=9)
        ax.set_xlabel("scheduler CPUs")
        ax.set_ylabel("drain, Pods/s")
        ax.set_xticks(sorted({c for pts in data[workload].values() for c, _ in pts}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=9, wrap=True)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
