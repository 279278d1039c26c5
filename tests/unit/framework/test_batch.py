"""OpportunisticBatching (py_scheduler/framework/batch.py), ported from upstream's
``pkg/scheduler/framework/runtime/batch_test.go`` plus end-to-end checks through ``Algorithm.schedule``."""

from __future__ import annotations

import random
from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework import batch as batch_mod
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.batch import MAX_BATCH_AGE, OpportunisticBatch, SortedScoredNodes
from py_scheduler.framework.config import ProfileConfig, SchedulerConfig, build_framework
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry

Obj = dict[str, Any]


# -- fixtures in the shape of batch_test.go ------------------------------------------------------------
def mk_pod(name: str, uid: str, *, nnn: str = "", cpu: str = "100m", labels: dict[str, str] | None = None,
           **spec: Any) -> Obj:
    p: Obj = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": name, "namespace": "default", "uid": uid, "labels": labels or {"app": "x"}},
              "spec": {"schedulerName": "py-scheduler",
                       "containers": [{"name": "c", "image": "img:1",
                                       "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}], **spec}}
    if nnn:
        p["status"] = {"nominatedNodeName": nnn}
    return p


def mk_node(name: str, cpu: str = "4", mem: str = "8Gi", **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110"}}}


class BatchTestPlugin:
    """Each node holds at most one Pod whose UID starts with 'b' (``BatchTestPlugin``)."""

    name = "batchTest"

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        if pod.uid.startswith("b") and any(p.uid.startswith("b") for p in node_info.pods):
            return Status.unschedulable("unsched")
        return Status.success()

    def sign_pod(self, pod: PodInfo, snapshot: Any) -> tuple[list[tuple[str, Any]], Status]:
        return [], Status.success()


class ConfigurableFilter:
    name = "configurableFilter"

    def __init__(self, err: bool = False) -> None:
        self.err = err

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status.error("injected filter error") if self.err else Status.success()

    def sign_pod(self, pod: PodInfo, snapshot: Any) -> tuple[list[tuple[str, Any]], Status]:
        return [], Status.success()


class ConfigurableScore:
    """PreScore records the nodes it saw; NormalizeScore fails for a node PreScore did not see."""

    name = "configurableScore"

    def __init__(self, score: int = 0, pre_score_err: bool = False, score_err: bool = False,
                 norm_err: bool = False) -> None:
        self.value, self.pre_score_err, self.score_err, self.norm_err = score, pre_score_err, score_err, norm_err

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        if self.pre_score_err:
            return Status.error("injected prescore error")
        state.write("seen", {n.name for n in nodes})
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        return (0, Status.error("injected score error")) if self.score_err else (self.value, Status.success())

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        if self.norm_err:
            return Status.error("injected normalize error")
        seen = state.data.get("seen")
        if seen is None:
            return Status.error("NormalizeScore: missing PreScore state")
        for n in scores:
            if n not in seen:
                return Status.error(f"NormalizeScore called for node {n!r} which was not passed to PreScore")
        return Status.success()

    def sign_pod(self, pod: PodInfo, snapshot: Any) -> tuple[list[tuple[str, Any]], Status]:
        return [], Status.success()


def make_framework(score: ConfigurableScore | None = None, flt: ConfigurableFilter | None = None) -> Framework:
    plugins: list[tuple[Any, int]] = [(BatchTestPlugin(), 0)]
    if flt is not None:
        plugins.append((flt, 0))
    if score is not None:
        plugins.append((score, 1))
    return Framework("p", plugins)


def names(*ns: str) -> SortedScoredNodes:
    """A ranking popping ``ns`` in order (``newTestNodes``)."""
    return SortedScoredNodes(list(ns), [len(ns) - i for i in range(len(ns))], {})


def snapshot_with(*node_pods: tuple[str, list[Obj]]) -> Snapshot:
    nodes = [mk_node(n) for n, _ in node_pods]
    pods = [dict(p, spec=dict(p["spec"], nodeName=n)) for n, ps in node_pods for p in ps]
    return Snapshot.from_objects(nodes, pods)


# -- TestBatchBasic -----------------------------------------------------------------------------------
BASIC = [
    # name, first uid, first sig, first ok, first chosen, first others, cycle mode, second uid, nnn, second sig,
    # second chosen, generic workload, expected hint, expected remaining
    ("same signature gets a hint", "b-1", "sig", True, "n3", ["n1"], "next", "b-2", "", "sig", "n1", False, "n1", None),
    ("different signature no hint", "a-1", "sig", True, "n3", ["n1"], "next", "a-2", "", "sig2", "n1", False, "", None),
    ("previous pod not scheduled", "b-1", "sig", False, "n3", ["n1"], "next", "b-2", "", "sig", "n1", False, "", None),
    ("empty list", "b-1", "sig", True, "n3", [], "next", "b-2", "", "sig", "n4", False, "", None),
    ("nil list", "b-1", "sig", True, "n3", None, "next", "b-2", "", "sig", "n4", False, "", None),
    ("previous pod of another profile", "b-1", "sig", True, "n3", ["n1"], "skip", "b-2", "", "sig", "n1", False, "",
     None),
    ("same cycle, GenericWorkload off", "b-1", "sig", True, "n3", ["n1"], "same", "b-2", "", "sig", "n1", False, "",
     None),
    ("same cycle, GenericWorkload on", "b-1", "sig", True, "n3", ["n1"], "same", "b-2", "", "sig", "n1", True, "n1",
     None),
    ("leaves remaining batch to next pod", "b-1", "sig", True, "n3", ["n1", "n2"], "next", "b-2", "", "sig", "n1",
     False, "n1", ["n2"]),
    ("nominated pod gets no hint", "b-1", "sig", True, "n3", ["n1"], "next", "b-2", "n1", "sig", "n1", False, "", None),
]


@pytest.mark.parametrize("case", BASIC, ids=[c[0] for c in BASIC])
def test_batch_basic(case: tuple[Any, ...]) -> None:
    (_, uid1, sig1, ok1, chosen1, others1, mode, uid2, nnn2, sig2, chosen2, generic, want_hint, want_rest) = case
    fw = make_framework()
    b = OpportunisticBatch(fw, generic_workload_enabled=generic)
    pod1 = PodInfo(mk_pod("pod", uid1))
    state = CycleState()
    empty = snapshot_with()
    assert b.get_node_hint(pod1, sig1, state, 1, empty) == ""
    if ok1:
        b.store_schedule_results(sig1, "", chosen1, names(*others1) if others1 is not None else None, 1)
    cycle = {"next": 2, "skip": 3, "same": 1}[mode]
    pod2 = PodInfo(mk_pod("pod2", uid2, nnn=nnn2))
    snap = snapshot_with((chosen1, [mk_pod("pod", uid1)]))  # the last chosen node holds the first Pod
    hint = b.get_node_hint(pod2, sig2, state, cycle, snap)
    assert hint == want_hint
    b.store_schedule_results(sig2, hint, chosen2, None, cycle)
    if want_rest is None:
        assert b.state_empty()
    else:
        assert b.state is not None and b.state.signature == "sig"
        assert b.state.sorted_nodes.remaining_names() == want_rest


# -- TestBatchRescore ---------------------------------------------------------------------------------
RESCORE = [
    # name, fresh score, filterErr, preScoreErr, scoreErr, normErr, chosen missing, cached missing, hint, remaining
    ("rescored node wins", 100, False, False, False, False, False, False, "n2", ["n1"]),
    ("rescored node loses", 10, False, False, False, False, False, False, "n1", ["n2"]),
    ("filter error gives no hint", 100, True, False, False, False, False, False, "", ["n1"]),
    ("prescore error gives no hint", 0, False, True, False, False, False, False, "", ["n1"]),
    ("score error gives no hint", 0, False, False, True, False, False, False, "", ["n1"]),
    ("normalize error gives no hint", 0, False, False, False, True, False, False, "", ["n1"]),
    ("chosen node missing gives no hint", 0, False, False, False, False, True, False, "", ["n1"]),
    ("cached node missing gives no hint", 100, False, False, False, False, False, True, "", ["n1"]),
]


class Recorder:
    def __init__(self) -> None:
        self.flushes: list[str] = []
        self.attempts: list[str] = []
        self.rescores = 0

    def attempt(self, profile: str, result: str) -> None:
        self.attempts.append(result)

    def flushed(self, profile: str, reason: str) -> None:
        self.flushes.append(reason)

    def rescore(self, profile: str, seconds: float) -> None:
        self.rescores += 1

    def hint_duration(self, hinted: str, profile: str, seconds: float) -> None:
        assert seconds >= 0

    def store_duration(self, profile: str, seconds: float) -> None:
        assert seconds >= 0


@pytest.mark.parametrize("case", RESCORE, ids=[c[0] for c in RESCORE])
def test_batch_rescore(case: tuple[Any, ...]) -> None:
    (_, score, f_err, ps_err, s_err, n_err, chosen_missing, cached_missing, want_hint, want_rest) = case
    fw = make_framework(ConfigurableScore(score, ps_err, s_err, n_err), ConfigurableFilter(f_err))
    rec = Recorder()
    b = OpportunisticBatch(fw, recorder=rec)
    pod1 = mk_pod("pod1", "a-1")
    cached = SortedScoredNodes(["n1"], [50], {"configurableScore": [50]})
    b.get_node_hint(PodInfo(pod1), "sig", CycleState(), 1, snapshot_with())
    b.store_schedule_results("sig", "", "n2", cached, 1)
    if chosen_missing:
        snap = snapshot_with()
    elif cached_missing:
        snap = snapshot_with(("n2", [pod1]))
    else:
        snap = snapshot_with(("n1", []), ("n2", [pod1]))
    hint = b.get_node_hint(PodInfo(mk_pod("pod2", "a-2")), "sig", CycleState(snap), 2, snap)
    assert hint == want_hint
    assert b.state is not None
    assert b.state.sorted_nodes.remaining_names() == want_rest
    expected_flush = {(True, False, False, False): batch_mod.FLUSH_FILTER_ERROR,
                      (False, True, False, False): batch_mod.FLUSH_PRESCORE_ERROR,
                      (False, False, True, False): batch_mod.FLUSH_RESCORE_ERROR,
                      (False, False, False, True): batch_mod.FLUSH_NORMALIZE_ERROR}.get((f_err, ps_err, s_err, n_err))
    if expected_flush:
        assert rec.flushes == [expected_flush]
    elif chosen_missing or cached_missing:
        assert rec.flushes == [batch_mod.FLUSH_NODE_MISSING]
    else:
        assert rec.flushes == [] and rec.rescores == 1


def test_batch_rescore_chain() -> None:
    fw = make_framework(ConfigurableScore(100))
    b = OpportunisticBatch(fw)
    pod1 = mk_pod("pod1", "a-1")
    b.get_node_hint(PodInfo(pod1), "sig", CycleState(), 1, snapshot_with())
    b.store_schedule_results("sig", "", "n2", SortedScoredNodes(["n1"], [50], {"configurableScore": [50]}), 1)
    snap = snapshot_with(("n1", []), ("n2", [pod1]))
    h2 = b.get_node_hint(PodInfo(mk_pod("pod2", "a-2")), "sig", CycleState(snap), 2, snap)
    assert h2 == "n2"
    b.store_schedule_results("sig", h2, "n2", None, 2)
    h3 = b.get_node_hint(PodInfo(mk_pod("pod3", "a-3")), "sig", CycleState(snap), 3, snap)
    assert h3 == "n2"
    assert b.state is not None and b.state.sorted_nodes.remaining_names() == ["n1"]
    assert b.batched_pods == 1


def test_expired_after_max_batch_age() -> None:
    now = [100.0]
    fw = make_framework()
    rec = Recorder()
    b = OpportunisticBatch(fw, clock=lambda: now[0], recorder=rec)
    b.store_schedule_results("sig", "", "n3", names("n1", "n2"), 1)
    snap = snapshot_with(("n3", [mk_pod("p", "b-1")]))
    now[0] += MAX_BATCH_AGE  # exactly 500 ms: still usable (time.Now().After(creation + maxBatchAge) is false)
    assert b.get_node_hint(PodInfo(mk_pod("q", "b-2")), "sig", CycleState(snap), 2, snap) == "n1"
    b.store_schedule_results("sig", "n1", "n1", None, 2)
    now[0] += 0.001
    assert b.get_node_hint(PodInfo(mk_pod("r", "b-3")), "sig", CycleState(snap), 3, snap) == ""
    assert rec.flushes == [batch_mod.FLUSH_EXPIRED]


def test_sorted_scored_nodes_order_and_uniform_ties() -> None:
    sn = SortedScoredNodes(["a", "b", "c", "d"], [10, 30, 20, 30], {}, random.Random(1))
    first = sn.pop()
    assert first in ("b", "d")
    assert [sn.pop() for _ in range(3)][1:] == ["c", "a"]
    with pytest.raises(IndexError):
        sn.pop()
    counts = {"b": 0, "d": 0}
    rng = random.Random(7)
    for _ in range(2000):
        counts[SortedScoredNodes(["a", "b", "c", "d"], [10, 30, 20, 30], {}, rng).pop()] += 1
    assert 850 < counts["b"] < 1150, counts


# -- signatures ---------------------------------------------------------------------------------------
def default_framework(**plugin_config: dict[str, Any]) -> Framework:
    prof = ProfileConfig(plugin_config=dict(plugin_config))
    return build_framework(prof, SchedulerConfig(profiles=[prof]), registry=registry)


LIST_PTS = {"PodTopologySpread": {"defaultingType": "List"}}


def test_default_profile_signs_nothing_because_of_system_default_spreading() -> None:
    """Upstream: PodTopologySpread with defaultingType System has default constraints -> no signature,
    so the default profile never batches."""
    fw = default_framework()
    assert fw.enable_signatures
    assert fw.sign_pod(PodInfo(mk_pod("p", "u1")), snapshot_with()) is None


@pytest.mark.parametrize(("a", "b", "same"), [
    ({}, {}, True),
    ({"labels": {"app": "y"}}, {}, False),  # InterPodAffinity signs labels
    ({"cpu": "200m"}, {}, False),  # NodeResourcesFit signs requests
    ({"cpu": "0.1"}, {}, True),  # the same quantity written differently
    ({"tolerations": [{"key": "k", "operator": "Exists"}]}, {}, False),
    ({"tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]},
     {"tolerations": [{"key": "b", "operator": "Exists"}, {"key": "a", "operator": "Exists"}]}, True),
    ({"nodeSelector": {"zone": "a"}}, {}, False),
    ({"volumes": [{"name": "cfg", "configMap": {"name": "x"}}]}, {}, True),  # ConfigMap/Secret volumes ignored
    ({"volumes": [{"name": "v1", "emptyDir": {}}]}, {"volumes": [{"name": "v2", "emptyDir": {}}]}, True),
    ({"volumes": [{"name": "v", "emptyDir": {}}]}, {}, False),
    ({"nodeName": "n1"}, {}, False),
    ({"schedulerName": "other"}, {}, False),
])
def test_signature_equality(a: dict[str, Any], b: dict[str, Any], same: bool) -> None:
    fw = default_framework(**LIST_PTS)
    snap = snapshot_with()

    def pod(uid: str, o: dict[str, Any]) -> PodInfo:
        o = dict(o)
        labels = o.pop("labels", None)
        cpu = o.pop("cpu", "100m")
        p = mk_pod(uid, uid, cpu=cpu, labels=labels)
        p["spec"].update(o)
        return PodInfo(p)

    sa, sb = fw.sign_pod(pod("a", a), snap), fw.sign_pod(pod("b", b), snap)
    assert sa is not None and sb is not None
    assert (sa == sb) is same


@pytest.mark.parametrize(("spec", "meta"), [
    ({"affinity": {"podAffinity": {}}}, {}),  # InterPodAffinity
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}}, {}),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
     {}),  # PodTopologySpread
    ({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}, {}),  # DynamicResources
    ({}, {"annotations": {"gpu-scheduler/gpu-count": "abc"}}),  # GPU plugins: malformed annotation
])
def test_pods_that_must_not_sign(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    fw = default_framework(**LIST_PTS)
    p = mk_pod("p", "u")
    p["spec"].update(spec)
    p["metadata"].update(meta)
    assert fw.sign_pod(PodInfo(p), snapshot_with()) is None


def test_dra_extended_resource_refuses_signature() -> None:
    fw = default_framework(**LIST_PTS)
    p = mk_pod("p", "u")
    p["spec"]["containers"][0]["resources"]["requests"]["example.com/dev"] = "1"
    dc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "dev"},
          "spec": {"extendedResourceName": "example.com/dev"}}
    assert fw.sign_pod(PodInfo(p), snapshot_with()) is not None
    snap = Snapshot.from_object_list([mk_node("n1"), dc])
    fw2 = default_framework(**LIST_PTS)
    assert fw2.sign_pod(PodInfo(p), snap) is None


