"""Secure serving of the metrics/health port, as kube-scheduler's: TLS, and delegated authentication
and authorization through the API server for every path but the health checks.

- **TLS**: the certificate and key of ``--tls-cert-file`` / ``--tls-private-key-file``, or, without
  them, an ECDSA P-256 serving certificate made at start for ``localhost``, ``127.0.0.1``, ``::1``,
  the host name and the Pod's IP (``POD_IP``, the downward API's ``status.podIP``), signed by a CA
  made with it (its own key, thrown away: nothing else can be signed by it), valid one year, kept in
  memory only (:func:`self_signed_cert`; the root file system of the Deployment is read-only). TLS
  1.2 at least (``--tls-min-version``, upstream's names ``VersionTLS12`` / ``VersionTLS13``).
- **Authentication** (:meth:`DelegatingAuth.authenticate`): a request without credentials is
  ``system:anonymous`` in ``system:unauthenticated`` (401 with ``--anonymous-auth=false``); a bearer
  token is checked with a ``TokenReview``; an unknown token answers 401. With
  ``--authentication-audiences`` the review names them (``spec.audiences``) and the answer's
  ``status.audiences`` must share one, so that only tokens minted for the scheduler work (``kubectl
  create token NAME --audience AUD``), not every token of the API server. Answers are cached 10 s
  (by the token's SHA-256, the token itself is never kept nor logged). The token is read (:func:`request_token`) from
  ``Authorization: Bearer``, else from ``X-Py-Scheduler-Authorization: Bearer`` (the API server's
  Pod proxy forwards no identity and strips ``Authorization`` after its own authentication, but
  passes other headers on: ``explain`` sends the user's token in this one), else from the
  ``py-scheduler-token`` cookie a login page set (:class:`LoginPage`: HttpOnly, Secure,
  SameSite=Strict, no Path so that it stays under the API server's proxy prefix, ``Max-Age`` at
  most the token's remaining lifetime: :func:`token_max_age`), accepted only on a browser's
  document navigation (``Sec-Fetch-Mode: navigate``, ``Sec-Fetch-Dest: document``: a page of
  another site cannot make it fetch or embed ours with the cookie). Each is reviewed exactly as the
  first: nothing the proxy adds is trusted.
- **Bounded review work** (anyone who reaches the port can make the scheduler send reviews): one
  review in flight per token (or per SubjectAccessReview question): concurrent requests with it
  wait for that one; at most :data:`MAX_REVIEWS_IN_FLIGHT` reviews at once and
  :data:`MAX_REVIEWS_PER_CLIENT` per client address, beyond which a request needing a new review
  answers 429 with ``Retry-After`` at once (API Priority and Fairness' answer); each review has a
  :data:`REVIEW_DEADLINE` covering the client's rate-limiter wait and retries, not only the
  request. Counted by ``apiserver_delegated_authn_request_total`` /
  ``apiserver_delegated_authz_request_total`` (``code``: the API server's status, ``429`` for a
  request refused here, ``timeout`` past the deadline), as upstream's.
- **Headers** (:func:`security_headers`, every response): ``Content-Security-Policy:
  frame-ancestors 'none'; form-action 'self'; base-uri 'none'`` (added to a page's own policy),
  ``X-Content-Type-Options: nosniff``, ``Server: py-scheduler`` (no versions). Request paths are
  logged escaped (:func:`printable`): a newline in a path cannot forge a log line.
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
certificate file when it changes (restart the Pod).

Upstream: ``staging/src/k8s.io/apiserver/pkg/server/options/serving.go``
(``MaybeDefaultWithSelfSignedCerts``), ``.../options/authentication.go`` (``DelegatingAuthenticationOptions``:
anonymous enabled, 10 s cache; ``.../authentication/token/cache`` coalesces concurrent reviews of one
token; ``.../plugin/pkg/authenticator/token/webhook`` checks the answer's audiences;
``.../authenticatorfactory`` and ``authorizerfactory`` ``metrics.go`` the two counters),
``.../options/authorization.go`` (``DelegatingAuthorizationOptions``:
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

import asyncio
import base64
import binascii
import datetime as dt
import hashlib
import ipaddress
import json
import logging
import os
import socket
import ssl
import tempfile
import time
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import Counter

from py_scheduler.app.client.wire import KubeError
from py_scheduler.app.telemetry.metrics import REGISTRY

log = logging.getLogger("py_scheduler.secure")

DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
DEFAULT_ALWAYS_ALLOW_GROUPS = ("system:masters",)
CACHE_TTL = 10.0
"""Seconds a TokenReview / SubjectAccessReview answer is reused (upstream's defaults)."""
CACHE_SIZE = 4096
"""Entries per cache at most (the least recently used dropped first: :class:`_TTLCache` is an LRU)."""
REVIEW_TIMEOUT = 10.0
"""Seconds one TokenReview / SubjectAccessReview request may take on the wire."""
REVIEW_DEADLINE = 5.0
"""Seconds one review may take in all: the client's rate-limiter wait, retries and the request
(half of Prometheus' default scrape timeout)."""
MAX_REVIEWS_IN_FLIGHT = 64
"""Reviews sent at once at most; a request needing one more answers 429."""
MAX_REVIEWS_PER_CLIENT = 8
"""Reviews sent at once for one client address at most (the API server's Pod proxy is one client)."""
RETRY_AFTER = 1
"""Seconds a 429 asks the client to wait (``Retry-After``)."""
COOKIE_MAX_AGE = 3600
"""Seconds the sign-in cookie lives when the token carries no expiry (``exp``), and at most
:data:`COOKIE_MAX_AGE_LIMIT` otherwise."""
COOKIE_MAX_AGE_LIMIT = 12 * 3600

AUTHN_REQUESTS = Counter("apiserver_delegated_authn_request", "Number of HTTP requests partitioned by status code.",
                         ["code"], registry=REGISTRY)
"""Upstream's name: TokenReviews, by the API server's status code (``429``: refused here, over the cap)."""
AUTHZ_REQUESTS = Counter("apiserver_delegated_authz_request", "Number of HTTP requests partitioned by status code.",
                         ["code"], registry=REGISTRY)
"""Upstream's name: SubjectAccessReviews, by status code."""
SECURITY_HEADERS = {"Content-Security-Policy": "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
                    "X-Content-Type-Options": "nosniff", "Server": "py-scheduler"}
TLS_VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}
"""``--tls-min-version`` values (upstream's names; 1.0 and 1.1 are not offered)."""

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
    if cookie and is_navigation(request):
        if not is_token(cookie):
            raise MalformedCredentials(TOKEN_COOKIE)
        return cookie
    return None


