"""NodeTree (``pkg/scheduler/backend/cache/node_tree.go``) against a plain model of upstream's slices.

The tree keeps each zone's names in a dict (membership and removal in O(1)); upstream keeps a slice
and scans it. Under random adds, updates (zone changes included) and removes, both give the same
``list()`` order, the same zone order and the same count, and the same answer from ``remove``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.cache.cache import NodeTree
from py_scheduler.cache.snapshot import node_tree_order, zone_key

ZONE = "topology.kubernetes.io/zone"


def _node(name: str, zone: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {ZONE: zone} if zone is not None else {}}}


class PlainTree:
    """upstream's nodeTree: zone -> []string, scanned for membership."""

    def __init__(self) -> None:
        self.tree: dict[str, list[str]] = {}
        self.zones: list[str] = []
        self.num_nodes = 0

    def add(self, node: dict[str, Any]) -> None:
        name, zone = node["metadata"]["name"], zone_key(node)
        if zone in self.tree:
            if name in self.tree[zone]:
                return
            self.tree[zone].append(name)
        else:
            self.zones.append(zone)
            self.tree[zone] = [name]
        self.num_nodes += 1

    def remove(self, node: dict[str, Any]) -> bool:
        name, zone = node["metadata"]["name"], zone_key(node)
        if zone not in self.tree or name not in self.tree[zone]:
            return False
        self.tree[zone].remove(name)
        if not self.tree[zone]:
            del self.tree[zone]
            self.zones.remove(zone)
        self.num_nodes -= 1
        return True

    def list(self) -> list[str]:
        return node_tree_order((n, z) for z in self.zones for n in self.tree[z])


OPS = st.lists(st.tuples(st.sampled_from(["add", "update", "remove"]), st.integers(0, 7),
                         st.sampled_from([None, "a", "b", "c"]), st.sampled_from([None, "a", "b", "c"])),
               max_size=60)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_node_tree_matches_upstreams_slices(ops: list[tuple[str, int, str | None, str | None]]) -> None:
    fast, plain = NodeTree(), PlainTree()
    for op, i, zone, new_zone in ops:
        node = _node(f"n{i}", zone)
        if op == "add":
            fast.add(node)
            plain.add(node)
        elif op == "remove":
            assert fast.remove(node) == plain.remove(node)
        else:  # updateNode: a zone change removes from the old zone and adds to the new one
            new = _node(f"n{i}", new_zone)
            fast.update(node, new)
            if zone_key(node) != zone_key(new):
                plain.remove(node)
                plain.add(new)
        assert fast.list() == plain.list()
        assert fast.zones == plain.zones
        assert fast.num_nodes == plain.num_nodes
