"""NodePorts: PreFilter Skip, host-port conflicts (0.0.0.0 wildcard, protocols, sidecars) and the
upstream reason string (node_ports.go)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.node_ports import ERR_REASON, PRE_FILTER_STATE_KEY, NodePorts
from tests.unit.plugins.plain_handle import plain_handle


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": "4Gi", "pods": "10"}}}


def port(host_port: int, protocol: str | None = None, host_ip: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"containerPort": 80, "hostPort": host_port}
    if protocol:
        p["protocol"] = protocol
    if host_ip:
        p["hostIP"] = host_ip
    return p


def pod(name: str, ports: Sequence[dict[str, Any]] = (), node_name: str = "",
        sidecar_ports: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "ports": list(ports)}]}
    if sidecar_ports:
        spec["initContainers"] = [{"name": "s", "image": "x", "restartPolicy": "Always",
                                   "ports": list(sidecar_ports)}]
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "uid": name}, "spec": spec}


def filter_status(incoming: dict[str, Any], existing: Sequence[dict[str, Any]]) -> Status:
    snap = Snapshot.from_objects([node("n")], list(existing))
    pl = registry.get("NodePorts")({}, plain_handle())
    state = CycleState(snap)
    pi = PodInfo(incoming)
    _, s = pl.pre_filter(state, pi, snap.node_info_list)
    assert s.is_success()
    result: Status = pl.filter(state, pi, snap.get("n"))
    return result


def test_prefilter_skips_without_host_ports() -> None:
    pl = NodePorts.create({}, plain_handle())
    state = CycleState()
    no_host = pod("p", [{"containerPort": 80}])
    _, s = pl.pre_filter(state, PodInfo(no_host), [])
    assert s.code == Code.SKIP
    assert PRE_FILTER_STATE_KEY not in state.data


@pytest.mark.parametrize(("want", "used", "conflict"), [
    (port(8080), port(8080), True),
    (port(8080), port(8081), False),
    (port(8080, "UDP"), port(8080), False),
    (port(8080, "TCP"), port(8080), True),  # empty protocol means TCP
    (port(8080, host_ip="127.0.0.1"), port(8080), True),  # existing 0.0.0.0 covers every IP
    (port(8080), port(8080, host_ip="10.0.0.1"), True),  # wanted 0.0.0.0 conflicts with any IP
    (port(8080, host_ip="10.0.0.2"), port(8080, host_ip="10.0.0.1"), False),
    (port(8080, host_ip="10.0.0.1"), port(8080, host_ip="10.0.0.1"), True),
    (port(53, "UDP", "10.0.0.1"), port(53, "TCP", "10.0.0.1"), False),
])
def test_conflicts(want: dict[str, Any], used: dict[str, Any], conflict: bool) -> None:
    s = filter_status(pod("p", [want]), [pod("e", [used], node_name="n")])
    if conflict:
        assert s.code == Code.UNSCHEDULABLE
        assert s.reasons == [ERR_REASON]
        assert s.reasons == ["node(s) didn't have free ports for the requested pod ports"]
    else:
        assert s.is_success()


def test_sidecar_ports_count_on_both_sides() -> None:
    assert filter_status(pod("p", sidecar_ports=[port(9000)]),
                         [pod("e", [port(9000)], node_name="n")]).code == Code.UNSCHEDULABLE
    assert filter_status(pod("p", [port(9000)]),
                         [pod("e", sidecar_ports=[port(9000)], node_name="n")]).code == Code.UNSCHEDULABLE


def test_filter_without_prefilter_is_an_error() -> None:
    snap = Snapshot.from_objects([node("n")])
    s = NodePorts().filter(CycleState(snap), PodInfo(pod("p", [port(1)])), snap.get("n"))
    assert s.code == Code.ERROR


def test_fit_error_message() -> None:
    snap = Snapshot.from_objects([node("a"), node("b")], [pod("e1", [port(80)], node_name="a"),
                                                          pod("e2", [port(80)], node_name="b")])
    fw = Framework("t", [(NodePorts(), 0)])
    res = Algorithm().schedule(fw, snap, PodInfo(pod("p", [port(80)])))
    assert res.selected is None
    assert res.message == "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."


def test_takes_no_args() -> None:
    with pytest.raises(ConfigError):
        NodePorts.create({"foo": 1}, plain_handle())
