"""Binder (condition patch, truncation, event series), the API adapter's retry/error mapping and
rate limiter, and the --v logging setup."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from py_scheduler.app.client.kube import Kube, RateLimiter
from py_scheduler.app.client.wire import Conflict, KubeError, NotFound
from py_scheduler.app.scheduling import binder as binder_mod
from py_scheduler.app.scheduling.binder import Binder, pod_condition_patch, truncate_message
from py_scheduler.app.telemetry.klog import setup_logging
from tests.unit.app.fakes import FakeKube

# -- binder ----------------------------------------------------------------------------------------



pytestmark = pytest.mark.usefixtures("call_api_on_stub")  # the stub API below answers the requests

def test_condition_patch_sets_and_skips_unchanged() -> None:
    pod: dict[str, Any] = {"metadata": {"generation": 3}, "status": {}}
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
    patch = pod_condition_patch(pod, cond, None)
    assert patch is not None
    c = patch["status"]["conditions"][0]
    assert c["lastProbeTime"] is None and c["observedGeneration"] == 3 and c["lastTransitionTime"]
    assert "nominatedNodeName" not in patch["status"]
    pod["status"]["conditions"] = [dict(c)]
    assert pod_condition_patch(pod, cond, None) is None
    changed = pod_condition_patch(pod, {**cond, "message": "0/2 nodes"}, None)
    assert changed is not None
    assert changed["status"]["conditions"][0]["lastTransitionTime"] == c["lastTransitionTime"]


def test_condition_patch_nominated_node() -> None:
    pod: dict[str, Any] = {"metadata": {}, "status": {"nominatedNodeName": "n1"}}
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
    pod["status"]["conditions"] = [{**cond, "lastProbeTime": None, "lastTransitionTime": "t"}]
    assert pod_condition_patch(pod, cond, "n1") is None
    assert pod_condition_patch(pod, cond, "n2") == {"status": {"nominatedNodeName": "n2"}}
    assert pod_condition_patch(pod, cond, "") == {"status": {"nominatedNodeName": None}}


def test_truncate_message() -> None:
    assert truncate_message("x" * 1024) == "x" * 1024
    cut = truncate_message("y" * 2000)
    assert len(cut) == 1024 and cut.endswith(" ...")


def _pod(rv: str = "7") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": rv}}


async def test_repeated_event_becomes_a_series_written_twice_then_counted_here() -> None:
    """client-go's events broadcaster: the same Event (its note aside) is created, then PATCHed once
    to a series of 2; later repeats are only counted, so a Pod retried unchanged costs two writes."""
    kube = FakeKube()
    clock = [0.0]
    b = Binder(kube, "me", now=lambda: clock[0])  # type: ignore[arg-type]
    for i in range(50):
        await b.failed_scheduling(_pod(), f"0/{1 + i // 25} nodes are available", "py-scheduler")
    assert kube.calls == [("event", "FailedScheduling"), ("event-series", kube.events[0]["metadata"]["name"])]
    assert len(kube.events) == 1 and kube.events[0]["series"]["count"] == 2
    assert kube.events[0]["note"] == "0/1 nodes are available"  # as upstream: the first note stays
    assert kube.events[0]["metadata"]["name"].startswith("p.")
    # the Pod changed (a new resourceVersion): another Event
    await b.failed_scheduling(_pod("8"), "0/2 nodes are available", "py-scheduler")
    assert len(kube.events) == 2 and "series" not in kube.events[1]


async def test_series_counts_are_written_when_they_finish_and_on_refresh() -> None:
    kube = FakeKube()
    clock = [0.0]
    b = Binder(kube, "me", now=lambda: clock[0])  # type: ignore[arg-type]
    for _ in range(5):
        await b.failed_scheduling(_pod(), "no", "py-scheduler")
    await b.scheduled(_pod("9"), "n1", "py-scheduler")  # a single Event
    clock[0] = 100.0
    await b.failed_scheduling(_pod(), "no", "py-scheduler")  # seen again: still open
    await b.flush_series(refresh=True)  # refreshExistingEventSeries: every open series written
    assert kube.events[0]["series"]["count"] == 6 and len(b._series) == 2
    clock[0] = 100.0 + binder_mod.EVENT_SERIES_FINISH
    await b.failed_scheduling(_pod(), "no", "py-scheduler")
    await b.flush_series()  # not unseen for 6 minutes yet; the single Event is old enough to forget
    assert kube.events[0]["series"]["count"] == 6 and len(b._series) == 1
    clock[0] += binder_mod.EVENT_SERIES_FINISH
    await b.flush_series()  # finishSeries: the final count, then forgotten
    assert kube.events[0]["series"]["count"] == 7 and not b._series
    await b.failed_scheduling(_pod(), "no", "py-scheduler")  # a new Event
    assert len(kube.events) == 3


async def test_a_series_whose_event_expired_is_created_again_with_its_count() -> None:
    kube = FakeKube()
    b = Binder(kube, "me")  # type: ignore[arg-type]
    await b.failed_scheduling(_pod(), "no", "py-scheduler")
    name = kube.events[0]["metadata"]["name"]
    kube.events.clear()  # the Event's TTL ran out
    await b.failed_scheduling(_pod(), "no", "py-scheduler")
    assert [(e["metadata"]["name"], e["series"]["count"]) for e in kube.events] == [(name, 2)]


async def _a_finished_series_of_three(kube: FakeKube) -> tuple[Binder, list[float]]:
    """A Binder on ``kube`` whose one series was seen 3 times and is now 6 minutes unseen (its clock)."""
    clock = [0.0]
    b = Binder(kube, "me", now=lambda: clock[0])  # type: ignore[arg-type]
    for _ in range(3):
        await b.failed_scheduling(_pod(), "no", "py-scheduler")
    clock[0] = binder_mod.EVENT_SERIES_FINISH
    return b, clock


async def test_a_repeat_while_a_series_is_finished_is_not_lost() -> None:
    import asyncio

    class Held(FakeKube):
        gate: asyncio.Event | None = None

        async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
            if self.gate is not None:
                await self.gate.wait()
            return await super().patch_event(namespace, name, patch)

    kube = Held()
    b, clock = await _a_finished_series_of_three(kube)
    kube.gate = asyncio.Event()
    flushing = asyncio.create_task(b.flush_series())
    await asyncio.sleep(0)
    await b.failed_scheduling(_pod(), "no", "py-scheduler")  # the 4th, while the 3rd is being written
    kube.gate.set()
    await flushing
    assert kube.events[0]["series"]["count"] == 3 and len(b._series) == 1  # kept: its 4th is not written yet
    clock[0] *= 2
    await b.flush_series()
    assert kube.events[0]["series"]["count"] == 4 and not b._series


async def test_the_bound_drops_single_events_first_and_writes_a_dropped_series_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binder_mod, "EVENT_SERIES_MAX", 4)
    kube = FakeKube()
    b = Binder(kube, "me")  # type: ignore[arg-type]
    for _ in range(10):
        await b.failed_scheduling(_pod(), "no", "py-scheduler")
    for i in range(10):  # Scheduled events of other Pods: single ones, dropped first
        await b.scheduled(_pod(str(100 + i)), "n1", "py-scheduler")
    assert len(b._series) == 4 and b._series[next(iter(b._series))].count == 10
    for rv in ("a", "b", "c", "d"):  # four more series: the first, oldest, goes with its count written
        for _ in range(2):
            await b.failed_scheduling(_pod(rv), "no", "py-scheduler")
    assert kube.events[0]["series"]["count"] == 10
    assert len(b._series) == 4 and all(ev.count == 2 for ev in b._series.values())


async def test_a_refused_series_write_is_given_up() -> None:
    class Refusing(FakeKube):
        async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
            self.calls.append(("event-series", name))
            raise KubeError(422, "Invalid", "no")

    b, _ = await _a_finished_series_of_three(Refusing())
    kube = b.kube
    assert isinstance(kube, Refusing)
    await b.flush_series()
    assert not b._series and len(kube.calls) == 3  # create, the refused PATCH, the refused final one


class _Unanswered(FakeKube):
    """Event creates get no answer (a connection error) ``failures`` times, then go through."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("event-create", event["metadata"]["name"]))
        if self.failures > 0:
            self.failures -= 1
            raise KubeError(0, "ConnectionError", "connection refused")
        return await super().create_event(namespace, event)


