"""Connection limits of the metrics/health server (``py_scheduler.app.serving.health``: header deadline,
keep-alive, connection cap, the open-file limit): slow clients cannot hold it (issue 31)."""

from __future__ import annotations

import asyncio
import resource
import ssl
import subprocess
import sys
import time

import aiohttp
import pytest

from py_scheduler.app.serving.health import ConnectionLimits, HealthServer, raise_nofile_limit
from py_scheduler.app.serving.secure import server_ssl_context

_NO_VERIFY = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
_NO_VERIFY.check_hostname, _NO_VERIFY.verify_mode = False, ssl.CERT_NONE


async def _half_header(port: int, tls: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that sent half a request header and then nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_NO_VERIFY if tls else None)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    await writer.drain()
    return reader, writer


async def _closed(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except (ConnectionError, ssl.SSLError):
        return True


@pytest.mark.parametrize("tls,n", [(False, 200), (True, 10)])
async def test_slow_loris_connections_are_closed_by_the_header_deadline(tls: bool, n: int) -> None:
    """``n`` connections that sent half a header are closed by the (shortened) deadline, while a
    legitimate request is served. 200 over plain HTTP (the same server and limits; TLS handshakes of
    both ends in one process take minutes on a loaded 2-core machine), a few over TLS."""
    srv = HealthServer("127.0.0.1:0", lambda: True, ssl_context=server_ssl_context() if tls else None,
                       limits=ConnectionLimits(header_timeout=2.0))
    await srv.start()
    try:
        slow = await asyncio.gather(*(_half_header(srv.port, tls) for _ in range(n)))
        opened = time.monotonic()
        assert len(srv.conns.open) >= n // 2  # held (the first ones may be past their deadline already)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s, \
                s.get(f"{srv.scheme}://127.0.0.1:{srv.port}/livez", ssl=False) as r:
            assert r.status == 200 and await r.text() == "ok"  # meanwhile a legitimate request is served
        closed = await asyncio.gather(*(_closed(rd, 60) for rd, _ in slow))
        assert all(closed) and time.monotonic() - opened < 30  # aiohttp alone: 3630 s
        assert srv.conns.expired >= n and not srv.conns.open
        for _, w in slow:
            w.close()
    finally:
        await srv.stop()


async def test_a_connection_serving_a_request_is_not_cut_by_the_deadline_and_keeps_alive() -> None:
    """The deadline stops once the header arrived (a slow handler is not cut) and restarts with the
    next request on the same connection; an idle keep-alive connection goes after keepalive_timeout."""
    srv = HealthServer("127.0.0.1:0", lambda: True, limits=ConnectionLimits(header_timeout=0.5,
                                                                           keepalive_timeout=1.5))

    async def slow(_r: aiohttp.web.Request) -> aiohttp.web.Response:
        await asyncio.sleep(1.0)
        return aiohttp.web.Response(text="slow")

    srv.add_get("/slow", slow)
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        for _ in range(2):  # two requests on one connection
            writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200") and b"Server: py-scheduler\r\n" in head
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"slow"
        t0 = time.monotonic()
        assert await _closed(reader, 10)  # idle: closed by keep-alive, not at once
        assert 1.0 < time.monotonic() - t0 < 5
        writer.close()
    finally:
        await srv.stop()


async def test_connections_beyond_the_cap_are_closed_at_once() -> None:
    srv = HealthServer("127.0.0.1:0", lambda: True, limits=ConnectionLimits(max_connections=5))
    await srv.start()
    try:
        held = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(5)]
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        assert await _closed(reader, 5) and srv.conns.refused >= 1
        writer.close()
        for _, w in held:
            w.close()
        deadline = time.monotonic() + 5
        while srv.conns.open and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{srv.port}/livez") as r:
            assert r.status == 200  # room again
    finally:
        await srv.stop()


def test_default_limits_are_upstreams() -> None:
    limits = ConnectionLimits()
    assert (limits.header_timeout, limits.keepalive_timeout) == (30.0, 75.0) and limits.max_connections >= 1000


def test_soft_open_file_limit_is_raised_to_the_hard_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < 512:
        pytest.skip(f"hard open-file limit {hard} too low to lower the soft one")
    code = (f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (256, {hard})); "
            "from py_scheduler.app.serving.health import raise_nofile_limit; print(raise_nofile_limit(), "
            "resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split() == [f"({hard},", f"{hard})", f"({hard},", f"{hard})"], out
    assert raise_nofile_limit()[0] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_run_raises_the_open_file_limit_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from py_scheduler.app.process import main
    from py_scheduler.app.serving import health

    called: list[bool] = []
    monkeypatch.setattr(health, "raise_nofile_limit", lambda: called.append(True) or (0, 0))
    assert main.run_scheduler(None, None, None, None, None, "", 0, feature_gates="NoSuchGate=true") == 1
    assert called == [True]
