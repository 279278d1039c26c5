"""framework/objects.py: the one Obj type and the metadata accessors every layer uses (issue 28 item 7)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.framework import objects as ob

PACKAGE = Path(__file__).resolve().parents[3] / "py_scheduler"


@pytest.mark.parametrize("obj", [None, {}, {"metadata": None}, {"metadata": "x"}, {"metadata": []}])
def test_malformed_metadata_reads_as_empty(obj: Any) -> None:
    assert ob.meta(obj) == {} and ob.name(obj) == "" and ob.uid(obj) == "" and ob.namespace(obj) == ""
    assert ob.labels_of(obj) == {} and ob.annotations_of(obj) == {} and ob.key(obj) == ""
    assert ob.namespace(obj, "default") == "default"


def test_accessors_read_metadata() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"a": "1"},
                        "annotations": {"b": "2"}}}
    assert (ob.name(pod), ob.namespace(pod), ob.uid(pod), ob.key(pod)) == ("p", "ns", "u1", "ns/p")
    assert ob.labels_of(pod) == {"a": "1"} and ob.annotations_of(pod) == {"b": "2"}
    assert ob.key({"metadata": {"name": "node-1"}}) == "node-1"  # cluster-scoped
    assert ob.labels_of({"metadata": {"labels": ["not", "a", "map"]}}) == {}


def test_one_obj_type_and_no_private_metadata_helpers() -> None:
    """No module defines its own ``Obj`` alias or its own ``_meta`` / ``_ns`` / ``_uid`` / ``_name``
    metadata reader: they use framework/objects.py."""
    own_obj, own_meta = [], []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        rel = str(path.relative_to(PACKAGE))
        if rel != "framework/objects.py" and re.search(r"^Obj = ", text, flags=re.M):
            own_obj.append(rel)
        if re.search(r"^def _(meta|ns|uid|name|namespace|labels|ann)\(", text, flags=re.M):
            own_meta.append(rel)
    assert own_obj == [] and own_meta == []
