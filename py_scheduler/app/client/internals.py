"""Every use of a third-party library's internals, in one module (checked against requirements/*.lock).

Each item is a behaviour the live process needs that the library offers no public API for; each is
checked by tests/unit/test_third_party.py, which fails loudly (naming the item) when a dependency
upgrade changes it -- run by ``make lock`` before a refreshed lock is committed.

- kubernetes_asyncio: :func:`call_api` -- ``ApiClient.call_api`` with raw JSON, no model
  (de)serialisation: its generated signature (``_preload_content``, ``_request_timeout``,
  ``auth_settings``); :data:`LAZY_PACKAGES` -- the packages whose ``__init__`` :mod:`~py_scheduler.app.client.lazy_k8s`
  defers, which must consist of ``from``/``import ... as`` lines and string constants.
- kubernetes_asyncio: :func:`encode_request_bodies_with` -- ``client.rest`` encodes every JSON request
  body with a bare ``json.dumps(body)`` of its module-level ``json`` name, the only hook for the body
  bytes (:func:`py_scheduler.app.client.wire.wire_json` writes them as Go does, issue 30).
- aiohttp: :func:`no_trust_env` -- a ``ClientSession`` made by kubernetes_asyncio's REST client (which
  passes ``trust_env=True``) told to stop reading proxy variables per request (``ClientSession._trust_env``;
  the proxy is resolved once, from the environment, by the caller).
- kopf: :data:`KOPF_AUTHENTICATOR` -- the name of kopf's credentials coroutine
  (``kopf._core.engines.activities.authenticator``), whose "never awaited" warning is silenced when
  start-up fails; ``kopf.ConnectionInfo`` is a frozen keyword dataclass that
  :class:`~py_scheduler.app.client.credentials.ClusterConnection` extends with one field.

Not here because a public API does it: the bound port of the health server (the asyncio server's
``sockets``, :mod:`py_scheduler.app.serving.health`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by lazy_k8s at package import: nothing heavy at run time
    import aiohttp

LAZY_PACKAGES = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.api",
                 "kubernetes_asyncio.client.models")
"""The packages whose ``__init__`` :mod:`py_scheduler.app.client.lazy_k8s` defers, parents first."""

KOPF_AUTHENTICATOR = "authenticator"
"""The ``__name__`` of kopf's credentials coroutine (``kopf._core.engines.activities``)."""

CALL_API_KEYWORDS = ("query_params", "header_params", "body", "auth_settings", "_preload_content",
                     "_request_timeout")
"""The keyword arguments of ``kubernetes_asyncio.client.ApiClient.call_api`` that :func:`call_api` passes."""


async def call_api(api: Any, path: str, method: str, *, query: Sequence[tuple[str, str]], headers: dict[str, str],
                   body: Any = None, timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
    """``ApiClient.call_api`` with raw JSON: the unread response (the caller reads and releases it),
    bearer-token auth from the client's Configuration, no model deserialisation."""
    resp: aiohttp.ClientResponse = await api.call_api(path, method, query_params=list(query), header_params=headers,
                                                      body=body, auth_settings=["BearerToken"],
                                                      _preload_content=False, _request_timeout=timeout)
    return resp


def no_trust_env(session: aiohttp.ClientSession) -> None:
    """Stop ``session`` from reading proxy environment variables on every request."""
    if hasattr(session, "_trust_env"):
        session._trust_env = False


class _BodyJSON:
    """Stands in for the ``json`` module inside ``kubernetes_asyncio.client.rest``."""

    dumps: Any = None
    loads: Any = None


def encode_request_bodies_with(dumps: Any) -> None:
    """Make kubernetes_asyncio's REST client encode every JSON request body (POST/PUT/PATCH/DELETE of
    :meth:`~py_scheduler.app.client.kube.Kube.request` and the generated clients alike) with ``dumps``
    (``obj -> str``), by replacing the ``json`` module name ``RESTClientObject.request`` calls."""
    import json

    from kubernetes_asyncio.client import rest

    _BodyJSON.dumps = staticmethod(dumps)
    _BodyJSON.loads = staticmethod(json.loads)
    setattr(rest, "json", _BodyJSON)  # noqa: B010 - the module kubernetes_asyncio encodes bodies with
