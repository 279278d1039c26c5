"""The API writes' own process (``py-scheduler run --request-process``, issue 32 item 2).

A child process with a client of its own sends the requests of the scheduler's client and its Event
client (Bindings, Events, status patches, deletions); the cycle's process hands each request over on
a socket and awaits the answer. Unlike a thread (``--request-thread`` before it: it moved CPU rather
than saving it, bench/RESULTS.md), the child does not share the GIL: the Python half of each request
(aiohttp's client, the rate limiter, retries, building the request and decoding the answer) runs on
another core when the machine has one. What stays on the cycle's process: the watches and LISTs
(they feed the cache), the Lease client (its renewals must not queue behind writes), metrics serving,
and each request's hand-over (a pickled tuple of about 0.3 KiB each way).

How docs/architecture.md's eight orderings ("Writes and the cycle thread") hold:

- 1-5, 7: the caller's coroutine awaits each answer, as it awaited the socket; nothing is queued that
  its caller does not await, and answers are delivered as soon as they are read.
- 6: :meth:`RequestProcess.send` runs the write's fence before the hand-over, and the child checks
  the leader fence's deadline (:meth:`~py_scheduler.app.client.kube.WriteFence.until`, a
  ``CLOCK_MONOTONIC`` time, which the processes of one machine share) right before each attempt,
  after its rate limiter and any backoff. Each renewal of the Lease, and its loss, moves that deadline
  in the child too (:meth:`RequestProcess.lease`), so a write held back by the server's throttling is
  sent as long as the Lease is renewed, as in the cycle's process, and never after the deadline of
  the last renewal the child was told of. The Node's existence is checked at the hand-over only: the
  informers live in the cycle's process (a Binding delayed past its Node's deletion there is left to
  PodGC, as upstream leaves every Binding).
- 8: the child has the token buckets (the client's and the Event client's). Until it is ready
  (:attr:`RequestProcess.ready`: imported, logged in, about a second after the first request), and
  after it died, requests go out from the cycle's process with its own buckets.

A child that dies fails its requests in flight with :class:`~py_scheduler.app.client.kube.RequestProcessGone`:
:meth:`~py_scheduler.app.client.kube.Kube.request` sends a resendable one (a GET, a Binding) again
itself and fails the others as a lost connection fails them; every later request goes out from the
cycle's process. A child that stops reading its input (stopped, frozen, its loop blocked) while
requests wait on it is killed after :data:`STALL_TICKS` checks and fails them over the same way. A
SIGTERM to the child (a supervisor that signals the whole group) makes it say so at once: the cycle's
process sends every later request itself, and the child finishes what is in flight while it still
reads the lease, cancel and ping frames.
The child's request metrics (``rest_client_*``) travel back with each answer and are
recorded in the cycle's process, which serves them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import itertools
import logging
import math
import multiprocessing
import os
import pickle
import signal
import socket
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from py_scheduler.app.client import kube as kube_module
from py_scheduler.app.client.credentials import Credentials, load_connection_info
from py_scheduler.app.client.kube import Fenced, Kube, RequestProcessGone, WriteFence
from py_scheduler.app.client.wire import KubeError
from py_scheduler.app.process import event_loop
from py_scheduler.app.telemetry.klog import setup_logging
from py_scheduler.app.telemetry.metrics import RestClientMetrics
from py_scheduler.app.tuning import set_thresholds

log = logging.getLogger("py_scheduler.request_process")

_HELLO, _ANSWER, _REQUEST, _CANCEL, _LEASE = "hello", "answer", "request", "cancel", "lease"
_PING, _PONG = "ping", "pong"
_STOPPING, _BYE = "stopping", "bye"
_HEADER = 4
"""Bytes of each frame's length prefix (big-endian); a frame is one pickled tuple."""
PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal this process gets when its parent dies (linux/prctl.h)."""
CLOSE_TIMEOUT = 5.0
"""Seconds :meth:`RequestProcess.close` waits for the child's requests in flight and its exit."""
STALL_TICK = 1.0
"""Seconds between two of the parent's checks that a child with requests waiting still reads its input."""
STALL_TICKS = 10
"""Checks in a row with requests waiting and nothing heard from the child (not even the answer to a
ping) after which it is taken for stalled (stopped, frozen, its loop blocked) and killed: its requests
then fail over as after a crash. Counted in checks, not in wall time, so a scheduler stopped and
resumed whole (both processes) counts one check, not the time it was stopped."""

