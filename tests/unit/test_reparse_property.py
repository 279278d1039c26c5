"""Property tests of ``PodInfo.reparse`` / ``same_parse_inputs`` / ``PodInfo.derive``
(``py_scheduler/framework/types.py``): for random Pods and random newer versions (any mix of changed
requests, init / sidecar containers, pod-level resources, overhead, ports, priority, labels,
annotations, nodeName, tolerations, affinity, spread constraints, images, volumes, claims, GPU
annotations and limits, in-place-resize status fields, conditions, startTime, phase,
nominatedNodeName), a reparsed PodInfo equals a fresh parse in every field, and every memoized
helper of the plugins (``PodInfo.memos``), primed on the old version, answers for the reparsed one
exactly as for a fresh PodInfo. Also: a version ``PodInfo`` cannot parse raises ``PodParseError``
(never another exception) from both paths.

Upstream: ``pkg/scheduler/framework/types.go`` (``PodInfo.Update`` re-parses on every update; the
reuse is py-scheduler's own optimisation and must be invisible),
``staging/src/k8s.io/component-helpers/resource/helpers.go`` (``PodRequests``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.preemption import pod_start_time_ns
from py_scheduler.framework.types import PodInfo, same_parse_inputs
from py_scheduler.plugins.balanced_allocation import NodeResourcesBalancedAllocation
from py_scheduler.plugins.dynamic_resources import DynamicResources
from py_scheduler.plugins.gpu.model import GPUKeys, parse_request
from py_scheduler.plugins.helpers.node_selector import preferred_node_affinity, required_node_affinity
from py_scheduler.plugins.helpers.tolerations import parse_tolerations
from py_scheduler.plugins.image_locality import _pod_images
from py_scheduler.plugins.inter_pod_affinity.common import pod_affinity_terms
from py_scheduler.plugins.node_resources_fit import NodeResourcesFit
from py_scheduler.plugins.node_volume_limits import _plain_pvc_volume_count
from py_scheduler.plugins.pod_topology_spread.common import _pod_constraints

Obj = dict[str, Any]

CPU = st.sampled_from([None, "100m", "250m", "1", "2"])
MEM = st.sampled_from([None, "64Mi", "1Gi"])
GPU = st.sampled_from([None, "1", "2"])


def _rl(**vals: str | None) -> Obj:
    return {k.replace("_", "/").replace("nvidia/com", "nvidia.com"): v for k, v in vals.items() if v is not None}


@st.composite
def resource_list(draw: st.DrawFn, gpu: bool = False) -> Obj:
    out: Obj = {}
    cpu, mem = draw(CPU), draw(MEM)
    if cpu is not None:
        out["cpu"] = cpu
    if mem is not None:
        out["memory"] = mem
    if gpu:
        g = draw(GPU)
        if g is not None:
            out["nvidia.com/gpu"] = g
    return out


@st.composite
def container(draw: st.DrawFn, name: str, init: bool = False) -> Obj:
    c: Obj = {"name": name, "image": draw(st.sampled_from(["nginx", "nginx:1.2", "redis"]))}
    res: Obj = {}
    if draw(st.booleans()):
        res["requests"] = draw(resource_list(gpu=True))
    if draw(st.booleans()):
        res["limits"] = draw(resource_list(gpu=True))
    if res:
        c["resources"] = res
    if draw(st.booleans()):
        c["ports"] = [{"containerPort": 80, "hostPort": draw(st.sampled_from([0, 8080, 9090]))}]
    if init and draw(st.booleans()):
        c["restartPolicy"] = "Always"
    return c


@st.composite
def container_status(draw: st.DrawFn, name: str) -> Obj:
    cs: Obj = {"name": name, "ready": draw(st.booleans())}
    if draw(st.booleans()):
        cs["allocatedResources"] = draw(resource_list())
    if draw(st.booleans()):
        cs["resources"] = draw(st.sampled_from([{}, {"limits": {"cpu": "1"}}])) | (
            {"requests": draw(resource_list())} if draw(st.booleans()) else {})
    return cs


PARTS: dict[str, Callable[[st.DrawFn], Any]] = {
    "spec.containers": lambda d: [d(container("c")), *([d(container("d"))] if d(st.booleans()) else [])],
    "spec.initContainers": lambda d: [d(container(n, init=True)) for n in d(st.sampled_from([[], ["i"], ["i", "j"]]))],
    "spec.resources": lambda d: d(st.sampled_from([None, {}])) if d(st.booleans()) else {
        "requests": d(resource_list()), "limits": d(resource_list())},
    "spec.overhead": lambda d: d(st.sampled_from([None, {"cpu": "50m"}, {"cpu": "50m", "memory": "10Mi"}])),
    "spec.priority": lambda d: d(st.sampled_from([None, 0, 5, 1000])),
    "spec.nodeName": lambda d: d(st.sampled_from([None, "n1", "n2"])),
    "spec.schedulerName": lambda d: d(st.sampled_from(["default-scheduler", "py-scheduler"])),
    "spec.tolerations": lambda d: d(st.sampled_from([None, [{"key": "k", "operator": "Exists"}],
                                                     [{"key": "k", "operator": "Equal", "value": "v",
                                                       "effect": "NoSchedule"}]])),
    "spec.affinity": lambda d: d(st.sampled_from([
        None,
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 3, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}},
        {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "a"}}}]}},
    ])),
    "spec.topologySpreadConstraints": lambda d: d(st.sampled_from([
        None, [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "a"}}, "matchLabelKeys": ["tier"]}]])),
    "spec.volumes": lambda d: d(st.sampled_from([
        None, [{"name": "v", "persistentVolumeClaim": {"claimName": "c1"}}], [{"name": "e", "emptyDir": {}}],
        [{"name": "img", "image": {"reference": "busybox"}}]])),
    "spec.resourceClaims": lambda d: d(st.sampled_from([None, [{"name": "gpu", "resourceClaimName": "rc"}]])),
    "metadata.labels": lambda d: d(st.sampled_from([None, {"app": "a"}, {"app": "b"}, {"app": "a", "tier": "x"}])),
    "metadata.annotations": lambda d: d(st.sampled_from([
        None, {"x": "1"}, {"gpu.example.com/gpu-model": "A100"}, {"gpu.example.com/gpu-memory-gb": "40"},
        {"gpu.example.com/gpu-count": "2"}, {"gpu.example.com/gpu-count": "x"}])),
    "metadata.resourceVersion": lambda d: str(d(st.integers(1, 99))),
    "metadata.uid": lambda d: d(st.sampled_from(["u1", "u2"])),
    "status.phase": lambda d: d(st.sampled_from([None, "Pending", "Running"])),
    "status.startTime": lambda d: d(st.sampled_from([None, "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"])),
    "status.nominatedNodeName": lambda d: d(st.sampled_from([None, "n1", "n2"])),
    "status.conditions": lambda d: d(st.sampled_from([
        None, [{"type": "PodScheduled", "status": "False"}],
        [{"type": "PodResizePending", "reason": "Infeasible"}],
        [{"type": "PodResizePending", "reason": "Deferred"}]])),
    "status.containerStatuses": lambda d: [d(container_status(n)) for n in d(st.sampled_from([[], ["c"], ["c", "d"],
                                                                                              ["i"]]))],
    "status.initContainerStatuses": lambda d: [d(container_status(n)) for n in d(st.sampled_from([[], ["i"], ["c"]]))],
    "status.allocatedResources": lambda d: d(st.sampled_from([None, {"cpu": "1"}, {"cpu": "3", "memory": "2Gi"}])),
    "status.resources": lambda d: d(st.sampled_from([None, {}, {"requests": {"cpu": "1500m"}},
                                                     {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}])),
}


def _put(pod: Obj, path: str, value: Any) -> None:
    top, key = path.split(".")
    part = pod.setdefault(top, {})
    if value is None:
        part.pop(key, None)
    else:
        part[key] = value


@st.composite
def pod_versions(draw: st.DrawFn) -> tuple[Obj, Obj]:
    old: Obj = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
                "spec": {}, "status": {}}
    for path, gen in PARTS.items():
        if path == "spec.containers" or draw(st.booleans()):
            _put(old, path, gen(draw))
    new = copy.deepcopy(old)
    for path in draw(st.lists(st.sampled_from(sorted(PARTS)), max_size=4, unique=True)):
        _put(new, path, PARTS[path](draw))
    if draw(st.booleans()):
        new["status"] = draw(st.sampled_from([None, "bogus", {}]))  # gone / malformed / empty status
    return old, new


def _fields(pi: PodInfo) -> tuple[Any, ...]:
    return (pi.uid, pi.namespace, pi.name, pi.key, pi.labels, pi.priority, pi.requests, pi.non0_cpu,
            pi.non0_mem, pi.ports)


KEYS = GPUKeys()
FIT = NodeResourcesFit()
BALANCED = NodeResourcesBalancedAllocation()
HELPERS: dict[str, Callable[[PodInfo], Any]] = {
    "tolerations": parse_tolerations,
    "required node affinity": required_node_affinity,
    "preferred node affinity": preferred_node_affinity,
    "inter-pod affinity terms": pod_affinity_terms,
    "spread constraints": _pod_constraints,
    "images": _pod_images,
    "pvc volume count": _plain_pvc_volume_count,
    "dra claims": DynamicResources._pod_claims,
    "gpu request": lambda p: parse_request(p, KEYS),
    "start time": lambda p: pod_start_time_ns(p, 123),
    "fit requests": FIT.scorer.pod_request_list,
    "balanced requests": BALANCED.scorer.pod_request_list,
}


def _shape(x: Any, depth: int = 0) -> Any:
    """A comparable structural value of a helper's answer (objects compared by their attributes)."""
    if depth > 12 or x is None or isinstance(x, (str, int, float, bool, bytes)):
        return x
    if isinstance(x, dict):
        return tuple(sorted((repr(k), _shape(v, depth + 1)) for k, v in x.items()))
    if isinstance(x, (list, tuple, set, frozenset)):
        items = [_shape(v, depth + 1) for v in x]
        return (type(x).__name__, tuple(sorted(items, key=repr) if isinstance(x, (set, frozenset)) else items))
    if callable(x) and not hasattr(x, "__dict__") and not hasattr(type(x), "__slots__"):
        return repr(x)
    attrs: dict[str, Any] = {}
    for cls in type(x).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(x, name):
                attrs[name] = getattr(x, name)
    attrs.update(getattr(x, "__dict__", {}))
    if not attrs:
        return repr(x)
    return (type(x).__name__, tuple(sorted((k, _shape(v, depth + 1)) for k, v in attrs.items())))


