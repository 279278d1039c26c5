"""PodInfo request aggregation (upstream PodRequests) and malformed input."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.types import NodeInfo, PodInfo


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec}


def c(name: str, **req: str) -> dict[str, Any]:
    return {"name": name, "resources": {"requests": req}} if req else {"name": name}


def test_requests_sum_containers_and_round_up() -> None:
    pi = PodInfo(pod({"containers": [c("a", cpu="0.0001", memory="1.5"), c("b", cpu="100m", memory="1Ki")]}))
    # Quantities are summed exactly, then rounded up once: 0.1001 cores -> 101m.
    assert pi.requests.milli_cpu == 101
    assert pi.requests.memory == 1026


def test_init_container_max_and_sidecars() -> None:
    spec = {
        "initContainers": [c("side", cpu="200m", memory="100") | {"restartPolicy": "Always"},
                           c("init", cpu="1", memory="50")],
        "containers": [c("main", cpu="300m", memory="300")],
    }
    pi = PodInfo(pod(spec))
    # containers + sidecar = 500m / 400; init runs beside the sidecar: 1200m / 150 -> max per resource.
    assert pi.requests.milli_cpu == 1200
    assert pi.requests.memory == 400


def test_overhead_and_pod_level_requests() -> None:
    spec = {"containers": [c("a", cpu="1", memory="1Gi")], "overhead": {"cpu": "100m"},
            "resources": {"requests": {"cpu": "2"}}}
    pi = PodInfo(pod(spec))
    assert pi.requests.milli_cpu == 2100
    assert pi.requests.memory == 2**30


def test_non_zero_defaults_only_for_missing() -> None:
    pi = PodInfo(pod({"containers": [c("a"), c("b", cpu="0", memory="0")]}))
    assert (pi.requests.milli_cpu, pi.requests.memory) == (0, 0)
    # missing: 100m / 200Mi; explicit zero stays zero
    assert (pi.non0_cpu, pi.non0_mem) == (100, 200 * 2**20)


def test_extended_resources_are_scalar() -> None:
    pi = PodInfo(pod({"containers": [c("a", **{"nvidia.com/gpu": "2", "hugepages-2Mi": "4Mi"})]}))
    assert pi.requests.scalar == {"nvidia.com/gpu": 2, "hugepages-2Mi": 4 * 2**20}


@pytest.mark.parametrize("spec, field", [
    ({"containers": "c"}, "spec.containers"),
    ({"containers": [{"name": "a", "resources": "x"}]}, "spec.containers[0].resources"),
    ({"containers": [c("a", cpu="abc")]}, "spec.containers[0].resources.requests.cpu"),
    ({"containers": [c("a", memory="1.2.3Gi")]}, "spec.containers[0].resources.requests.memory"),
    ({"containers": [], "overhead": {"cpu": "x"}}, "spec.overhead.cpu"),
    ("zz", "spec"),
])
def test_malformed_pods_raise_pod_parse_error_naming_the_field(spec: Any, field: str) -> None:
    with pytest.raises(PodParseError) as exc:
        PodInfo(pod(spec))
    assert exc.value.field == field
    assert field in str(exc.value)


def test_node_info_add_remove_restores_counters() -> None:
    ni = NodeInfo({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
    p = PodInfo(pod({"containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}],
                                     "resources": {"requests": {"cpu": "1"}}}]}))
    ni.add_pod(p)
    assert ni.requested.milli_cpu == 1000 and ni.non_zero_requested.memory == 200 * 2**20
    assert ni.used_ports.check_conflict("127.0.0.1", "TCP", 8080)
    assert ni.remove_pod("u1") is p
    assert ni.requested.milli_cpu == 0 and ni.non_zero_requested.memory == 0
    assert not ni.used_ports.check_conflict("0.0.0.0", "TCP", 8080)
    assert ni.allocatable.allowed_pod_number == 110


@pytest.mark.parametrize("spec, field", [
    ({"containers": [{"name": "a", "ports": "80"}]}, "spec.containers[0].ports"),
    ({"containers": [], "affinity": "abc"}, "spec.affinity"),
    ({"containers": [], "affinity": {"podAntiAffinity": ["x"]}}, "spec.affinity.podAntiAffinity"),
])
def test_wrongly_typed_affinity_and_ports(spec: Any, field: str) -> None:
    with pytest.raises(PodParseError) as exc:
        PodInfo(pod(spec))
    assert exc.value.field == field


def test_host_ports_are_a_set_as_upstream() -> None:
    # Two pods on one node holding the same host port count once; removing either frees it.
    ni = NodeInfo({"metadata": {"name": "n"}, "status": {"allocatable": {"pods": "10"}}})
    ports = [{"containerPort": 80, "hostPort": 8080}]
    for uid in ("a", "b"):
        spec = {"containers": [{"name": "c", "ports": ports}]}
        ni.add_pod(PodInfo({"metadata": {"name": uid, "uid": uid}, "spec": spec}))
    ni.remove_pod("a")
    assert not ni.used_ports.check_conflict("0.0.0.0", "TCP", 8080)


@pytest.mark.parametrize("spec, field, why", [
    ({"containers": [c("a", cpu="-1")]}, "spec.containers[0].resources.requests.cpu", "greater than or equal to 0"),
    ({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]},
     "spec.containers[0].resources.limits.nvidia.com/gpu", "must be an integer"),
    ({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "-1"}}}]},
     "spec.containers[0].resources.limits.nvidia.com/gpu", "greater than or equal to 0"),
    ({"containers": [], "overhead": {"memory": "-5Mi"}}, "spec.overhead.memory", "greater than or equal to 0"),
])
def test_values_the_api_server_rejects_fail_the_pod(spec: Any, field: str, why: str) -> None:
    # Snapshot files skip API validation; such Pods must fail alone, not skew scores or GPU counts.
    with pytest.raises(PodParseError) as exc:
        PodInfo(pod(spec))
    assert exc.value.field == field and why in str(exc.value)


def test_fractional_non_extended_quantities_are_fine() -> None:
    pi = PodInfo(pod({"containers": [c("a", cpu="0.5", **{"hugepages-2Mi": "2Mi"})]}))
    assert pi.requests.milli_cpu == 500


def test_derive_shares_parse_and_swaps_pod() -> None:
    """``PodInfo.derive``: the assumed Pod reuses the parse of the queued one."""
    from py_scheduler.framework.types import PodInfo

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}]}}
    from py_scheduler.framework.memo import PodInput, PodMemo

    spec_memo: PodMemo[int] = PodMemo("spec", PodInput.SPEC)
    node_memo: PodMemo[int] = PodMemo("nodeName", PodInput.SPEC | PodInput.NODE_NAME)
    pi = PodInfo(pod)
    spec_memo.put(pi, 1)
    node_memo.put(pi, 2)
    assumed_pod = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    d = pi.derive(assumed_pod)
    assert d.pod is assumed_pod and d.node_name == "n1" and pi.node_name == ""
    assert d.requests.milli_cpu == 250 and d.requests.memory == 1 << 30
    assert d.key == "ns/p" and d.uid == "u1" and d.labels == {"app": "x"}
    assert spec_memo.peek(d) == 1  # declared inputs unchanged: kept
    assert node_memo.peek(d) is None and node_memo.peek(pi) == 2  # reads nodeName: dropped for the assumed Pod
    same = pi.derive({**pod})
    assert same.memos is pi.memos  # nothing a memo may read changed: shared


def test_labels_coerced_to_strings_only_when_needed() -> None:
    from py_scheduler.framework.types import PodInfo

    labels = {"app": "x"}
    assert PodInfo({"metadata": {"name": "p", "labels": labels}, "spec": {}}).labels is labels
    assert PodInfo({"metadata": {"name": "p", "labels": {"n": 1}}, "spec": {}}).labels == {"n": "1"}


def test_set_node_bumps_the_generation_even_when_the_node_is_malformed() -> None:
    """set_node assigns its fields without __setattr__'s bump and bumps once at the end: a Node whose
    metadata or status is not a map raises midway, after ``node`` changed, and must still bump, or the
    indexes that sync by generation keep the old Node's view."""
    ni = NodeInfo({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1"}}})
    for bad in ({"metadata": 5}, {"metadata": {"name": "n1"}, "status": 5}):
        before = ni.generation
        with pytest.raises(AttributeError):
            ni.set_node(bad)
        assert ni.node is bad and ni.generation > before