Metric = tuple[Any, ...]
"""``("request", code, method, host)``, ``("retry", code, verb, host)`` or ``("rate_limited", verb,
host, seconds)``: one call the child made to :class:`~py_scheduler.app.telemetry.metrics.RestClientMetrics`."""


def _frame(msg: tuple[Any, ...]) -> bytes:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(_HEADER, "big") + data


async def _read_frame(reader: asyncio.StreamReader) -> tuple[Any, ...]:
    """The next frame's tuple. Raises ``asyncio.IncompleteReadError`` at the other side's close."""
    n = int.from_bytes(await reader.readexactly(_HEADER), "big")
    msg: tuple[Any, ...] = pickle.loads(await reader.readexactly(n))
    return msg


async def _stream(conn: Connection) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Non-blocking streams over the socket of ``conn`` (a ``multiprocessing`` duplex Pipe end, which
    on Unix is one end of a socketpair): writes are buffered by the loop, so neither side ever blocks
    on a full socket while the other does the same."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    conn.close()
    return await asyncio.open_connection(sock=sock)


class RequestProcess:
    """The parent's side: forks the child at construction (``fork``) or spawns it on :meth:`start`,
    reads its answers and forwards :meth:`send`.

    Implements :class:`~py_scheduler.app.client.kube.RequestSender`.

    Args:
        kubeconfig: the credentials the child logs in with (None: in-cluster), through the same
            login path as the cycle's process (rotated tokens are re-read there too).
        qps, burst, retries: the child's client, as the cycle's process's.
        verbosity: its log verbosity (``--v``), as the cycle's process's: its lines (a retried
            request's, a refused write's) go to the same stderr.
        fork: fork the child now, from a process with no event loop and no other thread yet (``py-scheduler
            run`` does, once its modules are imported and frozen: the child imports nothing, where a
            spawned child spends about 1.2 s of CPU importing the client, kopf and aiohttp, on the
            core the scheduler may share with it). Otherwise it is spawned by :meth:`start`.
        stall_tick, stall_ticks: a child that answers nothing, not even a ping, for ``stall_ticks``
            checks ``stall_tick`` seconds apart while requests wait on it is killed
            (:data:`STALL_TICKS`): no request waits on a stalled child longer than about their product.
    """

    def __init__(self, kubeconfig: Path | str | None, *, qps: float = 50.0, burst: int = 100,
                 retries: int = 5, verbosity: int = 0, fork: bool = False,
                 stall_tick: float = STALL_TICK, stall_ticks: int = STALL_TICKS) -> None:
        self._args = (str(kubeconfig) if kubeconfig is not None else None, qps, burst, retries, verbosity)
        self._proc: Any = None  # multiprocessing's Process (its context's subclass is private)
        self._conn: Connection | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self.stall = (stall_tick, stall_ticks)
        """``(stall_tick, stall_ticks)``, read at each check."""
        self._heard = False
        self._watchdog: asyncio.Task[None] | None = None
        self.ready = False
        """True from the child's hello until it is gone or closed: :meth:`send` may be used."""
        self.gone = False
        """The child died or was closed: every request goes out from the caller's process."""
        self.stopping = False
        """The child said it stops (it got a SIGTERM): it takes no new request, and ends once its
        writes in flight are answered."""
        self.replay: Callable[[list[Metric]], None] = replay_metrics
        """How the child's metric calls are recorded here (tests record them)."""
        if fork:
            self._launch(fork=True)

    def _launch(self, fork: bool) -> None:
        ctx = multiprocessing.get_context("fork") if fork else multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        # a forked child holds a copy of the parent's end too: it closes it, or it never reads the
        # end of its input when the parent dies
        args = (child, self._conn if fork else None, os.getpid(), *self._args)
        self._proc = ctx.Process(target=child_main, args=args, daemon=True, name="py-scheduler-requests")
        self._proc.start()
        child.close()

    def start(self) -> None:
        """Spawn the child unless it was forked, and read its answers (once; on the running loop).
        It says hello when logged in."""
        if self._reader is not None or self.gone:
            return
        if self._proc is None:
            self._launch(fork=False)  # never fork a process holding an event loop's threads
        assert self._conn is not None
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read(self._conn), name="request-process-reader")
        self._watchdog = loop.create_task(self._watch(), name="request-process-watchdog")
        self._conn = None

    @property
    def pid(self) -> int | None:
        """The child's pid (None before :meth:`start`)."""
        return None if self._proc is None else int(self._proc.pid)

    async def _read(self, conn: Connection) -> None:
        try:
            reader, self._writer = await _stream(conn)
            while True:
                msg = await _read_frame(reader)
                self._heard = True
                if msg[0] == _PONG:
                    continue
                if msg[0] == _HELLO:
                    self.ready = not self.gone
                    log.info("API writes go out from process %s", self.pid)
                    continue
                if msg[0] == _STOPPING:  # SIGTERM there: no more requests; its writes in flight go on
                    self.ready, self.stopping = False, True
                    log.info("the API requests' process %s stops (SIGTERM): requests go out from this process",
                             self.pid)
                    self._write(_frame((_BYE,)), control=True)  # after every request it will be sent
                    continue
                _, rid, ok, value, metrics = msg
                self.replay(metrics)
                fut = self._pending.pop(rid, None)
                if fut is not None and not fut.done():
                    (fut.set_result if ok else fut.set_exception)(value)
        except Exception as exc:  # its end closed, or a frame that does not unpickle: gone either way
            if not self.gone and not (self.stopping and isinstance(exc, asyncio.IncompleteReadError)):
                log.error("the API requests' process ended (%s): requests go out from this process",
                          type(exc).__name__)
        finally:
            closing = self.gone
            self.ready, self.gone = False, True
            if self._proc is not None and self._proc.is_alive() and not closing:
                # what it may still send would race the parent's resends: it must not outlive this
                self._proc.kill()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(RequestProcessGone("the API requests' process ended"))
            self._pending.clear()

    async def _watch(self) -> None:
        """Kill a child that stalls with requests waiting on it (:data:`STALL_TICKS`); the reader then
        fails them over. Each check with requests waiting pings the child, whose read loop answers
        even while its requests wait on the server (throttled, retried, slow), so only a child that
        stopped reading counts checks."""
        missed = 0
        while not self.gone:
            tick, ticks = self.stall
            await asyncio.sleep(tick)
            if not self._pending or self._heard:
                missed = 0
            else:
                missed += 1
            self._heard = False
            if missed >= ticks and not self.gone and self._proc is not None:
                log.error("the API requests' process answered nothing for %d checks %.1f s apart with %d "
                          "requests waiting: killed; requests go out from this process",
                          missed, tick, len(self._pending))
                self.ready = False
                self._proc.kill()  # its end closes: the reader fails the waiting requests over
                return
            if self._pending:
                self._write(_frame((_PING,)), control=True)

    async def send(self, purpose: str, method: str, path: str, options: dict[str, Any],
                   fence: Callable[[], None] | None, event_limiter: bool) -> Any:
        """Send ``method path`` from the child's client for ``purpose`` (``scheduler`` or ``events``,
        with its Event bucket when ``event_limiter``) and return the decoded answer. ``options``:
        :meth:`Kube.request`'s keyword arguments body, query, content_type, retries, throttle_retries,
        timeout, resend. ``fence`` runs here first; a :class:`WriteFence`'s deadline is checked again by
        the child right before each attempt. Cancelling the caller cancels the request in the child.

        Raises:
            whatever ``fence`` raises; the request's KubeError; RequestProcessGone: the child ended
            before it answered.
        """
        if fence is not None:
            fence()
        until, refusal = ((fence.until(), fence.not_leader()) if isinstance(fence, WriteFence)
                          else (math.inf, None))
        rid = next(self._ids)
        frame = _frame((_REQUEST, rid, purpose, method, path, options, until, refusal, event_limiter))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self._write(frame):
            raise RequestProcessGone("the API requests' process cannot take it", unsent=True)
        self._pending[rid] = fut
        try:
            return await fut
        except asyncio.CancelledError:
            if self._pending.pop(rid, None) is not None:
                self._write(_frame((_CANCEL, rid)), control=True)
            raise

    def _write(self, frame: bytes, *, control: bool = False) -> bool:
        """Queue ``frame`` for the child; False when it cannot take it: a request when the child is not
        ready (starting, stopping, gone), any frame when its socket closed (uvloop raises on a write
        to a closed transport where asyncio drops it). ``control`` frames (a lease, a cancel, a ping)
        still reach a child that stops: its writes in flight must follow the lease to the end."""
        if (not control and not self.ready) or self._writer is None or self._writer.is_closing():
            return False
        try:
            self._writer.write(frame)
        except (RuntimeError, OSError):
            self.ready = False
            return False
        return True

    def lease(self, until: float) -> None:
        """The leader fence's deadline is now ``until`` (``CLOCK_MONOTONIC`` seconds; -inf: no longer
        leading): the child's fenced writes are checked against it from now on. Never raises (the
        Lease's renewal calls it)."""
        self._write(_frame((_LEASE, until)), control=True)

    async def close(self) -> None:
        """End the child: it finishes its requests in flight (up to :data:`CLOSE_TIMEOUT` seconds),
        closes its client and exits; killed when it does not."""
        self.ready = False
        self.gone = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._writer is not None and not self._writer.is_closing():
            try:  # the end of its input; its answers to what is in flight are still read
                if self._writer.can_write_eof():
                    self._writer.write_eof()
                else:
                    self._writer.close()
            except (RuntimeError, OSError):
                self._writer.close()
        if self._conn is not None:  # forked, never started: the child reads the end of its input
            self._conn.close()
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), CLOSE_TIMEOUT)
        if self._proc is not None:
            await asyncio.to_thread(self._proc.join, CLOSE_TIMEOUT)
            if self._proc.is_alive():
                self._proc.kill()
                await asyncio.to_thread(self._proc.join, CLOSE_TIMEOUT)
        if self._writer is not None:
            self._writer.close()


