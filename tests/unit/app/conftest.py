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


@pytest.fixture
def call_api_on_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Send :meth:`Kube.request`'s requests to its ``api`` object's ``call_api(path, method, **keywords)``
    with ``ApiClient.call_api``'s keyword names: for tests whose stub API answers there."""
    from typing import Any

    from py_scheduler.app.client import internals

    async def through_stub(api: Any, path: str, method: str, *, query: Any, headers: dict[str, str],
                           body: Any = None, timeout: Any = None) -> Any:
        return await api.call_api(path, method, query_params=list(query), header_params=headers, body=body,
                                  auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)

    monkeypatch.setattr(internals, "call_api", through_stub)
