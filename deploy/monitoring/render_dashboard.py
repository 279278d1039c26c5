#!/usr/bin/env python3
"""Render ``py-scheduler-dashboard.json`` to one PNG from a real Prometheus scraping py-scheduler on the e2e bed.

Grafana is in neither Debian's archive nor the other registries this project reaches, so the dashboard is not
rendered by Grafana: this script runs each panel's own PromQL (``targets[].expr``, ``$__rate_interval`` expanded
as Grafana does) against Debian's ``prometheus`` through its HTTP API (``/api/v1/query_range``) and draws the
panels with matplotlib in the dashboard's own grid (``gridPos``: 24 columns, rows of ``h`` units), with their
titles, units and legends (``legendFormat``).

    python3 deploy/monitoring/render_dashboard.py [--out docs/dashboard.png] [--minutes 4]

Steps: (1) ``apt-get install prometheus`` when the binary is missing (as root; it says so), (2) the bed up
(tests/e2e/testbed, no kube-scheduler), py-scheduler run with deploy/configmap.yaml's configuration and
``--plain-http`` metrics on loopback, Prometheus on 127.0.0.1 scraping it every 5 s, (3) a workload of a few
minutes (CPU and GPU Nodes of two models, waves of Pods, some unschedulable, some deleted), (4) every panel's
expressions through ``query_range``, (5) the PNG. Needs the ``bench`` extra (matplotlib).

The pure part (:func:`panels`, :func:`promql`, :func:`grid_rect`, :func:`legend`) is unit-tested in
tests/unit/test_render_dashboard.py.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DASHBOARD = HERE / "py-scheduler-dashboard.json"
GRID_COLUMNS = 24  # Grafana's grid is 24 columns wide; ``h`` is in rows of 30 px
SCRAPE_S = 5


# -- the pure part: panels, expressions, grid ------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    ref_id: str
    expr: str
    legend_format: str


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: ``kind`` is Grafana's ``type`` (``row`` or ``timeseries``), ``unit`` its
    ``fieldConfig.defaults.unit`` (``""`` when unset), ``grid`` its ``gridPos`` as ``(x, y, w, h)`` in grid units."""

    title: str
    kind: str
    unit: str
    grid: tuple[int, int, int, int]
    targets: tuple[Target, ...]


def panels(dashboard: Mapping[str, Any]) -> list[Panel]:
    """The panels of a dashboard JSON, rows included, collapsed rows' nested panels flattened after their row."""
    out: list[Panel] = []
    for p in dashboard["panels"]:
        g = p["gridPos"]
        out.append(Panel(title=p.get("title", ""), kind=p["type"],
                         unit=p.get("fieldConfig", {}).get("defaults", {}).get("unit", ""),
                         grid=(g["x"], g["y"], g["w"], g["h"]),
                         targets=tuple(Target(t["refId"], t["expr"], t.get("legendFormat", ""))
                                       for t in p.get("targets", []))))
        if p["type"] == "row" and p.get("panels"):
            out.extend(panels({"panels": p["panels"]}))
    return out


def rate_interval(step_s: int, scrape_s: int) -> int:
    """Grafana's ``$__rate_interval``: ``max($__interval + scrape interval, 4 * scrape interval)``, seconds."""
    return max(step_s + scrape_s, 4 * scrape_s)


def promql(expr: str, step_s: int, scrape_s: int = SCRAPE_S) -> str:
    """``expr`` with Grafana's interval variables expanded (``$__rate_interval``, ``$__interval``, ``$__range``
    left alone: the dashboard does not use it)."""
    expr = re.sub(r"\$\{?__rate_interval\}?", f"{rate_interval(step_s, scrape_s)}s", expr)
    return re.sub(r"\$\{?__interval\}?", f"{step_s}s", expr)


def grid_rect(grid: tuple[int, int, int, int], rows: int, *, pad: float = 0.0) -> tuple[float, float, float, float]:
    """``(left, bottom, width, height)`` in figure fractions of a panel at ``grid`` (x, y, w, h) on a
    24-column grid ``rows`` units tall (y grows downwards as in Grafana, upwards in matplotlib); ``pad`` is a
    margin in figure fractions taken off each side."""
    x, y, w, h = grid
    left, width = x / GRID_COLUMNS, w / GRID_COLUMNS
    height = h / rows
    bottom = 1.0 - (y + h) / rows
    return left + pad, bottom + pad, width - 2 * pad, height - 2 * pad


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """Grafana's legend: ``{{label}}`` replaced by the series' label value; no format -> ``{a="b", ...}``."""
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}" if shown else "value"


