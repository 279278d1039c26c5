"""What the DynamicResources Filter may spend in one scheduling cycle (``CycleBudget``): CEL cost units
on (expression, device) pairs the selector memo lacks, and seconds in all.

Past the CEL budget the allocation fails with :class:`CelCycleBudgetExceeded` naming the selector's
field; what was judged stays in the memo, so repeated attempts (the live scheduler's retries after
backoff) go further each time and end with exactly the allocation an unbudgeted allocator gives. Past
the seconds (a device search that explodes, node after node) the Filter fails with Error naming the
claims. The offline engine has no budget. py-scheduler's own: upstream has no such bound (its Filter
runs on 16 goroutines in cel-go, its ``filterTimeout`` bounds one node).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import ProfileConfig, build_framework
from py_scheduler.framework.runtime import SchedulingError
from py_scheduler.framework.types import PodInfo
from py_scheduler.offline.engine import OfflineScheduler
from py_scheduler.plugins import registry
from py_scheduler.plugins.dynamic_resources.allocator import Allocator
from py_scheduler.plugins.dynamic_resources.common import AllocationError, CelCycleBudgetExceeded, CycleBudget
from py_scheduler.plugins.dynamic_resources.plugin import DynamicResources
from py_scheduler.plugins.dynamic_resources.selector_memo import SELECTOR_MEMO
from tests.unit.plugins.test_dra_selector_memo import cycles

Obj = dict[str, Any]
D = "gpu.example.com"
L40 = "[" + ",".join(str(i) for i in range(40)) + "]"
COSTLY = f'{L40}.all(x, x >= 0) && device.attributes["{D}"].index == 11'


def _slice(node: str, first: int, n: int) -> Obj:
    return {"metadata": {"name": f"s-{node}"},
            "spec": {"driver": D, "nodeName": node, "pool": {"name": f"p-{node}", "generation": 1,
                                                             "resourceSliceCount": 1},
                     "devices": [{"name": f"d{i}", "attributes": {"index": {"int": i}}}
                                 for i in range(first, first + n)]}}


def _claim(request: Obj) -> Obj:
    return {"metadata": {"name": "c", "namespace": "default", "uid": "u"},
            "spec": {"devices": {"requests": [{"name": "r0", "exactly": {"deviceClassName": "plain"}}, request]}}}


CLASSES = {"plain": {"metadata": {"name": "plain"}, "spec": {}},
           "costly": {"metadata": {"name": "costly"}, "spec": {"selectors": [
               {"cel": {"expression": f'device.driver == "{D}"'}}, {"cel": {"expression": COSTLY}}]}}}


def _attempt(slices: list[Obj], claims: list[Obj], node: str, budget: int | None, classes: Obj = CLASSES) -> Any:
    try:
        limit = CycleBudget(cel_units=budget) if budget is not None else None
        return ("ok", Allocator(set(), classes, slices, budget=limit).allocate(
            {"metadata": {"name": node}}, copy.deepcopy(claims)))
    except CelCycleBudgetExceeded:
        raise
    except AllocationError as exc:
        return ("error", str(exc))


@pytest.fixture(autouse=True)
def cold_memo() -> Any:
    SELECTOR_MEMO.clear()
    yield
    SELECTOR_MEMO.clear()


@pytest.mark.parametrize(("request_", "field"), [
    ({"name": "r1", "exactly": {"deviceClassName": "plain", "selectors": [
        {"cel": {"expression": f'device.driver == "{D}"'}}, {"cel": {"expression": COSTLY}}]}},
     "claim default/c: selector #1 (spec.devices.requests[1].exactly.selectors[1].cel.expression)"),
    ({"name": "r1", "firstAvailable": [{"name": "a", "deviceClassName": "plain", "count": 100}, {
        "name": "b", "deviceClassName": "plain", "selectors": [{"cel": {"expression": COSTLY}}]}]},
     "claim default/c: selector #0 (spec.devices.requests[1].firstAvailable[1].selectors[0].cel.expression)"),
    ({"name": "r1", "exactly": {"deviceClassName": "costly"}},
     "class costly: selector #1 (spec.selectors[1].cel.expression)"),
])
def test_a_spent_budget_fails_the_attempt_naming_the_selectors_field(request_: Obj, field: str) -> None:
    slices = [_slice("n0", 0, 12)]  # r0 takes d0; r1 judges the others, ~1200 units each
    with pytest.raises(CelCycleBudgetExceeded) as ei:
        _attempt(slices, [_claim(request_)], "n0", budget=3000)
    msg = str(ei.value)
    assert re.match(re.escape(field) + r": the CEL selectors of this scheduling cycle spent its budget of 3000 cost "
                    r"units \((\d+) by this one\) before device gpu\.example\.com/p-n0/d\d+;", msg), msg
    assert msg.endswith("the devices judged so far are remembered and the Pod is retried"), msg


def test_retries_go_further_each_time_and_end_with_the_unbudgeted_allocation() -> None:
    slices = [_slice("n0", 0, 12)]
    claims = [_claim({"name": "r1", "exactly": {"deviceClassName": "costly"}})]
    want = _attempt(slices, claims, "n0", budget=None)
    assert want[0] == "ok" and [r["device"] for r in want[1][0]["devices"]["results"]] == ["d0", "d11"]
    SELECTOR_MEMO.clear()
    attempts, sizes = 0, [0]
    while True:
        attempts += 1
        try:
            got = _attempt(slices, claims, "n0", budget=5000)
            break
        except CelCycleBudgetExceeded:
            assert len(SELECTOR_MEMO) > sizes[-1]  # each failed attempt judged something new
            sizes.append(len(SELECTOR_MEMO))
    assert got == want
    assert attempts > 2  # 12 devices of ~1200 units each against 5000 units a cycle
    assert _attempt(slices, claims, "n0", budget=1) == want  # all in the memo: nothing left to spend


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cycles(), st.integers(1, 150))
def test_any_budget_converges_to_the_unbudgeted_result(case: tuple[list[list[Obj]], Obj, list[Obj]],
                                                      budget: int) -> None:
    """The random slices, classes and claims of the memo's property test (runtime errors included):
    attempts under ``budget`` until one is not cut short give what one unbudgeted attempt on a cold
    memo gives, and each cut-short attempt leaves the memo larger."""
    per_cycle, dclass, claims = case
    SELECTOR_MEMO.clear()
    for slices in per_cycle:
        for node in ("n0", "n1", "n2"):
            saved = dict(SELECTOR_MEMO._memo), dict(SELECTOR_MEMO._by_content)
            SELECTOR_MEMO.clear()
            want = _attempt(slices, claims, node, None, {"gpu": dclass})
            SELECTOR_MEMO.clear()
            SELECTOR_MEMO._memo.update(saved[0])
            SELECTOR_MEMO._by_content.update(saved[1])
            while True:
                before = len(SELECTOR_MEMO)
                try:
                    got = _attempt(slices, claims, node, budget, {"gpu": dclass})
                    break
                except CelCycleBudgetExceeded:
                    assert len(SELECTOR_MEMO) > before
            assert got == want


def test_the_live_plugin_has_the_budget_and_the_offline_engine_none() -> None:
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    dra = fw.plugins["DynamicResources"]
    assert isinstance(dra, DynamicResources)
    assert dra.cycle_budget == CycleBudget() and (dra.cycle_budget.cel_units, dra.cycle_budget.seconds) == (200_000, 2)
    OfflineScheduler({"default-scheduler": fw}, "default-scheduler", Snapshot.from_object_list([]))
    assert dra.cycle_budget is None


def _explosive_cluster(nodes: int) -> list[Obj]:
    """Nodes of 64 devices whose attribute ``a`` has 15 values, and a Pod whose claim wants 16 devices
    with distinct ``a``: impossible, found out only by trying every combination (C(64, 16))."""
    objs: list[Obj] = [{"kind": "DeviceClass", "apiVersion": "resource.k8s.io/v1", "metadata": {"name": "gpu"},
                        "spec": {}}]
    for n in range(nodes):
        objs.append({"kind": "Node", "apiVersion": "v1", "metadata": {"name": f"n{n}", "labels": {}},
                     "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
        sl = _slice(f"n{n}", 0, 64)
        for d in sl["spec"]["devices"]:
            d["attributes"] = {"a": {"int": int(d["name"][1:]) % 15}}
        objs.append({"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1", **sl})
    objs.append({"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1",
                 "metadata": {"name": "c", "namespace": "default", "uid": "u"},
                 "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                     "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 16}}],
                     "constraints": [{"requests": ["r"], "distinctAttribute": f"{D}/a"}]}}})
    objs.append({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "default", "uid": "p"},
                 "spec": {"containers": [{"name": "c", "image": "i"}],
                          "resourceClaims": [{"name": "c", "resourceClaimName": "c"}]}})
    return objs


def test_a_device_search_exploding_on_every_node_is_cut_at_the_cycles_seconds() -> None:
    """filterTimeout stays upstream's 10 s per node; the cycle's 0.3 s end the attempt at the first
    node, with an Error naming the claim (without the bound: 10 s per node, one after another)."""
    objs = _explosive_cluster(3)
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    dra = fw.plugins["DynamicResources"]
    assert isinstance(dra, DynamicResources) and dra.filter_timeout == 10
    dra.cycle_budget = CycleBudget(seconds=0.3)
    pod = next(o for o in objs if o["kind"] == "Pod")
    with pytest.raises(SchedulingError) as ei:
        Algorithm().schedule(fw, Snapshot.from_object_list(objs), PodInfo(pod), explain=True)
    assert re.search(r"node n\d: timed out trying to allocate devices: the DynamicResources Filter ran 0\.3 s in this "
                     r"scheduling cycle, py-scheduler's bound on one cycle \(filterTimeout bounds one node\), "
                     r"allocating claim default/c \(spec\.devices\); the Pod is retried", str(ei.value)), str(ei.value)


def _slow_to_compile(k: int, index: int) -> str:
    """~600 characters, ~600 tokens: ~20-40 ms for cel-python's parser, ~20 units to evaluate."""
    digits = ", ".join(str((k + j) % 10) for j in range(290))
    return f'false ? [{digits}].size() > {k} : device.attributes["{D}"].index == {index}'


