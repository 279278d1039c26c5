"""Device constraints of a claim: ``matchAttribute`` (every device of the named requests has the same
value of an attribute) and ``distinctAttribute`` (pairwise different values).

Upstream: ``k8s.io/dynamic-resource-allocation@v0.37.2/structured/internal/incubating/``
``allocator_incubating.go`` (``matchAttributeConstraint``, ``lookupAttribute``) and
``constraint.go`` (``distinctAttributeConstraint``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.dynamic_resources.common import DeviceID


# -- constraints ------------------------------------------------------------------------------
def lookup_attribute(device: Mapping[str, Any], driver: str, name: str) -> Mapping[str, Any] | None:
    """``lookupAttribute``: the fully qualified name, or the bare id when the domain is the driver."""
    attrs = device.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        return None
    v = attrs.get(name)
    if isinstance(v, Mapping):
        return v
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver:
        return None
    v = attrs.get(ident)
    return v if isinstance(v, Mapping) else None


SCALAR_KEYS = ("string", "int", "bool", "version")


def attribute_scalar(attr: Mapping[str, Any]) -> tuple[str, Any] | None:
    for k in SCALAR_KEYS:
        if attr.get(k) is not None:
            return k, attr[k]
    return None


class Constraint:
    def __init__(self, requests: Iterable[str], attribute: str) -> None:
        self.requests = set(requests)
        self.attribute = attribute

    def applies(self, request: str, sub: str | None) -> bool:
        if not self.requests:
            return True
        if sub is None:
            return request in self.requests
        return request in self.requests or f"{request}/{sub}" in self.requests

    def add(self, request: str, sub: str | None, device: Obj, did: DeviceID) -> bool:
        raise NotImplementedError

    def remove(self, request: str, sub: str | None) -> None:
        raise NotImplementedError


class MatchAttribute(Constraint):
    """``matchAttributeConstraint``: every device has the attribute, all with the same value."""

    def __init__(self, requests: Iterable[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.value: tuple[str, Any] | None = None
        self.num = 0

    def add(self, request: str, sub: str | None, device: Obj, did: DeviceID) -> bool:
        if not self.applies(request, sub):
            return True
        attr = lookup_attribute(device, did[0], self.attribute)
        if attr is None:
            return False
        if self.num == 0:
            self.value = attribute_scalar(attr)
            self.num = 1
            return True
        v = attribute_scalar(attr)
        if v is None or self.value is None or v != self.value:
            return False
        self.num += 1
        return True

    def remove(self, request: str, sub: str | None) -> None:
        if self.applies(request, sub):
            self.num -= 1


class DistinctAttribute(Constraint):
    """``distinctAttributeConstraint``: every device has the attribute, all values differ."""

    def __init__(self, requests: Iterable[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.values: list[tuple[str, Any] | None] = []

    def add(self, request: str, sub: str | None, device: Obj, did: DeviceID) -> bool:
        if not self.applies(request, sub):
            return True
        attr = lookup_attribute(device, did[0], self.attribute)
        if attr is None:
            return False
        v = attribute_scalar(attr)
        if v is None or v in self.values:
            return False
        self.values.append(v)
        return True

    def remove(self, request: str, sub: str | None) -> None:
        if self.applies(request, sub):
            self.values.pop()
