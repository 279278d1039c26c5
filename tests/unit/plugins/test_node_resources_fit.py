"""NodeResourcesFit: Filter reasons and codes, Score arithmetic for the three strategies, args validation.

Expected numbers are worked by hand from upstream's formulas (fit.go, least_allocated.go,
most_allocated.go, requested_to_capacity_ratio.go, helper/shape_score.go).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.errors import ConfigError, PodParseError
from py_scheduler.framework.gomath import go_div, go_round
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.helpers.resource_scoring import (
    UtilizationShapePoint,
    build_broken_linear_function,
)
from py_scheduler.plugins.node_resources_fit import NodeResourcesFit
from tests.unit.plugins.plain_handle import plain_handle

MI = 1024 * 1024
GI = 1024 * MI


def node(name: str, cpu: str = "1", memory: str = "1Gi", pods: str = "110", **extra: str) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **extra}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc, "capacity": alloc}}


def container(name: str = "c", **requests: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if requests:
        c["resources"] = {"requests": {k.replace("_", "-"): v for k, v in requests.items()}}
    return c


def pod(name: str = "p", containers: list[dict[str, Any]] | None = None, node_name: str = "",
        **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"containers": containers if containers is not None else [container()], **spec}
    if node_name:
        s["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": s}


def filter_status(incoming: dict[str, Any], nodes: list[dict[str, Any]], existing: Sequence[dict[str, Any]] = (),
                  args: dict[str, Any] | None = None, objects: ClusterObjects | None = None,
                  node_name: str | None = None) -> Status:
    snap = Snapshot.from_objects(nodes, list(existing), objects)
    pl = NodeResourcesFit.create(args or {}, plain_handle())
    state = CycleState(snap)
    pi = PodInfo(incoming)
    _, s = pl.pre_filter(state, pi, snap.node_info_list)
    assert s.is_success()
    target = snap.get(node_name or snap.node_info_list[0].name)
    return pl.filter(state, pi, target)


def scores(incoming: dict[str, Any], nodes: list[dict[str, Any]], existing: Sequence[dict[str, Any]] = (),
           args: dict[str, Any] | None = None, pre_score: bool = True) -> dict[str, int]:
    snap = Snapshot.from_objects(nodes, list(existing))
    pl = NodeResourcesFit.create(args or {}, plain_handle())
    state = CycleState(snap)
    pi = PodInfo(incoming)
    if pre_score:
        assert pl.pre_score(state, pi, snap.node_info_list).is_success()
    out = {}
    for ni in snap.node_info_list:
        sc, s = pl.score(state, pi, ni)
        assert s.is_success()
        out[ni.name] = sc
    return out


# -- Filter ---------------------------------------------------------------------------------------
class TestFilter:
    def test_fits(self) -> None:
        s = filter_status(pod(containers=[container(cpu="500m", memory="100Mi")]), [node("n")])
        assert s.is_success()

    def test_insufficient_cpu_is_resolvable_when_node_could_hold_it(self) -> None:
        existing = [pod("e", [container(cpu="600m")], node_name="n")]
        s = filter_status(pod(containers=[container(cpu="500m")]), [node("n")], existing)
        assert s.code == Code.UNSCHEDULABLE
        assert s.reasons == ["Insufficient cpu"]
        assert s.plugin == "NodeResourcesFit"

    def test_request_larger_than_node_is_unresolvable(self) -> None:
        s = filter_status(pod(containers=[container(cpu="2")]), [node("n")])
        assert s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert s.reasons == ["Insufficient cpu"]

    def test_all_reasons_kept_in_upstream_order(self) -> None:
        existing = [pod("e", [container(cpu="900m", memory="900Mi", ephemeral_storage="9Gi")], node_name="n")]
        incoming = pod(containers=[container(cpu="200m", memory="200Mi", ephemeral_storage="2Gi")])
        s = filter_status(incoming, [node("n", pods="1", **{"ephemeral-storage": "10Gi"})], existing)
        assert s.reasons == ["Too many pods", "Insufficient cpu", "Insufficient memory",
                             "Insufficient ephemeral-storage"]
        assert s.code == Code.UNSCHEDULABLE

    def test_too_many_pods_even_for_best_effort_pod(self) -> None:
        existing = [pod("e", node_name="n")]
        s = filter_status(pod(), [node("n", pods="1")], existing)
        assert s.code == Code.UNSCHEDULABLE
        assert s.reasons == ["Too many pods"]

    def test_best_effort_pod_fits_full_node(self) -> None:
        existing = [pod("e", [container(cpu="1", memory="1Gi")], node_name="n")]
        assert filter_status(pod(), [node("n")], existing).is_success()

    def test_explicit_zero_request_fits_full_node(self) -> None:
        existing = [pod("e", [container(cpu="1")], node_name="n")]
        assert filter_status(pod(containers=[container(cpu="0")]), [node("n")], existing).is_success()

    def test_init_container_larger_than_containers(self) -> None:
        incoming = pod(containers=[container(cpu="100m")], initContainers=[container("init", cpu="1500m")])
        s = filter_status(incoming, [node("n")])
        assert s.reasons == ["Insufficient cpu"]
        assert s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE

    def test_init_container_smaller_than_containers_does_not_add(self) -> None:
        incoming = pod(containers=[container(cpu="800m")], initContainers=[container("init", cpu="700m")])
        assert filter_status(incoming, [node("n")]).is_success()

    def test_sidecar_adds_to_containers(self) -> None:
        sidecar = {**container("side", cpu="400m"), "restartPolicy": "Always"}
        existing = [pod("e", [container(cpu="200m")], node_name="n")]
        with_sidecar = pod(containers=[container(cpu="500m")], initContainers=[sidecar])
        without = pod(containers=[container(cpu="500m")])
        assert filter_status(without, [node("n")], existing).is_success()
        s = filter_status(with_sidecar, [node("n")], existing)
        assert s.reasons == ["Insufficient cpu"]
        assert s.code == Code.UNSCHEDULABLE

    def test_overhead_is_added(self) -> None:
        incoming = pod(containers=[container(cpu="500m")], overhead={"cpu": "600m"})
        assert filter_status(incoming, [node("n")]).reasons == ["Insufficient cpu"]

    def test_pod_level_requests_override_containers(self) -> None:
        incoming = pod(containers=[container(cpu="100m")], resources={"requests": {"cpu": "1500m"}})
        assert filter_status(incoming, [node("n")]).reasons == ["Insufficient cpu"]

    def test_a_pending_pods_resize_status_is_not_counted(self) -> None:
        """computePodResourceRequest reads the spec alone (the Pod is on no node yet), while a Pod on a
        node counts its resize status. Found on real nodes: a written status made py-scheduler bind
        a 2001m Pod to a 2000m node (the kubelet said OutOfcpu) and refuse a 100m one."""
        infeasible = {**pod(containers=[container("app", cpu="2001m")]),
                      "status": {"conditions": [{"type": "PodResizePending", "status": "True",
                                                 "reason": "Infeasible"}]}}
        assert filter_status(infeasible, [node("n", cpu="2")]).reasons == ["Insufficient cpu"]
        allocated = {**pod(containers=[container("app", cpu="100m")]),
                     "status": {"containerStatuses": [{"name": "app", "allocatedResources": {"cpu": "2001m"},
                                                       "resources": {"requests": {"cpu": "2001m"}}}]}}
        assert filter_status(allocated, [node("n", cpu="2")]).is_success()
        assert PodInfo(allocated).requests.milli_cpu == 2001  # the same Pod on a node counts its status
        on_node = {**allocated, "spec": {**allocated["spec"], "nodeName": "n"}}
        assert filter_status(pod(containers=[container(cpu="100m")]), [node("n", cpu="2")], [on_node]).reasons == [
            "Insufficient cpu"]

    def test_existing_sidecar_counts_on_node(self) -> None:
        sidecar = {**container("side", cpu="500m"), "restartPolicy": "Always"}
        existing = [pod("e", [container(cpu="300m")], node_name="n", initContainers=[sidecar])]
        assert filter_status(pod(containers=[container(cpu="300m")]), [node("n")], existing).reasons == [
            "Insufficient cpu"]

    def test_extended_resource_absent_from_node(self) -> None:
        incoming = pod(containers=[container(**{"example.com/foo": "1"})])
        s = filter_status(incoming, [node("n")])
        assert s.reasons == ["Insufficient example.com/foo"]
        assert s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE

    def test_extended_resource_used_up(self) -> None:
        existing = [pod("e", [container(**{"example.com/foo": "1"})], node_name="n")]
        incoming = pod(containers=[container(**{"example.com/foo": "1"})])
        s = filter_status(incoming, [node("n", **{"example.com/foo": "1"})], existing)
        assert s.reasons == ["Insufficient example.com/foo"]
        assert s.code == Code.UNSCHEDULABLE

    def test_zero_extended_request_is_ignored(self) -> None:
        incoming = pod(containers=[container(**{"example.com/foo": "0"})])
        assert filter_status(incoming, [node("n")]).is_success()

    def test_ignored_resources(self) -> None:
        incoming = pod(containers=[container(**{"example.com/foo": "1", "example.com/bar": "1"})])
        s = filter_status(incoming, [node("n")], args={"ignoredResources": ["example.com/foo"]})
        assert s.reasons == ["Insufficient example.com/bar"]

    def test_ignored_resource_groups(self) -> None:
        incoming = pod(containers=[container(**{"example.com/foo": "1", "other.io/bar": "1"})])
        s = filter_status(incoming, [node("n")], args={"ignoredResourceGroups": ["example.com"]})
        assert s.reasons == ["Insufficient other.io/bar"]

    def test_ignored_resources_do_not_cover_hugepages(self) -> None:
        incoming = pod(containers=[container(**{"hugepages-2Mi": "4Mi"})])
        s = filter_status(incoming, [node("n", **{"hugepages-2Mi": "2Mi"})],
                          args={"ignoredResources": ["hugepages-2Mi"]})
        assert s.reasons == ["Insufficient hugepages-2Mi"]

    def test_dra_backed_extended_resource_is_left_to_dynamic_resources(self) -> None:
        objects = ClusterObjects()
        objects.upsert("DeviceClass", {"metadata": {"name": "gpu.example.com"},
                                       "spec": {"extendedResourceName": "example.com/gpu"}})
        incoming = pod(containers=[container(**{"example.com/gpu": "1"})])
        assert filter_status(incoming, [node("n")], objects=objects).is_success()
        implicit = pod(containers=[container(**{"deviceclass.resource.kubernetes.io/gpu.example.com": "1"})])
        assert filter_status(implicit, [node("n")], objects=objects).is_success()

    def test_device_plugin_resource_is_checked_even_with_device_class(self) -> None:
        objects = ClusterObjects()
        objects.upsert("DeviceClass", {"metadata": {"name": "gpu.example.com"},
                                       "spec": {"extendedResourceName": "example.com/gpu"}})
        existing = [pod("e", [container(**{"example.com/gpu": "1"})], node_name="n")]
        incoming = pod(containers=[container(**{"example.com/gpu": "1"})])
        s = filter_status(incoming, [node("n", **{"example.com/gpu": "1"})], existing, objects=objects)
        assert s.reasons == ["Insufficient example.com/gpu"]

    def test_filter_without_prefilter_is_an_error(self) -> None:
        snap = Snapshot.from_objects([node("n")])
        pl = NodeResourcesFit.create({}, plain_handle())
        s = pl.filter(CycleState(snap), PodInfo(pod()), snap.get("n"))
        assert s.code == Code.ERROR
        assert "PreFilterNodeResourcesFit" in s.message()

    def test_malformed_quantity_is_a_pod_parse_error_naming_the_field(self) -> None:
        with pytest.raises(PodParseError) as ei:
            PodInfo(pod(containers=[container(cpu="lots")]))
        assert ei.value.field == "spec.containers[0].resources.requests.cpu"
        assert ei.value.value == "lots"

    def test_fit_error_message_through_the_framework(self) -> None:
        nodes = [node("a", pods="1"), node("b")]
        existing = [pod("e", [container(cpu="900m")], node_name="a"),
                    pod("f", [container(cpu="900m")], node_name="b")]
        snap = Snapshot.from_objects(nodes, existing)
        fw = Framework("test", [(NodeResourcesFit.create({}, plain_handle()), 1)])
        res = Algorithm().schedule(fw, snap, PodInfo(pod(containers=[container(cpu="500m")])))
        assert res.selected is None
        assert res.message == "0/2 nodes are available: 1 Too many pods, 2 Insufficient cpu."


# -- Score ----------------------------------------------------------------------------------------
class TestScoreLeastAllocated:
    def test_missing_requests_use_non_zero_defaults(self) -> None:
        # cpu: (1000 - 100) * 100 / 1000 = 90; memory: (1000Mi - 200Mi) * 100 / 1000Mi = 80; mean 85.
        assert scores(pod(), [node("n", cpu="1", memory="1000Mi")]) == {"n": 85}

    def test_explicit_zero_requests_are_zero(self) -> None:
        assert scores(pod(containers=[container(cpu="0", memory="0")]),
                      [node("n", cpu="1", memory="1000Mi")]) == {"n": 100}

    def test_existing_pods_without_requests_count_as_defaults_on_the_node(self) -> None:
        existing = [pod("e", node_name="n")]
        # node non-zero requested: 100m / 200Mi; pod 0/0 -> cpu 90, memory 80.
        assert scores(pod(containers=[container(cpu="0", memory="0")]),
                      [node("n", cpu="1", memory="1000Mi")], existing) == {"n": 85}

    def test_init_container_and_overhead(self) -> None:
        incoming = pod(containers=[container(cpu="500m", memory="100Mi")],
                       initContainers=[container("i", cpu="2", memory="100Mi")], overhead={"cpu": "1"})
        # cpu 2000 + 1000 overhead = 3000 of 4000 -> 25; memory 100Mi of 1000Mi -> 90; mean 57.
        assert scores(incoming, [node("n", cpu="4", memory="1000Mi")]) == {"n": 57}

    def test_score_ignores_pod_level_requests_as_upstream(self) -> None:
        # v1.37's Fit scorer does not enable pod-level resources: the 3-cpu pod-level request is not read.
        incoming = pod(containers=[container(cpu="1", memory="1Gi")], resources={"requests": {"cpu": "3"}})
        assert scores(incoming, [node("n", cpu="4", memory="4Gi")]) == {"n": 75}

    def test_weights_and_truncation(self) -> None:
        args = {"scoringStrategy": {"type": "LeastAllocated",
                                    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 2}]}}
        # cpu (3000-1000)*100/3000 = 66; memory (1000-300)*100/1000 = 70; (66 + 140) / 3 = 68.
        incoming = pod(containers=[container(cpu="1", memory="300")])
        assert scores(incoming, [node("n", cpu="3", memory="1000")], args=args) == {"n": 68}

    def test_request_over_capacity_scores_zero_for_that_resource(self) -> None:
        incoming = pod(containers=[container(cpu="5", memory="500")])
        assert scores(incoming, [node("n", cpu="4", memory="1000")]) == {"n": 25}

    def test_unrequested_extended_resource_is_bypassed(self) -> None:
        args = {"scoringStrategy": {"type": "LeastAllocated", "resources": [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "example.com/foo", "weight": 1}]}}
        incoming = pod(containers=[container(cpu="2", memory="500")])
        nodes = [node("n", cpu="4", memory="1000", **{"example.com/foo": "4"})]
        assert scores(incoming, nodes, args=args) == {"n": 50}
        with_foo = pod(containers=[container(cpu="2", memory="500", **{"example.com/foo": "1"})])
        # foo: (4-1)*100/4 = 75 -> (50 + 50 + 75) / 3 = 58.
        assert scores(with_foo, nodes, args=args) == {"n": 58}

    def test_score_without_prescore_matches(self) -> None:
        incoming = pod(containers=[container(cpu="1", memory="300")])
        nodes = [node("a", cpu="3", memory="1000"), node("b", cpu="2", memory="2000")]
        assert scores(incoming, nodes, pre_score=False) == scores(incoming, nodes)


class TestScoreMostAllocated:
    def test_weighted(self) -> None:
        args = {"scoringStrategy": {"type": "MostAllocated",
                                    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 2}]}}
        existing = [pod("e", [container(cpu="2", memory="2000")], node_name="n")]
        incoming = pod(containers=[container(cpu="1", memory="3000")])
        # cpu 3000*100/4000 = 75; memory 5000*100/10000 = 50; (75 + 100) / 3 = 58.
        assert scores(incoming, [node("n", cpu="4", memory="10000")], existing, args=args) == {"n": 58}

    def test_over_capacity_is_clamped(self) -> None:
        args = {"scoringStrategy": {"type": "MostAllocated"}}
        incoming = pod(containers=[container(cpu="5", memory="500")])
        # cpu clamped to 100; memory 50 -> 75.
        assert scores(incoming, [node("n", cpu="4", memory="1000")], args=args) == {"n": 75}


class TestScoreRequestedToCapacityRatio:
    @staticmethod
    def args(shape: list[tuple[int, int]], resources: list[tuple[str, int]] | None = None) -> dict[str, Any]:
        res = resources or [("cpu", 1), ("memory", 1)]
        return {"scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "resources": [{"name": n, "weight": w} for n, w in res],
            "requestedToCapacityRatio": {"shape": [{"utilization": u, "score": s} for u, s in shape]}}}

    def test_half_rounds_away_from_zero(self) -> None:
        # Linear shape 0 -> 0, 100 -> 10 (scaled to 100): cpu 25, memory 48; (25 + 48) / 2 = 36.5 -> 37.
        # Python's round() would give 36.
        incoming = pod(containers=[container(cpu="1", memory="48")])
        assert scores(incoming, [node("n", cpu="4", memory="100")], args=self.args([(0, 0), (100, 10)])) == {"n": 37}

    def test_custom_shape_with_truncating_interpolation(self) -> None:
        # Shape (0,10) (50,7) (100,0) scaled x10: utilization 33 -> 100 + (70-100)*33/50 = 100 - 19 (Go
        # truncates -19.8 toward zero) = 81.
        args = self.args([(0, 10), (50, 7), (100, 0)], [("cpu", 1)])
        assert scores(pod(containers=[container(cpu="330m")]), [node("n", cpu="1")], args=args) == {"n": 81}

    def test_zero_scoring_resource_is_dropped_from_mean(self) -> None:
        # cpu over capacity -> shape(100) = 0 and is dropped; memory 50% -> 50.
        args = self.args([(0, 10), (100, 0)])
        incoming = pod(containers=[container(cpu="5", memory="500")])
        assert scores(incoming, [node("n", cpu="4", memory="1000")], args=args) == {"n": 50}

    def test_flat_before_first_and_after_last_point(self) -> None:
        f = build_broken_linear_function([UtilizationShapePoint(20, 30), UtilizationShapePoint(80, 90)])
        assert [f(0), f(20), f(50), f(80), f(100)] == [30, 30, 60, 90, 90]


class TestGoArithmetic:
    @pytest.mark.parametrize(("x", "want"), [(0.5, 1), (1.5, 2), (2.5, 3), (36.5, 37), (-2.5, -3), (2.4999, 2),
                                             (0.49999999999999994, 0), (-0.4, 0)])
    def test_go_round(self, x: float, want: int) -> None:
        assert go_round(x) == want

    def test_go_div_truncates(self) -> None:
        assert go_div(-990, 50) == -19
        assert go_div(990, 50) == 19
        assert go_div(7, -2) == -3


# -- args -----------------------------------------------------------------------------------------
class TestArgs:
    def test_defaults(self) -> None:
        pl = NodeResourcesFit.create({}, plain_handle())
        assert pl.args.strategy == "LeastAllocated"
        assert [(r.name, r.weight) for r in pl.args.resources] == [("cpu", 1), ("memory", 1)]

    def test_zero_weight_defaults_to_one(self) -> None:
        pl = NodeResourcesFit.create({"scoringStrategy": {"type": "MostAllocated",
                                                          "resources": [{"name": "cpu", "weight": 0}]}}, plain_handle())
        assert [(r.name, r.weight) for r in pl.args.resources] == [("cpu", 1)]

    @pytest.mark.parametrize(("args", "field"), [
        ({"scoringStrategy": {"type": "Foo"}}, 'scoringStrategy.type: Unsupported value: "Foo"'),
        ({"scoringStrategy": {"resources": [{"name": "cpu"}]}}, "scoringStrategy.type"),
        ({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}},
         "scoringStrategy.resources[0].weight: Invalid value: 101: resource weight of cpu not in valid range (0, 100]"),
        ({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": -1}]}},
         "scoringStrategy.resources[0].weight"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
         "scoringStrategy.requestedToCapacityRatio: Required value"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": []}}},
         "scoringStrategy.requestedToCapacityRatio.shape: Required value"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {
            "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[1].utilization: Invalid value: 50: values must be sorted"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {
            "shape": [{"utilization": 0, "score": 11}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[0].score: Invalid value: 11: not in valid range [0, 10]"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {
            "shape": [{"utilization": 101, "score": 1}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[0].utilization: Invalid value: 101"),
        ({"scoringStrategy": {"type": "LeastAllocated", "requestedToCapacityRatio": {"shape": []}}},
         "scoringStrategy.requestedToCapacityRatio: Forbidden"),
        ({"ignoredResourceGroups": ["example.com/foo"]},
         "ignoredResourceGroups[0]: Invalid value: \"example.com/foo\": resource group name can't contain '/'"),
        ({"ignoredResources": ["a/b/c"]}, "ignoredResources[0]"),
        ({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": "x"}]}},
         "scoringStrategy.resources[0].weight"),
        ({"unknownField": 1}, 'unknownField: unknown field "unknownField"'),
    ])
    def test_invalid(self, args: dict[str, Any], field: str) -> None:
        with pytest.raises(ConfigError) as ei:
            registry.get("NodeResourcesFit")(args, plain_handle())
        assert field in str(ei.value)

    def test_errors_are_aggregated(self) -> None:
        with pytest.raises(ConfigError) as ei:
            NodeResourcesFit.create({"scoringStrategy": {"type": "Foo", "resources": [{"name": "cpu", "weight": 200}]}},
                                    plain_handle())
        msg = str(ei.value)
        assert msg.startswith("[") and "scoringStrategy.type" in msg and "scoringStrategy.resources[0].weight" in msg


class TestDRAExtendedResourceScore:
    """An extended resource backed by a DeviceClass (no device plugin) is scored from the node's
    ResourceSlice devices and the allocated ResourceClaims (resource_allocation.go)."""

    @staticmethod
    def objects(allocated: int) -> ClusterObjects:
        objs = ClusterObjects()
        objs.upsert("DeviceClass", {"metadata": {"name": "gpu.example.com"},
                                    "spec": {"extendedResourceName": "example.com/gpu"}})
        objs.upsert("ResourceSlice", {"metadata": {"name": "n-gpus"}, "spec": {
            "driver": "gpu.example.com", "pool": {"name": "n"}, "nodeName": "n",
            "devices": [{"name": f"g{i}"} for i in range(4)]}})
        objs.upsert("ResourceSlice", {"metadata": {"name": "other-gpus"}, "spec": {
            "driver": "gpu.example.com", "pool": {"name": "other"}, "nodeName": "other",
            "devices": [{"name": f"g{i}"} for i in range(4)]}})
        objs.upsert("ResourceClaim", {"metadata": {"name": "c", "namespace": "default"}, "status": {"allocation": {
            "devices": {"results": [{"driver": "gpu.example.com", "pool": "n", "device": f"g{i}", "request": "r"}
                                    for i in range(allocated)]}}}})
        return objs

    def run(self, objects: ClusterObjects) -> int:
        args = {"scoringStrategy": {"type": "LeastAllocated", "resources": [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "example.com/gpu", "weight": 1}]}}
        snap = Snapshot.from_objects([node("n", cpu="4", memory="1000")], [], objects)
        pl = NodeResourcesFit.create(args, plain_handle())
        state = CycleState(snap)
        pi = PodInfo(pod(containers=[container(cpu="2", memory="500", **{"example.com/gpu": "1"})]))
        _, s = pl.pre_filter(state, pi, snap.node_info_list)
        assert pl.filter(state, pi, snap.get("n")).is_success()
        assert pl.pre_score(state, pi, snap.node_info_list).is_success()
        sc, s = pl.score(state, pi, snap.get("n"))
        assert s.is_success()
        return sc

    def test_devices_are_counted(self) -> None:
        # cpu 50, memory 50, gpu: 2 allocated + 1 requested of 4 -> 25; (50 + 50 + 25) / 3 = 41.
        assert self.run(self.objects(allocated=2)) == 41

    def test_without_device_class_the_resource_is_bypassed(self) -> None:
        objs = self.objects(allocated=2)
        objs.delete("DeviceClass", {"metadata": {"name": "gpu.example.com"}})
        snap = Snapshot.from_objects([node("n", cpu="4", memory="1000")], [], objs)
        args = {"scoringStrategy": {"type": "LeastAllocated", "resources": [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "example.com/gpu", "weight": 1}]}}
        pl = NodeResourcesFit.create(args, plain_handle())
        state = CycleState(snap)
        pi = PodInfo(pod(containers=[container(cpu="2", memory="500", **{"example.com/gpu": "1"})]))
        assert pl.pre_score(state, pi, snap.node_info_list).is_success()
        assert pl.score(state, pi, snap.get("n"))[0] == 50
