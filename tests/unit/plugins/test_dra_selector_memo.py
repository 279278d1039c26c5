"""The DRA allocator's memo of selector results across cycles (``SelectorMemo`` in
``py_scheduler/plugins/dynamic_resources/selector_memo.py``) and the quantity-string memo of
``capacity._q`` must be invisible: on random ResourceSlices (some replaced by new versions between
cycles, as the informers do), DeviceClasses and claims with CEL selectors (including ones that fail
at run time), every allocation with the warm memo equals the allocation with a cold one, errors
included; and a selector is evaluated once per device content, not once per cycle or per node.

Upstream: ``k8s.io/dynamic-resource-allocation/structured`` (``selectorsMatch`` evaluates per
allocation; the cross-cycle memo is py-scheduler's own).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.framework import memo
from py_scheduler.framework import quantity as qty
from py_scheduler.plugins.dynamic_resources import allocator as alloc_mod
from py_scheduler.plugins.dynamic_resources import capacity
from py_scheduler.plugins.dynamic_resources.allocator import Allocator
from py_scheduler.plugins.dynamic_resources.common import AllocationError
from py_scheduler.plugins.dynamic_resources.selector_memo import SELECTOR_MEMO, SelectorMemo, _content
from py_scheduler.plugins.helpers import cel

Obj = dict[str, Any]
D = "gpu.example.com"
EXPRESSIONS = [
    f'device.driver == "{D}"',
    'device.attributes["gpu.example.com"].model == "a100"',
    'device.attributes["gpu.example.com"].cores > 4',
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("20Gi")) >= 0',
    'has(device.attributes["gpu.example.com"].model)',
    'device.attributes["gpu.example.com"].missing == 1',  # a runtime error (no such key)
]


@st.composite
def device(draw: st.DrawFn, name: str) -> Obj:
    attrs: Obj = {}
    if draw(st.booleans()):
        attrs["model"] = {"string": draw(st.sampled_from(["a100", "h100"]))}
    attrs["cores"] = {"int": draw(st.integers(1, 8))}
    d: Obj = {"name": name, "attributes": attrs}
    if draw(st.booleans()):
        d["capacity"] = {"memory": {"value": draw(st.sampled_from(["16Gi", "20Gi", "40Gi", "24480Mi"]))}}
    return d


@st.composite
def resource_slice(draw: st.DrawFn, node: str) -> Obj:
    n = draw(st.integers(1, 3))
    return {"metadata": {"name": f"s-{node}"},
            "spec": {"driver": D, "nodeName": node, "pool": {"name": f"p-{node}", "generation": 1,
                                                             "resourceSliceCount": 1},
                     "devices": [draw(device(f"d{i}")) for i in range(n)]}}


@st.composite
def cycles(draw: st.DrawFn) -> tuple[list[list[Obj]], Obj, list[Obj]]:
    """Slices per cycle (each cycle replaces some nodes' slices by new versions), the class, claims."""
    nodes = ["n0", "n1", "n2"]
    current = {n: draw(resource_slice(n)) for n in nodes}
    per_cycle = []
    for _ in range(draw(st.integers(2, 4))):
        per_cycle.append(list(current.values()))
        for n in draw(st.lists(st.sampled_from(nodes), unique=True)):
            current[n] = draw(resource_slice(n))  # a new object, as an informer update gives
    dclass = {"metadata": {"name": "gpu"}, "spec": {"selectors": [
        {"cel": {"expression": e}} for e in draw(st.lists(st.sampled_from(EXPRESSIONS[:5]), max_size=2))]}}
    claims = []
    for i in range(draw(st.integers(1, 3))):
        sel = draw(st.lists(st.sampled_from(EXPRESSIONS), max_size=2))
        ex: Obj = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": draw(st.integers(1, 2))}
        if sel:
            ex["selectors"] = [{"cel": {"expression": e}} for e in sel]
        claims.append({"metadata": {"name": f"c{i}", "namespace": "default", "uid": f"u{i}"},
                       "spec": {"devices": {"requests": [{"name": "r", "exactly": ex}]}}})
    return per_cycle, dclass, claims


def _allocate(slices: list[Obj], dclass: Obj, claims: list[Obj], node: str) -> Any:
    try:
        result = Allocator(set(), {"gpu": dclass}, slices).allocate({"metadata": {"name": node}},
                                                                       copy.deepcopy(claims))
        return ("ok", result)
    except AllocationError as exc:
        return ("error", str(exc))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cycles())
