"""Whether a CEL selector matches a device, kept across scheduling cycles (py-scheduler's own: the
allocator's per-cycle ``celCache`` of ``allocator_incubating.go`` made process-wide, see
:class:`SelectorMemo`).
"""

from __future__ import annotations

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

    Key: ``(expression, driver, id(device))`` with the device dict itself stored beside the result
    and compared by identity on a hit (so a freed dict whose id is reused is a miss, never a wrong
    hit). Inputs: exactly those of ``cel.device_matches(cel.compile_selector(expression),
    cel.device_variable(driver, device))``, which read nothing else (no feature gate, no clock, no
    other object). What it depends on: a device dict is never changed in place - the informers
    replace a ResourceSlice with a new object on every update, and :func:`apply_taint_rules` copies
    a device it adds taints to - so the same dict object means the same attributes and capacity.
    A compile or runtime error (a :class:`SelectorError`: among them a selector past its cost
    budget) is kept the same way, so a bad selector costs one evaluation per device, not one per
    device per node per attempt (issue 31). Bounded: at ``max_size`` entries it starts over (a
    cluster has ``devices x distinct expressions`` entries; taint-patched copies are new dicts every
    cycle and only churn it).

    Why: the per-cycle ``Allocator.cel_cache`` evaluated every (expression, device) pair again in
    each cycle; cel-python's tree-walking evaluation (~0.3 ms) plus the ``device`` variable
    (~0.15 ms) per device per node was ~2/3 of a DRA Pod's scheduling CPU
    (SchedulingWithResourceClaimTemplate, bench/RESULTS.md optimisation log).
    ``tests/unit/plugins/test_dra_selector_memo.py`` checks the allocator with the memo against a
    cold memo on random slices, selectors and updates.
    """

    def __init__(self, max_size: int = 200_000) -> None:
        self.max_size = max_size
        self._memo: dict[tuple[str, str, int], tuple[Obj, bool | SelectorError]] = {}

    def get(self, expression: str, driver: str, device: Obj) -> bool | SelectorError | None:
        """The stored result, or None when there is none for this very device dict."""
        hit = self._memo.get((expression, driver, id(device)))
        if hit is None or hit[0] is not device:
            return None
        return hit[1]

    def put(self, expression: str, driver: str, device: Obj, matches: bool | SelectorError) -> None:
        if len(self._memo) >= self.max_size:
            self._memo.clear()
        self._memo[(expression, driver, id(device))] = (device, matches)

    def clear(self) -> None:
        self._memo.clear()

    def __len__(self) -> int:
        return len(self._memo)


SELECTOR_MEMO = SelectorMemo()
"""The process's :class:`SelectorMemo` (one per process: results do not depend on the profile)."""
