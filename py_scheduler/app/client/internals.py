"""Every use of a third-party library's internals, in one module (checked against requirements/*.lock).

Each item is a behaviour the live process needs that the library offers no public API for; each is
checked by tests/unit/test_third_party.py, which fails loudly (naming the item) when a dependency
upgrade changes it -- run by ``make lock`` before a refreshed lock is committed.

- kubernetes_asyncio: :func:`call_api` -- one request as ``ApiClient.call_api`` would send it with
  raw JSON, sent straight on the REST client's ``aiohttp`` session: the client's ``default_headers``
  and ``cookie``, the Configuration's ``host`` and ``auth_settings()`` (a refreshed bearer token), the
  REST client's ``pool_manager``, ``proxy``, ``proxy_headers`` and ``server_hostname``
  (``ApiClient.call_api`` spends about 40 us a request sanitising and re-encoding arguments that are
  already plain); :data:`LAZY_PACKAGES` -- the packages whose ``__init__`` :mod:`~py_scheduler.app.client.lazy_k8s`
  defers, which must consist of ``from``/``import ... as`` lines and string constants.
- kubernetes_asyncio: :func:`encode_request_bodies_with` -- ``client.rest`` encodes every JSON request
  body with a bare ``json.dumps(body)`` of its module-level ``json`` name, the only hook for the body
  bytes (:func:`py_scheduler.app.client.wire.wire_json` writes them as Go does, issue 30).
- aiohttp: :func:`no_trust_env` -- a ``ClientSession`` made by kubernetes_asyncio's REST client (which
  passes ``trust_env=True``) told to stop reading proxy variables per request (``ClientSession._trust_env``;
  the proxy is resolved once, from the environment, by the caller).
- aiohttp, CPython and OpenSSL: :func:`send_certificate_file_only` (and :func:`ssl_mode`) -- the TLS context of a
  ``ClientSession``'s connector (``TCPConnector._ssl``, where kubernetes_asyncio's REST client puts the
  context it builds), the ``SSL_CTX`` pointer behind an ``ssl.SSLContext`` (the first field after the
  object header in CPython's ``_ssl`` module) and OpenSSL's ``SSL_CTX_ctrl(SSL_CTRL_MODE,
  SSL_MODE_NO_AUTO_CHAIN)``, which the ``ssl`` module does not expose.
- kopf: :data:`KOPF_AUTHENTICATOR` -- the name of kopf's credentials coroutine
  (``kopf._core.engines.activities.authenticator``), whose "never awaited" warning is silenced when
  start-up fails; ``kopf.ConnectionInfo`` is a frozen keyword dataclass that
  :class:`~py_scheduler.app.client.credentials.ClusterConnection` extends with one field.

Not here because a public API does it: the bound port of the health server (the asyncio server's
``sockets``, :mod:`py_scheduler.app.serving.health`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

if TYPE_CHECKING:  # imported by lazy_k8s at package import: nothing heavy at run time (ssl and ctypes: 16 ms)
    import ssl

    import aiohttp

LAZY_PACKAGES = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.api",
                 "kubernetes_asyncio.client.models")
"""The packages whose ``__init__`` :mod:`py_scheduler.app.client.lazy_k8s` defers, parents first."""

KOPF_AUTHENTICATOR = "authenticator"
"""The ``__name__`` of kopf's credentials coroutine (``kopf._core.engines.activities``)."""

