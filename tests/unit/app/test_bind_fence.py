"""The bind fence is checked right before a Binding goes on the wire, not only before the request
starts: a process frozen (SIGSTOP) while its Binding waits for a rate-limiter token or a retry
backoff must not send it once its lease could have expired.

Reproduces the fault suite's finding (tests/e2e/faults/test_faults.py::
test_frozen_leader_does_not_bind_after_losing_the_lease): a leader stopped past its lease sent its
queued Bindings after SIGCONT and got ``409 ... is already assigned`` from the new leader's work.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from py_scheduler.app.client.kube import Fenced, Kube, KubeAPIClient
from py_scheduler.framework.handle import APIError
from py_scheduler.framework.types import PodInfo

pytestmark = pytest.mark.usefixtures("call_api_on_stub")  # the stub API below answers the requests

class _Resp:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self._body = json.dumps(body).encode()
        self.headers: dict[str, str] = {}

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class _Api:
    def __init__(self, responses: list[_Resp]) -> None:
        self.responses = responses
        self.sent: list[tuple[str, str]] = []

    async def call_api(self, path: str, method: str, **_: Any) -> _Resp:
        self.sent.append((method, path))
        return self.responses.pop(0)


def _pod() -> PodInfo:
    return PodInfo({"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}})


async def test_fence_checked_after_waiting_for_the_rate_limiter() -> None:
    api = _Api([_Resp(201, {}), _Resp(201, {})])
    kube = Kube(api, qps=5, burst=1)  # type: ignore[arg-type]
    valid = {"v": True}
    await kube.request("GET", "/api")  # takes the only token: the Binding below has to wait ~0.2 s
    assert api.sent == [("GET", "/api")]

    original = kube.limiter.acquire

    async def acquire_then_lose_lease() -> None:
        await original()
        valid["v"] = False  # the lease expired while the Binding was waiting for its token

    kube.limiter.acquire = acquire_then_lose_lease  # type: ignore[method-assign]
    client = KubeAPIClient(kube, fence=lambda: valid["v"])
    with pytest.raises(Fenced) as ei:
        await client.bind("default", "p", "u1", "n1")
    assert ei.value.reason == "NotLeader" and isinstance(ei.value, APIError)
    assert ei.value.message == "leader election lease could have expired; not binding"  # the fault suite reads it
    assert api.sent == [("GET", "/api")], "the Binding was sent after the lease could have expired"


async def test_fence_checked_before_each_retry() -> None:
    api = _Api([_Resp(503, {"reason": "ServiceUnavailable"}), _Resp(201, {})])
    kube = Kube(api, qps=0, burst=1, retries=3)  # type: ignore[arg-type]
    checks = {"n": 0}

    def fence() -> bool:
        checks["n"] += 1
        return checks["n"] <= 2  # valid for the pre-check and the first attempt, then lost

    with pytest.raises(Fenced):
        await KubeAPIClient(kube, fence=fence).bind("default", "p", "u1", "n1")
    assert [m for m, _ in api.sent] == ["POST"], "the retry went out after the lease was lost"


async def test_plugin_writes_are_fenced_too() -> None:
    """PreBind plugins' writes (PUT / PATCH / POST / DELETE through the Handle's client) are fenced
    like the Binding."""
    api = _Api([_Resp(200, {})] * 4)
    kube = Kube(api, qps=0, burst=1)  # type: ignore[arg-type]
    client = KubeAPIClient(kube, fence=lambda: False)
    for call in (client.update("/api/v1/persistentvolumes/pv", {}), client.patch("/x", {}),
                 client.create("/x", {}), client.delete("/x", uid="u")):
        with pytest.raises(Fenced):
            await call
    assert api.sent == []


async def test_binding_carries_the_annotations() -> None:
    """The annotations ride in the Binding's metadata (copied onto the Pod by the API server with
    spec.nodeName): no separate Pod write that a lost Binding would leave behind."""
    bodies: list[Any] = []

    class _Recording(_Api):
        async def call_api(self, path: str, method: str, **kw: Any) -> _Resp:
            bodies.append(kw.get("body"))
            return await super().call_api(path, method, **kw)

    api = _Recording([_Resp(201, {})])
    await KubeAPIClient(Kube(api, qps=0, burst=1)).bind(  # type: ignore[arg-type]
        "default", "p", "u1", "n1", {"gpu-scheduler/gpu-indices": "0"})
    assert api.sent == [("POST", "/api/v1/namespaces/default/pods/p/binding")]
    assert bodies[0]["metadata"] == {"name": "p", "namespace": "default", "uid": "u1",
                                     "annotations": {"gpu-scheduler/gpu-indices": "0"}}
    assert bodies[0]["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}


async def test_binding_to_a_node_deleted_meanwhile_is_not_sent() -> None:
    """The API accepts a Binding to a missing Node; the client asks the cache right before sending."""
    api = _Api([_Resp(201, {})])
    kube = Kube(api, qps=0, burst=1)  # type: ignore[arg-type]
    with pytest.raises(Fenced) as ei:
        await KubeAPIClient(kube, fence=lambda: True, node_exists=lambda n: n != "n1").bind("default", "p", "u1",
                                                                                            "n1")
    assert ei.value.reason == "NodeGone"
    assert api.sent == []


async def test_loop_requeues_a_pod_whose_node_went_away_before_binding() -> None:
    """Found by the fault suite (test_nodes_and_pods_deleted_in_flight): Bindings queued behind the
    client rate limiter were sent seconds after their Node's deletion had reached the cache."""
    from tests.unit.app.test_loop import Harness

    h = Harness()
    h.node("n1")
    h.pod("a")
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)  # assumed on n1; the Binding runs in the background
    h.cache.remove_node({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}})
    await h.loop.drain()
    assert not any(c[0] == "bind" for c in h.kube.calls)
    assert any("was deleted before the Binding was sent" in e.get("note", "") for e in h.kube.events)
    assert not h.cache.is_assumed_pod(qpi.pod_info)


