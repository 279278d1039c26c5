"""The scheduler core: one scheduling cycle, one pod group cycle and the Reserve -> assume -> revert step,
shared by the live loop (``py_scheduler.app.scheduling.loop``), the offline engine (``explain``, ``simulate``) and
the parity runner, so they agree by construction.

Upstream: ``pkg/scheduler/schedule_one.go`` and ``schedule_one_podgroup.go``. Pure of I/O: the cluster
is reached through the ports of :mod:`py_scheduler.core.ports` (the live cache or an offline snapshot,
the queue's nominations); what a cycle decided comes back as data the caller writes (Bindings,
conditions, events) or prints.
"""
