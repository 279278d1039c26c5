"""The process's event loop: uvloop when it is installed, with one known uvloop fault logged as what it is.

This module is the one place that depends on uvloop, and on one of its internals: the context its
``SSLProtocol`` hands the loop's exception handler (``uvloop/sslproto.pyx``, ``SSLProtocol._do_read``
and ``_fatal_error``). tests/unit/app/test_event_loop.py reads that source from the installed uvloop
and fails loudly when it changes.

The fault (MagicStack/uvloop#506, #685): when the application closes a TLS connection from inside
its ``data_received`` (aiohttp does on a request timeout, a cancelled watch or a reset), uvloop's
``_do_read`` still flushes the TLS layer's outgoing bytes to the TCP transport it has just closed
(and ``_write_appdata`` may, for a write racing the close, with the same message);
the write raises ``RuntimeError: unable to perform operation on <TCPTransport closed=True ...>; the
handler is closed`` and uvloop reports it as "Fatal error on SSL protocol" with a traceback, through
the loop's exception handler. Nothing is lost: the connection was already closed by its owner, whose
request has failed (and is retried or re-watched by it). Asyncio's own loop ignores such a write.
So that one case is logged on one line, without a traceback; every other exception context goes to
the loop's default handler, traceback included.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("py_scheduler.event_loop")

#: the message uvloop's ``SSLProtocol._do_read`` passes to ``_fatal_error`` (uvloop/sslproto.pyx)
SSL_FATAL_MESSAGE = "Fatal error on SSL protocol"
#: the end of the RuntimeError uvloop's ``UVHandle._ensure_alive`` raises on a closed handle (uvloop/handles/handle.pyx)
CLOSED_HANDLE_TEXT = "the handler is closed"


def is_write_after_close(context: dict[str, Any]) -> bool:
    """Whether an exception-handler ``context`` (asyncio's dict: ``message``, ``exception``, ...) is
    uvloop's write of TLS bytes to a TCP transport its owner has already closed (see the module)."""
    exc = context.get("exception")
    return (context.get("message") == SSL_FATAL_MESSAGE and isinstance(exc, RuntimeError)
            and CLOSED_HANDLE_TEXT in str(exc))


def exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler: one line for :func:`is_write_after_close`, the default handler
    (message and traceback at ERROR) for anything else."""
    if is_write_after_close(context):
        log.info("TLS bytes written after the connection was closed by its owner, dropped (uvloop#506): %s: %s",
                 context.get("transport"), context.get("exception"))
        return
    loop.default_exception_handler(context)


async def _with_handler(coro: Coroutine[Any, Any, int]) -> int:
    asyncio.get_running_loop().set_exception_handler(exception_handler)
    return await coro


def run(coro: Coroutine[Any, Any, int]) -> int:
    """Run ``coro`` to its exit code on uvloop when it is installed (a faster event loop and TLS:
    ~8% less CPU per scheduled Pod on the bench, bench/RESULTS.md), else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: int = uvloop.run(_with_handler(coro))
    return result
