"""Secure serving of the metrics/health port, as kube-scheduler's: TLS, and delegated authentication
and authorization through the API server for every path but the health checks.

- **TLS**: the certificate and key of ``--tls-cert-file`` / ``--tls-private-key-file``, or, without
  them, a self-signed ECDSA P-256 certificate made at start for ``localhost``, ``127.0.0.1``, ``::1``
  and the host name, valid one year, kept in memory only (:func:`self_signed_cert`; the root file
  system of the Deployment is read-only). TLS 1.2 at least.
- **Authentication** (:meth:`DelegatingAuth.authenticate`): a request without credentials is
  ``system:anonymous`` in ``system:unauthenticated``; a bearer token is checked with a
  ``TokenReview``; an unknown token answers 401. Answers are cached 10 s (by the token's SHA-256,
  the token itself is never kept nor logged). The token is read (:func:`request_token`) from
  ``Authorization: Bearer``, else from ``X-Py-Scheduler-Authorization: Bearer`` (the API server's
  Pod proxy forwards no identity and strips ``Authorization`` after its own authentication, but
  passes other headers on: ``explain`` sends the user's token in this one), else from the
  ``py-scheduler-token`` cookie a login page set (:class:`LoginPage`: HttpOnly, Secure,
  SameSite=Strict, no Path so that it stays under the API server's proxy prefix). Each is reviewed
  exactly as the first: nothing the proxy adds is trusted.
- **Authorization** (:meth:`DelegatingAuth.authorize`): members of ``system:masters`` may do
  anything; everyone else needs a ``SubjectAccessReview`` allowing the non-resource URL (``path``,
  ``verb`` = the lower-cased HTTP method: ``get`` for a scrape); denied answers 403. Allowed and
  denied answers are cached 10 s each. An API failure answers 401 (authentication) or 500
  (authorization): never served by default.
- **Always-allowed paths** (``--authorization-always-allow-paths``, default ``/healthz``,
  ``/readyz``, ``/livez``; a trailing ``*`` matches a prefix): served to anyone, without asking
  the API server, so the kubelet's probes work without a token and while the API is unreachable.

Not reproduced: client-certificate authentication (the ``requestheader`` / ``client-ca`` of the
``extension-apiserver-authentication`` ConfigMap; only bearer tokens are accepted), reloading a
certificate file when it changes (restart the Pod), token audiences.

Upstream: ``staging/src/k8s.io/apiserver/pkg/server/options/serving.go``
(``MaybeDefaultWithSelfSignedCerts``), ``.../options/authentication.go`` (``DelegatingAuthenticationOptions``:
anonymous enabled, 10 s cache), ``.../options/authorization.go`` (``DelegatingAuthorizationOptions``:
``AlwaysAllowPaths`` /healthz /readyz /livez, ``AlwaysAllowGroups`` system:masters, 10 s allow and
deny caches), ``.../pkg/authorization/path`` (the ``*`` prefix rule), ``.../pkg/endpoints/filters``
(``WithAuthentication`` 401, ``WithAuthorization`` 403 / 500), ``cmd/kube-scheduler/app/options``.
Why a header and a cookie besides ``Authorization``: ``.../endpoints/filters/authentication.go``
deletes ``Authorization`` once the API server authenticated the request, and the Pod proxy
(``pkg/registry/core/pod/rest/subresources.go``, ``ProxyREST.Connect``; ``apimachinery/pkg/util/proxy``
``UpgradeAwareHandler`` and ``Transport``) forwards the other headers, cookies and ``Set-Cookie``,
leaves relative ``Location`` headers and links alone and prefixes absolute-path links in HTML. The
sign-in page follows the Kubernetes Dashboard's token login (a token pasted into a form, kept in a
cookie).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import logging
import socket
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from py_scheduler.app.kube import KubeError

log = logging.getLogger("py_scheduler.secure")

DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
DEFAULT_ALWAYS_ALLOW_GROUPS = ("system:masters",)
CACHE_TTL = 10.0
"""Seconds a TokenReview / SubjectAccessReview answer is reused (upstream's defaults)."""
CACHE_SIZE = 4096
"""Entries per cache at most (oldest dropped first)."""
REVIEW_TIMEOUT = 10.0
"""Seconds one TokenReview / SubjectAccessReview may take."""

TOKEN_HEADER = "X-Py-Scheduler-Authorization"
"""The header a caller behind the API server's Pod proxy puts its bearer token in (``Bearer <token>``)."""
TOKEN_COOKIE = "py-scheduler-token"
"""The cookie a :class:`LoginPage` sets (HttpOnly, Secure, SameSite=Strict; a browser session's)."""
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")
"""Characters of a bearer token (RFC 6750 ``b64token``): also safe in a cookie value."""

ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"


class MalformedCredentials(ValueError):
    """A credential header is present but is not ``Bearer <token>``."""


def request_token(request: web.Request) -> str | None:
    """The bearer token of ``request``: ``Authorization``, else :data:`TOKEN_HEADER`, else the
    :data:`TOKEN_COOKIE` cookie; None when there is none.

    Raises:
        MalformedCredentials: a header present that is not ``Bearer <token>``, or a cookie whose
            value is no bearer token.
    """
    for name in ("Authorization", TOKEN_HEADER):
        header = request.headers.get(name)
        if header is None:
            continue
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise MalformedCredentials(name)
        return token
    cookie = request.cookies.get(TOKEN_COOKIE)
    if cookie:
        if not is_token(cookie):
            raise MalformedCredentials(TOKEN_COOKIE)
        return cookie
    return None


def is_token(value: str) -> bool:
    """``value`` looks like a bearer token (RFC 6750 ``b64token``, at most 16 KiB)."""
    return 0 < len(value) <= 16384 and _TOKEN_CHARS.issuperset(value)


def token_cookie(token: str | None) -> str:
    """The ``Set-Cookie`` value carrying ``token`` (None: clearing it). No ``Path``: the browser
    scopes the cookie to the directory of the login URL, so it also works under the API server's
    proxy prefix (``/api/v1/namespaces/NS/pods/https:POD:10259/proxy/debug/decisions``)."""
    attrs = "HttpOnly; Secure; SameSite=Strict"
    return f"{TOKEN_COOKIE}={token}; {attrs}" if token else f"{TOKEN_COOKIE}=; Max-Age=0; {attrs}"


class LoginPage(Protocol):
    """Renders a login form for a browser that reached a protected page without (valid) credentials:
    ``(request, status, message)`` -> the response (``status`` 401 or 403, ``message`` why)."""

    def __call__(self, request: web.Request, status: int, message: str) -> web.Response: ...


class ReviewClient(Protocol):
    """What :class:`DelegatingAuth` needs of :class:`py_scheduler.app.kube.Kube`."""

    async def request(self, method: str, path: str, *, body: Any = None, retries: int | None = None,
                      timeout: float = ...) -> Any: ...


# -- TLS -------------------------------------------------------------------------------------------------

def self_signed_cert(host: str | None = None, days: int = 365) -> tuple[bytes, bytes]:
    """A self-signed serving certificate and its key, both PEM.

    Subject CN ``<host>@<unix time>``; SANs ``localhost``, ``host`` (default: this host name),
    127.0.0.1 and ::1; ``serverAuth`` extended key usage; valid from one hour ago for ``days`` days.

    Upstream: ``client-go/util/cert`` ``GenerateSelfSignedCertKeyWithFixtures`` (called by
    ``MaybeDefaultWithSelfSignedCerts("localhost", nil, [127.0.0.1])``).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    host = host or socket.gethostname() or "localhost"
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(now.timestamp())}")])
    dns = list(dict.fromkeys(["localhost", host]))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def server_ssl_context(cert_file: Path | str | None = None, key_file: Path | str | None = None) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or later) for ``cert_file`` / ``key_file`` (PEM), or for a fresh
    :func:`self_signed_cert` when both are None. The generated pair only touches the disk inside a
    private temporary directory that is removed before this returns (``ssl`` loads chains from files).

    Raises:
        ValueError: only one of the two files given.
        OSError, ssl.SSLError: a file cannot be read or the pair does not match.
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if (cert_file is None) != (key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
    if cert_file is not None and key_file is not None:
        ctx.load_cert_chain(str(cert_file), str(key_file))
        return ctx
    cert, key = self_signed_cert()
    with tempfile.TemporaryDirectory(prefix="py-scheduler-tls-") as d:
        cp, kp = Path(d) / "tls.crt", Path(d) / "tls.key"
        cp.write_bytes(cert)
        kp.touch(mode=0o600)
        kp.write_bytes(key)
        ctx.load_cert_chain(str(cp), str(kp))
    return ctx


# -- delegated authentication and authorization ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class UserInfo:
    """An authenticated (or anonymous) user, as a TokenReview returns it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)