async def _calls_settle(kube: FakeKube, b: Binder) -> None:
    import asyncio
    async with asyncio.timeout(10):
        while b._retrying:
            await asyncio.sleep(0.01)


async def test_an_unanswered_event_write_is_tried_again_until_answered() -> None:
    """attemptRecording: a write that got no answer is tried again (10 s apart upstream; here 10 ms)
    in the background, not dropped until the next occurrence."""
    kube = _Unanswered(failures=3)
    b = Binder(kube, "me")  # type: ignore[arg-type]
    b.retry_sleep = 0.01
    await b.scheduled(_pod(), "n1", "py-scheduler")
    assert not kube.events and b._retrying  # the caller is not held up by the retries
    await _calls_settle(kube, b)
    assert len(kube.events) == 1 and [c[0] for c in kube.calls].count("event-create") == 4


async def test_an_event_write_is_given_up_after_twelve_tries() -> None:
    kube = _Unanswered(failures=100)
    b = Binder(kube, "me")  # type: ignore[arg-type]
    b.retry_sleep = 0.001
    await b.failed_scheduling(_pod(), "no", "py-scheduler")
    await _calls_settle(kube, b)
    assert not kube.events and len(kube.calls) == binder_mod.EVENT_MAX_TRIES == 12  # then given up


