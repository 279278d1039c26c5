"""deploy/monitoring/ (issue 33 item 2): the alert rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``, the test file beside the rules), every alert has a test that fires it, the
dashboard's expressions are valid PromQL (Prometheus' own parser, through ``promtool check rules``), and
every metric the rules and the dashboard name is one that py-scheduler, running on the bed, exports on
``/metrics``.

promtool is built from its Go module into the bed's cache on first use (tests/e2e/testbed/gotools.py,
pin in tests/e2e/testbed/promtool/go.mod).
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.e2e.helpers import Testbed, create_node, create_pod, delete_node, delete_pod, unique_name, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess, running_scheduler

gotools = importlib.import_module("gotools")  # tests/e2e/testbed/gotools.py (helpers put that directory on sys.path)
GO_TOOLS = ("promtool",)  # built by conftest before the tests run (outside their timeout)

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "py-scheduler.rules.yaml"
RULE_TESTS = MONITORING / "py-scheduler.rules.test.yaml"
DASHBOARD = MONITORING / "py-scheduler-dashboard.json"
_SERVING = re.compile(r"serving /metrics\S* .*? on (?P<host>\S+):(?P<port>\d+)")


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def promtool() -> str:
    """The promtool binary (built into the bed's cache on first use)."""
    return str(gotools.build(gotools.PROMTOOL))


def rule_exprs() -> dict[str, str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"]}


def dashboard_exprs() -> dict[str, str]:
    """``panel title / refId -> expr`` of every target of every panel."""
    out: dict[str, str] = {}
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for t in panel.get("targets", []):
            out[f"{panel['title']} / {t['refId']}"] = t["expr"]
    return out


# -- metric names in PromQL -----------------------------------------------------------------------

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
             "inf", "nan", "atan2"}
_STRIPS = (re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\''),  # strings (label values, quantiles as strings)
           re.compile(r"\{[^{}]*\}"),  # label matchers
           re.compile(r"\[[^\[\]]*\]"),  # ranges / subqueries
           re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)"),  # label lists
           re.compile(r"\$\{?\w+\}?"))  # Grafana variables
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions (followed by ``(``),
    keywords, label names (inside ``{}``, ``by (...)``...), strings, durations or Grafana variables."""
    s = expr
    for pattern in _STRIPS:
        s = pattern.sub(" ", s)
    s = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", " ", s)  # numbers
    return {m.group(1) for m in _IDENT.finditer(s) if not m.group(2) and m.group(1).lower() not in _KEYWORDS}


def test_metric_names_are_extracted_from_promql() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (le, plugin) (rate(scheduler_plugin_execution_duration_'
                        'seconds_bucket{status!="Success", plugin=~"GPU.*"}[$__rate_interval])))') == \
        {"scheduler_plugin_execution_duration_seconds_bucket"}
    assert metric_names('(max by (name) (leader_election_master_status{name="py-scheduler"}) < 1) or '
                        'absent(leader_election_master_status{name="x"})') == {"leader_election_master_status"}
    assert metric_names('sum by (model) (py_scheduler_gpu_free and on (node, model) (py_scheduler_gpu_allocated > 0))'
                        ' and on () ((sum(rate(a_total[5m] offset 1h)) or vector(0)) == 0)') == \
        {"py_scheduler_gpu_free", "py_scheduler_gpu_allocated", "a_total"}
    assert metric_names("up") == {"up"} and metric_names("time() - 1e3") == set()


def exported_names(text: str) -> set[str]:
    """Every sample name a ``/metrics`` body can hold, from its ``# TYPE`` lines (a family with no sample
    yet counts: a labelled metric nobody observed is still exported)."""
    suffixes = {"counter": ("", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created"), "info": ("",), "untyped": ("",)}
    names: set[str] = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        names.update(m.group(1) + s for s in suffixes.get(m.group(2), ("",)))
    return names


# -- promtool --------------------------------------------------------------------------------------


def test_rules_pass_promtool_check(promtool: str) -> None:
    out = run(promtool, "check", "rules", str(RULES))
    assert f"SUCCESS: {len(rule_exprs())} rules found" in out.stdout, out.stdout


def test_rule_unit_tests_pass(promtool: str) -> None:
    out = run(promtool, "test", "rules", RULE_TESTS.name, cwd=MONITORING)
    assert "SUCCESS" in out.stdout + out.stderr, out.stdout + out.stderr


def test_every_alert_has_a_test_that_fires_it() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    fired = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    quiet = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", [])
             if not t.get("exp_alerts")}
    assert fired == set(rule_exprs()), set(rule_exprs()) ^ fired
    assert quiet == set(rule_exprs()), set(rule_exprs()) ^ quiet  # and a near miss that does not


def test_the_on_call_alerts_are_there() -> None:
    exprs = rule_exprs()
    for alert in ("PySchedulerNoLeader", "PySchedulerLeaderChanges", "PySchedulerPodsPendingTooLong",
                  "PySchedulerFailedSchedulingRate", "PySchedulerBindErrors", "PySchedulerWatchRestarts",
                  "PySchedulerGPUFragmentation"):
        assert alert in exprs, alert


def test_dashboard_expressions_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Each expression as a recording rule (``$__rate_interval`` -> 5m) through Prometheus' parser."""
    exprs = dashboard_exprs()
    rules = [{"record": f"dashboard:expr_{i}", "expr": e.replace("$__rate_interval", "5m")}
             for i, e in enumerate(exprs.values())]
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = run(promtool, "check", "rules", str(path))
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout, out.stdout


