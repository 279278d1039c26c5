"""The assume cache VolumeBinding's binder keeps over PVs and PVCs (upstream ``volumebinding``'s
``assume_cache.go`` / ``passive_assume_cache.go``).
"""

from __future__ import annotations

from collections.abc import Callable

from py_scheduler.framework.lister import ClusterObjectsLister
from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.helpers import storage as st


class AssumeCache:
    """``passiveAssumeCache`` over one kind of the snapshot's objects.

    ``assume(obj)`` overlays an in-memory version; reads return it only while the stored (API)
    object still has the same ``resourceVersion``: a newer object from the API server wins and the
    assumed one is dropped, as upstream's informer handler does.
    """

    def __init__(self, kind: str, key: Callable[[Obj], str]) -> None:
        self.kind = kind
        self._key = key
        self.assumed: dict[str, Obj] = {}
        self._index_memo: dict[str, tuple[Obj, str]] = {}

    def _overlay(self, key: str, api: Obj | None) -> Obj | None:
        assumed = self.assumed.get(key)
        if assumed is None:
            return api
        if api is None or st.resource_version(api) != st.resource_version(assumed):
            del self.assumed[key]
            return api
        return assumed

    def get(self, objects: ClusterObjectsLister, key: str) -> Obj | None:
        """The assumed object when current, else the stored one (``Get``); None when absent."""
        return self._overlay(key, objects.get(self.kind, key))

    def by_index(self, objects: ClusterObjectsLister, index: Callable[[Obj], str], value: str) -> list[Obj]:
        """``ByIndex``: stored objects whose ``index`` (evaluated on the stored object) is ``value``,
        assumed versions swapped in. ``index`` results are memoized per stored object (by identity,
        so an object replaced by the informer is re-indexed); one index function per cache."""
        memo = self._index_memo
        out: list[Obj] = []
        store = objects.by_kind.get(self.kind, {})
        for key, obj in store.items():
            hit = memo.get(key)
            if hit is None or hit[0] is not obj:
                hit = memo[key] = (obj, index(obj))
            if hit[1] == value:
                cur = self._overlay(key, obj)
                if cur is not None:
                    out.append(cur)
        if len(memo) > 2 * len(store) + 1024:
            for key in [k for k in memo if k not in store]:
                del memo[key]
        return out

    def assume(self, objects: ClusterObjectsLister, obj: Obj) -> None:
        """Overlay ``obj`` (``Assume``).

        Raises:
            st.StorageError: the object is not stored, or its resourceVersion differs from the stored one.
        """
        key = self._key(obj)
        stored = objects.get(self.kind, key)
        if stored is None:
            raise st.StorageError(f'{self.kind.lower()} "{key}" not found')
        if st.resource_version(stored) != st.resource_version(obj):
            raise st.StorageError(f"{key!r} is out of sync (stored: {st.resource_version(stored)}, "
                                  f"assume: {st.resource_version(obj)})")
        self.assumed[key] = obj

    def restore(self, obj: Obj) -> None:
        """Drop the assumed version of ``obj`` if it is the one assumed (``Restore``)."""
        key = self._key(obj)
        assumed = self.assumed.get(key)
        if assumed is not None and st.resource_version(assumed) == st.resource_version(obj):
            del self.assumed[key]
