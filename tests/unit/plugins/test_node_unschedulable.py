"""NodeUnschedulable (upstream ``nodeunschedulable/node_unschedulable_test.go`` cases)."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.node_unschedulable import NodeUnschedulable
from tests.unit.plugins.plain_handle import plain_handle

UNSCHEDULABLE = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ["node(s) were unschedulable"], "NodeUnschedulable")


def pod(tolerations: object = None) -> PodInfo:
    spec: dict[str, Any] = {}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return PodInfo({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec})


def node(unschedulable: object = None) -> NodeInfo:
    spec: dict[str, Any] = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return NodeInfo({"metadata": {"name": "n1"}, "spec": spec})


@pytest.mark.parametrize(("tolerations", "unschedulable", "want"), [
    (None, True, UNSCHEDULABLE),
    (None, False, None),
    (None, None, None),
    ([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}], True, None),
    ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}], True, None),
    ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], True, None),
    ([{"operator": "Exists"}], True, None),
    ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}], True, UNSCHEDULABLE),
    ([{"key": "other", "operator": "Exists"}], True, UNSCHEDULABLE),
])
def test_filter(tolerations: object, unschedulable: object, want: Status | None) -> None:
    got = NodeUnschedulable().filter(CycleState(), pod(tolerations), node(unschedulable))
    assert got == (want or Status.success())


def test_malformed_tolerations_only_matter_on_a_cordoned_node() -> None:
    pl = NodeUnschedulable()
    assert pl.filter(CycleState(), pod("bad"), node(False)).is_success()
    got = pl.filter(CycleState(), pod("bad"), node(True))
    assert got.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "spec.tolerations" in got.message() and "'bad'" in got.message()


def test_node_object_missing_is_schedulable() -> None:
    assert NodeUnschedulable().filter(CycleState(), pod(), NodeInfo()).is_success()


def test_registry_and_args() -> None:
    pl = registry.get("NodeUnschedulable")({}, plain_handle())
    assert isinstance(pl, NodeUnschedulable)
    r, st = pl.pre_filter(CycleState(), pod(), [])
    assert r is None and st.is_success()
    with pytest.raises(ConfigError):
        NodeUnschedulable.create({"x": 1}, plain_handle())