ANONYMOUS_USER = UserInfo(ANONYMOUS, groups=(UNAUTHENTICATED,))


class AuthError(Exception):
    """The API server could not answer a review (status 0 for a connection failure)."""


class _TTLCache:
    """A small time-bounded LRU: ``get`` returns None for a missing or expired key."""

    def __init__(self, ttl: float, size: int, now: Callable[[], float]) -> None:
        self.ttl = ttl
        self.size = size
        self._now = now
        self._d: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any) -> Any:
        hit = self._d.get(key)
        if hit is None:
            return None
        if hit[0] <= self._now():
            del self._d[key]
            return None
        self._d.move_to_end(key)
        return hit[1]

    def put(self, key: Any, value: Any, ttl: float | None = None) -> None:
        self._d[key] = (self._now() + (self.ttl if ttl is None else ttl), value)
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)


def path_allowed(path: str, patterns: Iterable[str]) -> bool:
    """``authorization/path``: ``path`` equals a pattern, or starts with a pattern's part before its
    trailing ``*``."""
    for p in patterns:
        if p.endswith("*") and path.startswith(p[:-1]):
            return True
        if path == p:
            return True
    return False


class DelegatingAuth:
    """Authenticate with TokenReview and authorize with SubjectAccessReview, both cached.

    Args:
        kube: the client the reviews go through (its own, :meth:`Kube.derive`, so scrapes never wait
            behind Bindings); needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews``.
        always_allow_paths: served without authentication or authorization.
        always_allow_groups: users in one of these groups are authorized without a review.
        ttl: seconds every answer is cached.
        now: monotonic clock.
    """

    def __init__(self, kube: ReviewClient, *, always_allow_paths: Sequence[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
                 always_allow_groups: Sequence[str] = DEFAULT_ALWAYS_ALLOW_GROUPS, ttl: float = CACHE_TTL,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.always_allow_paths = tuple(always_allow_paths)
        self.always_allow_groups = frozenset(always_allow_groups)
        self._tokens = _TTLCache(ttl, CACHE_SIZE, now)
        self._decisions = _TTLCache(ttl, CACHE_SIZE, now)
        self.reviews = 0
        """TokenReviews and SubjectAccessReviews sent (the caches' effect is visible in tests)."""
        self.login_pages: dict[str, LoginPage] = {}
        """Path -> the login form answered instead of a bare 401 / 403 there (a browser's page)."""
        self.login_handlers: set[str] = set()
        """Paths whose handler reviews the credentials it is given itself (a login form's POST, a
        logout): passed through without authentication."""

    async def authenticate(self, token: str) -> UserInfo | None:
        """The user a bearer token belongs to, or None when the API server does not recognise it.

        Raises:
            AuthError: the TokenReview failed (API unreachable, forbidden, malformed answer).
        """
        key = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached if isinstance(cached, UserInfo) else None
        self.reviews += 1
        try:
            review = await self.kube.request(
                "POST", "/apis/authentication.k8s.io/v1/tokenreviews", retries=1, timeout=REVIEW_TIMEOUT,
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        except KubeError as exc:
            raise AuthError(f"TokenReview failed: {exc.status} {exc.reason}") from None
        status = (review or {}).get("status") or {}
        user: UserInfo | None = None
        if status.get("authenticated") is True:
            u = status.get("user") or {}
            extra = {str(k): [str(x) for x in v] for k, v in (u.get("extra") or {}).items() if isinstance(v, list)}
            user = UserInfo(str(u.get("username") or ""), str(u.get("uid") or ""),
                            tuple(str(g) for g in u.get("groups") or ()), extra)
            if not user.name:
                user = None
        self._tokens.put(key, user if user is not None else False)
        return user

    async def authorize(self, user: UserInfo, verb: str, path: str) -> tuple[bool, str]:
        """``(allowed, reason)`` for ``verb`` on the non-resource URL ``path``.

        Raises:
            AuthError: the SubjectAccessReview failed.
        """
        if self.always_allow_groups.intersection(user.groups):
            return True, "privileged group"
        key = (user.name, user.uid, user.groups, tuple(sorted((k, tuple(v)) for k, v in user.extra.items())),
               verb, path)
        cached = self._decisions.get(key)
        if cached is not None:
            allowed, reason = cached
            return bool(allowed), str(reason)
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups),
                                "nonResourceAttributes": {"path": path, "verb": verb}}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        self.reviews += 1
        try:
            review = await self.kube.request(
                "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", retries=1, timeout=REVIEW_TIMEOUT,
                body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        except KubeError as exc:
            raise AuthError(f"SubjectAccessReview failed: {exc.status} {exc.reason}") from None
        status = (review or {}).get("status") or {}
        allowed = status.get("allowed") is True and status.get("denied") is not True
        reason = str(status.get("reason") or "")
        self._decisions.put(key, (allowed, reason))
        return allowed, reason

    async def check(self, token: str | None, verb: str, path: str) -> tuple[int, UserInfo | None, str]:
        """Authenticate ``token`` (None: anonymous) then authorize ``verb`` on ``path``:
        ``(200, user, "")``, or ``(401 | 403 | 500, user or None, message)`` as the middleware answers.
        Never raises; the token is never logged."""
        user = ANONYMOUS_USER
        if token is not None:
            try:
                found = await self.authenticate(token)
            except AuthError as exc:
                log.warning("Unable to authenticate the request to %s: %s", path, exc)
                return 401, None, "Unauthorized"
            if found is None:
                return 401, None, "Unauthorized: the API server does not accept this token (expired?)"
            user = found
        try:
            allowed, reason = await self.authorize(user, verb, path)
        except AuthError as exc:
            log.warning("Authorization of %s %s for %s failed: %s", verb, path, user.name, exc)
            return 500, user, "Internal Server Error: authorization failed"
        if not allowed:
            log.debug("Forbidden: user=%s verb=%s path=%s reason=%s", user.name, verb, path, reason)
            return 403, user, f'forbidden: User "{user.name}" cannot {verb} path "{path}"'
        return 200, user, ""

    def middleware(self) -> Middleware:
        """An aiohttp middleware applying all of the above to every request of the application
        (routes added later included): anything not always-allowed is authenticated then authorized
        before its handler (or the 404 of an unknown path) runs."""

        @web.middleware
        async def delegated_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
            path = request.path
            if path_allowed(path, self.always_allow_paths) or path in self.login_handlers:
                return await handler(request)  # login handlers review the token they are given
            page = self.login_pages.get(path)
            try:
                token = request_token(request)
            except MalformedCredentials:
                if page is not None:
                    return _with_cookie(page(request, 401, "the credentials sent are not a bearer token"), None)
                return _status(401, "Unauthorized")
            code, _, message = await self.check(token, request.method.lower(), path)
            if code == 200:
                return await handler(request)
            if page is not None and code in (401, 403):
                if token is None:  # anonymous and not allowed: ask for credentials
                    code, message = 401, "sign in with a bearer token"
                resp = page(request, code, message)
                # a cookie the API server no longer accepts (expired) is cleared
                return _with_cookie(resp, None) if code == 401 and request.cookies.get(TOKEN_COOKIE) else resp
            return _status(code, "Unauthorized" if code == 401 else message)

        return delegated_auth


def _with_cookie(resp: web.Response, token: str | None) -> web.Response:
    resp.headers.add("Set-Cookie", token_cookie(token))
    return resp


def _status(code: int, message: str) -> web.Response:
    """A ``metav1.Status`` failure body, as the apiserver filters answer."""
    reason = {401: "Unauthorized", 403: "Forbidden"}.get(code, "InternalError")
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    headers = {"WWW-Authenticate": 'Bearer realm="py-scheduler"'} if code == 401 else None
    return web.json_response(body, status=code, headers=headers)
