"""The API requests' own thread: a second asyncio loop where :class:`~py_scheduler.app.client.kube.Kube`
sends its requests, off the thread that runs scheduling cycles (issue 32 item 2).

The scheduling loop's thread used to spend about a third of its CPU per Pod on the two writes each
bound Pod costs (the Binding and the ``Scheduled`` Event): building the request, aiohttp's client,
TLS, reading and decoding the answer (bench/RESULTS.md, "Where py-scheduler's critical path goes").
With a :class:`RequestThread`, a Kube's :meth:`~py_scheduler.app.client.kube.Kube.request` hands the
whole request (rate limiter, retries, the ``fence`` check right before each attempt, the HTTP
exchange and the JSON decoding) to this thread and awaits the answer; the caller's coroutine is
suspended exactly as it was while the request was on the wire, so every ordering docs/architecture.md
lists ("Writes and the cycle thread") holds unchanged: a binding cycle still awaits its Binding's
answer before ``finish_binding``, the writes of one Pod still go out one after the other, and there is
still one rate limiter per client (it lives with the requests).

What stays on the cycle's thread: the watch streams (their events feed the cache in order), the
Lease client (its renewals must not queue behind writes) and whatever is not a request.

The C parts of a request (socket I/O, OpenSSL, orjson) release the GIL or are short; the Python
parts (aiohttp's client, tenacity) still take it, so on one core this moves CPU rather than saving
it. bench/RESULTS.md has the measurement.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class RequestThread:
    """A daemon thread running an asyncio loop of its own, until :meth:`stop`.

    Args:
        name: the thread's name (``py-scheduler-requests``; py-spy and ``/proc/<pid>/task`` show it).
    """

    def __init__(self, name: str = "py-scheduler-requests") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def here(self) -> bool:
        """Whether the caller runs on this thread."""
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` run on this thread's loop (objects bound to a loop, an aiohttp session, are built
        there); blocks the caller until it returns. Called on this thread, runs ``fn`` directly.

        Raises:
            whatever ``fn`` raises.
        """
        if self.here():
            return fn()
        out: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                out.set_result(fn())
            except BaseException as exc:  # handed to the caller
                out.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return out.result()

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` run on this thread's loop. Cancelling the caller cancels ``coro`` there.

        Raises:
            whatever ``coro`` raises.
        """
        if self.here():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (its unfinished tasks are dropped) and wait up to ``timeout`` seconds."""
        if self.loop.is_closed() or not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.here():
            self._thread.join(timeout)
