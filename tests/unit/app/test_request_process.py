"""API writes from a process of their own (``--request-process``, issue 32 item 2): once the child is
ready, the scheduler's client and its Event client send from it; LISTs and watches stay; the caller
still awaits each answer; the leader fence's deadline is checked in the child; a child that dies
leaves nothing stuck. A real aiohttp server answers; the parent's ``call_api`` is recorded, so a
request the server saw and the parent did not was sent by the child."""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing
import os
import pickle
import signal
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from py_scheduler.app.client import internals
from py_scheduler.app.client.credentials import load_connection_info
from py_scheduler.app.client.kube import Fenced, Kube, KubeAPIClient, RequestProcessGone
from py_scheduler.app.client.wire import Conflict, KubeError, NotFound
from py_scheduler.app.process.request_process import Metric, RequestProcess
from tests.unit.app.fakes import kubeconfig_file


class _Api:
    """A few API paths; ``gate`` holds the Binding until set; a Binding whose client went away while
    held is counted in ``abandoned``."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.bindings = 0
        self.abandoned = 0
        self.held = 0
        self.events = 0
        self.throttle = 0
        """Bindings still to be answered 429 with ``Retry-After: 3``."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/default/pods/p", self.pod)
        app.router.add_post("/api/v1/namespaces/default/pods/p/binding", self.bind)
        app.router.add_post("/apis/events.k8s.io/v1/namespaces/default/events", self.event)
        app.router.add_get("/api/v1/pods", self.watch)
        app.router.add_get("/api/v1/nodes", self.nodes)
        return app

    async def nodes(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                                  "items": [{"metadata": {"name": "n1"}}]})

    async def pod(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})

    async def bind(self, request: web.Request) -> web.Response:
        if self.throttle > 0:
            self.throttle -= 1
            return web.json_response({"kind": "Status", "code": 429}, status=429, headers={"Retry-After": "3"})
        self.held += 1
        try:
            while not self.gate.is_set():
                if request.transport is None or request.transport.is_closing():
                    self.abandoned += 1
                    return web.json_response({}, status=499)
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:  # the server cancels the handler when the client went away
            self.abandoned += 1
            raise
        self.bindings += 1
        return web.json_response({"kind": "Status", "status": "Success"}, status=201)

    async def event(self, request: web.Request) -> web.Response:
        self.events += 1
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        return web.json_response(await request.json(), status=201)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(json.dumps({"type": "ADDED", "object": {"metadata": {"name": "p"}}}).encode() + b"\n")
        await resp.write_eof()
        return resp


async def _until(cond: Any, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.01)


Served = tuple[_Api, Kube, RequestProcess, list[str], list[Metric]]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    api = _Api()
    async with TestServer(api.app()) as server:
        cfg = kubeconfig_file(tmp_path, server=str(server.make_url("")).rstrip("/"))
        process = RequestProcess(cfg, qps=100, burst=100)
        replayed: list[Metric] = []
        process.replay = replayed.extend
        kube = Kube.from_connection_info(await load_connection_info(cfg), request_process=process)
        seen: list[str] = []
        call_api = internals.call_api

        async def recording(a: Any, path: str, method: str, **kw: Any) -> Any:
            seen.append(f"{method} {path}")
            return await call_api(a, path, method, **kw)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(internals, "call_api", recording)
            try:
                # the client starts the child; a request before its hello goes out from here
                assert (await kube.get_pod("default", "p") or {})["metadata"]["name"] == "p"
                assert seen == ["GET /api/v1/namespaces/default/pods/p"]
                await _until(lambda: process.ready)
                seen.clear()
                yield api, kube, process, seen, replayed
            finally:
                await kube.close()


