"""A watch that stays open but carries nothing (a blackholed connection) is re-opened after the idle
timeout, from the last resourceVersion and without a re-LIST; the timeout's environment override."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiohttp import web

from py_scheduler.app.client import reflector as reflector_mod
from py_scheduler.app.client.informers import ObjectStore
from py_scheduler.app.client.reflector import WATCH_IDLE_TIMEOUT, Reflector, watch_idle_timeout
from tests.unit.app.test_informers import pod
from tests.unit.app.test_reflector import POD, _kube, _serve


def test_idle_timeout_default_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS", raising=False)
    assert watch_idle_timeout() == WATCH_IDLE_TIMEOUT == 90.0
    monkeypatch.setenv("PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS", "7.5")
    assert watch_idle_timeout() == 7.5
    for bad in ("0", "-3", "soon", "inf", "nan"):
        monkeypatch.setenv("PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS", bad)
        assert watch_idle_timeout() == WATCH_IDLE_TIMEOUT, bad


async def test_a_silent_watch_is_reopened_from_its_resource_version_without_relisting() -> None:
    lists: list[str] = []
    watches: list[dict[str, str]] = []
    hold = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            lists.append(request.query.get("resourceVersion", ""))
            return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": "10"},
                                      "items": [pod("a", 5)]})
        watches.append(dict(request.query))
        resp = web.StreamResponse()
        await resp.prepare(request)
        if len(watches) == 1:  # one event, then silence: the connection stays open, nothing comes
            await resp.write(orjson.dumps({"type": "ADDED", "object": pod("b", 11)}) + b"\n")
            await hold.wait()
        else:
            await resp.write(orjson.dumps({"type": "ADDED", "object": pod("c", 12)}) + b"\n")
            await hold.wait()
        return resp

    runner, host = await _serve(handler)
    kube = _kube(host)
    store = ObjectStore()
    r = Reflector(kube, POD, store, lambda *_: None, min_watch_timeout=300, backoff_initial=0.01,
                  idle_timeout=0.5)
    stop = asyncio.Event()
    task = asyncio.ensure_future(r.run(stop))
    try:
        start = time.monotonic()
        while store.get("Pod", "default/c") is None:
            assert time.monotonic() - start < 10, (watches, lists)
            await asyncio.sleep(0.02)  # polling the condition, with the timeout above
        took = time.monotonic() - start
    finally:
        hold.set()
        stop.set()
        await asyncio.wait_for(task, timeout=5)
        await kube.close()
        await runner.cleanup()
    assert len(lists) == 1  # the initial LIST only: no re-list
    assert [w["resourceVersion"] for w in watches[:2]] == ["10", "11"]  # resumed after the event it saw
    assert int(watches[0]["timeoutSeconds"]) >= 300  # the server-side end stays long: only silence is cut short
    assert 0.5 <= took < 5


def test_reflector_takes_the_environment_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS", "12")
    r = Reflector(None, POD, ObjectStore(), lambda *_: None)  # type: ignore[arg-type]
    assert r.idle_timeout == 12.0
    assert reflector_mod.watch_idle_timeout() == 12.0