def is_navigation(request: web.Request) -> bool:
    """A browser's top-level document navigation (``Sec-Fetch-Mode: navigate``, ``Sec-Fetch-Dest:
    document``): the only requests the sign-in cookie counts for."""
    h = request.headers
    return h.get("Sec-Fetch-Mode") == "navigate" and h.get("Sec-Fetch-Dest") == "document"


def is_cross_site(request: web.Request) -> bool:
    """A browser request another site's page made (login CSRF): ``Sec-Fetch-Site`` other than
    ``same-origin`` / ``none``, or without it an ``Origin`` whose host is not the request's ``Host``.
    Go's ``net/http.CrossOriginProtection`` (``csrf.go``) decides the same way."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return False  # not a browser, or one too old to say: no cookie of ours is at stake
    return origin == "null" or origin.partition("://")[2] != request.host


def token_max_age(token: str, now: float | None = None) -> int:
    """Seconds the sign-in cookie for ``token`` may live: until the token's ``exp`` (a JWT's, read
    without checking the signature: the API server just accepted the token), at most
    :data:`COOKIE_MAX_AGE_LIMIT`; :data:`COOKIE_MAX_AGE` for a token without one."""
    parts = token.split(".")
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))) if len(parts) == 3 else {}
    except (ValueError, binascii.Error):
        claims = {}
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if not isinstance(exp, int | float):
        return COOKIE_MAX_AGE
    left = int(exp - (time.time() if now is None else now))
    return max(0, min(left, COOKIE_MAX_AGE_LIMIT))


def printable(text: str, limit: int = 256) -> str:
    """``text`` for a log line: control characters (a newline) and non-ASCII escaped, cut at
    ``limit`` characters."""
    out = text.encode("unicode_escape").decode("ascii")
    return out if len(out) <= limit else out[:limit] + "..."


def is_token(value: str) -> bool:
    """``value`` looks like a bearer token (RFC 6750 ``b64token``, at most 16 KiB)."""
    return 0 < len(value) <= 16384 and _TOKEN_CHARS.issuperset(value)


def token_cookie(token: str | None, max_age: int | None = None) -> str:
    """The ``Set-Cookie`` value carrying ``token`` (None: clearing it) for ``max_age`` seconds (default
    :func:`token_max_age`). No ``Path``: the browser scopes the cookie to the directory of the login
    URL, so it also works under the API server's proxy prefix
    (``/api/v1/namespaces/NS/pods/https:POD:10259/proxy/debug/decisions``)."""
    attrs = "HttpOnly; Secure; SameSite=Strict"
    if not token:
        return f"{TOKEN_COOKIE}=; Max-Age=0; {attrs}"
    return f"{TOKEN_COOKIE}={token}; Max-Age={token_max_age(token) if max_age is None else max_age}; {attrs}"


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer (errors included) with :data:`SECURITY_HEADERS`; a page's own
    ``Content-Security-Policy`` keeps its directives and gets these too."""
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        _harden(exc.headers)
        raise
    if not resp.prepared:
        _harden(resp.headers)
    return resp