async def test_writes_go_out_from_the_child_and_watches_and_lists_from_here(served: Served) -> None:
    api, kube, process, seen, replayed = served
    await kube.bind("default", "p", "u1", "n1")
    ev = await kube.create_event("default", {"kind": "Event", "metadata": {"name": "e"}})
    assert ev == {"kind": "Event", "metadata": {"name": "e"}}  # the decoded answer came back
    with pytest.raises(NotFound):  # a refusal comes back as the same exception type
        await kube.request("GET", "/api/v1/namespaces/default/pods/nope")
    events = [e async for e in kube.watch("/api/v1/pods", {})]
    assert [e["type"] for e in events] == ["ADDED"]
    pages = [p async for p in kube.list_pages("/api/v1/nodes")]
    assert pages == [([{"metadata": {"name": "n1"}, "kind": "Node", "apiVersion": "v1"}], "7")]
    assert seen == ["GET /api/v1/pods", "GET /api/v1/nodes"]  # only the watch and the LIST went out here
    assert api.bindings == 1 and api.events == 1
    # the child's rest_client metrics were handed back: one answered attempt per request
    answered = [(m[1], m[2]) for m in replayed if m[0] == "request"]
    assert sorted(answered) == [("201", "POST"), ("201", "POST"), ("404", "GET")]
    assert process.pid is not None and process.pid != os.getpid()


async def test_the_child_refuses_a_write_once_the_leaders_deadline_passed(served: Served) -> None:
    api, kube, _, seen, _ = served
    asked: list[int] = []

    def fence() -> bool:
        asked.append(os.getpid())
        return True

    with pytest.raises(Fenced) as refused:  # valid here at the hand-over, past due in the child
        await KubeAPIClient(kube, fence=fence, valid_until=lambda: time.monotonic() - 1).bind("default", "p", "u", "n1")
    assert refused.value.reason == "NotLeader" and refused.value.status == 0
    assert "leader election lease could have expired; not binding" in str(refused.value)  # the parent's words
    assert asked == [os.getpid(), os.getpid()]  # the client's check, then the hand-over's
    assert api.held == 0 and seen == []
    # a deadline still ahead: sent
    await KubeAPIClient(kube, fence=fence, valid_until=lambda: time.monotonic() + 60).bind("default", "p", "u", "n1")
    assert api.bindings == 1


@pytest.mark.parametrize("renewed", [False, True])
async def test_a_write_held_back_by_throttling_follows_the_lease_renewals(served: Served, renewed: bool) -> None:
    """A Binding answered 429 (Retry-After 3 s) waits in the child past the deadline it was handed
    over with (1.5 s ahead): sent once the parent told the child of a renewal, refused as the parent
    refuses it when no renewal came."""
    api, kube, process, _, _ = served
    api.throttle = 1
    until = [time.monotonic() + 1.5]
    bind = asyncio.create_task(KubeAPIClient(kube, fence=lambda: True, valid_until=lambda: until[0]).bind(
        "default", "p", "u", "n1"))
    await _until(lambda: api.throttle == 0)  # the first attempt was answered 429
    if renewed:
        until[0] = time.monotonic() + 60
        process.lease(until[0])  # what LeaderElector.on_valid_until does at each renewal
        await bind
        assert api.bindings == 1
    else:
        with pytest.raises(Fenced, match="not binding"):
            await bind
        assert api.bindings == 0 and api.held == 0


async def test_cancelling_the_caller_cancels_the_request_in_the_child(served: Served) -> None:
    api, kube, _, seen, _ = served
    api.gate.clear()
    bind = asyncio.create_task(kube.bind("default", "p", "u1", "n1"))
    await _until(lambda: api.held == 1)
    assert not bind.done()  # the answer has not come: the binding cycle is still waiting
    bind.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bind
    await _until(lambda: api.abandoned == 1)  # the child dropped the connection
    assert api.bindings == 0 and seen == []
    api.gate.set()
    await kube.bind("default", "p", "u1", "n1")
    assert api.bindings == 1


async def test_a_child_that_dies_leaves_nothing_stuck(served: Served) -> None:
    """A Binding in flight is resent from here (a resend ends in 409 if the first took); an Event is
    not (it would be a duplicate): it fails as a lost connection fails; later requests go out here."""
    api, kube, process, seen, _ = served
    api.gate.clear()
    bind = asyncio.create_task(kube.bind("default", "p", "u1", "n1"))
    event = asyncio.create_task(kube.create_event("default", {"kind": "Event", "metadata": {"name": "e"}}))
    await _until(lambda: api.held == 1 and api.events == 1)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    with pytest.raises(KubeError) as lost:
        await event
    assert lost.value.status == 0 and lost.value.reason == "RequestProcessGone"
    await _until(lambda: "POST /api/v1/namespaces/default/pods/p/binding" in seen)  # resent from here
    api.gate.set()
    await asyncio.wait_for(bind, 30)
    assert not process.ready and process.gone
    await kube.create_event("default", {"kind": "Event", "metadata": {"name": "e2"}})
    assert seen[-1] == "POST /apis/events.k8s.io/v1/namespaces/default/events"


