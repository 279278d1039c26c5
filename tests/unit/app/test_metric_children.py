"""Memoized labelled children (``py_scheduler.app.telemetry.metrics.Children``) report into the same samples as
``metric.labels(...)``: the live loop's, the queue recorder's and the framework observer's values
are unchanged by the memo."""

from __future__ import annotations

from py_scheduler.app.scheduling.loop import QueueMetricsRecorder
from py_scheduler.app.telemetry import metrics as m


def _value(name: str, labels: dict[str, str]) -> float:
    v = m.REGISTRY.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_children_are_prometheus_own_and_counted_once() -> None:
    children = m.Children(m.SCHEDULE_ATTEMPTS)
    labels = {"result": "scheduled", "profile": "memo-test"}
    before = _value("scheduler_schedule_attempts_total", labels)
    assert children("scheduled", "memo-test") is m.SCHEDULE_ATTEMPTS.labels("scheduled", "memo-test")
    children("scheduled", "memo-test").inc()
    m.SCHEDULE_ATTEMPTS.labels("scheduled", "memo-test").inc()
    children("scheduled", "memo-test").inc(2)
    assert _value("scheduler_schedule_attempts_total", labels) == before + 4


def test_queue_recorder_and_observer_values() -> None:
    rec = QueueMetricsRecorder()
    labels = {"queue": "active", "event": "MemoTestEvent"}
    before = _value("scheduler_queue_incoming_pods_total", labels)
    rec.incoming("active", "MemoTestEvent")
    rec.incoming("active", "MemoTestEvent")
    assert _value("scheduler_queue_incoming_pods_total", labels) == before + 2
    rec.pending(3, 2, 1, 7)
    assert [_value("scheduler_pending_pods", {"queue": q}) for q in ("active", "backoff", "unschedulable", "gated")] \
        == [3, 2, 1, 7]
    rec.pending(3, 5, 1, 0)  # only the moved counts are written again
    assert [_value("scheduler_pending_pods", {"queue": q}) for q in ("active", "backoff", "unschedulable", "gated")] \
        == [3, 5, 1, 0]
    rec.pending(0, 0, 0, 0)
    assert [_value("scheduler_pending_pods", {"queue": q}) for q in ("active", "backoff", "unschedulable", "gated")] \
        == [0, 0, 0, 0]
    ub = {"plugin": "MemoPlugin", "profile": "memo-test"}
    base = _value("scheduler_unschedulable_pods", ub)
    rec.unschedulable_reason("MemoPlugin", "memo-test", 1)
    rec.unschedulable_reason("MemoPlugin", "memo-test", -1)
    rec.unschedulable_reason("MemoPlugin", "memo-test", 1)
    assert _value("scheduler_unschedulable_pods", ub) == base + 1

    observe = m.framework_observer("memo-test")
    pl = {"plugin": "MemoPlugin", "extension_point": "Filter", "status": "Success"}
    ep = {"extension_point": "Filter", "status": "Success", "profile": "memo-test"}
    n_pl = _value("scheduler_plugin_execution_duration_seconds_count", pl)
    n_ep = _value("scheduler_framework_extension_point_duration_seconds_count", ep)
    observe("Filter", "MemoPlugin", "Success", 0.001)
    observe("Filter", "", "Success", 0.002)
    observe("Filter", "", "Success", 0.002)
    assert _value("scheduler_plugin_execution_duration_seconds_count", pl) == n_pl + 1
    assert _value("scheduler_framework_extension_point_duration_seconds_count", ep) == n_ep + 2
    assert _value("scheduler_framework_extension_point_duration_seconds_sum", ep) >= 0.004 - 1e-9