def test_gpu_request_is_signed() -> None:
    fw = default_framework(**LIST_PTS)
    snap = snapshot_with()

    def gpu_pod(uid: str, n: str, model: str | None = None) -> PodInfo:
        p = mk_pod(uid, uid)
        p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": n}
        if model:
            p["metadata"]["annotations"] = {"gpu-scheduler/gpu-model": model}
        return PodInfo(p)

    s1, s2, s3, s4 = (fw.sign_pod(gpu_pod("a", "1"), snap), fw.sign_pod(gpu_pod("b", "1"), snap),
                      fw.sign_pod(gpu_pod("c", "2"), snap), fw.sign_pod(gpu_pod("d", "1", "a100"), snap))
    assert s1 is not None and s1 == s2
    assert s3 is not None and s3 != s1
    assert s4 is not None and s4 != s1


def test_plugin_without_sign_pod_disables_signatures() -> None:
    class NoSign:
        name = "NoSign"

        def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
            return Status.success()

    fw = Framework("p", [(BatchTestPlugin(), 0), (NoSign(), 0)])
    assert not fw.enable_signatures
    assert fw.sign_pod(PodInfo(mk_pod("p", "u")), snapshot_with()) is None


def test_signing_plugin_that_raises_gives_no_signature() -> None:
    class Boom(BatchTestPlugin):
        name = "Boom"

        def sign_pod(self, pod: PodInfo, snapshot: Any) -> tuple[list[tuple[str, Any]], Status]:
            raise ValueError("bad")

    fw = Framework("p", [(Boom(), 0)])
    assert fw.enable_signatures
    assert fw.sign_pod(PodInfo(mk_pod("p", "u")), snapshot_with()) is None