def replay_metrics(metrics: list[Metric]) -> None:
    """Record the child's metric calls in this process's registry."""
    m = kube_module.METRICS
    for call in metrics:
        match call:
            case ("request", code, method, host):
                m.request(code, method, host)
            case ("retry", code, verb, host):
                m.retry(code, verb, host)
            case ("rate_limited", verb, host, seconds):
                m.rate_limited(verb, host, seconds)


class _RecordedMetrics(RestClientMetrics):
    """The child's stand-in for the metrics: calls kept until sent with the next answer."""

    def __init__(self) -> None:
        self.calls: list[Metric] = []

    def request(self, code: str, method: str, host: str) -> None:
        self.calls.append(("request", code, method, host))

    def retry(self, code: str, verb: str, host: str) -> None:
        self.calls.append(("retry", code, verb, host))

    def rate_limited(self, verb: str, host: str, seconds: float) -> None:
        self.calls.append(("rate_limited", verb, host, seconds))

    def take(self) -> list[Metric]:
        calls, self.calls = self.calls, []
        return calls


class _Lease:
    """The child's view of the leader fence's deadline (``CLOCK_MONOTONIC`` seconds): the latest the
    parent sent, with a fenced write or on its own (frames arrive in the order they were sent)."""

    until = -math.inf