async def test_the_series_task_stops_the_retries_when_it_stops() -> None:
    import asyncio
    kube = _Unanswered(failures=100)
    b = Binder(kube, "me")  # type: ignore[arg-type]
    b.retry_sleep = 3600.0
    await b.scheduled(_pod(), "n1", "py-scheduler")
    (task,) = b._retrying.values()
    stop = asyncio.Event()
    series = asyncio.create_task(b.run_series(stop))
    stop.set()
    await asyncio.wait_for(series, 10)
    await asyncio.wait([task], timeout=10)
    assert task.cancelled() and not b._retrying


async def test_a_stalled_event_write_does_not_hold_back_the_pod_condition() -> None:
    """kube-scheduler's recorder only queues an Event: the PodScheduled condition is written
    whatever the Event client waits on (its rate limiter, a slow server)."""
    import asyncio

    from py_scheduler.app.scheduling import loop as loop_mod

    class Slow(FakeKube):
        gate = asyncio.Event()

        async def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
            await self.gate.wait()
            return await super().create_event(namespace, event)

    kube = Slow()
    host = type("Host", (), {"binder": Binder(kube, "me")})()  # type: ignore[arg-type]
    fw = type("Fw", (), {"profile_name": "py-scheduler"})()
    report = asyncio.create_task(loop_mod.SchedulingLoop._report_failure(
        host, fw, _pod(), "Unschedulable", "0/1 nodes are available", None))  # type: ignore[arg-type]
    async with asyncio.timeout(10):
        while not kube.status_patches:
            await asyncio.sleep(0.01)
    assert not report.done() and not kube.events
    Slow.gate.set()
    await asyncio.wait_for(report, 10)
    assert len(kube.events) == 1


async def test_event_failure_is_not_raised() -> None:
    class Broken(FakeKube):
        async def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
            raise KubeError(403, "Forbidden", "no")

    b = Binder(Broken(), "me")  # type: ignore[arg-type]
    await b.scheduled({"metadata": {"name": "p", "namespace": "d"}}, "n", "py-scheduler")


# -- kube adapter ----------------------------------------------------------------------------------


