"""The metrics deploy/monitoring's alerts and dashboard need beyond kube-scheduler's scheduling metrics:
``py_scheduler_watch_restarts_total{kind,reason}`` (the reflector), ``leader_election_master_status{name}``
(client-go's leader election gauge) and the DRA device gauges, read at scrape time."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from py_scheduler.app.client.informers import ObjectStore
from py_scheduler.app.client.wire import KubeError
from py_scheduler.app.telemetry import metrics as m
from tests.unit.app.fakes import FakeKube
from tests.unit.app.test_reflector import PODS, Recorder, _reflector, _running, _stop, pod, wait_until


def _restarts(reason: str) -> float:
    return m.REGISTRY.get_sample_value("py_scheduler_watch_restarts_total", {"kind": "Pod", "reason": reason}) or 0.0


async def test_watch_restarts_are_counted_by_reason() -> None:
    before = {r: _restarts(r) for r in ("closed", "error", "expired")}
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    rec = Recorder()
    r = _reflector(kube, rec)
    stop, task = await _running(r)
    try:
        feed = kube.watch_feed(PODS)
        feed.put_nowait({"type": "MODIFIED", "object": pod("a", 6)})
        feed.put_nowait(None)  # the server ends the watch after an event: routine
        await wait_until(lambda: len(kube.watch_calls) == 2)
        feed.put_nowait(KubeError(0, "ClientPayloadError", "connection reset", "WATCH", PODS))
        await wait_until(lambda: len(kube.watch_calls) == 3)
        kube.lists[PODS] = ([pod("a", 30)], "40")
        feed.put_nowait(KubeError(410, "Expired", "too old resource version: 6 (35)", "WATCH", PODS))
        await wait_until(lambda: len(kube.watch_calls) == 4)
    finally:
        await _stop(stop, task)
    assert {r: _restarts(r) - before[r] for r in before} == {"closed": 1, "error": 1, "expired": 1}


def _exposed(collector: Any) -> str:
    reg = CollectorRegistry()
    reg.register(collector)
    return generate_latest(reg).decode()


def test_leader_status_follows_the_elector() -> None:
    status = m.LeaderStatus()
    assert "# TYPE leader_election_master_status gauge" in _exposed(status)  # named before anything is tracked
    leading = [False]
    status.track("py-scheduler", lambda: leading[0])
    assert 'leader_election_master_status{name="py-scheduler"} 0.0' in _exposed(status)
    leading[0] = True
    assert 'leader_election_master_status{name="py-scheduler"} 1.0' in _exposed(status)


def _slice(driver: str, pool: str, gen: int, n: int) -> dict[str, Any]:
    return {"spec": {"driver": driver, "pool": {"name": pool, "generation": gen, "resourceSliceCount": 1},
                     "devices": [{"name": f"d{i}"} for i in range(n)]}}


def _claim(*drivers: str) -> dict[str, Any]:
    return {"status": {"allocation": {"devices": {"results": [
        {"driver": d, "pool": "p", "device": f"d{i}", "request": "r"} for i, d in enumerate(drivers)]}}}}


def test_dra_device_counts_take_the_newest_pool_generation_and_allocated_results() -> None:
    slices = [_slice("gpu.example.com", "n1", 1, 8), _slice("gpu.example.com", "n1", 2, 4),
              _slice("gpu.example.com", "n2", 1, 4), _slice("nic.example.com", "n1", 1, 2),
              {"spec": "garbage"}, {"spec": {"pool": {"name": "x", "generation": "1"}}}, "not a dict"]
    claims = [_claim("gpu.example.com", "gpu.example.com"), _claim("nic.example.com"), {"status": {}},
              {"status": {"allocation": {"devices": {"results": "bad"}}}}]
    assert m.dra_device_counts(slices, claims) == {"gpu.example.com": (8, 2), "nic.example.com": (2, 1)}


def test_dra_devices_are_read_from_the_store_at_scrape_time() -> None:
    store = ObjectStore()
    gauges = m.DRADevices()
    text = _exposed(gauges)
    assert "# TYPE py_scheduler_dra_devices gauge" in text and "# TYPE py_scheduler_dra_devices_allocated gauge" in text
    objs: dict[str, list[Any]] = {"ResourceSlice": [_slice("gpu.example.com", "n1", 1, 8)], "ResourceClaim": []}
    gauges.track(lambda kind: objs.get(kind, store.list_kind(kind)))
    text = _exposed(gauges)
    assert 'py_scheduler_dra_devices{driver="gpu.example.com"} 8.0' in text
    assert 'py_scheduler_dra_devices_allocated{driver="gpu.example.com"} 0.0' in text
    objs["ResourceClaim"].append(_claim("gpu.example.com"))
    assert 'py_scheduler_dra_devices_allocated{driver="gpu.example.com"} 1.0' in _exposed(gauges)
    gauges.track(lambda kind: 1 / 0)  # type: ignore[arg-type,return-value]  # a broken store never fails a scrape
    assert "py_scheduler_dra_devices{" not in _exposed(gauges)


def test_the_live_registry_exposes_them() -> None:
    text = generate_latest(m.REGISTRY).decode()
    for name in ("leader_election_master_status", "py_scheduler_dra_devices", "py_scheduler_dra_devices_allocated",
                 "py_scheduler_watch_restarts_total"):
        assert f"# TYPE {name} " in text, name
