"""The DRA allocator's slice index (``SliceIndex`` / ``SliceView`` in
``py_scheduler/plugins/dynamic_resources/pools.py``) must be invisible: over cycles whose
ResourceSlices change as the informers change them (a slice replaced by a new object, added,
deleted, a pool's generation bumped, a pool split over two slices one of which is missing, a slice
for all nodes or a node selector), every allocation made through one long-lived index equals the
allocation of a fresh Allocator that parses the slices itself, errors included; and an unchanged
list of slice objects is not parsed again.

Upstream: ``k8s.io/dynamic-resource-allocation/structured`` (``GatherPools`` per Allocate; the
index across cycles is py-scheduler's own, as upstream's scheduler keeps a ResourceSlice tracker).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.plugins.dynamic_resources.allocator import Allocator
from py_scheduler.plugins.dynamic_resources.common import AllocationError, FailedAllocationOnNode
from py_scheduler.plugins.dynamic_resources.pools import SliceIndex

Obj = dict[str, Any]
D = "gpu.example.com"
NODES = ["n0", "n1", "n2"]


def _node(name: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"rack": "r1" if name != "n2" else "r2"}}}


@st.composite
def a_slice(draw: st.DrawFn, key: str) -> Obj:
    """One slice of pool ``p-<key>``: on a node, for all nodes, or by node selector; sometimes one of
    two slices of its pool, sometimes a newer generation, sometimes with a duplicate device name."""
    target = draw(st.sampled_from(["node", "node", "node", "all", "selector"]))
    spec: Obj = {"driver": D}
    if target == "node":
        spec["nodeName"] = draw(st.sampled_from(NODES))
    elif target == "all":
        spec["allNodes"] = True
    else:
        spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "rack", "operator": "In", "values": [draw(st.sampled_from(["r1", "r2"]))]}]}]}
    count = draw(st.sampled_from([1, 1, 2]))
    spec["pool"] = {"name": f"p-{key}", "generation": draw(st.integers(1, 2)), "resourceSliceCount": count}
    names = [f"d{i}" for i in range(draw(st.integers(0, 3)))]
    if names and draw(st.integers(0, 9)) == 0:
        names.append(names[0])  # an invalid pool
    spec["devices"] = [{"name": n, "attributes": {"model": {"string": draw(st.sampled_from(["a", "b"]))}}}
                       for n in names]
    return {"metadata": {"name": f"s-{key}-{draw(st.integers(0, 1))}"}, "spec": spec}


@st.composite
def cycles(draw: st.DrawFn) -> tuple[list[list[Obj]], list[list[Obj]], list[set[tuple[str, str, str]]]]:
    """Slices per cycle (objects kept, replaced, added or deleted between cycles), the claims and the
    allocated devices per cycle."""
    current: dict[str, Obj] = {k: draw(a_slice(k)) for k in draw(st.lists(st.sampled_from("abcdef"), unique=True,
                                                                             min_size=1, max_size=4))}
    per_cycle: list[list[Obj]] = []
    allocated: list[set[tuple[str, str, str]]] = []
    for _ in range(draw(st.integers(2, 5))):
        per_cycle.append(list(current.values()))
        allocated.append({(D, f"p-{k}", f"d{draw(st.integers(0, 2))}")
                          for k in draw(st.lists(st.sampled_from("abcdef"), max_size=2))})
        change = draw(st.sampled_from(["none", "none", "replace", "add", "delete"]))
        if change == "replace" and current:
            k = draw(st.sampled_from(sorted(current)))
            current[k] = draw(a_slice(k))
        elif change == "add":
            k = draw(st.sampled_from("abcdef"))
            current[k] = draw(a_slice(k))
        elif change == "delete" and current:
            del current[draw(st.sampled_from(sorted(current)))]
    claims: list[list[Obj]] = []
    for _ in per_cycle:  # each cycle a Pod with its own claims (same or other specs)
        mine = []
        for i in range(draw(st.integers(1, 2))):
            ex: Obj = {"deviceClassName": "gpu", "allocationMode": draw(st.sampled_from(["ExactCount", "All"])),
                       "count": draw(st.integers(1, 2))}
            if draw(st.booleans()):
                ex["selectors"] = [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a"'}}]
            mine.append({"metadata": {"name": f"c{i}", "namespace": "default", "uid": f"u{i}"},
                         "spec": {"devices": {"requests": [{"name": "r", "exactly": ex}]}}})
        claims.append(mine)
    return per_cycle, claims, allocated


DCLASS = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}"'}}]}}


def _allocate(allocator: Allocator, node: str, claims: list[Obj]) -> Any:
    try:
        result = allocator.allocate(_node(node), copy.deepcopy(claims))
        return ("ok", result)
    except FailedAllocationOnNode as exc:
        return ("failed", str(exc))
    except AllocationError as exc:
        return ("error", str(exc))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cycles())
def test_a_long_lived_index_allocates_as_fresh_allocators(
        case: tuple[list[list[Obj]], list[list[Obj]], list[set[tuple[str, str, str]]]]) -> None:
    """Pools and allocation results memoized per node (``SliceView.pools`` / ``.results``) across
    cycles: the same as without, and a memoized result is not changed by its users' copies."""
    per_cycle, claims, allocated = case
    index = SliceIndex()
    dclass = DCLASS
    for k, (slices, taken, mine) in enumerate(zip(per_cycle, allocated, claims, strict=True)):
        if k % 2:
            dclass = copy.deepcopy(DCLASS)  # an informer update of the class: a new object
        kept = Allocator(set(taken), {"gpu": dclass}, slices, index=index)
        for node in NODES * 2:  # twice: the second lookup is the memoized one
            fresh = Allocator(set(taken), {"gpu": dclass}, slices)
            assert _allocate(kept, node, mine) == _allocate(fresh, node, mine)


def test_allocations_are_memoized_per_node_until_a_device_of_the_node_is_taken() -> None:
    slices = [{"metadata": {"name": f"s-{n}"}, "spec": {"driver": D, "nodeName": n,
                                                        "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                                                        "devices": [{"name": "d0"}, {"name": "d1"}]}}
              for n in NODES]
    claim = {"metadata": {"name": "c", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}
    index = SliceIndex()
    first = Allocator(set(), {"gpu": DCLASS}, slices, index=index).allocate(_node("n0"), [claim])
    other_claim = copy.deepcopy(claim)  # another Pod's claim from the same template
    other_claim["metadata"]["name"] = "c2"
    again = Allocator({(D, "n1", "d0")}, {"gpu": DCLASS}, slices, index=index).allocate(_node("n0"), [other_claim])
    assert again is first  # a device taken elsewhere: the memo holds
    taken = Allocator({(D, "n0", "d0")}, {"gpu": DCLASS}, slices, index=index).allocate(_node("n0"), [claim])
    assert taken is not None and taken[0]["devices"]["results"][0]["device"] == "d1"


def test_unchanged_slice_objects_are_parsed_once() -> None:
    sl = {"metadata": {"name": "s"}, "spec": {"driver": D, "nodeName": "n0",
                                              "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                                              "devices": [{"name": "d0"}]}}
    index = SliceIndex()
    first = index.update([sl])
    assert index.update([sl]) is first and index.rebuilds == 1
    # An equal but new object (an informer update) is parsed again; the old view stays as it was.
    second = index.update([copy.deepcopy(sl)])
    assert second is not first and index.rebuilds == 2
    assert [s.name for s in first.all_slices] == ["s"]
    assert index.update([]) is not second and index.view.all_slices == []