async def test_a_stopped_child_is_killed_and_its_requests_fail_over(served: Served) -> None:
    """A child stopped with a Binding waiting on it (SIGSTOP, a cgroup freeze of that process) answers
    no ping: after ``stall_ticks`` checks it is killed and the Binding is sent again from here."""
    api, kube, process, seen, _ = served
    process.stall = (0.05, 5)
    api.gate.clear()
    bind = asyncio.create_task(kube.bind("default", "p", "u1", "n1"))
    await _until(lambda: api.held == 1)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGSTOP)
    await _until(lambda: "POST /api/v1/namespaces/default/pods/p/binding" in seen, timeout=30)
    assert process.gone and not process.ready
    api.gate.set()
    await asyncio.wait_for(bind, 30)
    assert api.bindings == 1 and api.abandoned == 1  # the stopped child's attempt went with it
    assert process._proc is not None
    await asyncio.to_thread(process._proc.join, 10)
    assert process._proc.exitcode == -signal.SIGKILL


async def test_a_sigterm_lets_the_child_finish_what_is_in_flight_and_the_rest_go_out_from_here(
        served: Served) -> None:
    """A supervisor that sends SIGTERM to every process of the group (systemd's control-group kill):
    the child tells the parent, which sends every later request itself; the child answers the
    Binding it holds, and then ends."""
    api, kube, process, seen, _ = served
    api.gate.clear()
    bind = asyncio.create_task(kube.bind("default", "p", "u1", "n1"))
    await _until(lambda: api.held == 1)
    assert process.pid is not None and process._proc is not None
    os.kill(process.pid, signal.SIGTERM)
    await _until(lambda: process.stopping)
    assert not process.ready and not bind.done()
    get = "GET /api/v1/namespaces/default/pods/p"
    await kube.get_pod("default", "p")
    await kube.get_pod("default", "p")
    assert seen == [get, get]
    api.gate.set()
    await asyncio.wait_for(bind, 30)
    assert api.bindings == 1 and not any("binding" in s for s in seen)  # answered by the child, sent once
    await _until(lambda: process.gone)  # it ended its side once nothing was left in flight
    await asyncio.to_thread(process._proc.join, 10)
    assert not process._proc.is_alive()


async def test_a_stopping_child_still_follows_the_lease(served: Served) -> None:
    """A Binding held back by throttling in a child that got SIGTERM: the leader then lets the Lease
    go (``leader.release`` at shutdown tells the child ``-inf``); the child must refuse the Binding at
    its next attempt, not send it on the deadline it had."""
    api, kube, process, _, _ = served
    api.throttle = 1
    bind = asyncio.create_task(KubeAPIClient(kube, fence=lambda: True, valid_until=lambda: time.monotonic() + 60)
                               .bind("default", "p", "u", "n1"))
    await _until(lambda: api.throttle == 0)  # answered 429, Retry-After 3 s: waiting in the child
    assert process.pid is not None
    os.kill(process.pid, signal.SIGTERM)
    await _until(lambda: process.stopping)
    process.lease(-math.inf)
    with pytest.raises(Fenced, match="not binding"):
        await asyncio.wait_for(bind, 30)
    assert api.bindings == 0 and api.held == 0


async def test_a_slow_answer_is_not_a_stall(served: Served) -> None:
    """A Binding the server holds for many checks: the child still answers each ping, so it is not
    killed and the Binding is sent once, from the child."""
    api, kube, process, seen, _ = served
    process.stall = (0.02, 3)
    pings: list[int] = []
    write = process._write

    def counting(frame: bytes, **kw: Any) -> bool:
        if pickle.loads(frame[4:])[0] == "ping":
            pings.append(1)
        return write(frame, **kw)

    process._write = counting  # type: ignore[method-assign]
    api.gate.clear()
    bind = asyncio.create_task(kube.bind("default", "p", "u1", "n1"))
    await _until(lambda: len(pings) >= 15)  # five times the checks that would kill a silent child
    assert process.ready and not bind.done()
    api.gate.set()
    await asyncio.wait_for(bind, 30)
    assert api.bindings == 1 and seen == [] and process.ready


