"""NodeDeclaredFeatures (upstream ``nodedeclaredfeatures/nodedeclaredfeatures_test.go`` behaviour and the
``component-helpers/nodedeclaredfeatures`` feature registry)."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.errors import ConfigError, PodParseError
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.node_declared_features import (
    ERR_REASON_UNSATISFIED,
    REGISTERED_FEATURES,
    NodeDeclaredFeatures,
    infer_for_pod_scheduling,
    node_declared_features,
)
from tests.unit.plugins.plain_handle import plain_handle

RESTART_RULE = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1]}}


def pod(spec: dict[str, Any]) -> PodInfo:
    return PodInfo({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec})


def node(declared: object = None) -> NodeInfo:
    status: dict[str, Any] = {}
    if declared is not None:
        status["declaredFeatures"] = declared
    return NodeInfo({"metadata": {"name": "n1"}, "status": status})


@pytest.mark.parametrize(("spec", "want"), [
    ({"containers": [{"name": "c"}]}, set()),
    ({"containers": [{"name": "c", "restartPolicyRules": [RESTART_RULE]}]}, {"RestartAllContainersOnContainerExits"}),
    ({"initContainers": [{"name": "i", "restartPolicyRules": [RESTART_RULE]}], "containers": [{"name": "c"}]},
     {"RestartAllContainersOnContainerExits"}),
    ({"containers": [{"name": "c", "restartPolicyRules": [{"action": "Restart"}]}]}, set()),
    ({"hostNetwork": True, "hostUsers": False}, {"UserNamespacesHostNetworkSupport"}),
    ({"hostNetwork": True}, set()),  # hostUsers nil
    ({"hostNetwork": True, "hostUsers": True}, set()),
    ({"hostNetwork": False, "hostUsers": False}, set()),
    ({"containers": [{"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/d", "bindMountOptions": ["ro"]}]}]},
     {"VolumeBindMountOptions"}),
    ({"ephemeralContainers": [{"name": "e", "volumeMounts": [{"name": "v", "bindMountOptions": ["x"]}]}]},
     {"VolumeBindMountOptions"}),
    ({"containers": [{"name": "c", "volumeMounts": [{"name": "v", "bindMountOptions": []}]}]}, set()),
])
def test_infer_for_pod_scheduling(spec: dict[str, Any], want: set[str]) -> None:
    assert infer_for_pod_scheduling(spec) == want


def test_registry_is_sorted_and_complete() -> None:
    assert list(REGISTERED_FEATURES) == sorted(REGISTERED_FEATURES)
    assert len(REGISTERED_FEATURES) == 9


def test_node_declared_features_try_map() -> None:
    assert node_declared_features(None) == frozenset()
    assert node_declared_features({"status": {}}) == frozenset()
    got = node_declared_features({"status": {"declaredFeatures": [
        "AUnknownFeature", "RestartAllContainersOnContainerExits", "UserNamespacesHostNetworkSupport", "Zzz"]}})
    assert got == {"RestartAllContainersOnContainerExits", "UserNamespacesHostNetworkSupport"}
    assert node_declared_features({"status": {"declaredFeatures": "nope"}}) == frozenset()


def test_pre_filter_skips_pod_without_requirements() -> None:
    r, st = NodeDeclaredFeatures().pre_filter(CycleState(), pod({"containers": [{"name": "c"}]}), [])
    assert r is None and st.is_skip()


@pytest.mark.parametrize(("declared", "fits"), [
    (None, False),
    ([], False),
    (["RestartAllContainersOnContainerExits"], False),
    (["RestartAllContainersOnContainerExits", "UserNamespacesHostNetworkSupport"], True),
    (["DRANodeAllocatableResources", "RestartAllContainersOnContainerExits", "UserNamespacesHostNetworkSupport",
      "VolumeBindMountOptions"], True),
])
def test_filter(declared: object, fits: bool) -> None:
    pl = NodeDeclaredFeatures()
    p = pod({"hostNetwork": True, "hostUsers": False,
             "containers": [{"name": "c", "restartPolicyRules": [RESTART_RULE]}]})
    state = CycleState()
    r, st = pl.pre_filter(state, p, [])
    assert r is None and st.is_success()
    got = pl.filter(state, p, node(declared))
    want = Status.success() if fits else Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_UNSATISFIED],
                                                "NodeDeclaredFeatures")
    assert got == want


def test_filter_without_pre_filter_is_an_error() -> None:
    st = NodeDeclaredFeatures().filter(CycleState(), pod({}), node([]))
    assert st.code == Code.ERROR


@pytest.mark.parametrize(("spec", "field"), [
    ({"containers": [{"name": "c", "restartPolicyRules": {"action": "x"}}]}, "spec.containers[0].restartPolicyRules"),
    ({"containers": [{"name": "c", "volumeMounts": ["v"]}]}, "spec.containers[0].volumeMounts[0]"),
    ({"ephemeralContainers": "e"}, "spec.ephemeralContainers"),
])
def test_malformed_spec_is_unresolvable_naming_the_field(spec: dict[str, Any], field: str) -> None:
    r, st = NodeDeclaredFeatures().pre_filter(CycleState(), pod(spec), [])
    assert r is None
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert field in st.message()


@pytest.mark.parametrize(("spec", "field"), [
    ({"containers": "c"}, "spec.containers"),
    ({"initContainers": [7]}, "spec.initContainers[0]"),
])
def test_infer_malformed_raises_pod_parse_error(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(PodParseError) as exc:
        infer_for_pod_scheduling(spec)
    assert exc.value.field == field


def test_registry_and_args() -> None:
    assert isinstance(registry.get("NodeDeclaredFeatures")({}, plain_handle()), NodeDeclaredFeatures)
    with pytest.raises(ConfigError):
        NodeDeclaredFeatures.create({"features": []}, plain_handle())
