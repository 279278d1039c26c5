"""Binder (condition patch, truncation, event series), the API adapter's retry/error mapping and
rate limiter, and the --v logging setup."""

from __future__ import annotations

import io
import json
import logging
from typing import Any, ClassVar

import pytest

from py_scheduler.app.binder import Binder, pod_condition_patch, truncate_message
from py_scheduler.app.kube import Conflict, Kube, KubeError, NotFound, RateLimiter
from py_scheduler.app.logging import setup_logging
from tests.unit.app.fakes import FakeKube

# -- binder ----------------------------------------------------------------------------------------


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


async def test_repeated_event_becomes_series() -> None:
    kube = FakeKube()
    b = Binder(kube, "me")  # type: ignore[arg-type]
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}}
    await b.failed_scheduling(pod, "0/1 nodes are available", "py-scheduler")
    await b.failed_scheduling(pod, "0/1 nodes are available", "py-scheduler")
    await b.failed_scheduling(pod, "0/2 nodes are available", "py-scheduler")
    assert len(kube.events) == 2
    assert kube.events[0]["series"]["count"] == 2
    assert kube.events[0]["metadata"]["name"].startswith("p.")


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


async def test_gives_up_after_retries() -> None:
    k, api = kube_with([Resp(500, b"oops")] * 3, retries=2)
    with pytest.raises(KubeError) as ei:
        await k.patch_event("default", "e", {"series": {"count": 2}})
    assert ei.value.status == 500 and len(api.calls) == 3
    assert api.calls[0][2] == "application/merge-patch+json"


async def test_list_pages_and_fills_kind() -> None:
    k, _api = kube_with([
        Resp(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"continue": "c1", "resourceVersion": "7"},
                   "items": [{"metadata": {"name": "a"}}]}),
        Resp(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "8"},
                   "items": [{"metadata": {"name": "b"}}]}),
    ])
    items, rv = await k.list_objects("/api/v1/nodes")
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


def test_endpoint_hides_token() -> None:
    class Cfg:
        host = "https://h:6443"
        api_key: ClassVar[dict[str, str]] = {"BearerToken": "Bearer s3cr3t"}
        ssl_ca_cert = "/ca"
        cert_file = None
        key_file = None
        verify_ssl = True

    class Api:
        configuration = Cfg()

    ep = Kube(Api()).endpoint()  # type: ignore[arg-type]
    assert ep.token == "s3cr3t" and "s3cr3t" not in repr(ep)


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

    from py_scheduler.app.logging import setup_logging, v

    try:
        setup_logging(1, io.StringIO())
        assert not v(2) and v(1)
        setup_logging(2, io.StringIO())
        assert v(2) and not v(3)
    finally:
        setup_logging(2, io.StringIO())