@pytest.mark.parametrize("exc", [KubeError(0, "ClientConnectorError", "refused", "POST", "/x"),
                                 NotFound(404, "NotFound", "pods \"p\" not found", "GET", "/p"),
                                 Conflict(409, "Conflict", "already assigned", "POST", "/b"),
                                 Fenced(0, "NotLeader", "not writing")])
def test_api_errors_cross_a_process_boundary_whole(exc: KubeError) -> None:
    exc.retry_after = 3.0
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc)
    assert (back.status, back.reason, back.message, back.method, back.path, back.retry_after) == (
        exc.status, exc.reason, exc.message, exc.method, exc.path, 3.0)


async def test_close_ends_the_child(tmp_path: Path) -> None:
    from py_scheduler.app.process import lifecycle

    api = _Api()
    async with TestServer(api.app()) as server:
        cfg = kubeconfig_file(tmp_path, server=str(server.make_url("")).rstrip("/"))

        async def serve(kube: Kube, stop: asyncio.Event) -> int:
            await stop.wait()
            return 0

        rt = lifecycle.Runtime(kubeconfig=cfg, serve=serve, qps=5, burst=10, stop=asyncio.Event(),
                               request_process=RequestProcess(cfg, qps=5, burst=10))
        await lifecycle.startup(memo=rt)
        assert rt.kube is not None and isinstance(rt.kube.process, RequestProcess)
        assert rt.kube.event_client is not None and rt.kube.event_client.process is rt.kube.process
        process = rt.kube.process
        await rt.kube.get_pod("default", "p")
        await _until(lambda: process.ready)
        pid = process.pid
        await lifecycle.cleanup(memo=rt)
    assert pid is not None and process.gone
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_run_flag_reaches_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from py_scheduler.app.process import main as process_main
    from py_scheduler.cli import app

    got: list[bool | None] = []

    def fake_run(**kw: Any) -> int:
        got.append(kw["request_process"])
        return 0

    monkeypatch.setattr(process_main, "run_scheduler", fake_run)
    for argv in (["run"], ["run", "--no-request-process"], ["run", "--request-process"]):
        assert CliRunner().invoke(app, argv).exit_code == 0
    assert got == [None, False, True]  # None: on where this process may use more than one CPU


_FORKED = """
import asyncio, os, signal, sys
from pathlib import Path
from aiohttp.test_utils import TestServer
from py_scheduler.app.client import internals
from py_scheduler.app.client.credentials import load_connection_info
from py_scheduler.app.client.kube import Kube
from py_scheduler.app.process.request_process import RequestProcess
sys.path.insert(0, os.getcwd())
from tests.unit.app.fakes import kubeconfig_file
from tests.unit.app.test_request_process import _Api, _until

port, tmp = int(sys.argv[1]), Path(sys.argv[2])
cfg = kubeconfig_file(tmp, server=f"http://127.0.0.1:{port}")
process = RequestProcess(cfg, fork=True)  # as run forks it: no loop, no other thread yet

async def main() -> None:
    api = _Api()
    seen = []
    call_api = internals.call_api
    async def recording(a, path, method, **kw):
        seen.append(path)
        return await call_api(a, path, method, **kw)
    internals.call_api = recording
    async with TestServer(api.app(), port=port):
        kube = Kube.from_connection_info(await load_connection_info(cfg), request_process=process)
        await kube.get_pod("default", "p")
        await _until(lambda: process.ready)
        await kube.bind("default", "p", "u1", "n1")
        print("child", process.pid, "bindings", api.bindings, "seen", len(seen), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the parent dies without closing anything

asyncio.run(main())
"""


