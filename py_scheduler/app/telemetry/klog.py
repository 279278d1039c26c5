"""Logging of the live scheduler: klog-style ``--v`` verbosity mapped to Python logging.

Upstream: ``k8s.io/klog/v2`` verbosity as kube-scheduler uses it: ``--v=2`` (default) logs
bindings and failures, ``--v=3``/``4`` queue moves and per-Pod attempts, ``--v=10`` every plugin's
score per node (``Plugin scored node for pod``) and each node's total (``Calculated node's final
score for pod``) - ``pkg/scheduler/schedule_one.go`` ``prioritizeNodes``.

Mapping: ``v < 4`` -> INFO; ``4 <= v < 10`` -> DEBUG for py-scheduler's loggers except the
per-node score lines of ``py_scheduler.framework`` (DEBUG only from ``v >= 10``, they are one line per
plugin x node); kopf's, aiohttp's and kubernetes_asyncio's own loggers stay at WARNING below
``v = 11`` (kopf logs two lines per watch event at INFO). Lines look like
klog's: ``I0102 15:04:05.123456 1234 scheduler.loop] message``.

Secrets: nothing here logs request headers; :class:`RedactingFilter` also masks anything that looks
like a bearer token in a message, as a last line of defence.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import ClassVar, TextIO

__all__ = ["KlogFormatter", "RedactingFilter", "setup_logging", "v", "verbosity_level"]

_TOKEN = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9\-._~+/]+=*")


_verbosity = 2
"""The ``--v`` of the last :func:`setup_logging` (2, kube-scheduler's usual setting, until then)."""


def v(level: int) -> bool:
    """klog's ``V(level).Enabled()``: whether ``--v`` is at least ``level``.

    For per-Pod lines upstream writes at ``V(2)`` (``Successfully bound pod to node``, ``Unable to
    schedule pod; no fit; waiting``): below ``--v=2`` they are not even formatted, as upstream.
    """
    return _verbosity >= level


def verbosity_level(v: int) -> int:
    """The Python level for py-scheduler's loggers at klog verbosity ``v``."""
    return logging.DEBUG if v >= 4 else logging.INFO


class KlogFormatter(logging.Formatter):
    """``Lmmdd hh:mm:ss.uuuuuu pid logger] msg`` with L in I/W/E/F (debug lines print as I, as klog)."""

    _LETTERS: ClassVar[dict[int, str]] = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W",
                                          logging.ERROR: "E", logging.CRITICAL: "F"}

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        micros = int((record.created - int(record.created)) * 1_000_000)
        letter = self._LETTERS.get(record.levelno, "I")
        head = f"{letter}{time.strftime('%m%d %H:%M:%S', t)}.{micros:06d} {os.getpid()} {record.name}] "
        msg = head + record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        return msg


class RedactingFilter(logging.Filter):
    """Masks ``Bearer <token>`` in log messages."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "earer" in msg:
            record.msg = _TOKEN.sub(r"\1<redacted>", msg)
            record.args = None
        return True


def setup_logging(v: int, stream: TextIO | None = None) -> None:
    """Configure the root logger for verbosity ``v`` (idempotent: replaces earlier handlers)."""
    global _verbosity
    _verbosity = v
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(KlogFormatter())
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("py_scheduler").setLevel(verbosity_level(v))
    logging.getLogger("py_scheduler.framework").setLevel(logging.DEBUG if v >= 10 else logging.INFO)
    third_party = logging.DEBUG if v >= 12 else logging.INFO if v >= 11 else logging.WARNING
    for name in ("kopf", "aiohttp", "kubernetes_asyncio", "asyncio"):
        logging.getLogger(name).setLevel(third_party)
    # kubernetes_asyncio logs whole response bodies at DEBUG; never at any verbosity.
    logging.getLogger("kubernetes_asyncio.client.rest").setLevel(logging.INFO)
