"""The Helm chart (charts/py-scheduler, issue 33 item 1) against deploy/ and on the test bed.

helm v4 is built from its Go module into the bed's cache on first use (tests/e2e/testbed/gotools.py,
pin in tests/e2e/testbed/helm/go.mod). What is checked:

* ``helm lint --strict`` is clean, with default values and with every option on;
* with default values ``helm template`` renders exactly the objects of ``kubectl kustomize deploy/``
  (object by object; the ConfigMap's KubeSchedulerConfiguration compared as parsed YAML, and the one
  addition, the Pod template's ``checksum/config`` annotation, checked on its own), and with the
  monitoring options on, additionally those of ``kubectl kustomize deploy/monitoring/``: the two never drift;
* values reach the objects (profiles, GPU weights, leader election, TLS, decision records) and the
  rendered KubeSchedulerConfiguration is accepted by py-scheduler's own config loader; the values schema
  refuses nonsense;
* on the bed: ``helm install --dry-run=server`` creates nothing, ``helm install`` creates every object,
  ``helm upgrade`` with a changed config value changes the ConfigMap and the Pod template's checksum,
  so kube-controller-manager's Deployment controller rolls a new ReplicaSet; ``helm uninstall`` removes
  every object. (Rollout to Running Pods needs the bed's real nodes.)
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from py_scheduler.framework.config import parse_config
from py_scheduler.plugins import registry as plugin_registry
from tests.e2e.helpers import Testbed, unique_name, wait_for

gotools = importlib.import_module("gotools")  # tests/e2e/testbed/gotools.py (helpers put that directory on sys.path)
GO_TOOLS = ("helm",)  # built by conftest before the tests run (outside their timeout)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "py-scheduler"
DEPLOY = REPO / "deploy"
MONITORING = DEPLOY / "monitoring"
RELEASE, NAMESPACE = "py-scheduler", "kube-system"
ALL_MONITORING = ("--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
                  "--set", "monitoring.dashboard.enabled=true")
CHECKSUM = "checksum/config"

Obj = dict[str, Any]


def run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure an AssertionError with its output."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def helm() -> str:
    """The helm binary (built into the bed's cache on first use: minutes cold, nothing when cached)."""
    return str(gotools.build(gotools.HELM))


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:  # never a skip: CI must have it (tests/image renders deploy/ with it too)
        pytest.fail("kubectl is not on PATH (Debian: apt-get install kubectl); `kubectl kustomize` renders deploy/")
    return path


def docs(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def key(o: Obj) -> tuple[str, str, str]:
    return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]


def template(helm: str, *args: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[Obj]:
    return docs(run(helm, "template", release, str(CHART), "--namespace", namespace, *args).stdout)


def kustomize(kubectl: str, path: Path) -> list[Obj]:
    return docs(run(kubectl, "kustomize", str(path)).stdout)


def normalised(objs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    """Objects by (kind, namespace, name); a ConfigMap's ``config.yaml`` parsed (the scheduler reads YAML,
    helm's toYaml orders keys its own way); the Deployment's ``checksum/config`` annotation left out."""
    out: dict[tuple[str, str, str], Obj] = {}
    for o in objs:
        o = json.loads(json.dumps(o))
        if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {}):
            o["data"]["config.yaml"] = yaml.safe_load(o["data"]["config.yaml"])
        if o["kind"] == "Deployment":
            meta = o["spec"]["template"]["metadata"]
            meta.get("annotations", {}).pop(CHECKSUM, None)
            if not meta.get("annotations"):
                meta.pop("annotations", None)
        assert key(o) not in out, f"{key(o)} rendered twice"
        out[key(o)] = o
    return out


def assert_same(got: dict[tuple[str, str, str], Obj], want: dict[tuple[str, str, str], Obj]) -> None:
    assert sorted(got) == sorted(want), "the chart and deploy/ render different sets of objects"
    for k in want:
        assert got[k] == want[k], f"{k} differs:\nchart: {yaml.safe_dump(got[k])}\ndeploy: {yaml.safe_dump(want[k])}"


def deployment(objs: list[Obj]) -> Obj:
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    return dep


def config_of(objs: list[Obj]) -> Obj:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})]
    cfg: Obj = yaml.safe_load(cm["data"]["config.yaml"])
    return cfg


# -- rendering ------------------------------------------------------------------------------------


def test_chart_follows_helm_v2_chart_conventions() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "py-scheduler" and chart["type"] == "application"
    for f in ("values.yaml", "values.schema.json", "templates/_helpers.tpl", "templates/NOTES.txt"):
        assert (CHART / f).is_file(), f
    json.loads((CHART / "values.schema.json").read_text())