class _Deadline:
    """The child's fence: raises ``refusal`` (the write's own, :meth:`WriteFence.not_leader`) once the
    leader fence's deadline has passed."""

    def __init__(self, lease: _Lease, refusal: Fenced) -> None:
        self.lease = lease
        self.refusal = refusal

    def __call__(self) -> None:
        if time.monotonic() >= self.lease.until:
            raise self.refusal


def _forget(tasks: dict[int, asyncio.Task[None]], rid: int, _task: asyncio.Task[None]) -> None:
    tasks.pop(rid, None)


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``), as a crash of the
    scheduler ends every goroutine of kube-scheduler's: none of its writes is sent after that. A
    parent that closes its end normally lets the requests in flight finish first (:meth:`RequestProcess.close`).
    Without prctl (not Linux), the child ends when it reads the end of its input."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def child_main(conn: Connection, parents: Connection | None, parent_pid: int, kubeconfig: str | None, qps: float,
               burst: int, retries: int, verbosity: int) -> None:
    """The child's entry point: serve requests until the parent closes its end or dies. ``parents``:
    the parent's end, inherited by a forked child (closed here)."""
    if parents is not None:
        parents.close()
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends it (a Ctrl-C reaches the whole group)
    setup_logging(verbosity)
    set_thresholds()  # the live process's collector settings: each answer decoded is short-lived garbage
    raise SystemExit(event_loop.run(_serve(conn, kubeconfig, qps, burst, retries)))


