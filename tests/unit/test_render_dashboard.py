"""deploy/monitoring/render_dashboard.py's pure part (issue 33 item 2's screenshot): the panels, expressions,
units and grid placement it reads from the dashboard JSON, Grafana's ``$__rate_interval`` and legend formats.
The Prometheus run itself is not tested here (it needs the bed; docs/dashboard.png is its output)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "render_dashboard.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_dashboard", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


rd = _load()


def test_panels_read_title_unit_grid_and_targets() -> None:
    dash = {"panels": [
        {"type": "row", "title": "Queues", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
        {"type": "timeseries", "title": "Pending", "gridPos": {"x": 8, "y": 1, "w": 8, "h": 8},
         "fieldConfig": {"defaults": {"unit": "short"}},
         "targets": [{"refId": "A", "expr": "sum by (queue) (scheduler_pending_pods)", "legendFormat": "{{queue}}"},
                     {"refId": "B", "expr": "up"}]},
        {"type": "row", "title": "Collapsed", "collapsed": True, "gridPos": {"x": 0, "y": 9, "w": 24, "h": 1},
         "panels": [{"type": "timeseries", "title": "Inner", "gridPos": {"x": 0, "y": 10, "w": 12, "h": 6},
                     "targets": [{"refId": "A", "expr": "x"}]}]},
    ]}
    got = rd.panels(dash)
    assert [(p.title, p.kind, p.unit, p.grid) for p in got] == [
        ("Queues", "row", "", (0, 0, 24, 1)), ("Pending", "timeseries", "short", (8, 1, 8, 8)),
        ("Collapsed", "row", "", (0, 9, 24, 1)), ("Inner", "timeseries", "", (0, 10, 12, 6))]
    assert got[1].targets == (rd.Target("A", "sum by (queue) (scheduler_pending_pods)", "{{queue}}"),
                              rd.Target("B", "up", ""))


def test_every_panel_of_the_real_dashboard_is_read_with_its_queries() -> None:
    dash = json.loads(rd.DASHBOARD.read_text())
    got = rd.panels(dash)
    assert len(got) == len(dash["panels"])
    assert sum(len(p.targets) for p in got) == sum(len(p.get("targets", [])) for p in dash["panels"])
    assert all(p.targets and p.unit for p in got if p.kind != "row")
    # no two panels overlap on the 24-column grid, and none spills over its right edge
    cells: set[tuple[int, int]] = set()
    for p in got:
        x, y, w, h = p.grid
        assert x + w <= rd.GRID_COLUMNS, p.title
        mine = {(cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)}
        assert not cells & mine, p.title
        cells |= mine


@pytest.mark.parametrize(("step", "scrape", "want"), [(5, 5, 20), (30, 5, 35), (15, 15, 60)])
def test_rate_interval_is_grafanas(step: int, scrape: int, want: int) -> None:
    assert rd.rate_interval(step, scrape) == want


def test_promql_expands_grafana_intervals_only() -> None:
    expr = 'sum(rate(a_total{x="$__rate_interval"}[$__rate_interval])) / sum(increase(b[${__interval}]))'
    assert rd.promql(expr, step_s=10, scrape_s=5) == \
        'sum(rate(a_total{x="20s"}[20s])) / sum(increase(b[10s]))'
    assert "$" not in rd.promql(json.loads(rd.DASHBOARD.read_text())["panels"][1]["targets"][0]["expr"], 5)


def test_grid_rect_places_panels_as_grafana_does() -> None:
    # top-left third of a 24-unit-tall grid; y grows downwards in Grafana, upwards in matplotlib
    assert rd.grid_rect((0, 0, 8, 8), 24) == pytest.approx((0.0, 2 / 3, 1 / 3, 1 / 3))
    assert rd.grid_rect((16, 16, 8, 8), 24) == pytest.approx((2 / 3, 0.0, 1 / 3, 1 / 3))
    assert rd.grid_rect((0, 0, 24, 1), 10, pad=0.01) == pytest.approx((0.01, 0.91, 0.98, 0.08))


def test_legend_follows_legend_format() -> None:
    labels = {"__name__": "m", "queue": "active", "profile": "py-scheduler"}
    assert rd.legend("{{queue}} / {{ profile }}", labels) == "active / py-scheduler"
    assert rd.legend("p99", labels) == "p99"
    assert rd.legend("", labels) == '{profile="py-scheduler", queue="active"}'
    assert rd.legend("", {}) == "value"


def test_tick_labels_carry_the_panels_unit() -> None:
    assert rd.format_value(0.0042, "s") == "4.2 ms"
    assert rd.format_value(2.5, "ops") == "2.5 ops/s"
    assert rd.format_value(3, "short") == "3"


def test_a_crowded_panel_shows_its_highest_series_in_order() -> None:
    series = [(f"s{i}", [[0, str(i)], [5, "NaN"]]) for i in range(12)] + [("inf", [[0, "+Inf"]])]
    assert [name for name, _ in rd.shown(series, limit=3)] == ["s9", "s10", "s11"]
    assert rd.shown(series[:2]) == series[:2]