def test_dashboard_covers_what_on_call_needs() -> None:
    names = set().union(*map(metric_names, dashboard_exprs().values()))
    for needed in ("scheduler_schedule_attempts_total", "scheduler_scheduling_attempt_duration_seconds_bucket",
                   "scheduler_pending_pods", "scheduler_plugin_execution_duration_seconds_bucket",
                   "py_scheduler_gpu_free", "py_scheduler_gpu_allocated", "py_scheduler_dra_devices",
                   "leader_election_master_status"):
        assert needed in names, needed
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert all(p.get("targets") for p in dash["panels"] if p["type"] != "row")


# -- against the live scheduler --------------------------------------------------------------------


def _port(sched: SchedulerProcess) -> int:
    m = _SERVING.search(sched.log())
    assert m, sched.log()[-2000:]
    return int(m.group("port"))


async def test_rules_and_dashboard_name_only_metrics_py_scheduler_exports(testbed: Testbed, api_client: Any,
                                                                          tmp_path: Path) -> None:
    """py-scheduler runs deploy/'s KubeSchedulerConfiguration on the bed and binds a GPU Pod; its
    ``/metrics`` then names every metric any rule or dashboard expression selects."""
    cm = yaml.safe_load((REPO / "deploy" / "configmap.yaml").read_text())
    config = tmp_path / "config.yaml"
    config.write_text(cm["data"]["config.yaml"])
    node, pod = unique_name("mon-gpu-node"), unique_name("mon-gpu-pod")
    await create_node(api_client, node, {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"},
                      labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960",
                              "nvidia.com/gpu.count": "4"})
    try:
        async with running_scheduler(testbed, unique_name("monitoring"), verbosity=2, extra_args=[
                "--config", str(config), "--metrics-bind-address", "127.0.0.1:0", "--plain-http"]) as sched:
            await create_pod(api_client, pod, scheduler_name="py-scheduler", requests={"cpu": "100m"})
            url = f"http://127.0.0.1:{_port(sched)}/metrics"

            async def scrape() -> str | None:
                async with aiohttp.ClientSession() as s, s.get(url) as r:
                    text = await r.text()
                # the Pod bound and the GPU gauges have a sample: the scrape shows a working scheduler
                return text if 'result="scheduled"' in text and "py_scheduler_gpu_free{" in text else None

            text = await wait_for(scrape, timeout=60, what="a scrape after py-scheduler bound a Pod")
    finally:
        await delete_pod(api_client, pod, wait=False)
        await delete_node(api_client, node)
    exported = exported_names(text)
    missing = {f"{where}: {name}" for where, e in {**rule_exprs(), **dashboard_exprs()}.items()
               for name in metric_names(e) if name not in exported}
    assert not missing, "expressions name metrics py-scheduler does not export:\n" + "\n".join(sorted(missing))