def test_kube_errors_are_the_frameworks() -> None:
    """Plugins catch the framework's errors; the live adapter's are those (404 / 409 by class)."""
    from py_scheduler.app.client.wire import Conflict, KubeError, NotFound, error_for
    from py_scheduler.framework.handle import APIConflict, APINotFound

    nf = error_for(404, b'{"reason": "NotFound", "message": "pods \\"p\\" not found"}', "GET", "/p")
    cf = error_for(409, b'{"reason": "Conflict", "message": "already assigned"}', "POST", "/b")
    assert isinstance(nf, NotFound) and isinstance(nf, APINotFound) and nf.message == 'pods "p" not found'
    assert isinstance(cf, Conflict) and isinstance(cf, APIConflict) and (cf.status, cf.reason) == (409, "Conflict")
    assert isinstance(KubeError(500, "x", "y"), APIError)
    assert str(cf) == "POST /b: 409 Conflict: already assigned"


async def test_a_fence_refusal_is_final_not_retried() -> None:
    """The Binding is resent after a lost answer, but a refusal by the fence is not a lost answer:
    asking again within the retry backoff cannot bring the lease or the Node back. It used to be
    retried like a connection error (5 more checks over about 6 s of backoff)."""
    api = _Api([])
    kube = Kube(api, qps=0, burst=1, retries=5)  # type: ignore[arg-type]
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    kube.retry_sleep = no_wait
    asked: list[str] = []

    def node_exists(node: str) -> bool:
        asked.append(node)
        return len(asked) == 1  # there when the binding cycle asks, gone when the Binding is sent

    with pytest.raises(Fenced) as ei:
        await KubeAPIClient(kube, node_exists=node_exists).bind("default", "p", "u1", "n1")
    assert ei.value.reason == "NodeGone"
    assert asked == ["n1", "n1"] and waits == [] and api.sent == []
