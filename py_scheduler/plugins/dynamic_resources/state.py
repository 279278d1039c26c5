"""DynamicResources' names, CycleState keys and per-cycle state (upstream:
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``: ``stateData``,
``getStateData``, ``statusUnschedulable``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, CycleState, Status
from py_scheduler.plugins.dynamic_resources.allocator import Allocator
from py_scheduler.plugins.dynamic_resources.claims import allocation_of
from py_scheduler.plugins.helpers.extended_resources import DeviceClassResolver
from py_scheduler.plugins.helpers.node_selector import NodeSelector

NAME = "DynamicResources"
STATE_KEY = NAME
NEEDS_API_ALLOCATION_KEY = "DynamicResources/needs-api-allocation"
"""CycleState key set to True by Reserve when ResourceClaim status must be written (allocation
and/or ``reservedFor``) before the Pod may be bound."""
ALLOCATIONS_KEY = "DynamicResources/allocations"
"""CycleState key: claim ``namespace/name`` -> AllocationResult JSON chosen by Reserve."""
NEEDS_API_DEALLOCATION_KEY = "DynamicResources/needs-api-deallocation"
"""CycleState key: claim ``namespace/name`` PostFilter would deallocate upstream."""

FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE = 8
"""``resourceapi.FirstAvailableDeviceRequestMaxSize``: Score adds ``8 - index`` per subrequest used."""
SPECIAL_CLAIM_NAME = "<extended-resources>"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
DRA_OPTIONAL_NODE_OPERATIONS = "DRAOptionalNodeOperations"


def unresolvable(reason: str) -> Status:
    """``statusUnschedulable``: every DRA rejection is UnschedulableAndUnresolvable."""
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [reason], NAME)


@dataclass(slots=True)
class DRAState:
    """``stateData``: the Pod's claims (user claims, then the special extended-resource claim),
    per-claim node selectors of existing allocations, the allocator, per-node Filter results.

    ``node_allocations[node]`` holds the AllocationResults of the claims without allocation, in
    claim order. ``clone()`` returns the same object, as upstream.
    """

    claims: list[Obj] = field(default_factory=list)
    num_user: int = 0
    available_on: list[NodeSelector | None] = field(default_factory=list)
    allocations: list[Obj | None] = field(default_factory=list)
    allocator: Allocator | None = None
    unavailable: set[int] = field(default_factory=set)
    node_allocations: dict[str, list[Obj]] = field(default_factory=dict)
    ext_resources: dict[str, int] = field(default_factory=dict)
    resolver: DeviceClassResolver | None = None
    pod_spec: Obj = field(default_factory=dict)
    reserved: set[int] = field(default_factory=set)
    """Claims whose reservation for the Pod PreBind wrote (Unreserve takes it back)."""
    node_ext: dict[str, tuple[Obj, list[dict[str, str]]]] = field(default_factory=dict)
    """Node -> the special claim with the requests that node needs and the containers' request
    mappings (``nodeAllocation.extendedResourceClaim`` / ``containerResourceRequestMappings``)."""
    created_ext: Obj | None = None
    """The extended-resource claim PreBind created in the API (Unreserve deletes it)."""
    plain: list[Obj] | None = None
    """Set by PreFilter when every claim is a user claim still to allocate (no extended-resource
    claim): the claims to allocate, one list object for every node, so Filter skips the per-claim
    checks that cannot fail for such claims and the allocator recognises the same list."""

    def clone(self) -> DRAState:
        return self

    def to_allocate(self) -> list[tuple[int, Obj]]:
        return [(i, c) for i, c in enumerate(self.claims) if allocation_of(c) is None]

    def extended_claim(self) -> Obj | None:
        return self.claims[self.num_user] if len(self.claims) > self.num_user else None


def state_not_found() -> Status:
    """``getStateData``'s error: PreFilter never wrote the plugin's state (it did not run for this Pod)."""
    return Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)


def state_data(state: CycleState) -> DRAState | None:
    """``getStateData``: the plugin's cycle state, or None when PreFilter did not write it."""
    try:
        s: DRAState = state.read(STATE_KEY)
    except KeyError:
        return None
    return s