async def call_api(api: Any, path: str, method: str, *, query: Sequence[tuple[str, str]], headers: dict[str, str],
                   body: Any = None, timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
    """The request ``ApiClient.call_api(path, method, query_params=query, header_params=headers,
    body=body, auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)``
    sends (kubernetes_asyncio ``api_client.py`` ``__call_api``, ``rest.py`` ``request``), sent
    directly: ``headers`` then the client's default headers (its User-Agent) and cookie, the bearer
    token the Configuration gives now (``auth_settings`` runs its refresh hook), a JSON
    ``Content-Type`` when ``headers`` name none, the URL
    ``host + path`` with ``query`` URL-encoded, ``body`` (None, or a GET's or HEAD's: no body)
    encoded by the REST module's JSON encoder (:func:`encode_request_bodies_with`), the proxy and
    TLS server name the REST client was built with. Returns the unread response (the caller reads
    and releases it). ``body`` is a plain JSON value (what ``sanitize_for_serialization`` returns
    unchanged; no datetimes or generated models) or ``bytes``, sent as they are."""
    hdrs = dict(headers)
    hdrs.update(api.default_headers)
    if api.cookie:
        hdrs["Cookie"] = api.cookie
    cfg = api.configuration
    token = (await cfg.auth_settings()).get("BearerToken")
    if token:
        hdrs[token["key"]] = token["value"]
    hdrs.setdefault("Content-Type", "application/json")
    url = cfg.host + path
    if query:
        url += "?" + urlencode(query)
    client = api.rest_client
    extra: dict[str, Any] = {}
    if client.proxy:
        extra["proxy"] = client.proxy
    if client.proxy_headers:
        extra["proxy_headers"] = client.proxy_headers
    if client.server_hostname:
        extra["server_hostname"] = client.server_hostname
    data = (None if body is None or method in ("GET", "HEAD")
            else body if isinstance(body, bytes) else _encode_body(body))
    resp: aiohttp.ClientResponse = await client.pool_manager.request(
        method=method, url=url, headers=hdrs, data=data, timeout=timeout, **extra)
    return resp


def _encode_body(body: Any) -> str:
    """``body`` encoded as :func:`encode_request_bodies_with` set (``wire`` sets it at import)."""
    if _BodyJSON.dumps is None:
        raise RuntimeError("no request body encoder: import py_scheduler.app.client.wire first")
    encoded: str = _BodyJSON.dumps(body)
    return encoded


def no_trust_env(session: aiohttp.ClientSession) -> None:
    """Stop ``session`` from reading proxy environment variables on every request."""
    if hasattr(session, "_trust_env"):
        session._trust_env = False


_SSL_CTRL_MODE = 33
_SSL_MODE_NO_AUTO_CHAIN = 0x8
"""OpenSSL's ``SSL_CTRL_MODE`` and ``SSL_MODE_NO_AUTO_CHAIN`` (``openssl/ssl.h``, 1.1.0 to 3.x; LibreSSL alike)."""


def send_certificate_file_only(session: aiohttp.ClientSession) -> bool:
    """Make ``session`` send the certificates of its client certificate file and no others, as
    client-go (Go's crypto/tls) does; returns whether it could.

    OpenSSL, given a certificate file with no chain, builds one from the trust store and sends it, so
    a client certificate signed by the CA that also signed the API server's (kubeadm, kind, the test
    bed) goes out with that CA. kube-apiserver then checks the longer chain on every request, once
    against the request-header CA and once against the client CA (k8s.io/apiserver
    ``pkg/authentication/request/x509``, ``Verifier`` and ``Authenticator``): two ECDSA verifications
    a request more than for client-go's leaf alone. A chain written in the certificate file is sent
    as before; an intermediate CA found only in the trust store is no longer sent (client-go does not
    send it either). False (nothing changed) when the session has no TLS context of its own, the
    interpreter is not CPython, or its ``libssl`` lacks the two functions or does not read back the
    context's options through the pointer taken.

    The pointer is the first field after the object header of CPython's ``PySSLContext``
    (``Modules/_ssl.c``, unchanged from 3.x to 3.13, free-threaded builds included through
    ``object.__basicsize__``). That layout is assumed, not detected: the options read back through it
    guard the write, and tests/unit/test_third_party.py fails when it changes."""
    import ssl

    ctx = getattr(session.connector, "_ssl", None)
    if not isinstance(ctx, ssl.SSLContext):
        return False
    mode = _mode(ctx, _SSL_MODE_NO_AUTO_CHAIN)
    return mode is not None and bool(mode & _SSL_MODE_NO_AUTO_CHAIN)


def ssl_mode(ctx: ssl.SSLContext) -> int | None:
    """OpenSSL's mode bits of ``ctx`` (``SSL_CTX_get_mode``); None where :func:`send_certificate_file_only`
    could not reach them."""
    return _mode(ctx, 0)


def _mode(ctx: ssl.SSLContext, add: int) -> int | None:
    """``SSL_CTX_set_mode(add)`` on the ``SSL_CTX *`` behind ``ctx`` (0 reads the mode), when the
    options read through that pointer are ``ctx``'s; the mode after it, or None."""
    import ctypes

    lib = _libssl()
    if lib is None:
        return None
    ptr = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not ptr or lib.SSL_CTX_get_options(ptr) != ctx.options:
        return None
    return int(lib.SSL_CTX_ctrl(ptr, _SSL_CTRL_MODE, add, None))


@functools.cache
def _libssl() -> Any:
    """The ``libssl`` the ``ssl`` module runs on, with the two functions used typed; None where it
    cannot be had (not CPython, no field after ``SSLContext``'s object header, a TLS library without
    those functions, a platform where the lookup fails)."""
    import _ssl
    import ctypes
    import ssl
    import sys

    if sys.implementation.name != "cpython" or ssl.SSLContext.__basicsize__ <= object.__basicsize__:
        return None
    try:
        lib = ctypes.CDLL(getattr(_ssl, "__file__", None))  # None: linked into the interpreter
        ctrl, options = lib.SSL_CTX_ctrl, lib.SSL_CTX_get_options
    except Exception:  # OSError, AttributeError, TypeError (Windows: CDLL(None)): go without
        return None
    ctrl.restype, ctrl.argtypes = ctypes.c_long, [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
    options.restype, options.argtypes = ctypes.c_uint64, [ctypes.c_void_p]
    return lib


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
