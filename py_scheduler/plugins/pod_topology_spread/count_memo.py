"""PodTopologySpread's per-node count memo (py-scheduler's own, issue 9: no upstream counterpart; it
gives exactly the counts of ``filtering.go``'s loop over all nodes)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from py_scheduler.framework.types import NodeInfo
from py_scheduler.plugins.helpers.node_selector import LabelSelector

# -- per-node count memo (no upstream counterpart: issue 9) ----------------------------------------

_GENERATION = attrgetter("generation")
COUNT_MEMOS = 16
"""Count memos kept per plugin instance (LRU): one per (keys, selector, namespace) in use."""

SelectorKey = tuple[bool, tuple[tuple[str, str, frozenset[str]], ...]]


def selector_key(sel: LabelSelector) -> SelectorKey:
    """A hashable value identifying what ``sel`` matches (two Pods' equal selectors share it)."""
    return sel.nothing, tuple((r.key, r.op, r.values) for r in sel.requirements)


class _CountMemo:
    """PreFilter's per-node contributions for one (constraint keys, topology key, selector,
    namespace), in the order of the node list they were computed for.

    ``gens[i]`` is the ``NodeInfo.generation`` position ``i`` reflects (generations are unique and
    bumped on every NodeInfo change, a snapshot clone keeps its source's), ``values[i]`` the node's
    topology value (None: no Node object or a constraint key missing, the node is not counted),
    ``counts[i]`` its matching Pods; ``totals`` / ``domains`` are the sums per topology value (Pods,
    nodes). Node objects are assumed immutable (the informers replace them), as elsewhere.
    """

    __slots__ = ("counts", "domains", "gen_list", "gens", "pos_by_gen", "totals", "values")

    def __init__(self) -> None:
        self.gens: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.gen_list: list[int] = []
        self.pos_by_gen: dict[int, int] = {}
        self.values: list[str | None] = []
        self.counts: list[int] = []
        self.totals: dict[str, int] = {}
        self.domains: dict[str, int] = {}

    def _set(self, i: int, value: str | None, count: int) -> None:
        old = self.values[i]
        if old is not None:
            self.totals[old] -= self.counts[i]
            d = self.domains[old] - 1
            if d:
                self.domains[old] = d
            else:
                del self.domains[old]
                del self.totals[old]
        self.values[i] = value
        self.counts[i] = count
        if value is not None:
            self.totals[value] = self.totals.get(value, 0) + count
            self.domains[value] = self.domains.get(value, 0) + 1

    def update(self, nodes: list[NodeInfo], keys: tuple[str, ...], key: str, selector: LabelSelector | None,
               namespace: str) -> dict[str, int]:
        """Bring the memo up to date with ``nodes`` (only positions whose generation changed are
        re-read; all of them when the node count changed) and return a copy of the totals."""
        n = len(nodes)
        gens = np.fromiter(map(_GENERATION, nodes), np.int64, n)
        full = len(self.gens) != n
        if full:
            self.values = [None] * n
            self.counts = [0] * n
            self.totals = {}
            self.domains = {}
            self.gen_list = gens.tolist()
            self.pos_by_gen = dict(zip(self.gen_list, range(n), strict=True))
            changed: Iterable[int] = range(n)
        else:
            changed = np.flatnonzero(gens != self.gens).tolist()
        gen_list, pos_by_gen = self.gen_list, self.pos_by_gen
        for i in changed:
            ni = nodes[i]
            if not full:
                if pos_by_gen.get(gen_list[i]) == i:
                    del pos_by_gen[gen_list[i]]
                gen_list[i] = ni.generation
                pos_by_gen[ni.generation] = i
            node = ni.node
            value: str | None = None
            cnt = 0
            if node is not None:
                labels = (node.get("metadata") or {}).get("labels") or {}
                if all(k in labels for k in keys):
                    value = labels[key]
                    if selector is not None:
                        for p in ni.pods:
                            if p.namespace == namespace and selector.matches(p.labels) and (
                                    p.pod.get("metadata") or {}).get("deletionTimestamp") is None:
                                cnt += 1
            self._set(i, value, cnt)
        self.gens = gens
        return dict(self.totals)

    def values_for(self, nodes: Sequence[NodeInfo], gens: list[int]) -> list[str | None] | None:
        """The memoized topology values of ``nodes`` (``gens`` their generations) when they are a
        run of the memo's node list, possibly wrapping around its end (as Filter's rotating start
        gives them) and unchanged since; None otherwise."""
        m = len(gens)
        n = len(self.gen_list)
        p0 = self.pos_by_gen.get(gens[0]) if m else None
        if p0 is None or m > n:
            return None
        end = p0 + m
        if end <= n:
            return self.values[p0:end] if self.gen_list[p0:end] == gens else None
        if self.gen_list[p0:] + self.gen_list[:end - n] == gens:
            return self.values[p0:] + self.values[:end - n]
        return None


class CountMemos:
    """The plugin's :class:`_CountMemo` per (keys, topology key, selector, namespace), the last :data:`COUNT_MEMOS`."""

    @staticmethod
    def _memos_pay(nodes: Sequence[NodeInfo], keys: Sequence[str]) -> bool:
        """Whether the constraints of ``keys`` take their counts from the memos: always when they fit in
        the memos kept; past that only when some node carries every key (else upstream's loop counts
        nothing, and thousands of constraints on keys no Node has cost ``constraints x nodes`` in
        memos that would not last: 5 s at 12 000 x 500)."""
        return len(keys) <= COUNT_MEMOS or any(
            ni.node is not None and all(k in ni.labels for k in keys) for ni in nodes)

    _count_memos: OrderedDict[tuple[tuple[str, ...], str, SelectorKey | None, str], _CountMemo]

    def _memo_counts(self, nodes: list[NodeInfo], keys: tuple[str, ...], key: str, selector: LabelSelector | None,
                     namespace: str) -> tuple[_CountMemo, dict[str, int]]:
        """PreFilter's matching-Pod count per value of topology key ``key`` over ``nodes`` (those
        with a Node object and every key of ``keys``; ``selector`` None counts 0), for a constraint
        whose node inclusion policies let every node in: what upstream's loop over all nodes gives,
        from :class:`_CountMemo` (a stream of Pods with the same constraint re-reads only the nodes
        that changed since the previous cycle). Returns the memo and a new dict the caller may change."""
        mkey = (keys, key, None if selector is None else selector_key(selector), namespace)
        memos = self._count_memos
        memo = memos.get(mkey)
        if memo is None:
            memo = memos[mkey] = _CountMemo()
            while len(memos) > COUNT_MEMOS:
                memos.popitem(last=False)
        else:
            memos.move_to_end(mkey)
        try:
            return memo, memo.update(nodes, keys, key, selector, namespace)
        except BaseException:
            del memos[mkey]  # half-updated: start over next time
            raise
