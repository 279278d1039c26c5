"""GPUScore's per-node GPU devices kept across cycles (``GPUDeviceIndex`` in
``py_scheduler/plugins/gpu/dra.py``) must equal the plain form (group every slice by node, scan each
node's devices) after any sequence of informer-like slice changes: a slice replaced by a new object,
added, deleted, moved to another node; malformed entries included. An unchanged list of objects is
not grouped again."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.plugins.gpu.dra import GPUDeviceIndex, _by_node, _gpu_devices

Obj = dict[str, Any]
NODES = ["n0", "n1", "n2"]


@st.composite
def a_slice(draw: st.DrawFn, key: str) -> Any:
    if draw(st.integers(0, 15)) == 0:
        return draw(st.sampled_from([{"spec": None}, {"spec": {"nodeName": 3}}, {"metadata": {}}]))
    devices: list[Any] = []
    for i in range(draw(st.integers(0, 3))):
        attrs: Obj = {}
        if draw(st.booleans()):
            attrs[draw(st.sampled_from(["productName", "gpu.nvidia.com/productName"]))] = {
                "string": draw(st.sampled_from(["A100", "H100"]))}
        if draw(st.booleans()):
            attrs["type"] = {"string": "gpu"}
        devices.append({"name": f"d{i}", "attributes": attrs})
    if draw(st.integers(0, 9)) == 0:
        devices.append("junk")
    spec: Obj = {"driver": "gpu.nvidia.com", "pool": {"name": f"p-{key}"}, "devices": devices}
    if draw(st.integers(0, 5)):
        spec["nodeName"] = draw(st.sampled_from(NODES))
    return {"metadata": {"name": f"s-{key}"}, "spec": spec}


@st.composite
def histories(draw: st.DrawFn) -> list[list[Any]]:
    current = {k: draw(a_slice(k)) for k in draw(st.lists(st.sampled_from("abcde"), unique=True, max_size=4))}
    out = []
    for _ in range(draw(st.integers(1, 5))):
        out.append(list(current.values()))
        change = draw(st.sampled_from(["none", "replace", "add", "delete"]))
        if change in ("replace", "add"):
            k = draw(st.sampled_from("abcde"))
            current[k] = draw(a_slice(k))
        elif change == "delete" and current:
            del current[draw(st.sampled_from(sorted(current)))]
    return out


@settings(max_examples=200, deadline=None)
@given(histories())
def test_index_equals_the_plain_form(history: list[list[Any]]) -> None:
    index = GPUDeviceIndex()
    for slices in history:
        index.update(slices)
        plain = _by_node([sl for sl in slices if isinstance(sl, dict)])
        for node in [*NODES, "absent"]:
            assert index.devices(node) == _gpu_devices(plain.get(node, []))


def test_unchanged_objects_are_not_grouped_again() -> None:
    gpu = {"name": "g", "attributes": {"productName": {"string": "A100"}}}
    sl = {"metadata": {"name": "s"}, "spec": {"driver": "d", "nodeName": "n0", "pool": {"name": "p"}, "devices": [gpu]}}
    index = GPUDeviceIndex()
    index.update([sl])
    first = index.devices("n0")
    index.update([sl])
    assert index.rebuilds == 1 and index.devices("n0") is first
    changed = copy.deepcopy(sl)
    changed["spec"]["devices"][0]["attributes"] = {}
    index.update([changed])
    assert index.rebuilds == 2 and index.devices("n0") == {}
