"""Taints and tolerations: does a Pod's toleration list tolerate a Node's taint.

Upstream: ``staging/src/k8s.io/api/core/v1/toleration.go`` (``Toleration.ToleratesTaint``,
``compareNumericValues``), ``staging/src/k8s.io/component-helpers/scheduling/corev1/helpers.go``
(``TolerationsTolerateTaint``, ``FindMatchingUntoleratedTaint``) and
``staging/src/k8s.io/apimachinery/pkg/api/validate/content/decimal_int.go`` (``IsDecimalInteger``).

Tolerations and taints are plain dicts (``{"key", "operator", "value", "effect"}``). The ``Lt`` /
``Gt`` toleration operators belong to the ``TaintTolerationComparisonOperators`` feature gate, which is
Alpha and off by default in v1.37 (``pkg/features/kube_features.go``): with the gate off a ``Lt`` /
``Gt`` toleration tolerates nothing, as upstream. Pass ``enable_comparison_operators=True`` to turn it on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import PodInfo

__all__ = [
    "EFFECT_NO_EXECUTE",
    "EFFECT_NO_SCHEDULE",
    "EFFECT_PREFER_NO_SCHEDULE",
    "find_untolerated_taint",
    "parse_tolerations",
    "taint_to_string",
    "tolerates_taint",
    "toleration_tolerates_taint",
]

EFFECT_NO_SCHEDULE = "NoSchedule"
EFFECT_PREFER_NO_SCHEDULE = "PreferNoSchedule"
EFFECT_NO_EXECUTE = "NoExecute"

log = logging.getLogger("py_scheduler.plugins.helpers.tolerations")

_NOT_DECIMAL = "must be a valid decimal integer in canonical form"
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MEMO: PodMemo[list[dict[str, Any]]] = PodMemo("helpers.tolerations", PodInput.SPEC, (PodParseError,))
_INDEX_MEMO: PodMemo[TolerationIndex] = PodMemo("helpers.tolerations.index", PodInput.SPEC, (PodParseError,))
_TOLERATION_FIELDS = ("key", "operator", "value", "effect")


def _decimal_int64(s: str) -> int | str:
    """``IsDecimalInteger`` + ``strconv.ParseInt(s, 10, 64)``: an optional ``-``, no leading zeros
    (except ``"0"`` itself), ASCII digits only, within int64. Returns the value, or upstream's error
    message when ``s`` is not one."""
    n = len(s)
    if n == 0:
        return "must be non-empty"
    i = 1 if s[0] == "-" else 0
    if i == n or (s[i] == "0" and n > 1) or not all("0" <= c <= "9" for c in s[i:]):
        return _NOT_DECIMAL
    v = int(s)
    if v < _INT64_MIN or v > _INT64_MAX:
        return f'strconv.ParseInt: parsing "{s}": value out of range'
    return v


def _compare_numeric(tol_v: str, taint_v: str, op: str) -> bool:
    """``compareNumericValues``: taint value < / > toleration value as int64; a value that is not a
    decimal int64 tolerates nothing and is logged with upstream's message (``failed to parse
    toleration value as int64`` / ``failed to parse taint value as int64``, the parse error): the
    Filter reason stays the generic untolerated-taint one, as upstream's."""
    a = _decimal_int64(tol_v)
    if isinstance(a, str):
        log.error("failed to parse toleration value as int64: %s toleration=%r", a, tol_v)
        return False
    b = _decimal_int64(taint_v)
    if isinstance(b, str):
        log.error("failed to parse taint value as int64: %s taint=%r", b, taint_v)
        return False
    return b < a if op == "Lt" else b > a


def toleration_tolerates_taint(toleration: Mapping[str, Any], taint: Mapping[str, Any],
                               enable_comparison_operators: bool = False) -> bool:
    """``Toleration.ToleratesTaint``.

    An empty toleration effect matches every effect; an empty key matches every key; operator
    ``""`` / ``Equal`` compares values, ``Exists`` matches any value, ``Lt`` / ``Gt`` compare the
    values as decimal int64 (taint value < / > toleration value) when the comparison-operator gate is
    on and tolerate nothing when it is off or a value is not a decimal integer; any other operator
    tolerates nothing.
    """
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    op = toleration.get("operator") or ""
    if op in ("", "Equal"):
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    if op == "Exists":
        return True
    if op in ("Lt", "Gt"):
        if not enable_comparison_operators:
            return False
        tol_v = toleration.get("value")
        taint_v = taint.get("value")
        if not isinstance(tol_v, str) or not isinstance(taint_v, str):
            return False
        return _compare_numeric(tol_v, taint_v, op)
    return False


