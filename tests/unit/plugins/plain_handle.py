"""A typed :class:`~py_scheduler.framework.handle.Handle` for plugin tests on plain dicts.

Plugin factories take ``create(args, handle)`` with a real Handle; tests give them
:func:`plain_handle` instead of None, so a plugin may rely on its Handle. The Handle's ``objects``
is the live process's own lister (:class:`~py_scheduler.app.client.lister.InformerLister` over an
informers' :class:`~py_scheduler.app.client.reflector.ObjectStore`) holding the objects given, keyed as
the informers key them (``namespace/name``, ``default`` when the namespace is absent; ``name`` for
cluster-scoped kinds): empty unless a test passes objects. There is no API client (``client`` is
None, as in ``explain``) and no Event recorder; feature gates are the defaults unless given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from py_scheduler.app.client.lister import InformerLister
from py_scheduler.app.client.reflector import ObjectStore
from py_scheduler.cache.kinds import KINDS_BY_NAME
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.handle import Handle

__all__ = ["plain_handle", "store_of"]

Obj = dict[str, Any]


def store_of(objects: Iterable[Obj] = ()) -> ObjectStore:
    """An informers' store holding ``objects`` (each with a ``kind`` the scheduler watches).

    Raises:
        KeyError: an object's ``kind`` is not one of :data:`~py_scheduler.cache.kinds.KINDS`.
    """
    store = ObjectStore()
    for obj in objects:
        store.apply(KINDS_BY_NAME[str(obj["kind"])], None, obj)
    return store


def plain_handle(objects: Iterable[Obj] = (), feature_gates: FeatureGates | None = None) -> Handle:
    """A detached Handle whose ``objects`` lister serves ``objects`` (empty by default) under
    ``feature_gates`` (default: every gate's default); no client, no Event recorder, no queue; the
    framework binds its profile when it runs one.

    Raises:
        KeyError: see :func:`store_of`.
    """
    return Handle.detached(feature_gates, InformerLister(store_of(objects)))
