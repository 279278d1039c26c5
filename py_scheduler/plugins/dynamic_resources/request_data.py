"""The allocator's records of one search: a request (an ``exactly`` request or a ``firstAvailable``
subrequest), a candidate device, a request's data and one device result (upstream:
``allocator_incubating.go``'s ``requestAccessor``, ``deviceWithID``, ``requestData``,
``internalDeviceResult``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.dynamic_resources.capacity import request_amounts
from py_scheduler.plugins.dynamic_resources.common import MODE_EXACT_COUNT, DeviceID
from py_scheduler.plugins.dynamic_resources.pools import Pool, Slice


# -- requests ------------------------------------------------------------------------------------
@dataclass(slots=True)
class Request:
    """``requestAccessor`` over an ``exactly`` request or a ``firstAvailable`` subrequest."""

    name: str
    class_name: str
    mode: str
    count: int
    admin_access: bool
    has_admin_access: bool
    selectors: list[Any]
    tolerations: list[Any]
    capacity: dict[str, Decimal] | None
    derived: Any

    @classmethod
    def from_exact(cls, name: str, ex: Mapping[str, Any]) -> Request:
        return cls._from(name, ex, admin=ex.get("adminAccess"))

    @classmethod
    def from_sub(cls, sub: Mapping[str, Any]) -> Request:
        return cls._from(str(sub.get("name") or ""), sub, admin=None)

    @classmethod
    def _from(cls, name: str, m: Mapping[str, Any], admin: object) -> Request:
        count = m.get("count")
        return cls(
            name=name,
            class_name=str(m.get("deviceClassName") or ""),
            # The API server defaults allocationMode to ExactCount and count to 1.
            mode=str(m.get("allocationMode") or MODE_EXACT_COUNT),
            count=count if isinstance(count, int) and not isinstance(count, bool) else 1,
            admin_access=admin is True,
            has_admin_access=admin is not None,
            selectors=list(m.get("selectors") or []),
            tolerations=[t for t in m.get("tolerations") or [] if isinstance(t, Mapping)],
            capacity=request_amounts(m.get("capacity")),
            derived=m.get("derivedAttributes"),
        )


@dataclass(slots=True)
class Candidate:
    id: DeviceID
    device: Obj
    slice: Slice
    pool: Pool


@dataclass(slots=True)
class RequestData:
    request: Request
    parent: str | None
    device_class: Obj | None
    num_devices: int = 0
    selected_sub: int = 0
    all_devices: list[Candidate] = field(default_factory=list)

    def request_name(self) -> str:
        return f"{self.parent}/{self.request.name}" if self.parent is not None else self.request.name


@dataclass(slots=True)
class Result:
    request: str
    parent: str | None
    id: DeviceID
    device: Obj
    slice: Slice
    tolerations: list[Any]
    admin_access: bool = False
    share_id: str | None = None
    consumed_capacity: dict[str, Decimal] | None = None

    def request_name(self) -> str:
        return f"{self.parent}/{self.request}" if self.parent is not None else self.request