class Resp:
    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self._body = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.headers = headers or {}

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class StubApi:
    def __init__(self, responses: list[Any]) -> None:
        self.responses = responses
        self.calls: list[tuple[str, str, Any]] = []

    async def call_api(self, path: str, method: str, **kw: Any) -> Resp:
        self.calls.append((method, path, kw.get("header_params", {}).get("Content-Type")))
        r = self.responses.pop(0)
        if isinstance(r, BaseException):
            raise r
        assert isinstance(r, Resp)
        return r


def kube_with(responses: list[Any], retries: int = 3) -> tuple[Kube, StubApi]:
    api = StubApi(responses)
    k = Kube(api, qps=0, burst=1, retries=retries)  # type: ignore[arg-type]
    k.initial_backoff = 0.0
    return k, api


async def test_retries_5xx_and_connection_errors_then_succeeds() -> None:
    import aiohttp

    k, api = kube_with([Resp(503, {"reason": "ServiceUnavailable"}), aiohttp.ClientConnectionError("reset"),
                        Resp(201, {"kind": "Binding"})])
    await k.bind("default", "p", "u", "n1")
    assert [c[0] for c in api.calls] == ["POST"] * 3
    assert api.calls[0][1] == "/api/v1/namespaces/default/pods/p/binding"


async def test_conflict_and_not_found_are_not_retried() -> None:
    k, api = kube_with([Resp(409, {"reason": "Conflict", "message": "pod p is already assigned to node n2"})])
    with pytest.raises(Conflict) as ei:
        await k.bind("default", "p", "u", "n1")
    assert ei.value.status == 409 and "already assigned" in ei.value.message
    assert len(api.calls) == 1
    k, api = kube_with([Resp(404, {"reason": "NotFound", "message": "pods \"p\" not found"})])
    assert await k.get_pod("default", "p") is None
    k, api = kube_with([Resp(404, {"reason": "NotFound"})])
    with pytest.raises(NotFound):
        await k.patch_pod_status("default", "p", {"status": {}})


async def test_retry_waits_double_and_honour_retry_after() -> None:
    """tenacity drives the retries: 0.2 s doubling per ordinary failure (capped at 5 s); a 429's
    Retry-After waits exactly that, outside the ordinary budget and without advancing the doubling."""
    k, api = kube_with([Resp(503, {}), Resp(429, {}, {"Retry-After": "3"}), Resp(500, {}), Resp(500, {}),
                        Resp(500, {}), Resp(500, {}), Resp(201, {})], retries=6)
    k.initial_backoff = 0.2
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    k.retry_sleep = record  # type: ignore[method-assign]
    await k.bind("default", "p", "u", "n1")
    assert waits == [0.2, 3.0, 0.4, 0.8, 1.6, 3.2] and len(api.calls) == 7


async def test_gives_up_after_retries() -> None:
    k, api = kube_with([Resp(500, b"oops")] * 3, retries=2)
    with pytest.raises(KubeError) as ei:
        await k.request("GET", "/api/v1/nodes/n1")
    assert ei.value.status == 500 and len(api.calls) == 3
    # a write answered 500 without Retry-After is not resent (client-go's checkWait; issue 31)
    k, api = kube_with([Resp(500, b"oops")] * 3, retries=2)
    with pytest.raises(KubeError) as ei:
        await k.patch_event("default", "e", {"series": {"count": 2}})
    assert ei.value.status == 500 and len(api.calls) == 1
    assert api.calls[0][2] == "application/merge-patch+json"


async def test_list_pages_and_fills_kind() -> None:
    k, _api = kube_with([
        Resp(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"continue": "c1", "resourceVersion": "7"},
                   "items": [{"metadata": {"name": "a"}}]}),
        Resp(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "8"},
                   "items": [{"metadata": {"name": "b"}}]}),
    ])
    pages = [(page, rv) async for page, rv in k.list_pages("/api/v1/nodes")]
    items, rv = [i for page, _ in pages for i in page], pages[-1][1]
    # The list's resourceVersion is the first page's (client-go's pager; a real paged LIST repeats it
    # on every page - this fake does not, to tell them apart).
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and rv == "7"
    assert all(i["kind"] == "Node" and i["apiVersion"] == "v1" for i in items)