# -- through Algorithm.schedule -------------------------------------------------------------------
def cluster(n: int) -> Snapshot:
    nodes = [mk_node(f"n{i:02d}", cpu=str(2 + i % 3), mem=f"{4 + (i * 7) % 9}Gi", zone=f"z{i % 3}")
             for i in range(n)]
    bound = [dict(mk_pod(f"b{i}", f"bound-{i}", cpu=f"{(i * 137) % 900 + 50}m"), )
             for i in range(n)]
    for i, p in enumerate(bound):
        p["spec"]["nodeName"] = f"n{(i * 5) % n:02d}"
    return Snapshot.from_objects(nodes, bound)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stream_hinted_choice_is_a_best_full_cycle_choice(seed: int) -> None:
    """Every node chosen with batching has the highest total a full cycle (all nodes evaluated, < 100
    nodes) gives on the same snapshot: the hint equals the full cycle's choice up to tie-breaking."""
    fw = default_framework(**LIST_PTS)
    full_fw = default_framework(**LIST_PTS)
    full_fw.set_opportunistic_batching(False)
    snap = cluster(30)
    algo, ref = Algorithm(rng=random.Random(seed)), Algorithm(rng=random.Random(seed))
    assert fw.batch is not None
    for i in range(60):
        pi = PodInfo(mk_pod(f"s{i}", f"s-{i}", cpu="300m"))
        full = ref.schedule(full_fw, snap, PodInfo(mk_pod(f"s{i}", f"s-{i}", cpu="300m")))
        res = algo.schedule(fw, snap, pi, cycle=i + 1)
        assert res.selected is not None and full.selected is not None
        assert full.totals[res.selected] == max(full.totals.values()), (i, res.selected, full.selected)
        snap.assume(pi, res.selected)
    assert fw.batch.batched_pods > 40  # most Pods took their hint
    assert fw.sign_pod(PodInfo(mk_pod("x", "x", cpu="300m")), snap) is not None