def test_warm_memo_allocates_as_a_cold_one(case: tuple[list[list[Obj]], Obj, list[Obj]]) -> None:
    per_cycle, dclass, claims = case
    SELECTOR_MEMO.clear()
    try:
        for slices in per_cycle:
            for node in ("n0", "n1", "n2"):
                warm = _allocate(slices, dclass, claims, node)
                saved = dict(SELECTOR_MEMO._memo), dict(SELECTOR_MEMO._by_content)
                SELECTOR_MEMO.clear()
                memo.QUANTITIES.clear()
                cold = _allocate(slices, dclass, claims, node)
                SELECTOR_MEMO._memo.update(saved[0])
                SELECTOR_MEMO._by_content.update(saved[1])
                assert warm == cold
    finally:
        SELECTOR_MEMO.clear()


def test_a_selector_is_evaluated_once_per_device_content(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = cel.device_matches

    def counting(selector: Any, var: Any) -> bool:
        calls.append(selector.expression)
        return real(selector, var)

    monkeypatch.setattr(cel, "device_matches", counting)
    SELECTOR_MEMO.clear()
    sl = {"metadata": {"name": "s"}, "spec": {"driver": D, "nodeName": "n0", "pool": {
        "name": "p", "generation": 1, "resourceSliceCount": 1}, "devices": [
        {"name": "d0", "attributes": {"model": {"string": "h100"}}},
        {"name": "d1", "attributes": {"model": {"string": "a100"}}}]}}
    dclass = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": EXPRESSIONS[1]}}]}}
    claim = {"metadata": {"name": "c", "namespace": "default", "uid": "u"}, "spec": {"devices": {"requests": [
        {"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}}
    for _ in range(3):  # three cycles, each with its own Allocator
        result = _allocate([sl], dclass, [claim], "n0")
        assert result[0] == "ok" and result[1][0]["devices"]["results"][0]["device"] == "d1"
    assert len(calls) == 2  # d0 (no) and d1 (yes), in the first cycle only
    new = copy.deepcopy(sl)  # a new version of the slice: new dicts, the same contents
    assert _allocate([new], dclass, [claim], "n0")[1][0]["devices"]["results"][0]["device"] == "d1"
    assert len(calls) == 2
    other = copy.deepcopy(sl)  # another node's slice, its devices named apart: the same contents
    other["spec"]["nodeName"] = "n1"
    other["spec"]["pool"]["name"] = "p1"
    for i, dev in enumerate(other["spec"]["devices"]):
        dev["name"] = f"gpu-{i}"
    assert _allocate([other], dclass, [claim], "n1")[1][0]["devices"]["results"][0]["device"] == "gpu-1"
    assert len(calls) == 2
    new = copy.deepcopy(sl)  # a newer version: d0 now as d1 was, so no evaluation
    new["spec"]["devices"][0]["attributes"]["model"]["string"] = "a100"
    assert _allocate([new], dclass, [claim], "n0")[1][0]["devices"]["results"][0]["device"] == "d0"
    assert len(calls) == 2
    for change in ({"capacity": {"memory": {"value": "1Gi"}}}, {"allowMultipleAllocations": True},
                   {"attributes": {"model": {"string": "a100"}, "cores": {"int": 1}}}):
        changed = copy.deepcopy(sl)  # anything the device variable carries is evaluated again
        changed["spec"]["devices"][0].update(change)
        before = len(calls)
        assert _allocate([changed], dclass, [claim], "n0")[0] == "ok"
        assert len(calls) == before + 1, change  # d0 again (d1 is as before)
    SELECTOR_MEMO.clear()


def test_content_keys_tell_apart_what_the_device_variable_tells_apart() -> None:
    memo = SelectorMemo()
    memo.put("e", D, {"name": "a", "attributes": {"n": {"int": 1}}}, True)
    assert memo.get("e", D, {"name": "b", "attributes": {"n": {"int": 1}}, "taints": []}) is True
    for other in ({"n": {"int": 1.0}}, {"n": {"bool": True}}, {"n": {"string": "1"}}, {"m": {"int": 1}}, None):
        assert memo.get("e", D, {"name": "a", "attributes": other}) is None, other
    assert memo.get("e", "other.driver", {"name": "a", "attributes": {"n": {"int": 1}}}) is None
    assert memo.get("f", D, {"name": "a", "attributes": {"n": {"int": 1}}}) is None
    memo.put("e", D, {"name": "t", "attributes": {True: {"int": 1}}}, False)  # JSON would write True as "true"
    assert memo.get("e", D, {"name": "t", "attributes": {"true": {"int": 1}}}) is None
    assert memo.get("e", D, {"name": "t", "attributes": {"n": ({"int": 1},)}}) is None  # a tuple: no content key
    unwritable = {"name": "c", "attributes": {"n": {"int": object()}}}  # no content key: by object only
    memo.put("e", D, unwritable, False)
    assert memo.get("e", D, unwritable) is False
    assert memo.get("e", D, {"name": "c", "attributes": {"n": {"int": object()}}}) is None


def test_memo_never_answers_for_another_object_with_a_reused_id() -> None:
    memo = SelectorMemo(max_size=2)
    a: Obj = {"name": "a", "attributes": {"model": {"string": "a100"}}}
    memo.put("e", D, a, True)
    assert memo.get("e", D, a) is True
    a_id = id(a)
    memo._by_content.clear()  # the object key alone, now held by a dict of other content at a's id:
    memo._memo[("e", D, a_id)] = ({"name": "a"}, True)  # as if a had been freed and its id reused
    assert memo.get("e", D, a) is None
    assert memo.get("f", D, a) is None and memo.get("e", "other", a) is None
    memo.clear()
    memo.put("e", D, a, True)
    memo.put("f", D, a, False)  # at max_size (an object key and a content key): the older half goes
    assert len(memo) == 2 and memo.get("e", D, a) is None and memo.get("f", D, a) is False
    memo = SelectorMemo(max_size=3)
    b = dict(a)
    memo.put("e", D, a, True)
    assert memo.get("e", D, b) is True and len(memo) == 3  # the content key's hit adds an object key
    memo.put("f", D, a, False)  # two more would pass max_size: the oldest object and content keys go
    assert len(memo) == 3 and memo.get("f", D, a) is False
    assert memo.get("e", D, a) is None  # its object key and e's content key were the older ones
    assert memo.get("e", D, b) is True  # b's object key was the newer one


def test_at_max_size_the_newest_half_stays() -> None:
    """A Pod retried after its cycle spent the CEL budget finds what that cycle judged, although the
    memo filled meanwhile: the newest entries stay when it makes room."""
    memo = SelectorMemo(max_size=100)
    devices: list[Obj] = [{"name": f"d{i}", "attributes": {"i": {"int": i}}} for i in range(200)]
    for i, d in enumerate(devices):
        memo.put("e", D, d, i % 2 == 0)
        assert len(memo) <= 100
        # the last 24 puts are all answered, right after making room too (starting over kept 1)
        assert all(memo._by_content.get(("e", D, _content(devices[j]) or "")) is (j % 2 == 0)
                   for j in range(max(0, i - 23), i + 1)), i


@pytest.mark.parametrize("raw", ["24480Mi", "1k", "20Gi", "1.5", "-1", "abc", "", " ", 5, 2.5, None])
def test_quantity_memo_gives_what_a_parse_gives(raw: object) -> None:
    memo.QUANTITIES.clear()
    try:
        want: Decimal | None = None if raw is None else qty.parse(raw)
    except qty.QuantityError:
        want = None
    assert capacity._q(raw) == want
    assert capacity._q(raw) == want  # the memoized answer
    memo.QUANTITIES.clear()


def test_module_memo_is_the_allocators() -> None:
    assert alloc_mod.SELECTOR_MEMO is SELECTOR_MEMO


CAP_VALUES = st.sampled_from(["16Gi", "1k", "0", "-1", "-5Gi", "abc", 3, -2, 0.5, None])
POLICIES = st.sampled_from([None, "bogus", {}, {"default": "1Gi"}, {"validValues": ["1Gi", "2Gi"]},
                            {"validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}}])


@st.composite
def capacities(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([None, "bogus", []]))
    caps: Obj = {}
    for name in draw(st.lists(st.sampled_from(["memory", "cores", "bw"]), unique=True, max_size=3)):
        cap: Any = {} if draw(st.booleans()) else {"value": draw(CAP_VALUES)}
        if isinstance(cap, dict) and draw(st.integers(0, 3)) == 0:
            cap["requestPolicy"] = draw(POLICIES)
        caps[name] = cap if draw(st.integers(0, 9)) else "bogus"
    return caps


AMOUNTS = st.one_of(st.none(), st.just({}), st.dictionaries(st.sampled_from(["memory", "cores", "bw"]),
                                                            st.sampled_from([Decimal(0), Decimal(1), Decimal(2**30)]),
                                                            max_size=2))


@settings(max_examples=800, deadline=None)
@given(capacities(), AMOUNTS, AMOUNTS, AMOUNTS, st.booleans())
def test_fits_capacity_fast_path_answers_as_the_general_one(caps: Any, requests: Any, current: Any,
                                                            allocating: Any, fractional: bool) -> None:
    def outcome(fn: Any, c: Any) -> Any:
        try:
            return ("ok", fn(current, requests, c, allocating, fractional))
        except capacity.CapacityError as exc:
            return ("error", str(exc))

    general_caps = caps if isinstance(caps, dict) else {}
    want = outcome(capacity._fits_capacity, general_caps)
    if requests and any(name not in general_caps for name in requests):
        want = ("ok", False)  # decided before either path
    assert outcome(capacity.fits_capacity, caps) == want
