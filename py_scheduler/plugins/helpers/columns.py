"""Numpy resource columns of a snapshot's nodes: NodeResourcesFit's and the resource scorers' data.

No upstream counterpart: kube-scheduler's Go loops read NodeInfo fields directly. NodeResourcesFit's
Filter and the resource scorers read a chunk of nodes as int64 arrays instead of walking NodeInfos
(issue 9). The columns are plugin-owned data: they are registered with the snapshot through the
framework's :meth:`~py_scheduler.framework.lister.SnapshotLister.derived` (``snapshot.derived(NodeColumns)``),
which builds them on first use after the node list changes and refreshes them node by node where the
snapshot is brought up to date in place (:class:`~py_scheduler.framework.lister.NodeDerived`), so the
snapshot itself knows nothing of resources.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from py_scheduler.framework.types import NodeInfo, current_generation

__all__ = ["ALLOC_CPU", "ALLOC_EPH", "ALLOC_MEM", "ALLOC_PODS", "FILTER_LIMIT", "FREE_CPU", "FREE_EPH", "FREE_MEM",
           "FREE_PODS", "NZ_CPU", "NZ_MEM", "N_COLUMNS", "POD_COUNT", "REQ_CPU", "REQ_EPH", "REQ_MEM", "SCORE_LIMIT",
           "BoolArray", "GatheredColumns", "Int64Array", "NodeColumns", "ScalarColumn", "node_column_values"]


# -- node columns ------------------------------------------------------------------------------------
ALLOC_CPU, ALLOC_MEM, ALLOC_EPH, ALLOC_PODS, REQ_CPU, REQ_MEM, REQ_EPH, NZ_CPU, NZ_MEM, POD_COUNT = range(10)
"""Row numbers of :attr:`NodeColumns.values`: allocatable milli-CPU / memory bytes / ephemeral-storage
bytes / pod number, requested milli-CPU / memory / ephemeral-storage, non-zero requested milli-CPU /
memory (100m / 200Mi defaults), number of Pods. Rows ``ALLOC_CPU:ALLOC_MEM + 1``, ``REQ_CPU:REQ_MEM +
1`` and ``NZ_CPU:NZ_MEM + 1`` are adjacent (cpu then memory) so both resources slice as one block."""
FREE_PODS, FREE_CPU, FREE_MEM, FREE_EPH = range(10, 14)
"""Derived rows: allocatable pods - Pods, and allocatable - requested milli-CPU / memory /
ephemeral-storage (what ``fitsRequest`` compares the Pod's request with); adjacent, in this order."""
N_COLUMNS = 14
FILTER_LIMIT = 1 << 62
"""A node whose every column value lies in (-2**62, 2**62) can be compared as int64 (``alloc - used``
cannot overflow); others take the Python path."""
SCORE_LIMIT = 1 << 51
"""A node whose allocatable / requested / non-zero requested cpu and memory lie in [0, 2**51) can be
scored on the numpy path (with a Pod request below 2**51 the sums stay below 2**52, so ``* 100``
fits int64 and float64 division sees exact integers); others take the Python path."""
_SCORE_ROWS = (ALLOC_CPU, ALLOC_MEM, REQ_CPU, REQ_MEM, NZ_CPU, NZ_MEM)
_GENERATION = attrgetter("generation")

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def node_column_values(ni: NodeInfo) -> tuple[list[int], bool, bool]:
    """One node's column values in row order (see :data:`ALLOC_CPU` ...) and whether the node is
    usable on the int64 filter path and on the numpy score path (:data:`FILTER_LIMIT`,
    :data:`SCORE_LIMIT`). Values outside int64's comfort zone are replaced by 0 and the derived
    ``FREE_*`` rows are 0 (the node is then not usable on either path)."""
    a, u, z = ni.allocatable, ni.requested, ni.non_zero_requested
    row = [a.milli_cpu, a.memory, a.ephemeral_storage, a.allowed_pod_number, u.milli_cpu, u.memory,
           u.ephemeral_storage, z.milli_cpu, z.memory, len(ni.pods)]
    filter_ok = all(-FILTER_LIMIT < v < FILTER_LIMIT for v in row)
    if not filter_ok:
        return [v if -FILTER_LIMIT < v < FILTER_LIMIT else 0 for v in row] + [0, 0, 0, 0], False, False
    row += [row[ALLOC_PODS] - row[POD_COUNT], row[ALLOC_CPU] - row[REQ_CPU], row[ALLOC_MEM] - row[REQ_MEM],
            row[ALLOC_EPH] - row[REQ_EPH]]
    score_ok = all(0 <= row[k] < SCORE_LIMIT for k in _SCORE_ROWS)
    return row, True, score_ok


Selection = tuple[slice] | tuple[slice, slice] | list[int]
"""Positions in ``node_info_list``: one run, a run wrapping around the end, or any positions."""


def _select(arr: npt.NDArray[Any], sel: Selection) -> npt.NDArray[Any]:
    """``arr[..., sel]`` along the last axis (a view for one run)."""
    if isinstance(sel, list):
        return arr.take(sel, axis=-1)
    if len(sel) == 1:
        return arr[..., sel[0]]
    return np.concatenate((arr[..., sel[0]], arr[..., sel[1]]), axis=-1)


class ScalarColumn:
    """One scalar resource (``nvidia.com/gpu``, ``hugepages-2Mi``, ...) over a snapshot's nodes.

    Attributes:
        alloc: int64 (n,) allocatable ``Value()`` (0 where the node does not list it).
        free: int64 (n,) allocatable - requested.
        ok: bool (n,): both within (-2**62, 2**62) (others are 0 and take the Python path); ``bad``
            counts the False entries.
    """

    __slots__ = ("alloc", "bad", "free", "ok")

    def __init__(self, name: str, nodes: Sequence[NodeInfo]) -> None:
        n = len(nodes)
        self.alloc: Int64Array = np.zeros(n, np.int64)
        self.free: Int64Array = np.zeros(n, np.int64)
        self.ok: BoolArray = np.ones(n, np.bool_)
        self.bad = 0
        for i, ni in enumerate(nodes):
            self.set(i, name, ni)

    def set(self, i: int, name: str, ni: NodeInfo) -> None:
        """Re-read position ``i`` from ``ni``."""
        a = ni.allocatable.scalar.get(name, 0)
        f = a - ni.requested.scalar.get(name, 0)
        ok = -FILTER_LIMIT < a < FILTER_LIMIT and -FILTER_LIMIT < f < FILTER_LIMIT
        self.alloc[i], self.free[i] = (a, f) if ok else (0, 0)
        if bool(self.ok[i]) != ok:
            self.ok[i] = ok
            self.bad += -1 if ok else 1


class GatheredColumns:
    """The columns of some nodes, in the order they were asked for.

    Attributes:
        values: int64 array of shape (:data:`N_COLUMNS`, len(nodes)); row ``ALLOC_CPU`` ... (a view
            of the snapshot's columns when the nodes are a contiguous run of ``node_info_list``: do
            not write to it).
        filter_ok / score_ok: bool arrays (len(nodes),) telling which nodes may use the int64 filter
            / numpy score path; None when every node may.
        columns / selection: where the nodes sit, for :meth:`scalar`.
    """

    __slots__ = ("columns", "filter_ok", "score_ok", "selection", "values")

    def __init__(self, values: Int64Array, filter_ok: BoolArray | None, score_ok: BoolArray | None,
                 columns: NodeColumns, selection: Selection) -> None:
        self.values = values
        self.filter_ok = filter_ok
        self.score_ok = score_ok
        self.columns = columns
        self.selection = selection

    def scalar(self, name: str) -> tuple[Int64Array, Int64Array, BoolArray | None]:
        """(allocatable, allocatable - requested, ok mask or None when all ok) of scalar resource
        ``name`` for these nodes (the snapshot's :class:`ScalarColumn`, built on first use)."""
        col = self.columns.scalar(name)
        sel = self.selection
        return _select(col.alloc, sel), _select(col.free, sel), _select(col.ok, sel) if col.bad else None


class NodeColumns:
    """Resource columns of a Snapshot's nodes in ``node_info_list`` order (numpy, int64).

    Resource Filter / Score plugins read whole chunks of nodes from here instead of walking
    ``NodeInfo.allocatable`` / ``requested`` / ``non_zero_requested`` node by node (issue 9). There is
    no upstream counterpart: kube-scheduler's Go loops read NodeInfo fields directly.

    A node's position is found from its ``NodeInfo.generation`` (bumped on every change, kept by
    ``clone``), so a NodeInfo changed behind the snapshot's back (or a clone with extra Pods) is never
    matched to stale values: :meth:`gather` refreshes the column of a snapshot NodeInfo that changed
    in place and returns None for a NodeInfo the snapshot does not hold (callers then take their
    exact Python path).

    Attributes:
        values: int64 array (:data:`N_COLUMNS`, n).
        filter_ok / score_ok: bool arrays (n,) (see :func:`node_column_values`); ``bad_filter`` /
            ``bad_score`` count the False entries.
        gens: the generation each column reflects; ``pos_by_gen`` / ``pos_by_name`` map back to
            positions.
        source: the ``node_info_list`` the columns were built from (identity decides freshness).
        verified: the last :meth:`gather` that read generations: (:func:`current_generation` then, a
            copy of its node list, its result), reused while no NodeInfo changed (see :meth:`gather`).
    """

    __slots__ = ("bad_filter", "bad_score", "filter_ok", "gens", "n", "pos_by_gen", "pos_by_name", "scalars",
                 "score_ok", "source", "values", "verified")

    def __init__(self, nodes: list[NodeInfo]) -> None:
        n = len(nodes)
        self.source = nodes
        self.n = n
        self.values: Int64Array = np.zeros((N_COLUMNS, n), np.int64)
        self.filter_ok: BoolArray = np.ones(n, np.bool_)
        self.score_ok: BoolArray = np.ones(n, np.bool_)
        self.gens: list[int] = [ni.generation for ni in nodes]
        self.pos_by_gen: dict[int, int] = {g: i for i, g in enumerate(self.gens)}
        self.pos_by_name: dict[str, int] = {ni.name: i for i, ni in enumerate(nodes)}
        self.scalars: dict[str, ScalarColumn] = {}
        self.verified: tuple[int, list[NodeInfo], GatheredColumns] | None = None
        rows: list[list[int]] = []
        for i, ni in enumerate(nodes):
            row, f_ok, s_ok = node_column_values(ni)
            rows.append(row)
            if not f_ok:
                self.filter_ok[i] = False
            if not s_ok:
                self.score_ok[i] = False
        if rows:
            self.values = np.array(rows, np.int64).T.copy()
        self.bad_filter = int(n - np.count_nonzero(self.filter_ok))
        self.bad_score = int(n - np.count_nonzero(self.score_ok))

    def fresh_for(self, nodes: list[NodeInfo]) -> bool:
        """Whether these columns were built for this very ``node_info_list`` (same object and length)."""
        return self.source is nodes and len(nodes) == self.n

    def refresh(self, ni: NodeInfo) -> bool:
        """Re-read the column of ``ni`` (a NodeInfo of ``source``, changed in place). False when ``ni``
        is not the snapshot's NodeInfo at its name's position (nothing changed)."""
        i = self.pos_by_name.get(ni.name)
        if i is None or self.source[i] is not ni:
            return False
        old = self.gens[i]
        if self.pos_by_gen.get(old) == i:
            del self.pos_by_gen[old]
        self.gens[i] = ni.generation
        self.pos_by_gen[ni.generation] = i
        row, f_ok, s_ok = node_column_values(ni)
        self.values[:, i] = row
        if bool(self.filter_ok[i]) != f_ok:
            self.filter_ok[i] = f_ok
            self.bad_filter += -1 if f_ok else 1
        if bool(self.score_ok[i]) != s_ok:
            self.score_ok[i] = s_ok
            self.bad_score += -1 if s_ok else 1
        for name, col in self.scalars.items():
            col.set(i, name, ni)
        return True

    def scalar(self, name: str) -> ScalarColumn:
        """The :class:`ScalarColumn` of resource ``name`` (built over ``source`` on first use, then
        kept up to date by :meth:`refresh`)."""
        col = self.scalars.get(name)
        if col is None:
            col = self.scalars[name] = ScalarColumn(name, self.source)
        return col

    def _positions(self, gens: list[int], nodes: Sequence[NodeInfo]) -> list[int] | None:
        pos_by_gen = self.pos_by_gen
        try:
            return list(map(pos_by_gen.__getitem__, gens))
        except KeyError:
            pass
        for ni, g in zip(nodes, gens, strict=True):
            if g not in pos_by_gen and not self.refresh(ni):
                return None
        return list(map(pos_by_gen.__getitem__, gens))

    def _gathered(self, sel: Selection) -> GatheredColumns:
        return GatheredColumns(_select(self.values, sel), _select(self.filter_ok, sel) if self.bad_filter else None,
                               _select(self.score_ok, sel) if self.bad_score else None, self, sel)

    def gather(self, nodes: Sequence[NodeInfo]) -> GatheredColumns | None:
        """The columns of ``nodes`` in their order; None when one of them is not (a same-generation
        copy of) a NodeInfo of the snapshot.

        A contiguous run of ``node_info_list`` (also one wrapping around its end, as the rotating
        start index of Filter produces) costs one attribute read per node and a list compare; any
        other selection one dict lookup per node and a numpy take.

        The same nodes asked for again while :func:`current_generation` has not moved (Filter's chunk,
        then the feasible nodes each resource scorer reads, in one cycle) get the same result after
        one identity compare of the two lists, without reading a NodeInfo: no NodeInfo changed since
        their generations were checked, so the check still holds (``verified``; property test:
        tests/unit/plugins/test_batch_hooks.py::test_gather_reuses_its_check_only_while_no_nodeinfo_changes).
        """
        last = self.verified
        if last is not None and last[0] == current_generation() and type(nodes) is list and nodes == last[1]:
            return last[2]
        got = self._gather(nodes)
        if got is not None:
            self.verified = (current_generation(), list(nodes), got)
        return got

    def _gather(self, nodes: Sequence[NodeInfo]) -> GatheredColumns | None:
        m = len(nodes)
        gens = list(map(_GENERATION, nodes))
        if m == 0:
            return self._gathered((slice(0, 0),))
        n = self.n
        p0 = self.pos_by_gen.get(gens[0])
        if p0 is not None and m <= n:
            end = p0 + m
            if end <= n:
                if self.gens[p0:end] == gens:
                    return self._gathered((slice(p0, end),))
            elif self.gens[p0:] + self.gens[:end - n] == gens:
                return self._gathered((slice(p0, n), slice(0, end - n)))
        sel = self._positions(gens, nodes)
        if sel is None:
            return None
        return self._gathered(sel)