async def test_rate_limiter_burst_then_rate() -> None:
    class Clock:
        t = 0.0

        def __call__(self) -> float:
            return self.t

    clock = Clock()
    rl = RateLimiter(qps=10, burst=2, now=clock)
    await rl.acquire()
    await rl.acquire()
    assert rl._tokens < 1
    clock.t += 0.1  # one token refilled
    await rl.acquire()
    assert rl._tokens < 1


# -- logging ---------------------------------------------------------------------------------------


def test_verbosity_gates_score_lines_and_redacts_tokens() -> None:
    buf = io.StringIO()
    setup_logging(4, buf)
    logging.getLogger("py_scheduler.framework").debug("Plugin scored node for pod pod=a")
    logging.getLogger("py_scheduler.loop").debug("Attempting to schedule pod pod=a")
    logging.getLogger("kopf.objects").info("Handler succeeded")
    logging.getLogger("py_scheduler.kube").warning("header Authorization: Bearer abc.def-123")
    out = buf.getvalue()
    assert "Plugin scored" not in out and "Attempting to schedule" in out and "Handler succeeded" not in out
    assert "abc.def-123" not in out and "Bearer <redacted>" in out
    buf2 = io.StringIO()
    setup_logging(10, buf2)
    logging.getLogger("py_scheduler.framework").debug("Calculated node's final score for pod pod=a node=n score=1")
    assert "Calculated node's final score" in buf2.getvalue()
    setup_logging(2, io.StringIO())
    assert not logging.getLogger("py_scheduler.loop").isEnabledFor(logging.DEBUG)


def test_v2_lines_follow_verbosity() -> None:
    """klog ``V(2)``: per-Pod binding lines are written at ``--v=2`` and above only."""
    import io

    from py_scheduler.app.telemetry.klog import setup_logging, v

    try:
        setup_logging(1, io.StringIO())
        assert not v(2) and v(1)
        setup_logging(2, io.StringIO())
        assert v(2) and not v(3)
    finally:
        setup_logging(2, io.StringIO())


async def test_retry_after_is_honoured_outside_the_retry_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """client-go's withRetry: a 429 (or 5xx) with Retry-After waits exactly that long and is retried
    up to 10 times without spending the normal retries; without the header it is an ordinary retry."""
    import asyncio as aio

    slept: list[float] = []
    real_sleep = aio.sleep

    async def fake_sleep(s: float) -> None:
        slept.append(s)
        await real_sleep(0)

    monkeypatch.setattr("py_scheduler.app.client.kube.asyncio.sleep", fake_sleep)
    from py_scheduler.app.telemetry.metrics import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"host": "", **labels}) or 0.0

    before = (sample("rest_client_requests_total", code="429", method="POST"),
              sample("rest_client_request_retries_total", code="429", verb="POST"),
              sample("rest_client_requests_total", code="201", method="POST"))
    throttled = Resp(429, {"reason": "TooManyRequests"}, {"Retry-After": "3", "X-Kubernetes-PF-FlowSchema-UID": "u"})
    k, api = kube_with([throttled] * 6 + [Resp(503, b"", {"Retry-After": "1"}), Resp(201, {})], retries=0)
    await k.bind("default", "p", "u", "n1")
    assert len(api.calls) == 8 and slept == [3.0] * 6 + [1.0] and k.throttled == 7
    # client-go's rest_client_* metrics count each attempt and each retry
    assert (sample("rest_client_requests_total", code="429", method="POST"),
            sample("rest_client_request_retries_total", code="429", verb="POST"),
            sample("rest_client_requests_total", code="201", method="POST")) == (before[0] + 6, before[1] + 6,
                                                                                 before[2] + 1)
    # 11 throttled answers: the 11th is given up
    slept.clear()
    k, api = kube_with([throttled] * 11, retries=5)
    with pytest.raises(KubeError) as ei:
        await k.bind("default", "p", "u", "n1")
    assert ei.value.status == 429 and len(api.calls) == 11 and slept == [3.0] * 10
    # no header: the ordinary backoff and budget
    slept.clear()
    k, api = kube_with([Resp(429, {}), Resp(429, {})], retries=1)
    with pytest.raises(KubeError):
        await k.bind("default", "p", "u", "n1")
    assert len(api.calls) == 2 and slept == [0.0]
    # the Lease calls never wait on the server's clock: the elector retries on its own
    k, api = kube_with([throttled])
    with pytest.raises(KubeError):
        await k.update_lease("kube-system", "l", {})
    assert len(api.calls) == 1