def test_compiling_many_selectors_counts_against_the_cycles_seconds() -> None:
    """A claim of allocationMode All requests, each with distinct selectors that are cheap to judge
    but slow to compile (an adversarial run: 1024 of them blocked the loop 28 s on the bed): the
    attempt stops at the cycle's seconds, what it judged stays, and the retries end with the verdict
    an unbounded attempt gives."""
    objs = [o for o in _explosive_cluster(1) if o["kind"] in ("DeviceClass", "Node", "ResourceSlice")]
    for d in objs[2]["spec"]["devices"][:4]:
        d["attributes"] = {"index": {"int": int(d["name"][1:])}}
    del objs[2]["spec"]["devices"][4:]
    requests = [{"name": f"r{q}", "exactly": {"deviceClassName": "gpu", "allocationMode": "All", "selectors": [
        {"cel": {"expression": _slow_to_compile(q * 8 + s, q)}} for s in range(8)]}} for q in range(4)]
    objs.append({"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1",
                 "metadata": {"name": "c", "namespace": "default", "uid": "u"},
                 "spec": {"devices": {"requests": requests}}})
    objs.append({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "default", "uid": "p"},
                 "spec": {"containers": [{"name": "c", "image": "i"}],
                          "resourceClaims": [{"name": "c", "resourceClaimName": "c"}]}})
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    dra = fw.plugins["DynamicResources"]
    assert isinstance(dra, DynamicResources)
    dra.cycle_budget = CycleBudget(seconds=0.05)
    pod = PodInfo(objs[-1])
    cut = 0
    while True:
        before = len(SELECTOR_MEMO)
        try:
            res = Algorithm().schedule(fw, Snapshot.from_object_list(objs), pod, explain=True)
            break
        except SchedulingError as exc:
            assert "the DynamicResources Filter ran 0.05 s in this scheduling cycle" in str(exc), str(exc)
            assert len(SELECTOR_MEMO) > before  # each cut attempt judged something new
            cut += 1
            assert cut < 200
    assert cut >= 2  # 32 selectors of ~30 ms to compile against 0.05 s a cycle
    assert res.selected == "n0"  # each request takes the one device whose index it names
