"""DynamicResources (DRA): the plugin lives in :mod:`.plugin`; this package exports what the plugin
registry and the callers of its CycleState keys use."""

from py_scheduler.plugins.dynamic_resources.binding import simulated_pre_bind
from py_scheduler.plugins.dynamic_resources.plugin import DynamicResources
from py_scheduler.plugins.dynamic_resources.state import (
    ALLOCATIONS_KEY,
    NAME,
    NEEDS_API_ALLOCATION_KEY,
    NEEDS_API_DEALLOCATION_KEY,
    STATE_KEY,
    DRAState,
)

__all__ = [
    "ALLOCATIONS_KEY",
    "NAME",
    "NEEDS_API_ALLOCATION_KEY",
    "NEEDS_API_DEALLOCATION_KEY",
    "STATE_KEY",
    "DRAState",
    "DynamicResources",
    "simulated_pre_bind",
]
