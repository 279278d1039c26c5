"""A minimal asyncio Kubernetes API client for the benchmarks (aiohttp + orjson, client certificate).

Only what the benches need: JSON requests, bulk creation with bounded concurrency, a client-side
token bucket (``qps`` / ``burst``, like client-go's ``flowcontrol`` rate limiter), and watch streams
decoded line by line. Paths are raw API paths (``/api/v1/namespaces/ns/pods``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

Obj = dict[str, Any]


class ApiError(RuntimeError):
    """A non-2xx answer: ``status`` (HTTP code) and the API's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the API server is and how to authenticate (file paths)."""

    server: str
    ca_file: str
    cert_file: str
    key_file: str

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def argv(self) -> list[str]:
        """Command-line form understood by :func:`endpoint_from_args` (for child processes)."""
        return ["--server", self.server, "--ca", self.ca_file, "--cert", self.cert_file, "--key", self.key_file]


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` banked (client-go's token bucket)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.last = time.monotonic()

    async def take(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.qps)


class Api:
    """An API session (use as ``async with Api(endpoint) as api``)."""

    def __init__(self, endpoint: Endpoint, *, qps: float = 5000.0, burst: int = 5000, connections: int = 100) -> None:
        self.endpoint = endpoint
        self.bucket = TokenBucket(qps, burst)
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        conn = aiohttp.TCPConnector(ssl=self.endpoint.ssl_context(), limit=self.connections)
        self._session = aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use Api as an async context manager"
        return self._session

    async def request(self, method: str, path: str, body: Obj | None = None,
                      params: dict[str, str] | None = None) -> Obj:
        """One JSON request. Raises ApiError on a non-2xx answer."""
        await self.bucket.take()
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        async with self.session.request(method, self.endpoint.server + path, data=data, params=params,
                                        headers=headers) as resp:
            raw = await resp.read()
            if resp.status >= 300:
                try:
                    msg = str(orjson.loads(raw).get("message", raw[:200]))
                except orjson.JSONDecodeError:
                    msg = raw[:200].decode(errors="replace")
                raise ApiError(resp.status, msg)
            out: Obj = orjson.loads(raw) if raw else {}
            return out

    async def create_many(self, path_for: Callable[[Obj], str], objects: Iterable[Obj], *, concurrency: int = 32,
                          on_created: Callable[[Obj, float], None] | None = None,
                          exist_ok: bool = False) -> int:
        """POST every object (``path_for(obj)`` gives the collection path), ``concurrency`` at a time;
        ``on_created(obj, perf_counter_at_return)`` after each. Returns how many were created.

        Raises:
            ApiError: a create failed (409 AlreadyExists too, unless ``exist_ok``).
        """
        sem = asyncio.Semaphore(concurrency)
        created = 0

        async def one(obj: Obj) -> None:
            nonlocal created
            async with sem:
                try:
                    await self.request("POST", path_for(obj), obj)
                except ApiError as exc:
                    if exist_ok and exc.status == 409:
                        return
                    raise
                created += 1
                if on_created is not None:
                    on_created(obj, time.perf_counter())

        await gather_bounded(one(o) for o in objects)
        return created

    async def watch(self, path: str, resource_version: str, params: dict[str, str] | None = None,
                    ) -> AsyncIterator[Obj]:
        """Watch events (``{"type", "object"}``) of a collection from ``resource_version``."""
        q = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "false"}
        q.update(params or {})
        async with self.session.get(self.endpoint.server + path, params=q) as resp:
            if resp.status >= 300:
                raise ApiError(resp.status, (await resp.read())[:200].decode(errors="replace"))
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1:]
                    if line.strip():
                        yield orjson.loads(line)


async def gather_bounded(coros: Iterable[Awaitable[None]], window: int = 2000) -> None:
    """Await ``coros`` (an iterable, consumed lazily) with at most ``window`` pending at a time."""
    pending: set[asyncio.Future[None]] = set()
    for c in coros:
        pending.add(asyncio.ensure_future(c))
        if len(pending) >= window:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for d in done:
                d.result()
    if pending:
        done, _ = await asyncio.wait(pending)
        for d in done:
            d.result()


def binding(namespace: str, name: str, node: str) -> Obj:
    """A ``Binding`` of Pod ``namespace/name`` to ``node`` (POST to ``.../pods/<name>/binding``)."""
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
