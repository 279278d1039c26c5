"""Issue 21's benchmark pieces: the upstream-shaped workloads (init, measured and never-bound Pods
must not collide by name, must have the shape their upstream template has, and the never-bound ones
must really never fit), the per-round py/kube ratio ranges, and the report's target verdicts (a wrong
one would tell the lead a target is met when it is not)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.bench_lib import workloads as w  # noqa: E402
from bench.bench_lib.report import render  # noqa: E402
from bench.bench_lib.throughput import RunResult, ratios, run_sizes  # noqa: E402
from py_scheduler.framework.types import PodInfo  # noqa: E402

UPSTREAM = ("PodAffinity", "PreferredPodAntiAffinity", "PreferredTopologySpreading", "MixedSchedulingBasePod",
            "Preemption", "Unschedulable", "SchedulingGates", "SchedulingWithMixedChurn")


def _cpu_millis(pod: dict[str, object]) -> int:
    q = pod["spec"]["containers"][0]["resources"]["requests"]["cpu"]  # type: ignore[index]
    return int(q[:-1]) if q.endswith("m") else int(q) * 1000


def test_every_issue21_workload_is_registered_and_parses() -> None:
    for name in UPSTREAM:
        wl = w.get_workload(name)
        for pod in (wl.pod(0, "ns", "py-scheduler", None), *w.init_pods(wl, 20, 3, "ns", uids=False)):
            PodInfo(pod)  # raises on a malformed Pod
        if wl.extra is not None:
            PodInfo(wl.extra(0, "ns", "py-scheduler", None))


def test_names_of_init_measured_and_extra_pods_never_collide() -> None:
    for name in w.WORKLOADS:
        wl = w.get_workload(name)
        n_pods, n_init = run_sizes(wl, 100, 50, None)
        names = [p["metadata"]["name"] for p in w.init_pods(wl, 100, n_init, "ns", uids=False)]
        names += [wl.pod(n_init + i, "ns", "s", None)["metadata"]["name"] for i in range(n_pods)]
        if wl.extra is not None:
            names += [wl.extra(k, "ns", "s", None)["metadata"]["name"] for k in range(int(n_pods * wl.extra_ratio))]
        dup = [n for n, c in Counter(names).items() if c > 1]
        assert not dup, (name, dup[:3])


def test_preemption_init_pods_fill_every_node_and_measured_pods_outrank_them() -> None:
    wl = w.get_workload("Preemption")
    n = 30
    per_node: Counter[str] = Counter()
    for pod in w.init_pods(wl, n, wl.default_init(n), "ns", uids=False):
        per_node[pod["spec"]["nodeName"]] += _cpu_millis(pod)
        assert pod["spec"]["priorityClassName"] == w.PRIORITY_LOW
    assert len(per_node) == n and set(per_node.values()) == {int(w.NODE_CPU) * 1000}
    high = wl.pod(0, "ns", "s", None)
    assert high["spec"]["priority"] > 0 and high["spec"]["priorityClassName"] == w.PRIORITY_HIGH
    assert {p["metadata"]["name"] for _, p in wl.setup} == {w.PRIORITY_LOW, w.PRIORITY_HIGH}


def test_never_bound_pods_never_fit_or_stay_gated() -> None:
    large = w.get_workload("Unschedulable").extra
    assert large is not None
    assert _cpu_millis(large(0, "ns", "s", None)) > int(w.NODE_CPU) * 1000
    gated = w.get_workload("SchedulingGates").extra
    assert gated is not None
    assert gated(0, "ns", "s", None)["spec"]["schedulingGates"] == [{"name": "test.k8s.io/hold"}]
    path, node = w.churn_objects(3, "ns", "s")[0]
    assert path == "/api/v1/nodes" and node["metadata"]["labels"][w.LABEL_HOSTNAME] == node["metadata"]["name"]
    kinds = [o["kind"] for _, o in w.churn_objects(3, "ns", "s")]
    assert kinds == ["Node", "Pod", "Service"]


def test_upstream_template_shapes() -> None:
    spread = w.get_workload("PreferredTopologySpreading").pod(0, "ns", "s", None)["spec"]["topologySpreadConstraints"]
    assert spread[0]["maxSkew"] == 5 and spread[0]["whenUnsatisfiable"] == "ScheduleAnyway"
    aff = w.get_workload("PodAffinity").pod(0, "ns", "s", None)
    term = aff["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == w.LABEL_ZONE and aff["metadata"]["labels"] == term["labelSelector"]["matchLabels"]
    mixed = w.get_workload("MixedSchedulingBasePod")
    kinds = {tuple(sorted((p["spec"].get("affinity") or {}).keys()))
             for p in w.init_pods(mixed, 10, mixed.default_init(10), "ns", uids=False)}
    assert kinds == {(), ("podAffinity",), ("podAntiAffinity",)}


def _run(kind: str, rnd: int, bound: int, seconds: float, cpu: float, ready: float) -> RunResult:
    return RunResult(kind, "SchedulingBasic", 10, bound, bound=bound, seconds=seconds, cpu_seconds=cpu,
                     ready_seconds=ready, round=rnd, mode="backlog", latencies=[0.1] * bound)


def test_ratios_give_medians_and_per_round_ranges() -> None:
    runs = [_run("py", 0, 100, 1.0, 0.3, 2.0), _run("kube", 0, 100, 2.0, 0.4, 0.5),
            _run("py", 1, 100, 2.0, 0.3, 3.0), _run("kube", 1, 100, 1.0, 0.4, 0.5),
            _run("py", 2, 100, 1.0, 0.3, 2.5), _run("kube", 2, 100, 1.0, 0.4, 0.5)]
    out = ratios(runs)
    assert out["py_pods_per_second"] == 100.0 and out["kube_pods_per_second"] == 100.0
    assert out["py/kube_pods_per_second_range"] == "0.500-2.000"
    assert out["py/kube_cpu_ms_per_pod"] == 0.75
    assert out["py_ready_s"] == 2.5


def test_report_verdicts() -> None:
    rec = {"tool": "throughput", "mode": "backlog", "argv": ["--backlog"], "date": "d", "machine": {"nproc": 2},
           "summary": {"py_pods_per_second": 90.0, "kube_pods_per_second": 100.0, "py/kube_pods_per_second": 0.9,
                       "py_cpu_ms_per_pod": 0.7, "kube_cpu_ms_per_pod": 1.0, "py_ready_s": 2.0, "kube_ready_s": 0.5},
           "runs": [{"scheduler": "py", "workload": "SchedulingBasic", "nodes": 5000, "pods": 3000, "round": 0}]}
    text = render([rec], smoke=True)
    assert "NOT a result" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert "no, by 10%" in rows[next(k for k in rows if k.startswith("Pods/s"))]
    assert rows["CPU per Pod from ready, ms"].rstrip().endswith("| yes |")
    assert "no, by 0.50 s" in rows["start -> ready (first /readyz 200), s"]


def test_volume_pods_come_with_their_bound_pvc_and_pv() -> None:
    for name, source in (("SchedulingInTreePVs", "awsElasticBlockStore"), ("SchedulingCSIPVs", "csi")):
        wl = w.get_workload(name)
        pod = wl.pod(7, "ns", "s", None)
        pvc, pv = w.pod_objects(wl, 7, "ns")
        assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["status"]["phase"] == "Bound"
        assert pv["spec"]["claimRef"]["name"] == pvc["metadata"]["name"] and source in pv["spec"]
        assert pvc["metadata"]["annotations"][w.BIND_COMPLETED] == "true"
    assert w.get_workload("SchedulingCSIPVs").node_object is not None
    assert w.pod_objects(w.get_workload("SchedulingBasic"), 7, "ns") == []


def test_wffc_claims_are_unbound_and_pvs_spread_over_the_nodes() -> None:
    wl = w.get_workload("SchedulingWaitForFirstConsumer")
    nodes = Counter()
    for i in range(20):
        pvc, pv = w.pod_objects(wl, i, "ns", n_nodes=5)
        assert "volumeName" not in pvc["spec"] and pvc["spec"]["storageClassName"] == w.WFFC_CLASS
        term = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
        nodes[term["values"][0]] += 1
    assert nodes == {w.node_name(k): 4 for k in range(5)}
    assert wl.controller_manager and wl.setup[0][1]["volumeBindingMode"] == "WaitForFirstConsumer"


def test_dra_workload_shape() -> None:
    wl = w.get_workload("SchedulingWithResourceClaimTemplate")
    pod = wl.pod(0, "ns", "s", None)
    assert pod["spec"]["resourceClaims"] == [{"name": "resource", "resourceClaimTemplateName": w.DRA_TEMPLATE}]
    PodInfo(pod)
    assert wl.node_object is not None and wl.namespace_objects is not None
    slice_ = wl.node_object(3)
    assert slice_["spec"]["nodeName"] == w.node_name(3) and len(slice_["spec"]["devices"]) == w.DRA_DEVICES_PER_NODE
    (tmpl,) = wl.namespace_objects("ns")
    assert tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == w.DRA_CLASS
    assert w.max_pods(wl, 20, 1000) == 200 and wl.live_only


def test_dra_backlog_waits_for_the_claim_controller_to_name_each_claim() -> None:
    wl = w.get_workload("SchedulingWithResourceClaimTemplate")
    assert wl.prepared is not None
    pod = wl.pod(0, "ns", "s", None)
    assert not wl.prepared(pod)
    w.generated_claim(pod)  # what the resourceclaim controller does: the claim, then the Pod's status
    assert wl.prepared(pod)
    assert w.get_workload("SchedulingBasic").prepared is None


def test_kube_controller_manager_gets_scheduler_perfs_client_rate(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """scheduler_perf's controllers use a 5000 QPS client; at kube-controller-manager's default (20)
    its resourceclaim controller paced both schedulers at about 10 Pods/s."""
    from bench.bench_lib import throughput as t

    spawned: dict[str, list[str]] = {}

    def spawn(self: object, name: str, argv: list[str], port: int | None = None, *, restart: bool = False) -> int:
        spawned[name] = argv
        return 1

    monkeypatch.setattr(t.bed.Testbed, "_spawn", spawn)
    monkeypatch.setenv("BENCH_KCM_ARGS", "--kube-api-qps=7")
    tb = t.BenchBed(tmp_path, {t.bed.KUBE_CONTROLLER_MANAGER: ["taskset", "-c", "0"]})
    tb._spawn(t.bed.KUBE_CONTROLLER_MANAGER, ["kcm", "--v=1"])
    tb._spawn(t.bed.ETCD, ["etcd"])
    assert spawned[t.bed.KUBE_CONTROLLER_MANAGER] == [
        "taskset", "-c", "0", "kcm", "--v=1", "--kube-api-qps=5000", "--kube-api-burst=5000", "--kube-api-qps=7"]
    assert spawned[t.bed.ETCD] == ["etcd"]
