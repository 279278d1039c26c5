"""Fetch the decision the live scheduler *recorded* for a Pod (``py-scheduler explain --kubeconfig
--pod``), from the leader's ``/debug/decisions`` endpoint (``py_scheduler/app/scheduling/decisions.py``).

Route: the leader is the holder of the scheduler's Lease (``holderIdentity`` is
``<hostname>_<uuid>``, and in a Pod the hostname is the Pod's name); the request goes through the
API server's proxy to that Pod (``GET /api/v1/namespaces/<ns>/pods/<scheme>:<pod>:<port>/proxy/
debug/decisions?pod=<ns/name>&uid=<uid>``). The Pod proxy rather than the metrics Service's proxy:
a Service picks any ready replica, and only the leader has records. The caller needs ``get`` on
``coordination.k8s.io`` ``leases`` and ``pods/proxy`` in the scheduler's namespace (cluster admins
have both). ``decisions_url`` skips the Lease and the proxy (``kubectl port-forward``, a local
scheduler).

Identity: the API server's Pod proxy forwards none (``ProxyREST`` uses a plain transport, and its
authentication filter removes ``Authorization``), so the user's bearer token goes in
``X-Py-Scheduler-Authorization: Bearer <token>``, which the proxy passes on and the scheduler reviews
exactly as ``Authorization`` (TokenReview, SubjectAccessReview; ``py_scheduler/app/serving/secure.py``).
The token is ``--token`` / ``PY_SCHEDULER_TOKEN``; the kubeconfig's own bearer token (often the
user's whole identity, cluster-admin on many clusters) is sent only when asked for
(``--kubeconfig-token``): the scheduler needs a token allowed to read records, not the user's
credential. Without one a secure scheduler refuses, and the reason says to give one.

Whom the token goes to: the Pod proxy does not verify its backend, so whoever can edit the Lease or
run a Pod under the name it holds would collect the token. Before anything is sent, the Pod the
Lease names must be a py-scheduler replica (:func:`replica_problem`): in the scheduler's namespace,
running as the scheduler's ServiceAccount (``--scheduler-service-account``, default
:data:`DEFAULT_SERVICE_ACCOUNT` as ``deploy/`` installs it) and Running; otherwise nothing is sent
(the reason says why) and explain recomputes. The caller then also needs ``get`` on ``pods`` there.
The check and the proxied request are two calls: a Pod deleted and recreated under the same name by
someone allowed to run Pods as the scheduler's ServiceAccount in its namespace in between is not
caught, but such a user can mint that ServiceAccount's tokens anyway.

Redirects are never followed (an answer 3xx is a refusal): a redirect to another origin would
carry the token header there (aiohttp drops ``Authorization`` on such a redirect, not ours).
``decisions_url`` over HTTPS verifies the scheduler's certificate against ``ca_file``
(``--scheduler-ca-file``), else against the system's CAs, except on a loopback address
(``kubectl port-forward``: the self-signed certificate of a default scheduler, reached through a
tunnel the kubeconfig's user opened).

Every failure is a reason string, never an exception: the caller then recomputes and says why.

Upstream: none (kube-scheduler keeps no decisions); the proxy path is the API server's
``pods/proxy`` subresource (``pkg/registry/core/pod/rest/subresources.go``, ``ProxyREST``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

__all__ = ["DEFAULT_SERVICE_ACCOUNT", "Lookup", "fetch_recorded", "leader_pod_name", "replica_problem"]

DEFAULT_LEASE = "kube-system/py-scheduler"
DEFAULT_SERVICE_ACCOUNT = "kube-system/py-scheduler"
"""The scheduler's ServiceAccount ``namespace/name`` as ``kubectl apply -k deploy/`` installs it
(``deploy/kustomization.yaml``: namespace ``kube-system``; ``deploy/serviceaccount.yaml``:
``py-scheduler``, the Deployment's ``serviceAccountName``)."""
DEFAULT_PORT = 10259
TIMEOUT_SECONDS = 20.0
TOKEN_HEADER = "X-Py-Scheduler-Authorization"
"""The header the scheduler reads a bearer token from behind the Pod proxy (``app/serving/secure.py``)."""
NEEDS_TOKEN = ("the scheduler serves its records securely and reviews the caller's bearer token, but none was "
               "given: give --token or PY_SCHEDULER_TOKEN, e.g. "
               "`kubectl create token decisions-reader -n kube-system --duration 1h` "
               "(deploy/examples/decisions-reader.yaml); the kubeconfig's own token is sent only with "
               "--kubeconfig-token")


@dataclass(slots=True)
class Lookup:
    """What the leader answered: ``record`` (the newest matching record's JSON) or ``reason`` (why
    there is none), and ``source`` (which replica / URL was asked)."""

    record: dict[str, Any] | None
    reason: str
    source: str
    count: int = 0
    """Records of this Pod (this UID) the leader holds."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """Every record the leader answered, newest first (``record`` is the first;
    ``kubectl py-scheduler decisions`` lists them)."""


def leader_pod_name(holder_identity: str) -> str:
    """The Pod name in a Lease ``holderIdentity`` (``<hostname>_<uuid>``; the hostname of a Pod is its
    name). Raises ValueError for an empty identity."""
    if not holder_identity:
        raise ValueError("the Lease has no holder: no replica is leading")
    return holder_identity.rsplit("_", 1)[0]


def replica_problem(pod: Any, namespace: str, service_account: str) -> str:
    """Why the Pod the Lease names is not a py-scheduler replica ("" when it is one).

    ``pod``: the Pod as read from the API (a kubernetes_asyncio ``V1Pod``), in ``namespace`` (the
    Lease's); ``service_account``: the scheduler's ServiceAccount ``namespace/name``. A replica is in
    the ServiceAccount's namespace, runs as it (``spec.serviceAccountName``) and is ``Running``."""
    sa_ns, _, sa_name = service_account.rpartition("/")
    spec, status = getattr(pod, "spec", None), getattr(pod, "status", None)
    runs_as = str(getattr(spec, "service_account_name", None) or "default")
    phase = str(getattr(status, "phase", None) or "unknown")
    if namespace != sa_ns:
        return f"it is in namespace {namespace}, not the scheduler's ({sa_ns})"
    if runs_as != sa_name:
        return f"it runs as ServiceAccount {namespace}/{runs_as}, not the scheduler's ({service_account})"
    if phase != "Running":
        return f"it is {phase}, not Running"
    return ""


def _refusal(source: str, status: int, body: str, token: str | None) -> str:
    """Why the scheduler (or the API server in front of it) refused, in words a user can act on."""
    detail = " ".join(str(body).split())[:200]
    ours = "cannot get path" in detail or status == 401  # the scheduler's own 401 / 403 (secure.py)
    if ours and token is None and status in (401, 403):
        return NEEDS_TOKEN
    if status == 401 and token is not None:
        return (f"the {source} did not accept the bearer token (expired, or not this cluster's): give a fresh one "
                "with --token or PY_SCHEDULER_TOKEN")
    if status == 403 and ours:
        return (f"the {source} answered HTTP 403: {detail} (the token's user needs get on the non-resource URLs "
                "/debug/decisions*: bind the ClusterRole of deploy/examples/decisions-reader.yaml)")
    if status == 404 and '"kind":"pods"' in detail.replace(" ", ""):  # the API server's NotFound for the Pod
        return (f"the {source} answered HTTP 404: {detail} (the Lease holder is not a Pod of that namespace, e.g. "
                "a scheduler run outside the cluster: give --decisions-url https://HOST:PORT)")
    return f"the {source} answered HTTP {status}: {detail}"


def _pick(body: Any, source: str) -> Lookup:
    decisions = body.get("decisions") if isinstance(body, dict) else None
    if not isinstance(decisions, list) or not decisions or not isinstance(decisions[0], dict):
        return Lookup(None, "the leader has no record of this Pod (older than its ring, or not scheduled by this "
                            "leader: records live in the leader's memory and go with a restart or a leader change)",
                      source)
    return Lookup(decisions[0], "", source, len(decisions), [d for d in decisions if isinstance(d, dict)])


def _config_token(cfg: Any) -> str | None:
    """The bearer token a loaded kubernetes_asyncio configuration sends (None for client certificates)."""
    auth = str((cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken") or "")
    return auth.removeprefix("Bearer ").strip() or None


async def _bearer_token(kubeconfig: Path | None) -> str | None:
    """The kubeconfig's bearer token (None for client certificates, exec plugins without one, or no
    kubeconfig): what the scheduler's delegated authentication reviews (TokenReview)."""
    if kubeconfig is None:
        return None
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    try:
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    except Exception:  # no usable kubeconfig: ask without a token
        return None
    return _config_token(cfg)


def is_loopback(url: str) -> bool:
    """``url``'s host is ``localhost`` or a loopback address."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_tls(url: str, ca_file: Path | None) -> ssl.SSLContext | bool:
    """How ``url``'s certificate is checked: against ``ca_file``; unchecked (False) on loopback
    without one; else against the system's CAs."""
    if ca_file is not None:
        return ssl.create_default_context(cafile=str(ca_file))
    return False if is_loopback(url) else ssl.create_default_context()


async def _direct(url: str, pod: str, uid: str, kubeconfig: Path | None = None, token: str | None = None,
                  kubeconfig_token: bool = False, ca_file: Path | None = None) -> Lookup:
    """GET ``url``/debug/decisions. Over HTTPS (the scheduler's default) ``token`` (or, with
    ``kubeconfig_token``, the kubeconfig's bearer token) is sent for its delegated authentication and
    authorization, the scheduler's certificate checked as :func:`client_tls` says (self-signed
    by default: on loopback after ``kubectl port-forward``, or with ``ca_file``)."""
    full = url.rstrip("/") + "/debug/decisions"
    headers: dict[str, str] = {}
    secure = full.startswith("https://")
    if secure and not token and kubeconfig_token:
        token = await _bearer_token(kubeconfig)
    token = token if secure else None  # never over plain HTTP
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        tls = client_tls(full, ca_file) if secure else True
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)) as s, \
                s.get(full, params={"pod": pod, "uid": uid}, headers=headers, ssl=tls, allow_redirects=False) as r:
            text = await r.text()
            if r.status in (200, 404):
                return _pick(json.loads(text), f"scheduler at {full}")
            return Lookup(None, _refusal(full, r.status, text, token), full)
    except aiohttp.ClientConnectorCertificateError as exc:
        return Lookup(None, f"cannot read {full}: its certificate is not trusted ({exc.certificate_error}): give "
                            "--scheduler-ca-file with the CA that signed it", full)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        return Lookup(None, f"cannot read {full}: {exc}", full)


async def _via_proxy(kubeconfig: Path, pod: str, uid: str, lease: str, port: int, scheme: str,
                     token: str | None = None, *, kubeconfig_token: bool = False,
                     service_account: str = DEFAULT_SERVICE_ACCOUNT) -> Lookup:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException

    lease_ns, _, lease_name = lease.rpartition("/")
    lease_ns = lease_ns or "kube-system"
    cfg = client.Configuration()
    try:
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    except Exception as exc:  # I/O, YAML, a malformed kubeconfig: all mean "cannot ask"; never a traceback
        return Lookup(None, f"kubeconfig {kubeconfig}: cannot load: {exc}", "")
    async with client.ApiClient(cfg) as api:
        try:
            resp = await client.CoordinationV1Api(api).read_namespaced_lease(
                lease_name, lease_ns, _request_timeout=TIMEOUT_SECONDS)
            leader = leader_pod_name(str(resp.spec.holder_identity or "") if resp.spec else "")
        except ApiException as exc:
            hint = " (a scheduler without leader election has none: give --decisions-url)" if exc.status == 404 else ""
            return Lookup(None, f"cannot read the Lease {lease_ns}/{lease_name}: HTTP {exc.status} {exc.reason}{hint}",
                          "")
        except ValueError as exc:
            return Lookup(None, f"Lease {lease_ns}/{lease_name}: {exc}", "")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Lookup(None, f"cannot reach the API server ({cfg.host}): {exc}", "")
        try:  # whom the request (and the token) would go to: a py-scheduler replica only
            leader_pod = await client.CoreV1Api(api).read_namespaced_pod(leader, lease_ns,
                                                                          _request_timeout=TIMEOUT_SECONDS)
        except ApiException as exc:
            hint = (" (a scheduler run outside the cluster: give --decisions-url)" if exc.status == 404 else "")
            return Lookup(None, f"cannot read the Lease holder's Pod {lease_ns}/{leader}: HTTP {exc.status} "
                                f"{exc.reason}{hint}; nothing was sent to it", "")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Lookup(None, f"cannot reach the API server ({cfg.host}): {exc}", "")
        problem = replica_problem(leader_pod, lease_ns, service_account)
        if problem:
            return Lookup(None, f"the Lease holder {lease_ns}/{leader} is not a py-scheduler replica ({problem}): "
                                "nothing was sent to it, no token (--scheduler-service-account names the "
                                "scheduler's ServiceAccount)", "")
        target = f"{scheme}:{leader}:{port}" if scheme != "http" else f"{leader}:{port}"
        headers = {"Accept": "application/json"}
        if scheme == "https":
            token = token or (_config_token(cfg) if kubeconfig_token else None)
            if token:  # the proxy forwards no identity: the scheduler reviews this header instead
                headers[TOKEN_HEADER] = f"Bearer {token}"
        else:
            token = None
        path = f"/api/v1/namespaces/{quote(lease_ns)}/pods/{quote(target, safe=':')}/proxy/debug/decisions"
        source = f"leader {lease_ns}/{leader} through {path}"
        try:  # the client's own session (TLS, proxy) and credentials, but no redirect followed
            await api.update_params_for_auth(headers, [], ["BearerToken"])
            rest = api.rest_client
            async with rest.pool_manager.get(
                    f"{cfg.host}{path}", params={"pod": pod, "uid": uid}, headers=headers, allow_redirects=False,
                    proxy=rest.proxy, timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS),
                    server_hostname=rest.server_hostname) as resp:
                status, text = resp.status, (await resp.read()).decode("utf-8", "replace")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Lookup(None, f"cannot reach the {source}: {exc}", source)
        try:
            body = json.loads(text)
        except ValueError:
            body = None  # not JSON: not from us
        if status in (200, 404) and isinstance(body, dict) and "decisions" in body:  # ours; a Status is the API's
            return _pick(body, source)
        if status == 200:
            return Lookup(None, f"the {source} did not answer JSON", source)
        return Lookup(None, _refusal(source, status, text, token), source)


def fetch_recorded(kubeconfig: Path | None, pod: str, uid: str, *, lease: str = DEFAULT_LEASE,
                   port: int = DEFAULT_PORT, scheme: str = "https", decisions_url: str | None = None,
                   token: str | None = None, kubeconfig_token: bool = False,
                   service_account: str = DEFAULT_SERVICE_ACCOUNT, ca_file: Path | None = None) -> Lookup:
    """The newest record of ``pod`` (``namespace/name``) with ``uid`` held by the leader.

    ``decisions_url`` (``https://host:port``, or ``http://`` for a scheduler run with ``--plain-http``)
    asks that server directly, with the kubeconfig's bearer token; otherwise the Lease ``lease``
    (``namespace/name``) names the leader, asked through the API server's Pod proxy on ``port`` with
    ``scheme``, once the Lease holder is checked to be a replica running as ``service_account``
    (``namespace/name``; :func:`replica_problem`: otherwise nothing is sent). Over HTTPS the bearer
    token ``token`` (else, only with ``kubeconfig_token``, the kubeconfig's) is sent, in
    ``Authorization`` directly, in :data:`TOKEN_HEADER` through the proxy (which forwards no
    identity); without one a secure scheduler refuses, and the reason says to give ``--token``.
    ``ca_file``: the CA ``decisions_url``'s certificate is checked against (:func:`client_tls`).
    Never raises: a failure is :attr:`Lookup.reason`. The token is never part of a reason.
    """
    if decisions_url:
        return asyncio.run(_direct(decisions_url, pod, uid, kubeconfig, token, kubeconfig_token, ca_file))
    if kubeconfig is None:
        return Lookup(None, "no kubeconfig and no --decisions-url: nowhere to ask", "")
    if "/" not in service_account.strip("/") or service_account.count("/") != 1:
        return Lookup(None, f"--scheduler-service-account must be NAMESPACE/NAME, not {service_account!r}", "")
    return asyncio.run(_via_proxy(kubeconfig, pod, uid, lease, port, scheme, token,
                                  kubeconfig_token=kubeconfig_token, service_account=service_account))
