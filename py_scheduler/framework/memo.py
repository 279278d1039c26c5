"""Typed per-Pod and per-Node memos that declare what they depend on (issue 14 item 5).

Speed-ups that leak were the problem: ``PodInfo.parsed`` was an untyped dict shared by 14 modules and
``PodInfo.reparse`` had to know which of them read the annotations or ``status.startTime``. Here a memo
is an object that names its inputs; the holder invalidates by construction:

* :class:`PodMemo` lives on a ``PodInfo`` (``pod.memos``). It declares the :class:`PodInput` parts
  of the Pod it reads. When a PodInfo is derived for a newer version of the same Pod
  (``PodInfo.reparse`` / ``derive``), the holder computes which parts changed and keeps exactly the
  memos whose declared inputs did not; a brand-new parse starts empty. So a memo is correct as long as
  its declaration is, and the declaration sits next to the computation.
* :class:`NodeMemo` lives on a ``NodeInfo`` (``ni.memos``) and is stamped with what it declares it
  reads: the Node object (``NodeInput.NODE``: labels, taints, allocatable; compared by identity, the
  informer replaces the object on every update) or the whole NodeInfo (``NodeInput.NODE_INFO``:
  compared by ``generation``, which every change bumps by construction). A stale stamp recomputes.

Errors: a memo may memoize an exception (``errors``): a malformed field raises the same
``PodParseError`` on every call without re-parsing.

No upstream counterpart: kube-scheduler recomputes these per cycle or keeps them in ``PodInfo``'s
fixed fields.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, cast

__all__ = ["NodeInput", "NodeMemo", "PodInput", "PodMemo"]

T = TypeVar("T")
_MISSING: Any = object()


class PodInput(enum.Flag):
    """The parts of a Pod a memo may read."""

    IDENTITY = enum.auto()
    """``metadata.uid`` / ``namespace`` / ``name``."""
    LABELS = enum.auto()
    """``metadata.labels``."""
    SPEC = enum.auto()
    """``spec`` except ``spec.nodeName`` (containers, affinity, tolerations, volumes, constraints...)."""
    NODE_NAME = enum.auto()
    """``spec.nodeName`` (differs between a pending Pod and its assumed / bound version)."""
    ANNOTATIONS = enum.auto()
    """``metadata.annotations``."""
    START_TIME = enum.auto()
    """``status.startTime``."""
    STATUS = enum.auto()
    """Any other part of ``status``."""
    ALL = IDENTITY | LABELS | SPEC | NODE_NAME | ANNOTATIONS | START_TIME | STATUS


class _Raised:
    """A memoized exception (re-raised on every get)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _HasMemos(Protocol):
    memos: dict[Any, Any]


H = TypeVar("H", bound=_HasMemos)


class PodMemo(Generic[T]):
    """A value derived from a Pod, memoized on its PodInfo.

    Args:
        name: for repr and debugging (``"InterPodAffinity/terms"``).
        inputs: the :class:`PodInput` parts the computation reads; the memo survives a new version of
            the Pod only when none of them changed.
        errors: exception types the computation may raise that are memoized too (re-raised by every
            :meth:`get` for that PodInfo).
    """

    __slots__ = ("errors", "inputs", "name")

    def __init__(self, name: str, inputs: PodInput, errors: tuple[type[Exception], ...] = ()) -> None:
        self.name = name
        self.inputs = inputs
        self.errors = errors

    def get(self, pod: H, compute: Callable[[H], T]) -> T:
        """The memoized value, computed by ``compute(pod)`` on first use.

        Raises:
            whatever ``compute`` raises; the types in ``errors`` are memoized and raised again.
        """
        memos = pod.memos
        got = memos.get(self, _MISSING)
        if got is _MISSING:
            try:
                v = compute(pod)
            except self.errors as exc:
                memos[self] = _Raised(exc)
                raise
            memos[self] = v
            return v
        if type(got) is _Raised:
            raise got.exc
        return cast(T, got)

    def peek(self, pod: _HasMemos) -> T | None:
        """The memoized value, None when there is none (or it is a memoized error)."""
        v = pod.memos.get(self)
        return None if type(v) is _Raised else cast("T | None", v)

    def put(self, pod: _HasMemos, value: T) -> None:
        """Memoize ``value`` (for memos whose computation needs more than the Pod, e.g. a profile)."""
        pod.memos[self] = value

    def __repr__(self) -> str:
        return f"PodMemo({self.name!r}, {self.inputs})"


def kept_memos(memos: dict[Any, Any], changed: PodInput) -> dict[Any, Any]:
    """The memos of a PodInfo that survive a new version of the Pod in which ``changed`` differ
    (``memos`` itself, shared, when nothing a memo may read changed)."""
    if not changed:
        return memos
    return {m: v for m, v in memos.items() if not (m.inputs & changed)}


class NodeInput(enum.Enum):
    """What a :class:`NodeMemo` reads, hence what stamps it."""

    NODE = "node"
    """Only the Node object (labels, taints, allocatable): valid while ``ni.node`` is that object."""
    NODE_INFO = "generation"
    """The NodeInfo with its Pods: valid while ``ni.generation`` is unchanged."""


class _NodeHolder(Protocol):
    memos: dict[Any, Any]
    generation: int
    node: dict[str, Any] | None


N = TypeVar("N", bound=_NodeHolder)


class NodeMemo(Generic[T]):
    """A value derived from a NodeInfo, memoized on it and stamped with its declared input."""

    __slots__ = ("inputs", "name")

    def __init__(self, name: str, inputs: NodeInput) -> None:
        self.name = name
        self.inputs = inputs

    def get(self, ni: N, compute: Callable[[N], T]) -> T:
        """The value for this NodeInfo's current input, computed by ``compute(ni)`` when the stamp is
        stale or missing."""
        stamp: object = ni.node if self.inputs is NodeInput.NODE else ni.generation
        e = ni.memos.get(self)
        if e is not None and (e[0] is stamp if self.inputs is NodeInput.NODE else e[0] == stamp):
            return cast(T, e[1])
        v = compute(ni)
        ni.memos[self] = (stamp, v)
        return v

    def __repr__(self) -> str:
        return f"NodeMemo({self.name!r}, {self.inputs.name})"