def test_a_forked_child_sends_and_exits_when_its_parent_dies(tmp_path: Path) -> None:
    """As ``py-scheduler run`` starts it: forked before the loop; it sends the Binding (the parent's
    client saw only the first GET), and it ends by itself when the parent is killed (a forked child
    inherits the parent's end of the socket: unless it closes it, it never reads EOF)."""
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, "-c", _FORKED, str(port), str(tmp_path)], capture_output=True,
                         text=True, timeout=120, cwd=Path(__file__).parents[3])
    assert out.returncode == -signal.SIGKILL, out.stderr
    words = out.stdout.split()
    assert words[0] == "child" and words[2:] == ["bindings", "1", "seen", "1"], out.stdout + out.stderr
    child = int(words[1])
    deadline = time.monotonic() + 30
    while True:
        try:  # gone, or a zombie its new parent has not reaped yet
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except (FileNotFoundError, ProcessLookupError):
            break
        assert time.monotonic() < deadline, f"request process {child} outlived its parent"
        time.sleep(0.05)


async def test_a_child_that_cannot_log_in_says_so_in_one_line_and_the_parent_sends_itself(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    api = _Api()
    async with TestServer(api.app()) as server:
        cfg = kubeconfig_file(tmp_path, server=str(server.make_url("")).rstrip("/"))
        process = RequestProcess(tmp_path / "missing-kubeconfig")
        kube = Kube.from_connection_info(await load_connection_info(cfg), request_process=process)
        try:
            await kube.get_pod("default", "p")
            await _until(lambda: process.gone)
            await kube.bind("default", "p", "u1", "n1")
            assert api.bindings == 1 and not process.ready
        finally:
            await kube.close()
    err = capfd.readouterr().err
    assert "the API requests' process cannot load the client configuration" in err and "Traceback" not in err


async def _talking_to_a_fake_child() -> tuple[RequestProcess, socket.socket]:
    """A RequestProcess reading a socket whose other end (returned) the test writes as a child
    would, after the child's hello."""
    process = RequestProcess(None)
    ours, end = multiprocessing.Pipe()
    theirs = socket.socket(fileno=os.dup(end.fileno()))
    end.close()
    process._conn = ours
    process._reader = asyncio.get_running_loop().create_task(process._read(ours))
    process._conn = None
    _send_frame(theirs, pickle.dumps(("hello",)))
    await _until(lambda: process.ready)
    return process, theirs


def _send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(len(data).to_bytes(4, "big") + data)


async def test_a_frame_that_does_not_unpickle_ends_the_child_not_the_reader() -> None:
    """Whatever the child sends that cannot be read here (an exception class that does not unpickle,
    a broken frame) marks it gone: the requests waiting on it fail with RequestProcessGone (and are
    sent again from here by Kube.request when they may be), nothing waits forever."""
    process, theirs = await _talking_to_a_fake_child()
    waiting = asyncio.create_task(process.send("scheduler", "GET", "/api/v1/nodes", {}, None, False))
    await asyncio.sleep(0)
    _send_frame(theirs, b"cno_such_module\nThing\n.")  # unpickling it imports a module that is not there
    with pytest.raises(RequestProcessGone):
        await asyncio.wait_for(waiting, 10)
    assert process.gone and not process.ready
    theirs.close()
    await process.close()


async def test_close_still_delivers_the_answers_in_flight(served: Served) -> None:
    """A Binding on the wire when the client closes gets its answer from the child (the end of the
    child's input, not of the parent's): it is not failed over and sent a second time from here."""
    api, kube, process, seen, _ = served
    api.gate.clear()
    bind = asyncio.create_task(kube.bind("default", "p", "u1", "n1"))
    await _until(lambda: api.held == 1)
    closing = asyncio.create_task(process.close())
    await _until(lambda: process.gone)
    api.gate.set()
    await asyncio.wait_for(bind, 30)
    await closing
    assert api.bindings == 1 and seen == []


def test_a_closed_socket_refuses_writes_without_raising_under_uvloop() -> None:
    """uvloop raises on a write to a closed transport where asyncio drops it: a request then is
    refused unsent (Kube.request sends it itself) and a Lease renewal's notice never raises (it is
    called from the leader election's loop)."""
    import uvloop

    async def check() -> None:
        process, theirs = await _talking_to_a_fake_child()
        assert process._writer is not None
        process._writer.transport.abort()  # the socket is gone; the reader has not noticed yet
        process.lease(1.0)
        with pytest.raises(RequestProcessGone) as refused:
            await process.send("scheduler", "GET", "/api/v1/nodes", {}, None, False)
        assert refused.value.unsent
        theirs.close()
        await process.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(check())
