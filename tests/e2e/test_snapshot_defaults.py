"""The snapshot loader fills in a Pod as the real API server does (issue 30, Deliver 1).

Each case is a Pod as a user writes it. The bed's kube-apiserver creates it (``dryRun=All``: defaulted,
admitted by the Priority plugin, validated, not stored) and returns the stored form; the loader
(``py_scheduler.offline.loader.parse_objects``, what ``explain`` / ``simulate`` run on a file) fills
in the same Pod. The fields the case names must be equal, quantities compared by value (the API
server writes them canonically: ``0.5`` -> ``500m``). Fields the API server leaves unset (a
toleration's operator, topology spread policies, an init container's restartPolicy) must stay
unset offline too. Pods of a RuntimeClass (created on the bed for the test, the RuntimeClass
admission plugin being on there) get the class's overhead / nodeSelector / tolerations as the
plugin sets them, and the Pods it refuses are refused offline with its message.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio import client

from py_scheduler.framework import quantity
from py_scheduler.offline.loader import parse_objects
from tests.e2e.helpers import unique_name, wait_for

Obj = dict[str, Any]


def _norm(v: Any, key: str = "") -> Any:
    """``v`` with every resource list's quantities parsed (compared by value)."""
    if isinstance(v, dict):
        if key in ("requests", "limits", "overhead") and all(isinstance(x, str | int | float) for x in v.values()):
            return {k: quantity.parse(x) for k, x in v.items()}
        return {k: _norm(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return v


def _c(**extra: Any) -> Obj:
    return {"name": "c", "image": "registry.k8s.io/pause:3.10", **extra}


def _spec(key: str) -> Callable[[Obj], Any]:
    return lambda p: p["spec"].get(key)


def _containers(key: str, field: str) -> Callable[[Obj], Any]:
    return lambda p: [c.get(field) for c in p["spec"].get(key) or []]


CASES: list[tuple[str, Obj, Callable[[Obj], Any]]] = [
    ("limits-to-requests", {"containers": [_c(resources={"limits": {"cpu": "8", "memory": "64Gi"}})]},
     _containers("containers", "resources")),
    ("limits-fill-missing-requests-only", {"containers": [_c(resources={
        "requests": {"cpu": "500m"}, "limits": {"cpu": "2", "memory": "1Gi"}})]},
     _containers("containers", "resources")),
    ("extended-resources", {"containers": [_c(resources={"limits": {
        "nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "1", "example.com/fpga": "1"}})]},
     _containers("containers", "resources")),
    ("init-container-limits", {"initContainers": [_c(name="init", resources={"limits": {"cpu": "3"}})],
                               "containers": [_c()]},
     _containers("initContainers", "resources")),
    ("sidecar-limits", {"initContainers": [_c(name="side", restartPolicy="Always",
                                              resources={"limits": {"memory": "256Mi", "nvidia.com/gpu": "1"}})],
                        "containers": [_c()]},
     lambda p: [(c.get("resources"), c.get("restartPolicy")) for c in p["spec"]["initContainers"]]),
    ("init-container-restart-policy-unset", {"initContainers": [_c(name="init")], "containers": [_c()]},
     _containers("initContainers", "restartPolicy")),
    ("pod-level-resources", {"resources": {"limits": {"cpu": "4", "memory": "8Gi"}},
                             "containers": [_c(resources={"requests": {"cpu": "1"}})]},
     lambda p: (p["spec"].get("resources"), [c.get("resources") for c in p["spec"]["containers"]])),
    ("pod-level-requests-from-containers", {"resources": {"requests": {"memory": "2Gi"}},
                                           "containers": [_c(resources={"requests": {"cpu": "250m"}}),
                                                          _c(name="d", resources={"limits": {"cpu": "750m"}})]},
     _spec("resources")),
    ("scheduler-name", {"containers": [_c()]}, _spec("schedulerName")),
    ("pod-spec-defaults", {"containers": [_c()]},
     lambda p: {k: p["spec"].get(k) for k in ("restartPolicy", "dnsPolicy", "enableServiceLinks",
                                              "terminationGracePeriodSeconds", "securityContext")}),
    ("negative-grace-period", {"terminationGracePeriodSeconds": -5, "containers": [_c()]},
     _spec("terminationGracePeriodSeconds")),
    ("container-defaults", {"containers": [_c(), _c(name="l", image="nginx"), _c(name="t", image="nginx:latest")]},
     lambda p: [(c.get("imagePullPolicy"), c.get("terminationMessagePath"), c.get("terminationMessagePolicy"))
                for c in p["spec"]["containers"]]),
    ("port-protocol", {"containers": [_c(ports=[{"containerPort": 8080}, {"containerPort": 53, "protocol": "UDP"}])]},
     _containers("containers", "ports")),
    ("host-network-ports", {"hostNetwork": True, "containers": [_c(ports=[{"containerPort": 9100}])]},
     _containers("containers", "ports")),
    ("toleration-operator-unset", {"tolerations": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}],
                                   "containers": [_c()]}, _spec("tolerations")),
    ("topology-spread-policies-unset", {"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "x"}}}], "containers": [_c()]},
     _spec("topologySpreadConstraints")),
    ("priority-without-class", {"containers": [_c()]},
     lambda p: (p["spec"].get("priority"), p["spec"].get("preemptionPolicy"), p["spec"].get("priorityClassName"))),
]


async def _stored(core: client.CoreV1Api, spec: Obj, ready: Callable[[Obj], bool] = lambda _p: True) -> Obj:
    """The Pod as the API server would store it; ``ready`` until the Priority plugin's informer has
    seen the classes just created (before that it refuses a named class or ignores a new default)."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": unique_name("dflt"), "namespace": "default"},
            "spec": copy.deepcopy(spec)}

    async def create() -> Obj | None:
        # raw JSON: the generated models would drop fields newer than the client (spec.resources)
        resp = await core.create_namespaced_pod("default", body, dry_run="All", _preload_content=False)
        try:
            got: Obj = json.loads(await resp.read())
        finally:
            resp.release()
        return got if ready(got) else None

    got: Obj = await wait_for(create, timeout=30, what="a dry-run Pod create")
    return got


def _loaded(spec: Obj, extra: list[Obj] | None = None) -> Obj:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": copy.deepcopy(spec)}
    data = parse_objects([{"apiVersion": "v1", "kind": "List", "items": [*(extra or []), pod]}], "case")
    return data.pods[0]


@pytest.mark.parametrize(("spec", "field"), [pytest.param(s, f, id=i) for i, s, f in CASES])
async def test_loader_defaults_equal_the_api_servers(core_v1: client.CoreV1Api, spec: Obj,
                                                     field: Callable[[Obj], Any]) -> None:
    stored = await _stored(core_v1, spec)
    assert _norm(field(_loaded(spec))) == _norm(field(stored))


@pytest.fixture
async def priority_classes(api_client: client.ApiClient) -> AsyncIterator[list[Obj]]:
    """Two PriorityClasses in the bed (one ``globalDefault``, one ``Never``), as snapshot objects."""
    sched = client.SchedulingV1Api(api_client)
    kind = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    made: list[Obj] = [
        {**kind, "metadata": {"name": unique_name("dflt-never")}, "value": 5000, "preemptionPolicy": "Never"},
        {**kind, "metadata": {"name": unique_name("dflt-global")}, "value": 700, "globalDefault": True}]
    try:
        for pc in made:
            await sched.create_priority_class(pc)
        yield made
    finally:
        for pc in made:
            with contextlib.suppress(client.ApiException):
                await sched.delete_priority_class(pc["metadata"]["name"])


@pytest.mark.parametrize("which", ["named-class", "global-default"])
async def test_priority_and_preemption_policy_equal_the_admission_plugins(
        core_v1: client.CoreV1Api, priority_classes: list[Obj], which: str) -> None:
    spec: Obj = {"containers": [_c()]}
    if which == "named-class":
        spec["priorityClassName"] = priority_classes[0]["metadata"]["name"]
    want = 5000 if which == "named-class" else 700
    stored = await _stored(core_v1, spec, lambda p: p["spec"].get("priority") == want)

    def fields(p: Obj) -> tuple[Any, ...]:
        return p["spec"].get("priority"), p["spec"].get("preemptionPolicy"), p["spec"].get("priorityClassName")

    assert fields(_loaded(spec, priority_classes)) == fields(stored)


@pytest.fixture
async def runtime_classes(api_client: client.ApiClient) -> AsyncIterator[dict[str, Obj]]:
    """RuntimeClasses in the bed (created here, deleted after), as snapshot objects: ``kata`` with an
    overhead and scheduling constraints whose tolerations cover some of the Pod's and of
    DefaultTolerationSeconds', ``any`` tolerating every taint, ``bare`` with neither."""
    nodes = client.NodeV1Api(api_client)
    kind = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "runc"}
    made: dict[str, Obj] = {
        "kata": {**kind, "metadata": {"name": unique_name("dflt-kata")},
                 "overhead": {"podFixed": {"cpu": "0.25", "memory": "120Mi"}},
                 "scheduling": {"nodeSelector": {"sandbox": "kata", "zone": "a"}, "tolerations": [
                     {"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"},
                     {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": 600},
                     {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": 60}]}},
        "any": {**kind, "metadata": {"name": unique_name("dflt-any")},
                "scheduling": {"tolerations": [{"operator": "Exists"}]}},
        "bare": {**kind, "metadata": {"name": unique_name("dflt-bare")}},
    }
    try:
        for rc in made.values():
            await nodes.create_runtime_class(rc)
        yield made
    finally:
        for rc in made.values():
            with contextlib.suppress(client.ApiException):
                await nodes.delete_runtime_class(rc["metadata"]["name"])


def _rc_fields(p: Obj) -> tuple[Any, ...]:
    spec = p["spec"]
    return (_norm(spec.get("overhead"), "overhead"), spec.get("nodeSelector"),
            spec.get("tolerations"))


RUNTIME_CLASS_CASES: list[tuple[str, str, Obj]] = [
    ("overhead-and-scheduling-merged", "kata", {
        "nodeSelector": {"zone": "a", "disk": "ssd"},
        "tolerations": [{"key": "sandbox", "operator": "Equal", "value": "x", "effect": "NoSchedule"},
                        {"key": "gpu", "operator": "Exists"}],
        "containers": [_c(resources={"requests": {"cpu": "1"}})]}),
    ("overhead-given-equal-to-the-classs", "kata", {"overhead": {"cpu": "250m", "memory": "120Mi"},
                                                    "containers": [_c()]}),
    ("node-selector-from-the-class-alone", "kata", {"containers": [_c()]}),
    ("toleration-of-everything-covers-the-rest", "any", {
        "tolerations": [{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}],
        "containers": [_c()]}),
    ("class-without-overhead-nor-scheduling", "bare", {"nodeSelector": {"disk": "ssd"}, "containers": [_c()]}),
]


def _loaded_named(name: str, spec: Obj, extra: list[Obj]) -> tuple[Obj, str | None]:
    """The loader's Pod ``default/name`` and its admission refusal (None when admitted)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": copy.deepcopy(spec)}
    data = parse_objects([{"apiVersion": "v1", "kind": "List", "items": [*extra, pod]}], "case")
    return data.pods[0], data.rejected.get(f"default/{name}")


@pytest.mark.parametrize(("rc", "spec"), [pytest.param(r, s, id=i) for i, r, s in RUNTIME_CLASS_CASES])
async def test_runtime_class_fields_equal_the_admission_plugins(
        core_v1: client.CoreV1Api, runtime_classes: dict[str, Obj], rc: str, spec: Obj) -> None:
    spec = {**spec, "runtimeClassName": runtime_classes[rc]["metadata"]["name"]}
    stored = await _stored(core_v1, spec)
    loaded, refused = _loaded_named("p", spec, list(runtime_classes.values()))
    assert refused is None
    assert _rc_fields(loaded) == _rc_fields(stored)
    if rc == "kata":  # not vacuous: the class's fields did reach the Pod
        assert stored["spec"]["overhead"] and stored["spec"]["nodeSelector"]["sandbox"] == "kata"


REFUSED_CASES: list[tuple[str, str | None, Obj]] = [
    ("class-missing", "no-such-class", {"containers": [_c()]}),
    ("node-selector-conflict", "kata", {"nodeSelector": {"zone": "b"}, "containers": [_c()]}),
    ("overhead-differs", "kata", {"overhead": {"cpu": "1"}, "containers": [_c()]}),
    ("overhead-of-a-class-without-one", "bare", {"overhead": {"cpu": "1"}, "containers": [_c()]}),
    ("overhead-without-a-class", None, {"overhead": {"cpu": "1"}, "containers": [_c()]}),
]


@pytest.mark.parametrize(("rc", "spec"), [pytest.param(r, s, id=i) for i, r, s in REFUSED_CASES])
async def test_runtime_class_refusals_equal_the_admission_plugins(
        core_v1: client.CoreV1Api, runtime_classes: dict[str, Obj], rc: str | None, spec: Obj) -> None:
    if rc is not None:
        spec = {**spec, "runtimeClassName": runtime_classes[rc]["metadata"]["name"] if rc in runtime_classes else rc}
    name = unique_name("dflt")
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}
    with pytest.raises(client.ApiException) as refusal:
        await core_v1.create_namespaced_pod("default", body, dry_run="All")
    assert refusal.value.status == 403, refusal.value.body
    message = json.loads(refusal.value.body)["message"]
    _, refused = _loaded_named(name, spec, list(runtime_classes.values()))
    assert refused is not None and refused.startswith(message), (refused, message)


INVALID_REQUEST_CASES: list[tuple[str, Obj]] = [
    ("cpu-request-above-limit", {"containers": [_c(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})]}),
    ("gpu-request-below-limit", {"containers": [_c(resources={"requests": {"nvidia.com/gpu": "1"},
                                                             "limits": {"nvidia.com/gpu": "2"}})]}),
    ("gpu-request-without-limit", {"initContainers": [_c(name="init", resources={"requests": {"nvidia.com/gpu": "1"}})],
                                   "containers": [_c()]}),
]


@pytest.mark.parametrize("spec", [pytest.param(s, id=i) for i, s in INVALID_REQUEST_CASES])
async def test_invalid_requests_are_refused_as_the_api_server_refuses_them(core_v1: client.CoreV1Api,
                                                                           spec: Obj) -> None:
    """A hand-written snapshot Pod the API server would refuse (422) is reported unplaced with its
    message, not simulated: the GPU cases are the usual mistake (an extended resource cannot be
    overcommitted). A request up to its limit, or a GPU limit alone, is admitted by both."""
    name = unique_name("dflt")
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}
    with pytest.raises(client.ApiException) as refusal:
        await core_v1.create_namespaced_pod("default", body, dry_run="All")
    assert refusal.value.status == 422, refusal.value.body
    _, refused = _loaded_named(name, spec, [])
    assert refused == json.loads(refusal.value.body)["message"]
    fine = {"containers": [_c(resources={"requests": {"cpu": "1"}, "limits": {"cpu": "1", "nvidia.com/gpu": "1"}})]}
    await core_v1.create_namespaced_pod("default", {**body, "spec": fine}, dry_run="All")
    assert _loaded_named(name, fine, [])[1] is None


def test_norm_compares_by_value() -> None:
    assert _norm({"requests": {"cpu": "0.5"}}) == _norm({"requests": {"cpu": "500m"}}) == {
        "requests": {"cpu": Decimal("0.5")}}
