"""The differential check of py-scheduler's cache: its view (``GET /debug/cache``,
:mod:`py_scheduler.app.serving.cachedump`) against a fresh LIST of every kind it watches.

What is compared (:func:`differences`), each difference a :data:`Difference` tuple
``(what, key, ours, the API's)``:

- **informers**: for every kind of :data:`py_scheduler.cache.kinds.KINDS` (Pods with the informers'
  field selector, so terminal Pods are outside both sides), the set of keys and each object's
  ``resourceVersion``;
- **cache Nodes**: the Nodes in the cache's node tree against the listed Nodes;
- **cache Pods**: every listed Pod bound to a Node is in the cache on that Node, by UID, and every
  Pod the cache holds as bound (not assumed) is such a Pod; a Pod the cache *assumes* (its Binding in
  flight) must exist in the API, unbound or bound to the assumed Node.

Changes in flight (the rule, :func:`check_until_quiet`): a LIST and a dump are never taken at the same
instant, so under churn one round of comparison shows the objects created, changed or deleted in
between. A difference is therefore counted only when it is **persistent**: the very same tuple (object,
our version, the API's version) is found in every round for ``settle`` seconds (default 5 s: the
watch normally delivers in milliseconds; a real divergence - a lost event, a Pod left assumed - does
not change by itself). The check ends as soon as one round shows no difference at all (``clean``), or
when a difference has persisted ``settle`` seconds (reported), or after ``timeout`` with differences
that kept changing and none persistent (``clean`` is False, nothing reported: churn never paused, but
no divergence stayed). Rounds are ``interval`` (0.5 s) apart; each is one dump then one LIST per kind.

Upstream analogue: ``pkg/scheduler/backend/cache/debugger/comparer.go`` (``CompareNodes``,
``ComparePods``: the cache against the informers' listers, on ``SIGUSR2``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from py_scheduler.app.serving.cachedump import PATH
from py_scheduler.cache.kinds import KINDS, WatchedKind

Difference = tuple[str, str, str, str]
"""``(what, key, ours, the API's)``: e.g. ``("informer:Pod", "default/a", "123", "")`` (missing in
the API), ``("cache:Pod", "<uid>", "node-1", "")`` (the cache holds a Pod the API does not have bound)."""

DEBUG_ROLE = "py-scheduler-e2e-debug-cache-reader"


async def list_kind(api: client.ApiClient, wk: WatchedKind) -> list[dict[str, Any]]:
    """Every object of ``wk`` (with its field selector; [] when an optional API is absent).

    Raises:
        ApiException: the LIST failed.
    """
    query = [("fieldSelector", wk.field_selector)] if wk.field_selector else []
    try:
        resp = await api.call_api(wk.list_path, "GET", query_params=query, auth_settings=["BearerToken"],
                                  _preload_content=False, _request_timeout=60)
    except ApiException as e:
        if e.status == 404 and wk.optional:
            return []
        raise
    try:
        doc = json.loads(await resp.read())
    finally:
        resp.release()
    return list(doc.get("items") or [])


async def list_all(api: client.ApiClient, kinds: Collection[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """kind -> its listed objects, for every kind of ``kinds`` (default every kind of :data:`KINDS`)."""
    chosen = [wk for wk in KINDS if kinds is None or wk.kind in kinds]
    lists = await asyncio.gather(*(list_kind(api, wk) for wk in chosen))
    return {wk.kind: items for wk, items in zip(chosen, lists, strict=True)}


def _meta(o: Mapping[str, Any]) -> Mapping[str, Any]:
    return o.get("metadata") or {}


def differences(dump: Mapping[str, Any], listed: Mapping[str, list[dict[str, Any]]]) -> set[Difference]:
    """What differs between ``dump`` (``/debug/cache``) and ``listed`` (:func:`list_all`); empty when
    the scheduler's view equals the API's.

    Only the kinds the replica watches are compared: those its dump names (a kind behind a feature
    gate that is off, e.g. PodGroup without GenericWorkload, is neither watched nor dumped, and its
    objects in the API are not a divergence)."""
    out: set[Difference] = set()
    ours_by_kind: Mapping[str, Mapping[str, str]] = dump.get("informers") or {}
    for wk in KINDS:
        if wk.kind not in ours_by_kind:
            continue  # not watched by this replica
        ours = ours_by_kind.get(wk.kind) or {}
        theirs = {wk.key(o): str(_meta(o).get("resourceVersion") or "") for o in listed.get(wk.kind, [])}
        for key in ours.keys() | theirs.keys():
            if ours.get(key) != theirs.get(key):
                out.add((f"informer:{wk.kind}", key, ours.get(key, ""), theirs.get(key, "")))
    cache = dump.get("cache") or {}
    nodes = {str(_meta(n).get("name")) for n in listed.get("Node", [])}
    for name in set(cache.get("nodes") or []) ^ nodes:
        out.add(("cache:Node", name, "present" if name not in nodes else "", "present" if name in nodes else ""))
    api_pods = {str(_meta(p).get("uid")): p for p in listed.get("Pod", [])}
    bound = {uid: str((p.get("spec") or {}).get("nodeName")) for uid, p in api_pods.items()
             if (p.get("spec") or {}).get("nodeName")}
    cached: Mapping[str, Mapping[str, Any]] = cache.get("pods") or {}
    for uid, entry in cached.items():
        node = str(entry.get("node") or "")
        if entry.get("assumed"):
            pod = api_pods.get(uid)
            api_node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
            if pod is None or api_node not in ("", node):
                out.add(("cache:assumed Pod", uid, node, "absent" if pod is None else api_node))
        elif bound.get(uid) != node:
            out.add(("cache:Pod", uid, node, bound.get(uid, "")))
    for uid, node in bound.items():
        if uid not in cached:
            out.add(("cache:Pod", uid, "", node))
    return out


@dataclass
class DiffResult:
    """What :func:`check_until_quiet` found.

    Attributes:
        persistent: the differences seen unchanged for ``settle`` seconds (must be empty).
        clean: one round showed no difference at all.
        rounds: comparison rounds made.
        seconds: wall time of the check.
        last: the differences of the last round (diagnostics; transient ones included).
        dump: the last dump (its ``process`` and ``queue`` figures are reported by the soak).
    """

    persistent: set[Difference] = field(default_factory=set)
    clean: bool = False
    rounds: int = 0
    seconds: float = 0.0
    last: set[Difference] = field(default_factory=set)
    dump: dict[str, Any] = field(default_factory=dict)


async def check_until_quiet(fetch_dump: Callable[[], Awaitable[dict[str, Any]]], api: client.ApiClient, *,
                            settle: float = 5.0, interval: float = 0.5, timeout: float = 60.0) -> DiffResult:
    """Compare rounds of (dump, LIST) until one is clean or a difference persists ``settle`` seconds
    (the rule of the module docstring)."""
    res = DiffResult()
    start = time.monotonic()
    first_seen: dict[Difference, float] = {}
    while True:
        res.dump = await fetch_dump()
        listed = await list_all(api, set(res.dump.get("informers") or {}))
        now = time.monotonic()
        res.rounds += 1
        res.last = differences(res.dump, listed)
        if not res.last:
            res.clean = True
            break
        first_seen = {d: first_seen.get(d, now) for d in res.last}  # a tuple that changed starts over
        res.persistent = {d for d, t in first_seen.items() if now - t >= settle}
        if res.persistent or now - start >= timeout:
            break
        await asyncio.sleep(interval)  # the pace of the rounds, not a synchronisation
    res.seconds = time.monotonic() - start
    return res


# ------------------------------------------------------------------------------------------------
# Reaching the endpoint: a ServiceAccount allowed to GET /debug/cache (delegated authorization)
# ------------------------------------------------------------------------------------------------

async def debug_reader_token(api: client.ApiClient, namespace: str = "default",
                             name: str = "py-scheduler-e2e-debug", expiration_seconds: int = 3600) -> str:
    """A bound token (``expiration_seconds``, default 1 h) of ServiceAccount ``namespace/name``, which a
    ClusterRole allows to ``get`` ``/debug/cache``, ``/debug/memory`` and ``/metrics``, and ``post``
    ``/debug/memory`` (its actions, served with ``--profiling``) (created if absent)."""
    rbac = client.RbacAuthorizationV1Api(api)
    core = client.CoreV1Api(api)
    creates: list[Callable[[], Awaitable[Any]]] = [
        lambda: core.create_namespaced_service_account(namespace, {"metadata": {"name": name}}),
        lambda: rbac.create_cluster_role({"metadata": {"name": DEBUG_ROLE}, "rules": [
            {"nonResourceURLs": [PATH, "/metrics", "/debug/memory"], "verbs": ["get"]},
            {"nonResourceURLs": ["/debug/memory"], "verbs": ["post"]}]}),
        lambda: rbac.create_cluster_role_binding({
            "metadata": {"name": DEBUG_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DEBUG_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
    ]
    for create in creates:
        try:
            await create()
        except ApiException as e:
            if e.status != 409:
                raise
    tr = await core.create_namespaced_service_account_token(name, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)))
    return str(tr.status.token)


async def fetch_dump(port: int, token: str, host: str = "127.0.0.1") -> dict[str, Any]:
    """``GET https://host:port/debug/cache`` with ``token`` (the certificate is self-signed: not verified).

    Raises:
        AssertionError: the answer is not 200.
    """
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s, \
            s.get(f"https://{host}:{port}{PATH}", ssl=False, headers={"Authorization": f"Bearer {token}"}) as r:
        if r.status != 200:
            raise AssertionError(f"{PATH} answered {r.status}: {(await r.text())[:300]}")
        body: dict[str, Any] = await r.json()
        return body