def _answer(fn: Callable[[PodInfo], Any], pi: PodInfo) -> Any:
    try:
        return ("ok", _shape(fn(pi)))
    except Exception as exc:  # the helpers' own parse errors are memoized too: compare them
        return ("raised", type(exc).__name__, str(exc))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_versions())
def test_reparse_equals_a_fresh_parse_fields_and_memoized_helpers(versions: tuple[Obj, Obj]) -> None:
    old, new = versions
    try:
        pi = PodInfo(old)
    except PodParseError:
        return
    for fn in HELPERS.values():  # prime every memo on the old version
        _answer(fn, pi)
    try:
        fresh = PodInfo(new)
    except PodParseError as exc:
        try:
            pi.reparse(new)
        except PodParseError as exc2:
            assert exc2.field == exc.field
            return
        raise AssertionError(f"reparse accepted what PodInfo refuses: {exc}") from None
    out = pi.reparse(new)
    assert out.pod is new
    assert _fields(out) == _fields(fresh)
    for what, fn in HELPERS.items():
        assert _answer(fn, out) == _answer(fn, fresh), what
    if same_parse_inputs(old, new):
        assert out.requests is pi.requests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_versions())
def test_derived_assumed_pod_answers_as_a_fresh_parse(versions: tuple[Obj, Obj]) -> None:
    """The core's assumed Pod (``assumed_pod``: the queued Pod with ``spec.nodeName`` and our
    annotations) is a ``derive`` sharing the memo: every field and helper answer equals a fresh parse."""
    from py_scheduler.core.cycle import assumed_pod

    old, _ = versions
    try:
        pi = PodInfo(old)
    except PodParseError:
        return
    for fn in HELPERS.values():
        _answer(fn, pi)
    assumed = assumed_pod(pi, "n9", {"gpu.example.com/assigned": "0,1"})
    fresh = PodInfo(copy.deepcopy(assumed.pod))
    assert assumed.node_name == "n9" and _fields(assumed) == _fields(fresh)
    for what, fn in HELPERS.items():
        assert _answer(fn, assumed) == _answer(fn, fresh), what
    assert "nodeName" not in (old.get("spec") or {}) or old["spec"]["nodeName"] != "n9"  # the queued Pod untouched