def test_helm_lint_is_clean(helm: str) -> None:
    options = ("--set", "secureServing.tlsSecretName=tls", "--set", "leaderElection.enabled=false",
               "--set", "replicas=1")
    for extra in ((), ALL_MONITORING, options):
        out = run(helm, "lint", "--strict", str(CHART), *extra)
        text = out.stdout + out.stderr
        assert "0 chart(s) failed" in text and "[WARNING]" not in text and "[ERROR]" not in text, text


def test_default_values_render_what_deploy_renders(helm: str, kubectl: str) -> None:
    chart = template(helm)
    assert_same(normalised(chart), normalised(kustomize(kubectl, DEPLOY)))
    # the one addition: the config's hash on the Pod template, so that a config change rolls the Pods
    annotations = deployment(chart)["spec"]["template"]["metadata"]["annotations"]
    assert set(annotations) == {CHECKSUM} and len(annotations[CHECKSUM]) == 64


def test_monitoring_options_render_what_deploy_monitoring_renders(helm: str, kubectl: str) -> None:
    base = {key(o) for o in template(helm)}
    extra = [o for o in template(helm, *ALL_MONITORING) if key(o) not in base]
    assert_same(normalised(extra), normalised(kustomize(kubectl, MONITORING)))


def test_chart_copies_of_the_monitoring_files_are_deploy_monitoring_s() -> None:
    for name in ("py-scheduler.rules.yaml", "py-scheduler-dashboard.json"):
        assert (CHART / "files" / name).read_bytes() == (MONITORING / name).read_bytes(), name
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["spec"] == yaml.safe_load((MONITORING / "py-scheduler.rules.yaml").read_text())


def test_values_reach_the_objects(helm: str) -> None:
    objs = template(helm, "--set", "gpu.modelWeight=50", "--set", "gpu.memoryWeight=30", "--set", "gpu.queueWeight=20",
                    "--set", "gpu.scoreWeight=5", "--set", "replicas=3",
                    "--set", "image.repository=reg.example/py-sched", "--set", "image.tag=9.9.9",
                    "--set", "leaderElection.resourceName=my-lease",
                    "--set", "secureServing.port=10300", "--set", "secureServing.tlsSecretName=sched-tls",
                    "--set", "decisions.capacity=0", "--set", "logVerbosity=4",
                    "--set-json", 'config.extraPluginConfig=[{"name":"NodeResourcesFit","args":'
                                  '{"scoringStrategy":{"type":"MostAllocated"}}}]',
                    "--set", "monitoring.prometheusRule.enabled=true")
    cfg = config_of(objs)
    (profile,) = cfg["profiles"]
    args = {p["name"]: p.get("args") for p in profile["pluginConfig"]}
    assert args["GPUScore"]["modelWeight"] == 50 and args["GPUScore"]["queueWeight"] == 20
    assert args["NodeResourcesFit"] == {"scoringStrategy": {"type": "MostAllocated"}}
    assert {"name": "GPUScore", "weight": 5} in profile["plugins"]["multiPoint"]["enabled"]
    assert cfg["leaderElection"]["resourceName"] == "my-lease"
    parse_config(cfg, registry=plugin_registry)  # py-scheduler itself accepts it
    dep = deployment(objs)
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert dep["spec"]["replicas"] == 3 and c["image"] == "reg.example/py-sched:9.9.9"
    assert {"--metrics-bind-address=0.0.0.0:10300", "--tls-cert-file=/etc/py-scheduler/tls/tls.crt",
            "--tls-private-key-file=/etc/py-scheduler/tls/tls.key", "--decisions-capacity=0", "--v=4"} <= set(c["args"])
    assert {"name": "tls", "secret": {"secretName": "sched-tls"}} in dep["spec"]["template"]["spec"]["volumes"]
    (role,) = [o for o in objs if o["kind"] == "Role"]
    assert role["rules"][1]["resourceNames"] == ["my-lease"]
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    exprs = " ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"])
    assert 'name="my-lease"' in exprs and 'name="py-scheduler"' not in exprs
    # leader election off: one flag, the config agrees
    off = template(helm, "--set", "leaderElection.enabled=false", "--set", "replicas=1")
    assert "--no-leader-elect" in deployment(off)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert config_of(off)["leaderElection"]["leaderElect"] is False
    # full control of the profiles
    own = template(helm, "--set-json", 'config.profiles=[{"schedulerName":"a"},{"schedulerName":"b"}]')
    assert [p["schedulerName"] for p in config_of(own)["profiles"]] == ["a", "b"]