def test_hinted_cycle_filters_only_the_hint() -> None:
    fw = default_framework(**LIST_PTS)
    snap = cluster(20)
    algo = Algorithm(rng=random.Random(0))
    first = PodInfo(mk_pod("p1", "p-1"))
    r1 = algo.schedule(fw, snap, first, cycle=1)
    assert r1.nodes_evaluated == 20 and r1.selected is not None
    snap.assume(first, r1.selected)
    start = algo.next_start_node_index
    second = PodInfo(mk_pod("p2", "p-2"))
    r2 = algo.schedule(fw, snap, second, cycle=2)
    assert r2.nodes_evaluated == 1 and r2.feasible == [r2.selected]
    assert algo.next_start_node_index == start  # a hinted cycle does not advance the start index
    assert fw.batch is not None and fw.batch.batched_pods == 1


@pytest.mark.parametrize("what", ["failed_cycle", "other_profile", "nominated", "other_signature", "no_cycle"])
def test_flushes(what: str) -> None:
    fw = default_framework(**LIST_PTS)
    rec = Recorder()
    assert fw.batch is not None
    fw.batch.recorder = rec
    snap = cluster(10)
    algo = Algorithm(rng=random.Random(0))
    p1 = PodInfo(mk_pod("p1", "p-1"))
    r1 = algo.schedule(fw, snap, p1, cycle=1)
    assert r1.selected is not None
    snap.assume(p1, r1.selected)
    cycle = 2
    if what == "failed_cycle":
        huge = PodInfo(mk_pod("huge", "h", cpu="100"))
        assert algo.schedule(fw, snap, huge, cycle=2).selected is None
        cycle = 3
    elif what == "other_profile":
        cycle = 3  # cycle 2 went to another profile
    p2 = mk_pod("p2", "p-2", nnn=r1.selected if what == "nominated" else "",
                labels={"app": "other"} if what == "other_signature" else None)
    r2 = algo.schedule(fw, snap, PodInfo(p2), cycle=None if what == "no_cycle" else cycle)
    assert r2.selected is not None
    if what == "no_cycle":
        assert r2.nodes_evaluated == 10 and rec.flushes == []
        return
    want = {"failed_cycle": batch_mod.FLUSH_POD_SKIPPED, "other_profile": batch_mod.FLUSH_POD_SKIPPED,
            "nominated": batch_mod.FLUSH_POD_NOMINATED, "other_signature": batch_mod.FLUSH_POD_INCOMPATIBLE}[what]
    assert want in rec.flushes
    if what == "nominated":
        assert r2.selected == r1.selected and r2.nodes_evaluated == 1  # nominated node tried alone
    else:
        assert r2.nodes_evaluated == 10  # full cycle


