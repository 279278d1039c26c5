"""toxiproxy between one py-scheduler replica and the bed's kube-apiserver, driven over its HTTP API.

The server is Shopify's toxiproxy (``github.com/Shopify/toxiproxy/v2/cmd/server``), built from its Go
module into the test bed's cache (:func:`tests.e2e.testbed.bed.build_toxiproxy`, the pin in
``tests/e2e/testbed/toxiproxy/go.mod``) and started per test module on a free loopback port. Bytes are
relayed as they are: TLS passes end to end (the API server's certificate names 127.0.0.1).

Toxics used (toxiproxy v2.5.0 ``toxics/*.go``; ``stream`` is ``downstream`` = server to client, or
``upstream`` = client to server; a toxic applies to the connections open now and to new ones):

- ``latency`` ``{"latency": ms, "jitter": ms}``: each chunk delayed latency +- jitter;
- ``bandwidth`` ``{"rate": KB/s}``;
- ``timeout`` ``{"timeout": ms}``: data dropped; the connection closed after ``ms`` (0: never, a blackhole);
- ``reset_peer`` ``{"timeout": ms}``: the connection reset (RST, SO_LINGER 0) when data next arrives;
- ``limit_data`` ``{"bytes": n}``: the connection closed after ``n`` bytes.

Disabling the proxy (:meth:`Proxy.disable`) closes every connection and refuses new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.e2e.faults.netproxy import proxied_kubeconfig
from tests.e2e.helpers import bed, unique_name, wait_for  # bed: the test bed's module, imported by helpers


class ToxiproxyError(AssertionError):
    """The toxiproxy API refused a request (status and body in the message)."""


class Toxiproxy:
    """One ``toxiproxy-server`` process (loopback only) and an aiohttp session to its API."""

    def __init__(self, log_path: Path, *, seed: int = 1) -> None:
        self.log_path = log_path
        self.seed = seed
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, timeout: float = 30.0) -> None:
        """Build if needed (cached: nothing happens), start, wait until ``/version`` answers.

        Raises:
            TestbedError: the build failed; AssertionError: the server did not answer in ``timeout``.
        """
        binary = await asyncio.to_thread(bed.build_toxiproxy)
        self.port = bed.free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(binary), "-host", "127.0.0.1", "-port", str(self.port),
                                          "-seed", str(self.seed)], stdout=log, stderr=subprocess.STDOUT)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

        async def answers() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log_path.read_text()[-2000:]
            try:
                await self._call("GET", "/version")
            except aiohttp.ClientError:
                return False
            return True

        await wait_for(answers, timeout=timeout, interval=0.1, what="toxiproxy answering")

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        assert self._session is not None, "start() first"
        async with self._session.request(method, self.url + path, json=body) as r:
            text = await r.text()
            if r.status >= 300:
                raise ToxiproxyError(f"toxiproxy {method} {path}: {r.status} {text[:300]}")
            return yaml.safe_load(text) if text else None  # JSON is YAML

    async def proxy(self, upstream: str, name: str | None = None) -> Proxy:
        """A new proxy listening on a free loopback port, relaying to ``upstream`` (``host:port``)."""
        name = name or unique_name("proxy")
        got = await self._call("POST", "/proxies", {"name": name, "listen": "127.0.0.1:0", "upstream": upstream,
                                                   "enabled": True})
        return Proxy(self, name, int(str(got["listen"]).rsplit(":", 1)[1]))


class Proxy:
    """One toxiproxy proxy: its toxics and its enabled state."""

    def __init__(self, server: Toxiproxy, name: str, port: int) -> None:
        self.server = server
        self.name = name
        self.port = port

    async def add(self, type_: str, stream: str = "downstream", **attributes: int) -> str:
        """Add a toxic (``type_``, ``attributes``: see the module docstring) named
        ``<type_>_<stream>``, applied to every connection (toxicity 1); returns its name."""
        return await self._add(type_, stream, attributes)

    async def _add(self, type_: str, stream: str, attributes: dict[str, int]) -> str:
        name = f"{type_}_{stream}"
        await self.server._call("POST", f"/proxies/{self.name}/toxics",
                                {"name": name, "type": type_, "stream": stream, "toxicity": 1.0,
                                 "attributes": attributes})
        return name

    async def remove(self, name: str) -> None:
        await self.server._call("DELETE", f"/proxies/{self.name}/toxics/{name}")

    async def clear(self) -> None:
        """Remove every toxic."""
        for t in await self.server._call("GET", f"/proxies/{self.name}/toxics") or []:
            await self.remove(str(t["name"]))

    @contextlib.asynccontextmanager
    async def toxic(self, type_: str, stream: str = "downstream", **attributes: int) -> AsyncIterator[str]:
        """The toxic while the block runs (removed on the way out, even on failure)."""
        name = await self._add(type_, stream, attributes)
        try:
            yield name
        finally:
            await self.remove(name)

    async def disable(self) -> None:
        """Close every connection and refuse new ones (a partition that the client sees at once)."""
        await self.server._call("POST", f"/proxies/{self.name}", {"enabled": False})

    async def enable(self) -> None:
        await self.server._call("POST", f"/proxies/{self.name}", {"enabled": True})

    def kubeconfig(self, src: Path, dest: Path) -> Path:
        """A copy of kubeconfig ``src`` whose clusters' server is this proxy."""
        return proxied_kubeconfig(src, dest, self.port)