# -- Prometheus ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("prometheus is not installed and this is not root: apt-get install prometheus")
    print("[render] prometheus missing: apt-get install -y prometheus (Debian's package)", file=sys.stderr)
    subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "prometheus"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return shutil.which("prometheus") or "/usr/bin/prometheus"


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:  # loopback Prometheus only
        return json.loads(r.read())


def query_range(base: str, expr: str, start: float, end: float, step_s: int) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s}s"})
    body = _get_json(f"{base}/api/v1/query_range?{q}")
    if body.get("status") != "success":
        raise RuntimeError(f"query_range {expr!r}: {body}")
    return list(body["data"]["result"])


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what}")


# -- the workload on the bed -----------------------------------------------------------------------------------


async def workload(api: Any, minutes: float) -> None:
    """``minutes`` of a steady trickle on the bed: two CPU Nodes, an A100 x4 and an H100 x8 Node (GPU labels
    as NVIDIA's GPU feature discovery sets them), a Node whose 4 GPUs a DRA driver publishes in a ResourceSlice;
    a CPU Pod every 2 s (each deleted a minute later: it finished), a GPU Pod every 20 s (1-3 GPUs: free GPUs
    fragment), a DRA claim and its Pod every 40 s, and every 44 s a Pod no Node fits (64 CPUs or 16 GPUs)."""
    from kubernetes_asyncio import client

    from tests.e2e.helpers import PAUSE_IMAGE, create_node, create_pod, delete_pod

    custom, dra = client.CustomObjectsApi(api), "gpu.example.com"
    for name, gpus, product, memory in (("cpu-1", "", "", ""), ("cpu-2", "", "", ""),
                                        ("a100-1", "4", "NVIDIA-A100-SXM4-40GB", "40960"),
                                        ("h100-1", "8", "NVIDIA-H100-80GB-HBM3", "81920")):
        labels = {"nvidia.com/gpu.count": gpus, "nvidia.com/gpu.product": product,
                  "nvidia.com/gpu.memory": memory} if gpus else {}
        await create_node(api, name, {"cpu": "32", "memory": "128Gi", "pods": "110",
                                      **({"nvidia.com/gpu": gpus} if gpus else {})}, labels=labels)
    await create_node(api, "dra-1", {"cpu": "32", "memory": "128Gi", "pods": "110"})
    await custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "dra-gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{dra}"'}}]}})
    await custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "dra-1"},
        "spec": {"driver": dra, "nodeName": "dra-1", "pool": {"name": "dra-1", "generation": 1,
                                                              "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}"} for i in range(4)]}})

    async def pod(name: str, requests: dict[str, str], claim: str = "") -> None:
        gpus = {k: v for k, v in requests.items() if k == "nvidia.com/gpu"}  # extended: limit = request
        spec: dict[str, Any] = {"containers": [{"name": "main", "image": PAUSE_IMAGE,
                                                "resources": {"requests": requests, "limits": gpus}}]}
        if claim:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        await create_pod(api, name, scheduler_name="py-scheduler", spec=spec)

    start, finishing = time.time(), []
    for tick in range(int(minutes * 30)):  # one tick per 2 s
        await pod(f"web-{tick}", {"cpu": "250m"})
        finishing.append((time.time() + 60, f"web-{tick}"))
        if tick % 10 == 5:
            await pod(f"train-{tick}", {"cpu": "1", "nvidia.com/gpu": str(1 + tick // 10 % 3)})
        if tick % 20 == 8:
            await custom.create_namespaced_custom_object("resource.k8s.io", "v1", "default", "resourceclaims", {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": f"claim-{tick}"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "dra-gpu"}}]}}})
            await pod(f"infer-{tick}", {"cpu": "500m"}, claim=f"claim-{tick}")
        if tick % 22 == 12:
            await pod(f"huge-{tick}", {"cpu": "64"} if tick % 44 == 12 else {"nvidia.com/gpu": "16"})
        while finishing and finishing[0][0] <= time.time():
            await delete_pod(api, finishing.pop(0)[1], wait=False)
        await asyncio.sleep(max(0.0, start + 2 * (tick + 1) - time.time()))


Series = list[tuple[str, list[list[Any]]]]  # (legend, [[epoch s, "value"], ...]) per series of a panel


async def drive(dash_panels: Sequence[Panel], minutes: float, work: Path) -> tuple[float, float, dict[str, Series]]:
    """Bed up, py-scheduler and Prometheus started, the workload run, every panel queried over the run's window;
    returns (start, end, {panel title: series}). Everything started is stopped on return."""
    import yaml

    sys.path.insert(0, str(REPO))
    # the bed and its helpers: the script drives the bed as the e2e tests do
    from tests.e2e.helpers import Testbed, api_client_for, client_configuration
    from tests.e2e.scheduler_proc import running_scheduler

    importlib.import_module("bed").build()  # tests/e2e/testbed/bed.py (on sys.path through tests.e2e.helpers)
    tb = Testbed(work / "bed", die_with_parent=True)
    prom: subprocess.Popen[bytes] | None = None
    try:
        tb.up()
        config = work / "config.yaml"
        config.write_text(yaml.safe_load((REPO / "deploy" / "configmap.yaml").read_text())["data"]["config.yaml"])
        cfg = client_configuration(tb.server, str(tb.ca_file), cert_file=str(tb.admin_cert), key_file=str(tb.admin_key))
        async with api_client_for(cfg) as api, running_scheduler(
                tb, "dashboard", verbosity=2, lease_name="py-scheduler",
                extra_args=["--config", str(config), "--plain-http"]) as sched:
            m = wait_until(lambda: re.search(r"serving /metrics\S* .*? on (\S+):(\d+)", sched.log()), 60,
                           "py-scheduler's metrics port")
            target = f"127.0.0.1:{m.group(2)}"
            prom_port = _free_port()
            (work / "prometheus.yml").write_text(yaml.safe_dump({
                "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
                "scrape_configs": [{"job_name": "py-scheduler", "scheme": "http",
                                    "static_configs": [{"targets": [target]}]}]}))
            with open(work / "prometheus.log", "wb") as log:  # the child keeps its own descriptor
                prom = subprocess.Popen([prometheus_binary(), f"--config.file={work / 'prometheus.yml'}",
                                         f"--storage.tsdb.path={work / 'tsdb'}",
                                         f"--web.listen-address=127.0.0.1:{prom_port}"],
                                        stdout=log, stderr=subprocess.STDOUT)
            base = f"http://127.0.0.1:{prom_port}"
            wait_until(lambda: any(t["health"] == "up" for t in
                                   _get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]),
                       60, "Prometheus to scrape py-scheduler")
            start = time.time()
            await workload(api, minutes)
            end = time.time()
            await asyncio.sleep(2 * SCRAPE_S)  # the window's last scrape is in
            step = max(SCRAPE_S, int((end - start) / 120))
            return start, end, {p.title: [(legend(t.legend_format, s["metric"]), s["values"])
                                          for t in p.targets
                                          for s in query_range(base, promql(t.expr, step), start, end, step)]
                                for p in dash_panels if p.kind != "row"}
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
        tb.down()


# -- drawing ---------------------------------------------------------------------------------------------------

_UNIT_SUFFIX = {"ops": " ops/s", "reqps": " req/s", "short": "", "": "", "percentunit": ""}


def format_value(v: float, unit: str) -> str:
    """A tick label in the panel's Grafana unit (``s`` scaled to ms/µs, ``ops``/``reqps`` per second)."""
    if unit == "s":
        if v == 0:
            return "0 s"
        for scale, suffix in ((1.0, " s"), (1e-3, " ms"), (1e-6, " µs")):
            if abs(v) >= scale:
                return f"{v / scale:.3g}{suffix}"
        return f"{v / 1e-6:.3g} µs"
    return f"{v:.3g}{_UNIT_SUFFIX.get(unit, ' ' + unit)}"


def shown(series: Series, limit: int = 9) -> Series:
    """The ``limit`` series with the highest peaks (in the order given): what fits a panel's legend."""
    def peak(values: list[list[Any]]) -> float:
        finite = [float(v) for _, v in values if float(v) == float(v) and abs(float(v)) != float("inf")]
        return max(finite, default=float("-inf"))

    keep = {id(s) for s in sorted(series, key=lambda s: peak(s[1]), reverse=True)[:limit]}
    return [s for s in series if id(s) in keep]


def render(dash: Mapping[str, Any], dash_panels: Sequence[Panel], data: Mapping[str, Series], start: float,
           end: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

    rows = max(p.grid[1] + p.grid[3] for p in dash_panels) + 2  # + a header of 2 units
    plt.style.use("dark_background")
    fig = plt.figure(figsize=(20, rows * 0.3), dpi=100, facecolor="#111217")
    fig.text(0.005, 1 - 0.9 / rows, f"{dash['title']}  (Prometheus {time.strftime('%H:%M', time.gmtime(start))}-"
             f"{time.strftime('%H:%M UTC', time.gmtime(end))}; the dashboard's queries, drawn with matplotlib: "
             "Grafana is not installable here)", fontsize=15, color="#ccccdc", va="center")
    for p in dash_panels:
        x, y, w, h = p.grid
        left, bottom, width, height = grid_rect((x, y + 2, w, h), rows)
        if p.kind == "row":
            fig.text(left + 0.004, bottom + height / 2, p.title, fontsize=15, weight="bold", color="#ccccdc",
                     va="center")
            continue
        # the panel's frame, then the plot inside it (room for title, tick labels and the legend)
        frame = fig.add_axes((left + 0.002, bottom + 0.002 * 24 / rows, width - 0.004, height - 0.004 * 24 / rows))
        frame.set_facecolor("#181b1f")
        frame.set_xticks([])
        frame.set_yticks([])
        for spine in frame.spines.values():
            spine.set_color("#2c3235")
        frame.text(0.012, 0.955, p.title, transform=frame.transAxes, fontsize=11.5, color="#ccccdc", va="top")
        series = shown(data.get(p.title, []))
        ncol = 3 if max((len(n) for n, _ in series), default=0) <= 26 else 2  # long legends: 2 columns
        legend_rows = -(-len(series) // ncol)
        low = 0.17 + 0.065 * max(legend_rows, 1)  # room under the plot for ticks and the legend
        ax = fig.add_axes((left + width * 0.13, bottom + height * low, width * 0.84, height * (0.87 - low)))
        ax.set_facecolor("#181b1f")
        if len(series) < len(data.get(p.title, [])):
            frame.text(0.988, 0.955, f"{len(series)} of {len(data[p.title])} series (highest peaks)",
                       transform=frame.transAxes, fontsize=9, color="#9fa7b3", va="top", ha="right")
        for name, values in series:
            ax.plot([(float(t) - start) / 60 for t, _ in values], [float(v) for _, v in values], lw=1.6,
                    label=name[:40])
        ax.set_xlim(0, (end - start) / 60)
        ax.xaxis.set_major_locator(MultipleLocator(1))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}m"))
        ax.yaxis.set_major_locator(MaxNLocator(4))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, u=p.unit: format_value(v, u)))
        ax.tick_params(labelsize=9, colors="#9fa7b3")
        ax.grid(color="#2c3235", lw=0.6)
        for spine in ax.spines.values():
            spine.set_visible(False)
        if series and min((float(v) for _, vs in series for _, v in vs), default=0.0) >= 0:
            ax.set_ylim(bottom=0)  # counts, rates and durations: from 0, as Grafana's soft minimum shows them
        if not series:
            ax.set_yticks([])
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", fontsize=13,
                    color="#9fa7b3")
        else:
            ax.legend(loc="upper left", bbox_to_anchor=(left + 0.004, bottom + height * (low - 0.1)),
                      bbox_transform=fig.transFigure, ncol=ncol, fontsize=8.5, frameon=False,
                      handlelength=1.2, columnspacing=1.0, labelcolor="#ccccdc")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=fig.get_facecolor())
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "dashboard.png")
    ap.add_argument("--minutes", type=float, default=4.0, help="length of the workload (default 4)")
    ap.add_argument("--data", type=Path, help="also write the queried series as JSON here")
    ap.add_argument("--from-data", type=Path, help="skip the bed: draw series a previous --data run wrote")
    args = ap.parse_args(argv)
    dash = json.loads(DASHBOARD.read_text())
    dash_panels = panels(dash)
    if args.from_data:
        saved = json.loads(args.from_data.read_text())
        start, end, data = saved["start"], saved["end"], saved["series"]
    else:
        with tempfile.TemporaryDirectory(prefix="render-dashboard-") as work:
            start, end, data = asyncio.run(drive(dash_panels, args.minutes, Path(work)))
        if args.data:
            args.data.write_text(json.dumps({"start": start, "end": end, "series": data}))
    render(dash, dash_panels, data, start, end, args.out)
    empty = [p.title for p in dash_panels if p.kind != "row" and not data.get(p.title)]
    print(f"[render] wrote {args.out}; panels with no data: {empty or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