def _harden(headers: Any) -> None:
    for name, value in SECURITY_HEADERS.items():
        own = headers.get(name) if name == "Content-Security-Policy" else None
        headers[name] = f"{own}; {value}" if own else value


class LoginPage(Protocol):
    """Renders a login form for a browser that reached a protected page without (valid) credentials:
    ``(request, status, message)`` -> the response (``status`` 401 or 403, ``message`` why)."""

    def __call__(self, request: web.Request, status: int, message: str) -> web.Response: ...


class ReviewClient(Protocol):
    """What :class:`DelegatingAuth` needs of :class:`py_scheduler.app.client.kube.Kube`."""

    async def request(self, method: str, path: str, *, body: Any = None, retries: int | None = None,
                      timeout: float = ...) -> Any: ...


# -- TLS -------------------------------------------------------------------------------------------------

def self_signed_cert(host: str | None = None, days: int = 365, ips: Sequence[str] = ()) -> tuple[bytes, bytes]:
    """A serving certificate signed by a CA made with it, and the serving key, both PEM: the chain
    (serving certificate, then the CA's) and the key. The CA's key is thrown away.

    CA: CN ``<host>-ca@<unix time>``, a CA only (``keyCertSign``). Serving certificate: CN
    ``<host>@<unix time>``, not a CA; SANs ``localhost``, ``host`` (default: this host name),
    127.0.0.1, ::1 and ``ips`` (the Pod's IP); ``serverAuth``; both valid from one hour ago for
    ``days`` days.

    Upstream: ``client-go/util/cert`` ``GenerateSelfSignedCertKeyWithFixtures`` (called by
    ``MaybeDefaultWithSelfSignedCerts("localhost", nil, [127.0.0.1])``: a CA and a certificate it signs).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    host = host or socket.gethostname() or "localhost"
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{int(now.timestamp())}")])
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(now.timestamp())}")])
    dns = list(dict.fromkeys(["localhost", host]))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in dict.fromkeys(("127.0.0.1", "::1", *ips))]

    def usage(sign: bool) -> x509.KeyUsage:
        return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=not sign,
                             data_encipherment=False, key_agreement=False, key_cert_sign=sign, crl_sign=False,
                             encipher_only=False, decipher_only=False)

    def builder(subject: x509.Name, public: Any) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(public)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=days)))

    ca = (builder(ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(usage(True), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (builder(name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(usage(False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM), key_pem


def server_ssl_context(cert_file: Path | str | None = None, key_file: Path | str | None = None, *,
                       min_version: str = "VersionTLS12") -> ssl.SSLContext:
    """A TLS server context (at least ``min_version``, a key of :data:`TLS_VERSIONS`) for ``cert_file``
    / ``key_file`` (PEM), or for a fresh :func:`self_signed_cert` (with the ``POD_IP`` environment
    variable's address in its names) when both are None. The generated pair only touches the disk
    inside a private temporary directory that is removed before this returns (``ssl`` loads chains
    from files).

    Raises:
        ValueError: only one of the two files given, an unknown ``min_version`` or a malformed ``POD_IP``.
        OSError, ssl.SSLError: a file cannot be read or the pair does not match.
    """
    if min_version not in TLS_VERSIONS:
        raise ValueError(f"--tls-min-version must be one of {', '.join(TLS_VERSIONS)}, not {min_version!r}")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = TLS_VERSIONS[min_version]
    if (cert_file is None) != (key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
    if cert_file is not None and key_file is not None:
        ctx.load_cert_chain(str(cert_file), str(key_file))
        return ctx
    pod_ip = os.environ.get("POD_IP", "").strip()
    try:
        ips = [str(ipaddress.ip_address(pod_ip))] if pod_ip else []
    except ValueError:
        raise ValueError(f"POD_IP {pod_ip!r} is not an IP address") from None
    cert, key = self_signed_cert(ips=ips)
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


class Overloaded(Exception):
    """More reviews in flight than allowed (:data:`MAX_REVIEWS_IN_FLIGHT`, per client
    :data:`MAX_REVIEWS_PER_CLIENT`): the request answers 429 without one."""


class DelegatingAuth:
    """Authenticate with TokenReview and authorize with SubjectAccessReview, both cached, coalesced
    and bounded (module docstring).

    Args:
        kube: the client the reviews go through (its own, :meth:`Kube.derive`, so scrapes never wait
            behind Bindings); needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews``.
        always_allow_paths: served without authentication or authorization.
        always_allow_groups: users in one of these groups are authorized without a review.
        ttl: seconds every answer is cached.
        now: monotonic clock.
        anonymous: a request without credentials is ``system:anonymous`` (True, upstream's default)
            or answers 401 (``--anonymous-auth=false``).
        audiences: sent in every TokenReview; the answer must name one of them (empty: none sent,
            the API server's own audiences apply).
        deadline: seconds a review may take in all (rate-limiter wait included).
        max_in_flight / max_per_client: reviews at once, in all and per client address.
    """

    def __init__(self, kube: ReviewClient, *, always_allow_paths: Sequence[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
                 always_allow_groups: Sequence[str] = DEFAULT_ALWAYS_ALLOW_GROUPS, ttl: float = CACHE_TTL,
                 now: Callable[[], float] = time.monotonic, anonymous: bool = True, audiences: Sequence[str] = (),
                 deadline: float = REVIEW_DEADLINE, max_in_flight: int = MAX_REVIEWS_IN_FLIGHT,
                 max_per_client: int = MAX_REVIEWS_PER_CLIENT) -> None:
        self.kube = kube
        self.always_allow_paths = tuple(always_allow_paths)
        self.always_allow_groups = frozenset(always_allow_groups)
        self.anonymous = anonymous
        self.audiences = tuple(audiences)
        self.deadline = deadline
        self.max_in_flight, self.max_per_client = max_in_flight, max_per_client
        self._tokens = _TTLCache(ttl, CACHE_SIZE, now)
        self._decisions = _TTLCache(ttl, CACHE_SIZE, now)
        self._pending: dict[Any, asyncio.Future[Any]] = {}
        """Review key -> the answer of the review in flight for it (waited on by the same requests)."""
        self._per_client: Tally[str] = Tally()
        self.reviews = 0
        """TokenReviews and SubjectAccessReviews sent (the caches' effect is visible in tests)."""
        self.refused = 0
        """Requests answered 429: a review was needed and too many were in flight."""
        self.login_pages: dict[str, LoginPage] = {}
        """Path -> the login form answered instead of a bare 401 / 403 there (a browser's page)."""
        self.login_handlers: set[str] = set()
        """Paths whose handler reviews the credentials it is given itself (a login form's POST, a
        logout): passed through without authentication."""

    async def _once(self, key: Any, client: str, counter: Counter, send: Callable[[], Any]) -> Any:
        """The answer of ``send()`` (a review) for ``key``: the one in flight for ``key`` when there is
        one, else a new one within the caps (:class:`Overloaded` beyond them) and the deadline
        (:class:`AuthError` past it)."""
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        if len(self._pending) >= self.max_in_flight or self._per_client[client] >= self.max_per_client:
            self.refused += 1
            counter.labels("429").inc()
            raise Overloaded
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        self._per_client[client] += 1
        self.reviews += 1
        try:
            async with asyncio.timeout(self.deadline):
                value = await send()
            counter.labels("201").inc()
        except TimeoutError:
            counter.labels("timeout").inc()
            fut.set_exception(AuthError(f"no answer within {self.deadline:g} s"))
        except KubeError as exc:
            counter.labels(str(exc.status)).inc()
            fut.set_exception(AuthError(f"{exc.status} {exc.reason}"))
        except BaseException as exc:  # cancelled: whoever waits on it tries again
            fut.cancel()
            raise exc from None
        else:
            fut.set_result(value)
        finally:
            del self._pending[key]
            self._per_client[client] -= 1
            if self._per_client[client] <= 0:
                del self._per_client[client]
        fut.exception()  # retrieved here: no "never retrieved" warning when nobody else waited
        return fut.result()

    async def authenticate(self, token: str, client: str = "") -> UserInfo | None:
        """The user a bearer token belongs to, or None when the API server does not recognise it
        (or, with audiences, not for them). ``client``: the caller's address (the per-client cap).

        Raises:
            AuthError: the TokenReview failed (API unreachable, forbidden, malformed answer, deadline).
            Overloaded: too many reviews in flight.
        """
        key = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached if isinstance(cached, UserInfo) else None
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)

        async def send() -> Any:
            return await self.kube.request(
                "POST", "/apis/authentication.k8s.io/v1/tokenreviews", retries=1, timeout=REVIEW_TIMEOUT,
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})

        try:
            review = await self._once(("token", key), client, AUTHN_REQUESTS, send)
        except AuthError as exc:
            raise AuthError(f"TokenReview failed: {exc}") from None
        cached = self._tokens.get(key)  # a coalesced request finds the first one's answer here
        if cached is not None:
            return cached if isinstance(cached, UserInfo) else None
        status = (review or {}).get("status") or {}
        user: UserInfo | None = None
        if status.get("authenticated") is True:
            u = status.get("user") or {}
            extra = {str(k): [str(x) for x in v] for k, v in (u.get("extra") or {}).items() if isinstance(v, list)}
            user = UserInfo(str(u.get("username") or ""), str(u.get("uid") or ""),
                            tuple(str(g) for g in u.get("groups") or ()), extra)
            if not user.name:
                user = None
            elif self.audiences and not set(self.audiences).intersection(status.get("audiences") or ()):
                log.debug("token of %s refused: its audiences %s are not %s", user.name,
                          status.get("audiences"), list(self.audiences))
                user = None
        self._tokens.put(key, user if user is not None else False)
        return user

    async def authorize(self, user: UserInfo, verb: str, path: str, client: str = "") -> tuple[bool, str]:
        """``(allowed, reason)`` for ``verb`` on the non-resource URL ``path``.

        Raises:
            AuthError: the SubjectAccessReview failed.
            Overloaded: too many reviews in flight.
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

        async def send() -> Any:
            return await self.kube.request(
                "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", retries=1, timeout=REVIEW_TIMEOUT,
                body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})

        try:
            review = await self._once(("sar", key), client, AUTHZ_REQUESTS, send)
        except AuthError as exc:
            raise AuthError(f"SubjectAccessReview failed: {exc}") from None
        status = (review or {}).get("status") or {}
        allowed = status.get("allowed") is True and status.get("denied") is not True
        reason = str(status.get("reason") or "")
        self._decisions.put(key, (allowed, reason))
        return allowed, reason

    async def check(self, token: str | None, verb: str, path: str,
                    client: str = "") -> tuple[int, UserInfo | None, str]:
        """Authenticate ``token`` (None: anonymous) then authorize ``verb`` on ``path``:
        ``(200, user, "")``, or ``(401 | 403 | 429 | 500, user or None, message)`` as the middleware
        answers. ``client``: the caller's address. Never raises; the token is never logged."""
        user = ANONYMOUS_USER
        shown = printable(path)
        try:
            if token is not None:
                try:
                    found = await self.authenticate(token, client)
                except AuthError as exc:
                    log.warning("Unable to authenticate the request to %s: %s", shown, exc)
                    return 401, None, "Unauthorized"
                if found is None:
                    return 401, None, "Unauthorized: the API server does not accept this token (expired?)"
                user = found
            elif not self.anonymous:
                return 401, None, "Unauthorized: anonymous requests are not allowed (--anonymous-auth=false)"
            try:
                allowed, reason = await self.authorize(user, verb, path, client)
            except AuthError as exc:
                log.warning("Authorization of %s %s for %s failed: %s", verb, shown, user.name, exc)
                return 500, user, "Internal Server Error: authorization failed"
        except Overloaded:
            return 429, None, "Too many requests: too many authentication reviews in flight, retry later"
        if not allowed:
            log.debug("Forbidden: user=%s verb=%s path=%s reason=%s", user.name, verb, shown, reason)
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
            code, _, message = await self.check(token, request.method.lower(), path, request.remote or "")
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
    """A ``metav1.Status`` failure body, as the apiserver filters answer (429 with ``Retry-After``)."""
    reason = {401: "Unauthorized", 403: "Forbidden", 429: "TooManyRequests"}.get(code, "InternalError")
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    headers = ({"WWW-Authenticate": 'Bearer realm="py-scheduler"'} if code == 401
               else {"Retry-After": str(RETRY_AFTER)} if code == 429 else None)
    return web.json_response(body, status=code, headers=headers)
