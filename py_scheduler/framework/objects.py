"""API objects as the scheduler holds them, and the one set of metadata accessors.

Objects are the API server's JSON documents decoded to ``dict`` (``Obj``), as the informers deliver
them; nothing in the scheduler changes one in place (the memos depend on it: framework/memo.py). The
accessors read ``metadata`` defensively: a missing or malformed ``metadata`` (or field) reads as empty,
never raises, as apimachinery's ``ObjectMeta`` getters return zero values (k8s.io/apimachinery
pkg/apis/meta/v1/meta.go).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
"""One API object (a Pod, Node, ResourceClaim...): its JSON document decoded."""


def meta(obj: Mapping[str, Any] | None) -> Obj:
    """``obj.metadata``; ``{}`` when absent or not an object."""
    m = (obj or {}).get("metadata")
    return m if isinstance(m, dict) else {}


def name(obj: Mapping[str, Any] | None) -> str:
    """``metadata.name`` (``""`` when absent)."""
    return str(meta(obj).get("name") or "")


def namespace(obj: Mapping[str, Any] | None, default: str = "") -> str:
    """``metadata.namespace``; ``default`` when absent (``"default"`` for Pods read from a file)."""
    return str(meta(obj).get("namespace") or default)


def uid(obj: Mapping[str, Any] | None) -> str:
    """``metadata.uid`` (``""`` when absent)."""
    return str(meta(obj).get("uid") or "")


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """``metadata.labels`` (``{}`` when absent or not an object)."""
    m = meta(obj).get("labels")
    return m if isinstance(m, dict) else {}


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """``metadata.annotations`` (``{}`` when absent or not an object)."""
    m = meta(obj).get("annotations")
    return m if isinstance(m, dict) else {}


def key(obj: Mapping[str, Any] | None) -> str:
    """``namespace/name`` (``name`` alone for a cluster-scoped object): client-go's
    ``MetaNamespaceKeyFunc``."""
    ns, n = namespace(obj), name(obj)
    return f"{ns}/{n}" if ns else n
