"""A test-only Permit plugin that waits, gang style: Pods labelled ``py-scheduler-e2e/gang: NAME``
are held at Permit until ``minMember`` Pods of that gang are reserved, then all are allowed at once.

Used by tests/unit/framework/test_binding_cycle.py (in process) and by the e2e gang test through the
registry (``python -m tests.gang_permit run ...`` registers it, then runs ``py-scheduler``), the way
an out-of-tree coscheduling plugin uses upstream's waiting-Pods map (``IterateOverWaitingPods``,
``WaitingPod.Allow``).

Args (pluginConfig): ``minMember`` (int, default 2), ``timeoutSeconds`` (float, default 30): how long
one Pod may wait for the rest of its gang before Permit rejects it.
"""

from __future__ import annotations

import sys
from typing import Any

from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status

NAME = "GangPermit"
GANG_LABEL = "py-scheduler-e2e/gang"


def _gang(pod: PodInfo) -> str:
    labels = (pod.pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(GANG_LABEL)
    return value if isinstance(value, str) else ""


class GangPermit:
    name = NAME

    def __init__(self, min_member: int = 2, timeout: float = 30.0, handle: Handle | None = None) -> None:
        self.handle = handle if handle is not None else Handle.detached()
        self.min_member = min_member
        self.timeout = timeout

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> GangPermit:
        n = args.get("minMember", 2)
        t = args.get("timeoutSeconds", 30)
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"minMember: must be a positive integer, got {n!r}")
        if not isinstance(t, int | float) or t <= 0:
            raise ConfigError(f"timeoutSeconds: must be positive, got {t!r}")
        return cls(n, float(t), handle)

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        gang = _gang(pod)
        if not gang:
            return Status.success(), 0.0
        assert self.handle.profile is not None  # filled in by the Framework
        waiting = [wp for wp in self.handle.profile.waiting_pods if _gang(wp.pod) == gang and wp.pod.uid != pod.uid]
        if len(waiting) + 1 >= self.min_member:
            for wp in waiting:
                wp.allow(NAME)
            return Status.success(), 0.0
        missing = self.min_member - len(waiting) - 1
        return Status(Code.WAIT, [f"waiting for {missing} more of gang {gang}"]), self.timeout


if __name__ == "__main__":
    from py_scheduler.plugins import registry

    registry.register(NAME, "tests.gang_permit:GangPermit")
    from py_scheduler.cli import main

    main()
    sys.exit(0)
