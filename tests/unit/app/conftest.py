"""Fixtures of the app unit tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

_LOGGERS = ("", "py_scheduler", "py_scheduler.framework", "kopf", "aiohttp", "kubernetes_asyncio", "asyncio",
            "kubernetes_asyncio.client.rest")


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """``setup_logging`` reconfigures process-wide loggers; put them back after each test."""
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers)) for name in _LOGGERS}
    try:
        yield
    finally:
        for name, (level, handlers) in saved.items():
            lg = logging.getLogger(name)
            lg.setLevel(level)
            lg.handlers[:] = handlers
