"""A TCP proxy between one py-scheduler replica and the bed's kube-apiserver for the two *silent*
faults toxiproxy cannot make (asyncio, bytes relayed as they are: TLS passes through end to end,
the API server's certificate names 127.0.0.1):

- :meth:`FaultProxy.blackhole_established`: the connections open now carry nothing from then on,
  new ones flow (a blackholed watch). A toxiproxy toxic applies to new connections as well.
- :meth:`FaultProxy.blackhole`: established connections stay open but carry nothing, new ones are
  accepted and carry nothing either (a partition as a client sees it, packets dropped, no RST);
  :meth:`FaultProxy.heal` then delivers what was *held*, late (toxiproxy's ``timeout`` toxic drops
  it, which breaks the TLS stream instead: the late Binding would never arrive).

Latency, jitter, bandwidth, resets, a lost response and a refusing partition are toxiproxy's
(:mod:`tests.e2e.faults.toxiproxy`, ``test_toxics.py``). :meth:`FaultProxy.reset_all` closes every
connection with an RST. The API server is never mocked, only the network to it is broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from pathlib import Path

import yaml


class FaultProxy:
    """Listens on ``127.0.0.1:<port>`` (picked by the OS; :attr:`port` after :meth:`start`) and relays
    to ``upstream_host:upstream_port``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._held: set[asyncio.Event] = set()  # one per connection: cleared while it is blackholed

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def blackhole(self) -> None:
        """Stop relaying (both directions, every connection, new ones too); nothing is closed."""
        self._flowing.clear()

    def blackhole_established(self) -> int:
        """Stop relaying on the connections open now (they stay open); new ones flow. Returns how
        many were blackholed."""
        for ev in self._held:
            ev.clear()
        return len(self._held)

    def heal(self) -> None:
        self._flowing.set()
        for ev in self._held:
            ev.set()

    def reset_all(self) -> None:
        """Close every relayed connection with an RST (SO_LINGER 0)."""
        for w in list(self._writers):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.heal()
        if self._server is not None:
            self._server.close()
        self.reset_all()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def kubeconfig(self, src: Path, dest: Path) -> Path:
        """A copy of kubeconfig ``src`` whose clusters' server is this proxy."""
        return proxied_kubeconfig(src, dest, self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._flowing.wait()  # a partition: the connection is accepted and then hangs
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        flowing = asyncio.Event()
        flowing.set()
        self._held.add(flowing)
        pipes = [asyncio.ensure_future(self._pipe(reader, up_writer, flowing)),
                 asyncio.ensure_future(self._pipe(up_reader, writer, flowing))]
        for t in pipes:
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for t in pipes:
            t.cancel()
        self._held.discard(flowing)
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flowing: asyncio.Event) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(65536):
                await self._flowing.wait()  # held while blackholed
                await flowing.wait()
                writer.write(chunk)
                await writer.drain()


def proxied_kubeconfig(src: Path, dest: Path, port: int) -> Path:
    """Write to ``dest`` a copy of kubeconfig ``src`` whose clusters' server is
    ``https://127.0.0.1:<port>`` (a fault proxy in front of the API server); returns ``dest``."""
    doc = yaml.safe_load(src.read_text())
    for c in doc.get("clusters") or []:
        c["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dest.write_text(yaml.safe_dump(doc))
    return dest
