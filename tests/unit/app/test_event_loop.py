"""The event loop adapter (py_scheduler/app/process/event_loop.py): uvloop's write of TLS bytes to a
transport its owner has closed is one line, everything else keeps the default handler's traceback;
and the uvloop internals the adapter reads are still there."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import pytest
import uvloop

from py_scheduler.app.process import event_loop


def _source(rel: str) -> str:
    return (Path(uvloop.__file__).parent / rel).read_text()


def test_uvloop_still_reports_a_write_after_close_as_the_adapter_expects() -> None:
    """Fails loudly when uvloop changes what the adapter matches on: then re-read the sources named in
    event_loop's docstring, and drop the adapter if uvloop stopped writing to closed transports."""
    ssl = _source("sslproto.pyx")
    do_read = re.search(r"cdef _do_read\(self\):(.*?)\n    cdef ", ssl, re.S)
    assert do_read, "uvloop's SSLProtocol._do_read is gone"
    assert "self._process_outgoing()" in do_read.group(1)
    assert f"self._fatal_error(ex, '{event_loop.SSL_FATAL_MESSAGE}')" in do_read.group(1)
    fatal = re.search(r"cdef _fatal_error\(self, exc, message=.*?(\n    c?def |\Z)", ssl, re.S)
    assert fatal and "'message': message" in fatal.group(0) and "'exception': exc" in fatal.group(0)
    write = re.search(r"cdef _write_appdata\(self.*?\n    cdef ", ssl, re.S)
    assert write and f"self._fatal_error(ex, '{event_loop.SSL_FATAL_MESSAGE}')" in write.group(0)
    assert event_loop.CLOSED_HANDLE_TEXT in _source("handles/handle.pyx")


def _closed_write_error() -> RuntimeError:
    try:  # raised, so it carries a traceback as uvloop's does
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True reading=False 0x5561>; "
                           "the handler is closed")
    except RuntimeError as exc:
        return exc


def _report(context: dict[str, object]) -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        assert loop.get_exception_handler() is event_loop.exception_handler
        loop.call_exception_handler(context)
        return 0

    assert event_loop.run(main()) == 0


def test_a_write_after_close_is_one_line_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _report({"message": "Fatal error on SSL protocol", "exception": _closed_write_error(),
             "transport": "<TCPTransport closed=True>", "protocol": "<SSLProtocol>"})
    records = [r for r in caplog.records if r.name in ("asyncio", "py_scheduler.event_loop")]
    assert [(r.name, r.levelno) for r in records] == [("py_scheduler.event_loop", logging.INFO)]
    assert records[0].exc_info is None
    line = records[0].getMessage()
    assert "uvloop#506" in line and "<TCPTransport closed=True>" in line and "the handler is closed" in line
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("context", [
    {"message": "Fatal error on SSL protocol", "exception": RuntimeError("something else broke")},
    {"message": "Fatal error on SSL protocol", "exception": ValueError("the handler is closed")},
    {"message": "Task exception was never retrieved", "exception": _closed_write_error()},
], ids=["other RuntimeError", "other type", "other message"])
def test_anything_else_keeps_the_default_handlers_traceback(context: dict[str, object],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _report(context)
    records = [r for r in caplog.records if r.name in ("asyncio", "py_scheduler.event_loop")]
    assert [(r.name, r.levelno) for r in records] == [("asyncio", logging.ERROR)]
    assert records[0].exc_info is not None and records[0].exc_info[1] is context["exception"]
    assert str(context["message"]) in records[0].getMessage()