async def _serve(conn: Connection, kubeconfig: str | None, qps: float, burst: int, retries: int) -> int:
    reader, writer = await _stream(conn)
    recorded = _RecordedMetrics()
    kube_module.METRICS = recorded
    creds = Credentials(lambda: load_connection_info(kubeconfig))
    try:
        kube = Kube.from_connection_info(await creds.login(), creds, qps=qps, burst=burst, retries=retries)
    except Exception as exc:  # as the parent's start-up: "cannot connect", one line; the parent sends itself
        log.error("the API requests' process cannot load the client configuration (%s): %s",
                  kubeconfig or "in-cluster", exc)
        writer.close()
        return 1
    clients = {"scheduler": kube, "events": kube.event_client or kube}
    tasks: dict[int, asyncio.Task[None]] = {}
    lease = _Lease()

    async def answer(rid: int, purpose: str, method: str, path: str, options: dict[str, Any], until: float,
                     refusal: Fenced | None, event_limiter: bool) -> None:
        client = clients[purpose]
        fence = None if refusal is None or math.isinf(until) else _Deadline(lease, refusal)
        try:
            value = await client.request(method, path, fence=fence,
                                         limiter=client.event_limiter if event_limiter else None, **options)
            out: tuple[Any, ...] = (_ANSWER, rid, True, value, recorded.take())
        except Exception as exc:  # handed to the caller
            out = (_ANSWER, rid, False, exc, recorded.take())
        try:
            writer.write(_frame(out))
        except Exception as exc:  # an answer that does not pickle (an exception's class, a too deep value)
            writer.write(_frame((_ANSWER, rid, False, KubeError(0, type(out[3]).__name__, str(exc)),
                                 out[4])))

    stopping = asyncio.Event()

    async def read() -> None:
        while True:
            try:
                msg = await _read_frame(reader)
            except (asyncio.IncompleteReadError, OSError):
                return
            if msg[0] == _LEASE:
                lease.until = msg[1]
                continue
            if msg[0] == _PING:  # the parent's watchdog: this loop still reads
                writer.write(_frame((_PONG,)))
                continue
            if msg[0] == _BYE:  # the parent read our stopping frame: no request follows
                bye.set()
                continue
            if msg[0] == _CANCEL:
                task = tasks.get(msg[1])
                if task is not None:
                    task.cancel()
                continue
            rid, until, refusal = msg[1], msg[6], msg[7]
            if stopping.is_set():  # sent before the parent read our stopping frame
                writer.write(_frame((_ANSWER, rid, False, RequestProcessGone(
                    "the API requests' process is stopping", unsent=True), [])))
                continue
            if refusal is not None and not math.isinf(until):  # as read: a later lease frame overrides it
                lease.until = until
            task = asyncio.create_task(answer(*msg[1:]))
            tasks[rid] = task
            task.add_done_callback(functools.partial(_forget, tasks, rid))

    async def drain(reading: asyncio.Task[None]) -> None:
        """On SIGTERM (a supervisor that signals every process of the group): tell the parent, which
        sends no more requests and answers ``bye``; finish what is in flight (up to
        :data:`CLOSE_TIMEOUT`, then cancelled: the parent fails those over as after a crash) while
        still reading the lease and cancel frames, then stop. A request read before the ``bye`` is
        refused unsent, so the parent sends it itself."""
        await stopping.wait()
        writer.write(_frame((_STOPPING,)))
        log.info("the API requests' process stops (SIGTERM) with %d requests in flight", len(tasks))
        deadline = asyncio.get_running_loop().time() + CLOSE_TIMEOUT
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(bye.wait(), CLOSE_TIMEOUT)
        if tasks:  # a finished task has left it (_forget)
            await asyncio.wait(list(tasks.values()), timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
        for t in tasks.values():
            t.cancel()
        reading.cancel()

    bye = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    reading = asyncio.create_task(read())
    drainer = asyncio.create_task(drain(reading))
    writer.write(_frame((_HELLO,)))
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await reading
    finally:
        drainer.cancel()
        if tasks:
            await asyncio.wait(list(tasks.values()), timeout=CLOSE_TIMEOUT)
        await kube.close()
        writer.close()
    return 0