def test_a_config_change_changes_the_pod_template(helm: str) -> None:
    def checksum(*args: str) -> str:
        objs = template(helm, *args)
        value: str = deployment(objs)["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
        return value

    base = checksum()
    assert checksum() == base  # deterministic
    assert checksum("--set", "gpu.modelWeight=41") != base
    assert checksum("--set", "config.podMaxBackoffSeconds=20") != base
    assert checksum("--set", "replicas=3") == base  # not a config change


def test_the_schema_refuses_bad_values(helm: str) -> None:
    for bad in (("--set", "replicas=-1"), ("--set", "gpu.modelWeight=abc"), ("--set", "image.pullPolicy=Sometimes"),
                ("--set", "leaderElection.leaseDuration=15"), ("--set", "nosuchvalue=1")):
        proc = run(helm, "template", RELEASE, str(CHART), *bad, check=False)
        assert proc.returncode != 0 and "schema" in proc.stderr.lower(), (bad, proc.stderr)


# -- on the bed -----------------------------------------------------------------------------------


@pytest.fixture
def release(testbed: Testbed, helm: str) -> Iterator[tuple[str, str]]:
    """A release name and a fresh namespace on the bed; uninstalled (if still there) afterwards."""
    name, ns = unique_name("helm-e2e"), unique_name("helm-ns")
    yield name, ns
    run(helm, "--kubeconfig", str(testbed.kubeconfig), "uninstall", name, "-n", ns, "--ignore-not-found", check=False)
    run("kubectl", "--kubeconfig", str(testbed.kubeconfig), "delete", "namespace", ns, "--wait=false",
        "--ignore-not-found", check=False)


def _existing(kubectl: str, testbed: Testbed, manifest: str) -> list[str]:
    """``kind/name`` of each object of ``manifest`` that exists on the bed."""
    proc = subprocess.run([kubectl, "--kubeconfig", str(testbed.kubeconfig), "get", "-f", "-", "--ignore-not-found",
                           "-o", "json"], input=manifest, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout) if proc.stdout.strip() else {"items": []}
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in found.get("items", []))


async def test_install_upgrade_uninstall_on_the_bed(testbed: Testbed, controller_manager: None, helm: str,
                                                    kubectl: str, release: tuple[str, str]) -> None:
    name, ns = release
    h = (helm, "--kubeconfig", str(testbed.kubeconfig))
    k = (kubectl, "--kubeconfig", str(testbed.kubeconfig))
    values = ("--set", f"leaderElection.resourceName={name}", "--set", "metricsReader.serviceAccount.namespace=" + ns)
    run(*k, "create", "namespace", ns)
    manifest = run(helm, "template", name, str(CHART), "-n", ns, *values).stdout
    wanted = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in docs(manifest))
    assert len(wanted) == 11, wanted

    # the API server validates every object (admission, schema) and creates none
    run(*h, "install", name, str(CHART), "-n", ns, *values, "--dry-run=server")
    assert _existing(kubectl, testbed, manifest) == []

    run(*h, "install", name, str(CHART), "-n", ns, *values)
    assert _existing(kubectl, testbed, manifest) == wanted
    assert json.loads(run(*h, "status", name, "-n", ns, "-o", "json").stdout)["info"]["status"] == "deployed"
    dep_name = f"{name}-py-scheduler"

    def get_dep() -> Obj:
        d: Obj = json.loads(run(*k, "-n", ns, "get", "deployment", dep_name, "-o", "json").stdout)
        return d

    def replica_sets() -> list[Obj]:
        items: list[Obj] = json.loads(run(*k, "-n", ns, "get", "replicasets", "-o", "json").stdout)["items"]
        return items

    before = get_dep()
    old_sum = before["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
    await wait_for(lambda: len(replica_sets()) == 1, timeout=60, what="the Deployment's first ReplicaSet")

    # a config value changes: the ConfigMap and the Pod template's checksum change -> a new ReplicaSet
    run(*h, "upgrade", name, str(CHART), "-n", ns, *values, "--reuse-values", "--set", "gpu.modelWeight=50")
    after = get_dep()
    new_sum = after["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
    assert new_sum != old_sum and after["metadata"]["generation"] > before["metadata"]["generation"]
    cm = json.loads(run(*k, "-n", ns, "get", "configmap", f"{dep_name}-config", "-o", "json").stdout)
    gpu_score = {p["name"]: p["args"] for p in yaml.safe_load(cm["data"]["config.yaml"])["profiles"][0]["pluginConfig"]}
    assert gpu_score["GPUScore"]["modelWeight"] == 50
    assert hashlib.sha256(b"").hexdigest() not in (old_sum, new_sum)

    def rolled() -> bool:
        sums = {rs["spec"]["template"]["metadata"]["annotations"][CHECKSUM] for rs in replica_sets()}
        return sums == {old_sum, new_sum}

    await wait_for(rolled, timeout=60, what="a ReplicaSet with the new config's checksum next to the old one")
    assert json.loads(run(*h, "history", name, "-n", ns, "-o", "json").stdout)[-1]["revision"] == 2

    run(*h, "uninstall", name, "-n", ns)
    await wait_for(lambda: _existing(kubectl, testbed, manifest) == [], timeout=60,
                   what="every object of the release gone after helm uninstall")
    assert run(*h, "status", name, "-n", ns, check=False).returncode != 0
