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

The process-wide memos (:class:`SharedMemo`, :class:`IdentityMemo`) all live here, at the end of this
module, each stating what it depends on; ``tests/unit/framework/test_shared_memos.py`` checks every
one against the plain computation (the memo disabled). What every memo keyed by an object relies on:
**API objects are never changed in place** (a new version is a new object). :class:`DeliveryGuard`
enforces that in the tests and behind ``PY_SCHEDULER_DEBUG_IMMUTABLE_OBJECTS=1`` (docs/operations.md).
"""

from __future__ import annotations

import atexit
import enum
import json
import logging
import os
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, cast

__all__ = ["DeliveryGuard", "IdentityMemo", "MutatedObjectError", "NodeInput", "NodeMemo", "PodInput", "PodMemo",
           "SharedMemo"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
log = logging.getLogger(__name__)
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


# -- process-wide memos -------------------------------------------------------------------------------

class Evict(enum.Enum):
    """What a full :class:`SharedMemo` does with a new entry."""

    CLEAR = "clear"
    """Drop every entry, then store."""
    OLDEST = "oldest"
    """Drop the oldest entry, then store."""
    LRU = "lru"
    """Drop the least recently used entry (:meth:`SharedMemo.lookup` refreshes), then store."""
    STOP = "stop"
    """Store nothing more."""


class SharedMemo(dict[K, V]):
    """A bounded process-wide memo, key -> derived value. A dict, so a hot path reads it with
    ``.get`` at C speed; writes go through :meth:`store`, which applies the bound. ``size`` 0 disables
    it (what the property tests compare against). ``depends``: what makes a hit equal to a fresh
    computation, stated where every memo is listed (:data:`SHARED`)."""

    def __init__(self, name: str, *, size: int, evict: Evict, depends: str) -> None:
        super().__init__()
        self.name, self.size, self.evict, self.depends = name, size, evict, depends

    def store(self, key: K, value: V) -> V:
        """Memoize ``value`` under ``key`` within the bound; returns ``value``."""
        if len(self) >= self.size:
            if self.evict is Evict.STOP or not self.size:
                return value
            if self.evict is Evict.CLEAR:
                self.clear()
            else:
                del self[next(iter(self))]
        self[key] = value
        return value

    def lookup(self, key: K) -> V | None:
        """``get`` that counts as a use for :attr:`Evict.LRU`."""
        v = self.get(key)
        if v is not None and self.evict is Evict.LRU:
            del self[key]
            self[key] = v
        return v

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self)}/{self.size})"


class IdentityMemo(SharedMemo[int, tuple[Any, V]]):
    """A :class:`SharedMemo` keyed by an object's identity: ``id(obj) -> (obj, value)``; the entry keeps
    ``obj`` alive so its id cannot be reused while stored. Correct only for objects never changed in
    place (API objects and their parts: the informers replace, never mutate)."""

    def __init__(self, name: str = "", *, size: int = 1 << 62, evict: Evict = Evict.CLEAR, depends: str = "") -> None:
        super().__init__(name, size=size, evict=evict, depends=depends)
        self._pinned: tuple[object, V] | None = None

    def pin(self, obj: object, value: V) -> None:
        """Answer :meth:`find` for ``obj`` with ``value`` until the next pin, without storing it: the
        value the caller already holds for that very object (the scheduling queue pins a queued Pod's
        own PodInfo while its hints run, so a pool larger than the memo is not parsed again at every
        event)."""
        self._pinned = (obj, value)

    def find(self, obj: object) -> V | None:
        """The value pinned or stored for ``obj`` itself, None when there is none."""
        pinned = self._pinned
        if pinned is not None and pinned[0] is obj:
            return pinned[1]
        hit = self.get(id(obj))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: object, value: V) -> V:
        """Memoize ``value`` for ``obj``; returns ``value``."""
        self.store(id(obj), (obj, value))
        return value


ParseMemo = IdentityMemo[Any]
"""ResourceList object -> its parse (``dict[str, Decimal]``): one Pod's quantities parsed once while
``PodInfo`` validates them and aggregates them twice (with and without the scoring defaults); one per
PodInfo construction, unbounded. The parsed dicts handed out must not be modified."""

REQUESTS = SharedMemo[str, tuple[Any, int, int]](
    "PodInfo requests", size=4096, evict=Evict.OLDEST, depends=(
        "framework/types.py: PodInfo's (requests Resource, non0 cpu, non0 memory) by the repr of exactly the "
        "inputs validate_pod_resources and pod_requests read (containers' name/resources/restartPolicy, "
        "spec.resources, spec.overhead, the resize status); no global state. The Resource is copied in and out."))
"""Stored after a successful parse only (a malformed Pod fails again). Why: parsing and aggregating the
quantities is ~3/4 of a PodInfo's construction, and the Pods of one workload share their resources (the
initial sync parses every bound Pod of the cluster)."""
SCORER_REQUESTS = SharedMemo[tuple[bool, bool, str], Any](
    "resource scorers' requests", size=4096, evict=Evict.OLDEST, depends=(
        "plugins/helpers/resource_scoring.py: pod_requests of a Pod as a resource scorer reads it, per "
        "(useRequested, pod-level resources + resize status), by requests_key (the repr of exactly the inputs "
        "pod_requests reads); no global state. The dict handed out must not be modified."))
"""Stored after a successful parse only. Why: NodeResourcesFit's and BalancedAllocation's scorers
aggregate every new Pod's requests again (4 % of a live drain's cycle thread), and the Pods of one
workload share their resources."""
HINT_POD_INFOS = IdentityMemo[Any](
    "queueing-hint PodInfos", size=4096, evict=Evict.CLEAR, depends=(
        "plugins/helpers/queueing_hints.py: PodInfo(pod) per Pod object; an API object is never changed in "
        "place (a new version is a new object), so the parse of the object stays its parse. The queue pins "
        "each queued Pod's own PodInfo (built from that very object) while its hints run."))
PV_NODE_AFFINITY = IdentityMemo[Any](
    "PV node affinity", size=50_000, evict=Evict.CLEAR, depends=(
        "plugins/helpers/storage.py: a PV's compiled spec.nodeAffinity per nodeAffinity object "
        "(shared by assumed copies of the PV); never changed in place."))
CEL_SELECTORS = SharedMemo[str, Any](
    "CEL selectors", size=256, evict=Evict.LRU, depends=(
        "plugins/helpers/cel.py: the compiled program of an expression string under the default cost "
        "limits (a pure function of the string: one environment, one function table)."))
QUANTITIES = SharedMemo[str, Any](
    "DRA quantities", size=4096, evict=Evict.STOP, depends=(
        "plugins/dynamic_resources/capacity.py: quantity.parse of a string (pure under the process's default "
        "decimal context, never changed); Decimal values are immutable."))
SHARED: tuple[SharedMemo[Any, Any], ...] = (REQUESTS, SCORER_REQUESTS, HINT_POD_INFOS, PV_NODE_AFFINITY, CEL_SELECTORS,
                                             QUANTITIES)
"""Every process-wide memo (each has a property test against its plain form)."""


# -- the invariant: delivered API objects are never changed in place ----------------------------------

DEBUG_ENV = "PY_SCHEDULER_DEBUG_IMMUTABLE_OBJECTS"
"""``1``: the live process checks that no delivered object is changed in place (the tests set it)."""
VIOLATION = "in-place change of a delivered API object"
"""The words every report starts with (the e2e harness fails a test whose scheduler log has them)."""


class MutatedObjectError(AssertionError):
    """An API object the informers delivered was changed in place."""


def _first_diff(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b or a[k] != b[k]:
                return _first_diff(a.get(k), b.get(k), f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_diff(x, y, f"{path}[{i}]")
    return f"{path or '.'}: {a!r} -> {b!r}"


class DeliveryGuard:
    """Checks that the objects delivered to the scheduler are not changed in place: each is
    fingerprinted (its sorted JSON) when delivered and checked after its handler ran, when its next
    version (or its deletion) arrives, and in :meth:`check_all`. A change is logged at ERROR (the
    object, the first changed field) and counted; with ``strict`` it raises :class:`MutatedObjectError`.
    Debug only: ~three JSON encodings per event."""

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.violations: list[str] = []
        self._seen: dict[int, tuple[Any, str, str]] = {}

    @staticmethod
    def enabled() -> bool:
        """:data:`DEBUG_ENV` is set to a true value."""
        return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes")

    def delivered(self, obj: Any, kind: str = "") -> None:
        """Record ``obj`` (a ``kind``) as delivered: its current content is the one it must keep."""
        self._seen[id(obj)] = (obj, json.dumps(obj, sort_keys=True, default=repr), kind or str(obj.get("kind")))

    def check(self, obj: Any, *, forget: bool = False) -> None:
        """Check ``obj`` against its fingerprint (nothing when it was not delivered)."""
        seen = self._seen.pop(id(obj), None) if forget else self._seen.get(id(obj))
        if seen is None or seen[0] is not obj:
            return
        now = json.dumps(obj, sort_keys=True, default=repr)
        if now != seen[1]:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            msg = (f"{VIOLATION}: {seen[2]} "
                   f"{meta.get('namespace', '')}/{meta.get('name')} changed at "
                   f"{_first_diff(json.loads(seen[1]), json.loads(now))}; API objects are shared by the caches "
                   f"and memos and must be copied, never changed (framework/memo.py)")
            self.violations.append(msg)
            self._seen[id(obj)] = (obj, now, seen[2])  # report each change once
            log.error("%s", msg)
            if self.strict:
                raise MutatedObjectError(msg)

    def check_all(self) -> None:
        """Check every object delivered and not yet replaced."""
        for obj, _, _ in list(self._seen.values()):
            self.check(obj)

    def wrap(self, handler: Callable[[Any, Any, Any], None]) -> Callable[[Any, Any, Any], None]:
        """``handler(wk, old, new)`` with ``new`` recorded before it runs and both sides checked after
        (``old`` for the last time: the store replaced it)."""

        def on_delta(wk: Any, old: Any, new: Any) -> None:
            if new is not None:
                self.delivered(new, wk.kind)
            try:
                handler(wk, old, new)
            finally:
                if old is not None and old is not new:
                    self.check(old, forget=True)
                if new is not None:
                    self.check(new)

        return on_delta

    @classmethod
    def from_env(cls) -> DeliveryGuard | None:
        """A guard when :data:`DEBUG_ENV` is set (checked once more at exit), else None."""
        if not cls.enabled():
            return None
        guard = cls()
        atexit.register(guard.check_all)
        log.warning("%s=1: checking that delivered API objects are never changed in place (slower)", DEBUG_ENV)
        return guard
