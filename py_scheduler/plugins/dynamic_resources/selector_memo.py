"""Whether a CEL selector matches a device, kept across scheduling cycles (py-scheduler's own: the
allocator's per-cycle ``celCache`` of ``allocator_incubating.go`` made process-wide, see
:class:`SelectorMemo`).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from py_scheduler.framework.objects import Obj


@dataclass(frozen=True, slots=True)
class SelectorError:
    """A selector's failure on one device, kept as its result: the ``cel`` exception and whether it
    is a compile error (``CEL compile error``) rather than a runtime one (``CEL runtime error``)."""

    error: Exception
    compile: bool


class SelectorMemo:
    """Whether a CEL selector expression matches a device, kept across scheduling cycles.

    Two keys, one result. First ``(expression, driver, id(device))``, with the device dict itself
    stored beside the result and compared by identity on a hit (so a freed dict whose id is reused
    is a miss, never a wrong hit). Then, for a device dict not seen before, ``(expression, driver,
    content)``: ``content`` is the JSON text (insertion order kept) of exactly what
    ``cel.device_variable`` reads from the device - its ``attributes``, its ``capacity`` and
    whether it ``allowMultipleAllocations`` - so devices that differ only in their name, their node
    or fields the ``device`` variable does not carry share one evaluation. Inputs: exactly those of
    ``cel.device_matches(cel.compile_selector(expression), cel.device_variable(driver, device))``,
    which read nothing else (no feature gate, no clock, no other object, and the same inputs give
    the same cost against the budget). What it depends on: a device dict is never changed in place -
    the informers replace a ResourceSlice with a new object on every update, and
    :func:`apply_taint_rules` copies a device it adds taints to - so the same dict object means the
    same attributes and capacity; and JSON text tells apart every two values the ``device`` variable
    tells apart (``1``, ``1.0`` and ``true`` are three texts; a value JSON cannot write, a key that
    is not a ``str`` or a tuple gets no content key). A compile or runtime error (a
    :class:`SelectorError`: among them a selector past its cost budget) is kept the same way, so a
    bad selector costs one evaluation per device content, not one per device per node per attempt
    (issue 31). Bounded: at ``max_size`` entries (both keys together) the older half of each key's
    entries goes (insertion order), so what the last cycles judged stays: a Pod retried after its
    cycle spent the CEL budget (``CycleBudget``) finds what it judged before, even when the memo
    fills meanwhile (a cluster has ``devices x distinct expressions`` entries of the first key at
    most, and as many of the second; taint-patched copies are new dicts every cycle and only churn
    the first).

    Why: the per-cycle ``Allocator.cel_cache`` evaluated every (expression, device) pair again in
    each cycle; cel-python's tree-walking evaluation (~0.3 ms) plus the ``device`` variable
    (~0.15 ms) per device per node was ~2/3 of a DRA Pod's scheduling CPU
    (SchedulingWithResourceClaimTemplate, bench/RESULTS.md optimisation log). Keyed by the device
    object alone, each node's devices still cost one evaluation each the first time a cycle
    filtered that node: at 5000 nodes, the first cycles of a backlog (which filter new nodes) spent
    most of their time there, although every node's devices were alike (scheduler_perf's
    ``device.driver == ...`` class). ``tests/unit/plugins/test_dra_selector_memo.py`` checks the
    allocator with the memo against a cold memo on random slices, selectors and updates.
    """

    def __init__(self, max_size: int = 200_000) -> None:
        self.max_size = max_size
        self._memo: dict[tuple[str, str, int], tuple[Obj, bool | SelectorError]] = {}
        self._by_content: dict[tuple[str, str, str], bool | SelectorError] = {}
        self._last: tuple[Obj | None, str | None] = (None, None)  # get's content key, for the put after a miss

    def get(self, expression: str, driver: str, device: Obj) -> bool | SelectorError | None:
        """The stored result for this very device dict, or for one with the same content; None
        when there is none."""
        hit = self._memo.get((expression, driver, id(device)))
        if hit is not None and hit[0] is device:
            return hit[1]
        content = self._content(device)
        if content is None:
            return None
        found = self._by_content.get((expression, driver, content))
        if found is not None:
            self._make_room(1)
            self._by_content.setdefault((expression, driver, content), found)
            self._memo[(expression, driver, id(device))] = (device, found)
        return found

    def put(self, expression: str, driver: str, device: Obj, matches: bool | SelectorError) -> None:
        self._make_room(2)
        self._memo[(expression, driver, id(device))] = (device, matches)
        content = self._content(device)
        if content is not None:
            self._by_content[(expression, driver, content)] = matches

    def _make_room(self, n: int) -> None:
        """When ``n`` more entries would pass ``max_size``: drop the older half of each key's entries
        (all of them if that is not enough)."""
        if len(self) + n <= self.max_size:
            return
        for k in list(itertools.islice(self._memo, (len(self._memo) + 1) // 2)):
            del self._memo[k]
        for c in list(itertools.islice(self._by_content, (len(self._by_content) + 1) // 2)):
            del self._by_content[c]
        if len(self) + n > self.max_size:
            self.clear()

    def clear(self) -> None:
        self._memo.clear()
        self._by_content.clear()
        self._last = (None, None)

    def __len__(self) -> int:
        return len(self._memo) + len(self._by_content)

    def _content(self, device: Obj) -> str | None:
        if self._last[0] is not device:
            self._last = (device, _content(device))
        return self._last[1]


def _content(device: Obj) -> str | None:
    """What ``cel.device_variable`` reads from ``device``, as JSON text; None when JSON text could
    hide a difference: a value JSON cannot write, a key that is not a ``str`` (JSON writes ``True``
    and ``"true"`` alike, ``device_variable`` reads ``str(name)``), or a tuple (written as a list).
    Never the case for objects from the API server; possible in a hand-written snapshot."""
    read = [device.get("attributes"), device.get("capacity"), bool(device.get("allowMultipleAllocations"))]
    if not _plain(read):
        return None
    try:
        return json.dumps(read, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return None


def _plain(value: object, depth: int = 0) -> bool:
    """Dicts with ``str`` keys, lists and scalars only (at most 8 levels; the device variable's
    inputs have 2)."""
    if isinstance(value, dict):
        return depth < 8 and all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return depth < 8 and all(_plain(v, depth + 1) for v in value)
    return not isinstance(value, tuple)


SELECTOR_MEMO = SelectorMemo()
"""The process's :class:`SelectorMemo` (one per process: results do not depend on the profile)."""