def tolerates_taint(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any],
                    enable_comparison_operators: bool = False) -> bool:
    """``TolerationsTolerateTaint``: True when any toleration tolerates ``taint``."""
    return any(toleration_tolerates_taint(t, taint, enable_comparison_operators) for t in tolerations)


class TolerationIndex:
    """A Pod's parsed tolerations by key, those with an empty key (which tolerate any key) apart:
    ``ToleratesTaint`` is asked only of the tolerations that can tolerate a taint's key, so a Pod of
    thousands of tolerations costs a few checks per taint, not thousands (the same answers: a
    toleration with a key tolerates only taints with that key)."""

    __slots__ = ("any_key", "by_key")

    def __init__(self, tolerations: Iterable[Mapping[str, Any]]) -> None:
        self.by_key: dict[str, list[Mapping[str, Any]]] = {}
        self.any_key: list[Mapping[str, Any]] = []
        for t in tolerations:
            key = t.get("key") or ""
            (self.by_key.setdefault(key, []) if key else self.any_key).append(t)

    def for_taint(self, taint: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The tolerations that may tolerate ``taint``, in the Pod's order within each group."""
        own = self.by_key.get(taint.get("key") or "")
        return own + self.any_key if own else self.any_key


def find_untolerated_taint(taints: Iterable[Mapping[str, Any]],
                           tolerations: Iterable[Mapping[str, Any]] | TolerationIndex,
                           effects: set[str] | frozenset[str] | None = None,
                           enable_comparison_operators: bool = False,
                           ) -> dict[str, Any] | None:
    """``FindMatchingUntoleratedTaint``: the first taint (in node order) whose effect is in
    ``effects`` (``None``: every effect) that no toleration tolerates; ``None`` when all are
    tolerated. ``tolerations`` may be a :class:`TolerationIndex` (:func:`toleration_index`)."""
    index = tolerations if isinstance(tolerations, TolerationIndex) else None
    tols = [] if isinstance(tolerations, TolerationIndex) else list(tolerations)
    for taint in taints:
        if not isinstance(taint, Mapping):
            continue
        if effects is not None and (taint.get("effect") or "") not in effects:
            continue
        if not tolerates_taint(tols if index is None else index.for_taint(taint), taint, enable_comparison_operators):
            return dict(taint)
    return None


def taint_to_string(taint: Mapping[str, Any]) -> str:
    """``Taint.ToString``: ``key=value:effect``, ``key:effect`` without a value, ``key=value`` /
    ``key`` without an effect."""
    key = str(taint.get("key") or "")
    value = str(taint.get("value") or "")
    effect = str(taint.get("effect") or "")
    s = f"{key}={value}" if value else key
    return f"{s}:{effect}" if effect else s


def parse_tolerations(pod_info: PodInfo) -> list[dict[str, Any]]:
    """The Pod's ``spec.tolerations``, checked once and memoized on the PodInfo.

    Each returned dict has string ``key``, ``operator``, ``value`` and ``effect`` (``""`` when
    absent) plus ``tolerationSeconds`` when given. An unknown operator or effect is kept (it
    simply tolerates nothing, as upstream).

    Raises:
        PodParseError: ``spec.tolerations`` is not a list, an entry is not an object, or a field
        is not a string (field named like ``spec.tolerations[2].value``). The error is memoized
        too, so every call for the same Pod raises it again without re-parsing.
    """
    return _MEMO.get(pod_info, lambda p: _parse(p.spec.get("tolerations")))


def toleration_index(pod_info: PodInfo) -> TolerationIndex:
    """:func:`parse_tolerations` by key (:class:`TolerationIndex`), memoized on the PodInfo.

    Raises:
        PodParseError: as :func:`parse_tolerations`.
    """
    return _INDEX_MEMO.get(pod_info, lambda p: TolerationIndex(parse_tolerations(p)))


def _parse(raw: object) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PodParseError("spec.tolerations", raw, "expected a list of tolerations")
    out: list[dict[str, Any]] = []
    for i, t in enumerate(raw):
        if not isinstance(t, Mapping):
            raise PodParseError(f"spec.tolerations[{i}]", t, "expected a toleration object")
        tol: dict[str, Any] = {}
        for f in _TOLERATION_FIELDS:
            v = t.get(f)
            if v is None:
                v = ""
            if not isinstance(v, str):
                raise PodParseError(f"spec.tolerations[{i}].{f}", v, "expected a string")
            tol[f] = v
        if "tolerationSeconds" in t and t["tolerationSeconds"] is not None:
            secs = t["tolerationSeconds"]
            if not isinstance(secs, int) or isinstance(secs, bool):
                raise PodParseError(f"spec.tolerations[{i}].tolerationSeconds", secs, "expected an integer")
            tol["tolerationSeconds"] = secs
        out.append(tol)
    return out