@pytest.mark.parametrize(("value", "want"), [("3", 3), (" 0 ", 0), ("600", 60), ("-1", None), ("", None),
                                              (None, None), ("Wed, 21 Oct 2015 07:28:00 GMT", None)])
def test_retry_after_seconds(value: str | None, want: int | None) -> None:
    from py_scheduler.app.client.kube import retry_after_seconds

    assert retry_after_seconds(value) == want


async def test_a_low_priority_request_waits_behind_every_other() -> None:
    """The PodScheduled writes of failed attempts wait (in their order) until no other caller has the
    next token reserved: a Binding that asks after five of them queued is served first, and the
    bucket's rate holds for all."""
    import asyncio

    rl = RateLimiter(qps=40, burst=1)
    await rl.acquire()  # the bucket is empty
    order: list[str] = []

    async def take(name: str, low: bool) -> None:
        await (rl.acquire(low=True) if low else rl.acquire())
        order.append(name)

    lows = [asyncio.create_task(take(f"status-{i}", True)) for i in range(5)]
    await asyncio.sleep(0.005)
    start = asyncio.get_running_loop().time()
    await asyncio.wait_for(asyncio.gather(take("binding", False), *lows), 10)
    assert order == ["binding", *[f"status-{i}" for i in range(5)]]
    assert asyncio.get_running_loop().time() - start >= 5 / 40  # six tokens at 40/s after the first


async def test_condition_writes_of_one_pod_are_coalesced_to_the_latest() -> None:
    """While a Pod's PodScheduled write is waiting, newer ones replace each other: ten failures in a
    row cost two writes (the first, then the latest), and each call returns without waiting."""
    import asyncio

    class Slow(FakeKube):
        gate = asyncio.Event()

        async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any],
                                   low_priority: bool = False) -> dict[str, Any]:
            assert low_priority
            await self.gate.wait()
            return await super().patch_pod_status(namespace, name, patch)

    kube = Slow()
    b = Binder(kube, "me")  # type: ignore[arg-type]
    first = asyncio.create_task(b.update_pod_condition(_pod(), "Unschedulable", "0/1 nodes: 0"))
    await asyncio.sleep(0)
    for i in range(1, 10):
        await asyncio.wait_for(b.update_pod_condition(_pod(), "Unschedulable", f"0/1 nodes: {i}"), 1)
    Slow.gate.set()
    await asyncio.wait_for(first, 10)
    messages = [p["status"]["conditions"][0]["message"] for _, p in kube.status_patches]
    assert messages == ["0/1 nodes: 0", "0/1 nodes: 9"]


async def test_a_waiting_condition_write_is_dropped_when_the_pod_is_tried_again() -> None:
    """The review's sequence: a failed attempt's PodScheduled=False waits for a token; the Pod is tried
    again (the loop drops the write) and bound. The stale write is never sent, so it cannot mark the
    bound Pod unschedulable; the next failure's write goes out as usual."""
    import asyncio

    from py_scheduler.app.client.ratelimit import RateLimiter

    class Limited(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.bucket = RateLimiter(qps=20, burst=1)

        async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any],
                                   low_priority: bool = False) -> dict[str, Any]:
            await self.bucket.acquire(low=low_priority)
            return await super().patch_pod_status(namespace, name, patch)

    kube = Limited()
    await kube.bucket.acquire()  # empty: the write must wait
    b = Binder(kube, "me")  # type: ignore[arg-type]
    stale = asyncio.create_task(b.update_pod_condition(_pod(), "Unschedulable", "0/1 nodes: stale"))
    async with asyncio.timeout(5):
        while not kube.bucket._low.locked():  # the write waits in the limiter's low lane
            await asyncio.sleep(0.001)
    b.drop_condition(_pod())  # the next attempt begins (and binds)
    await asyncio.wait_for(stale, 5)  # the caller is released, nothing raised
    # a failure of a later attempt, right away (before the dropped writer has left the map)
    await asyncio.wait_for(b.update_pod_condition(_pod(), "Unschedulable", "0/1 nodes: later"), 5)
    assert [p["status"]["conditions"][0]["message"] for _, p in kube.status_patches] == ["0/1 nodes: later"]