def test_malformed_status_lists_raise_pod_parse_error_from_both_paths() -> None:
    base: Obj = {"metadata": {"name": "p", "uid": "u"},
                 "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                 "status": {"containerStatuses": [{"name": "c"}]}}
    pi = PodInfo(base)
    for key in ("containerStatuses", "initContainerStatuses"):
        for bad in (5, {"name": "c"}, True):
            new = copy.deepcopy(base)
            new["status"][key] = bad
            for parse in (PodInfo, pi.reparse):
                try:
                    parse(new)
                except PodParseError as exc:
                    assert exc.field == f"status.{key}"
                else:
                    raise AssertionError(f"{key}={bad!r} accepted")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_versions(), st.booleans())
def test_parse_memo_changes_nothing_also_with_shared_resource_lists(versions: tuple[Obj, Obj], alias: bool) -> None:
    """``PodInfo`` parses each ResourceList once (``ParseMemo``, keyed by the list object); its
    requests equal :func:`pod_requests` without a memo, also when one ResourceList object is shared by
    several containers (YAML anchors in a snapshot file give exactly that)."""
    from decimal import Decimal

    from py_scheduler.framework import quantity
    from py_scheduler.framework.pod_resources import is_pod_level_requests_set, pod_requests
    from py_scheduler.framework.types import Resource

    pod, _ = versions
    if alias:
        shared = {"cpu": "300m", "memory": "32Mi"}
        for key in ("containers", "initContainers"):
            for c in pod["spec"].get(key) or []:
                c["resources"] = {"requests": shared, "limits": shared}
    try:
        pi = PodInfo(pod)
    except PodParseError:
        return
    reqs = pod_requests(copy.deepcopy(pod))
    assert pi.requests == Resource.from_decimals(reqs)
    defaults = {"cpu": Decimal(100) / 1000, "memory": Decimal(200 * 1024 * 1024)}
    if is_pod_level_requests_set(pod["spec"]):
        defaults = {k: v for k, v in defaults.items() if k not in reqs}
    non0 = pod_requests(copy.deepcopy(pod), defaults) if defaults else reqs
    assert pi.non0_cpu == quantity.milli_value(non0.get("cpu", Decimal(0)))
    assert pi.non0_mem == quantity.value(non0.get("memory", Decimal(0)))