def test_gate_off_never_hints() -> None:
    fw = default_framework(**LIST_PTS)
    fw.set_opportunistic_batching(False)
    snap = cluster(10)
    algo = Algorithm(rng=random.Random(0))
    for i in range(3):
        pi = PodInfo(mk_pod(f"p{i}", f"p-{i}"))
        r = algo.schedule(fw, snap, pi, cycle=i + 1)
        assert r.nodes_evaluated == 10 and r.selected is not None
        snap.assume(pi, r.selected)


def test_feature_gates_reach_the_profile_through_its_handle() -> None:
    from py_scheduler.framework.features import FeatureGates

    off = FeatureGates.parse("OpportunisticBatching=false")
    assert off == FeatureGates(opportunistic_batching=False)
    prof = ProfileConfig()
    fw = build_framework(prof, SchedulerConfig(profiles=[prof], feature_gates=off), registry=registry)
    assert fw.batch is None and fw.handle.feature_gates is off
    with pytest.raises(ValueError, match="unrecognized feature gate: Foo"):
        FeatureGates.parse("Foo=true")
    with pytest.raises(ValueError):
        FeatureGates.parse("OpportunisticBatching=maybe")
    assert default_framework().batch is not None


def test_live_metrics_recorder() -> None:
    from py_scheduler.app.telemetry.metrics import REGISTRY, BatchMetricsRecorder

    fw = default_framework(**LIST_PTS)
    assert fw.batch is not None
    fw.batch.recorder = BatchMetricsRecorder()
    fw.profile_name = "batch-metrics-test"
    snap = cluster(10)
    algo = Algorithm(rng=random.Random(0))
    for i in range(3):
        pi = PodInfo(mk_pod(f"m{i}", f"m-{i}"))
        r = algo.schedule(fw, snap, pi, cycle=i + 1)
        assert r.selected is not None
        snap.assume(pi, r.selected)
    labels = {"profile": "batch-metrics-test", "result": "hint_used"}
    assert REGISTRY.get_sample_value("scheduler_batch_attempts_total", labels) == 2.0
    assert REGISTRY.get_sample_value("scheduler_batch_attempts_total",
                                     {"profile": "batch-metrics-test", "result": "no_hint"}) == 1.0