async def test_a_write_that_nominates_a_node_is_kept_and_not_low_priority() -> None:
    """Preemption's PodScheduled=False with nominatedNodeName goes out in turn (not at low priority)
    and a new attempt does not drop it: the nomination must reach the API."""
    import asyncio

    class Record(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.lows: list[bool] = []

        async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any],
                                   low_priority: bool = False) -> dict[str, Any]:
            self.lows.append(low_priority)
            await asyncio.sleep(0.01)
            return await super().patch_pod_status(namespace, name, patch)

    kube = Record()
    b = Binder(kube, "me")  # type: ignore[arg-type]
    write = asyncio.create_task(b.update_pod_condition(_pod(), "Unschedulable", "preempting", "n1"))
    await asyncio.sleep(0.001)
    b.drop_condition(_pod())
    await asyncio.wait_for(write, 5)
    assert kube.lows == [False] and kube.status_patches[0][1]["status"]["nominatedNodeName"] == "n1"


async def test_a_victim_gets_the_disruption_target_condition_before_it_is_deleted() -> None:
    """``PreemptPod``: each victim's status is patched with DisruptionTarget (True, PreemptionByScheduler,
    the preemptor's scheduler name) before the UID-preconditioned delete, and its Preempted event names
    the candidate node (not the victim's own: a gang's member elsewhere is evicted for this node). A
    victim already gone (the patch answers 404) is neither deleted nor reported."""
    from py_scheduler.framework.types import PodInfo

    class _Gone(FakeKube):
        async def patch_pod_status(self, namespace: str, name: str, patch: Any, low_priority: bool = False) -> Any:
            if name == "gone":
                raise NotFound(404, "NotFound", name)
            return await super().patch_pod_status(namespace, name, patch, low_priority)

    def victim(name: str, node: str) -> PodInfo:
        return PodInfo({"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}", "generation": 1},
                        "spec": {"nodeName": node, "containers": []}, "status": {"phase": "Running"}})

    kube = _Gone()
    b = Binder(kube, "me")  # type: ignore[arg-type]
    preemptor = {"metadata": {"name": "high", "namespace": "default", "uid": "u-high"},
                 "spec": {"schedulerName": "gpu-scheduler"}}
    failed = await b.delete_victims([victim("v1", "n1"), victim("gone", "n1"), victim("v2", "n2")], preemptor,
                                    "py-scheduler", "n1")
    assert failed == 0  # a victim already gone is no failure (upstream: "Victim Pod is already deleted")
    assert [c for c in kube.calls if c[0] != "event"] == [
        ("status", "default/v1"), ("delete", "default/v1"), ("status", "default/v2"), ("delete", "default/v2")]
    assert kube.deleted == [("default/v1", "u-v1"), ("default/v2", "u-v2")]
    cond = kube.status_patches[0][1]["status"]["conditions"][0]
    assert {k: cond[k] for k in ("type", "status", "reason", "message", "observedGeneration")} == {
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": "gpu-scheduler: preempting to accommodate a higher priority pod", "observedGeneration": 1}
    assert cond["lastTransitionTime"]
    notes = [e["note"] for e in kube.events if e["reason"] == "Preempted"]
    assert notes == ["Preempted by pod u-high on node n1", "Preempted by pod u-high on node n1"]
