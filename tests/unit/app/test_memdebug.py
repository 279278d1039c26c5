"""``/debug/memory``: the collector's counters always, allocation sites only while tracemalloc traces,
growth measured from the marked snapshot, bad queries answered 400."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from py_scheduler.app.serving.memdebug import PATH, MemoryDebug, add_routes

_KEPT: list[Any] = []


def _grow(n: int) -> None:
    _KEPT.extend(bytearray(1000) for _ in range(n))  # this line is the growing site


@pytest.fixture
def tracing() -> Iterator[None]:
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start(1)
    try:
        yield
    finally:
        _KEPT.clear()
        if not was:
            tracemalloc.stop()


def test_without_tracing_only_the_process_and_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    if tracemalloc.is_tracing():
        pytest.skip("the test run itself traces (PYTHONTRACEMALLOC)")

    def walk_all() -> list[object]:  # a list of every tracked object: millions at 30000 Pods, per request
        raise AssertionError("the report walked every tracked object")

    monkeypatch.setattr(gc, "get_objects", walk_all)
    d = MemoryDebug().report()
    assert d["tracemalloc"] is None
    assert d["process"]["rss_bytes"] > 0
    g = d["gc"]
    assert g["thresholds"] == list(gc.get_threshold()) and len(g["counts"]) == 3
    assert len(g["collections"]) == 3 and "tracked" not in g and g["frozen"] == gc.get_freeze_count()


def test_growth_since_the_mark_names_the_growing_line(tracing: None) -> None:
    mem = MemoryDebug()
    first = mem.report(mark=True)["tracemalloc"]
    assert first["marked_at"] is not None and all(r["size_diff"] is None for r in first["top"])
    _grow(2000)
    top = mem.report(top=5)["tracemalloc"]["top"]
    assert "test_memdebug.py" in top[0]["site"][0], top[0]
    assert top[0]["size_diff"] >= 2000 * 1000 and top[0]["count_diff"] >= 2000
    # the mark stays: a second look without mark=1 still measures from it
    assert mem.report(top=1)["tracemalloc"]["top"][0]["size_diff"] >= 2000 * 1000
    # a new mark: nothing grew since
    mem.report(mark=True)
    assert all(abs(r["size_diff"]) < 100_000 for r in mem.report(top=5)["tracemalloc"]["top"])


def test_trace_turns_tracing_on_and_off() -> None:
    if tracemalloc.is_tracing():
        pytest.skip("the test run itself traces (PYTHONTRACEMALLOC)")
    mem = MemoryDebug()
    try:
        d = mem.report(trace=3, mark=True)["tracemalloc"]
        assert tracemalloc.is_tracing() and d["frames"] == 3 and d["marked_at"] is not None
        _grow(500)
        assert mem.report(top=1)["tracemalloc"]["top"][0]["size_diff"] >= 500 * 1000
        assert mem.report(trace=0)["tracemalloc"] is None and not tracemalloc.is_tracing()
        # the mark went with the traces: tracing again starts without one
        assert all(r["size_diff"] is None for r in mem.report(trace=1)["tracemalloc"]["top"])
    finally:
        _KEPT.clear()
        tracemalloc.stop()
    with pytest.raises(ValueError):
        mem.report(trace=101)


def test_gc_query_collects_cycles_first(tracing: None) -> None:
    class Node:
        ref: Any = None

    for _ in range(100):
        a, b = Node(), Node()
        a.ref, b.ref = b, a
    del a, b
    assert MemoryDebug().report(collect=True)["collected_now"] >= 200


async def test_served_as_json_and_bad_queries_are_400() -> None:
    app = web.Application()
    add_routes(app, MemoryDebug())
    async with TestClient(TestServer(app)) as c:
        r = await c.get(PATH, params={"top": "3", "group": "filename"})
        assert r.status == 200
        assert "gc" in await r.json()
        assert (await c.get(PATH, params={"group": "nope"})).status == 400
        assert (await c.get(PATH, params={"top": "x"})).status == 400
        assert (await c.get(PATH, params={"top": "-1"})).status == 400
        assert (await c.get(PATH, params={"trace": "-1"})).status == 400
