"""Helpers for e2e tests against the real test bed: polling, clients, Nodes, Pods, events.

The bed has no kubelet and no kube-controller-manager, which shapes these helpers:

* Nodes are plain API objects; :func:`create_node` creates one, then sets
  ``status.capacity``/``allocatable`` and a ``Ready=True`` condition through the status
  subresource (a create ignores ``status``). Nothing taints them (the apiserver runs without
  ``TaintNodesByCondition``) and nothing ever marks them NotReady.
* A bound Pod deleted gracefully would stay Terminating forever (no kubelet confirms it):
  :func:`delete_pod` always deletes with ``grace_period_seconds=0``.
* Nothing garbage-collects: delete what you create (unique names: :func:`unique_name`).
  A deleted namespace stays Terminating forever (no namespace controller), so prefer
  ``default`` plus unique names over per-test namespaces.

Synchronise by polling with :func:`wait_for`, never by sleeping.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from py_scheduler.app.client.informers import WatchedKind

sys.path.insert(0, str(Path(__file__).resolve().parent / "testbed"))
import bed

Testbed = bed.Testbed
"""Type of the ``testbed`` fixture (re-exported so tests need not import ``bed``)."""

T = TypeVar("T")

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
"""Image named in test Pods; never pulled (no kubelet)."""

DEFAULT_NODE_RESOURCES: Mapping[str, str] = {"cpu": "4", "memory": "8Gi", "pods": "110"}


def unique_name(prefix: str) -> str:
    """``prefix`` plus a random suffix: a DNS-1123 name no other test (or run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def wait_for(
    predicate: Callable[[], Awaitable[T | None] | T | None],
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` (sync or async) until it returns something truthy, and return that.

    Exceptions raised by the predicate count as "not yet" (e.g. a 404 before an object
    exists). On timeout, raises AssertionError naming ``what`` with the last value returned
    or the last exception raised, so a failing test says what it was waiting for.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
            last, last_exc = value, None
        except AssertionError as e:  # predicates may assert; report the latest
            last_exc = e
        except Exception as e:
            last_exc = e
        if time.monotonic() >= deadline:
            detail = f"last error: {last_exc!r}" if last_exc is not None else f"last value: {last!r}"
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; {detail}")
        await asyncio.sleep(interval)


# --------------------------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------------------------


def client_configuration(
    server: str,
    ca_file: str,
    *,
    cert_file: str | None = None,
    key_file: str | None = None,
    token: str | None = None,
) -> client.Configuration:
    """A kubernetes_asyncio Configuration for ``server`` with a client cert or a bearer token."""
    cfg = client.Configuration(host=server, ssl_ca_cert=ca_file)
    if cert_file and key_file:
        cfg.cert_file, cfg.key_file = cert_file, key_file
    if token is not None:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg


@asynccontextmanager
async def api_client_for(cfg: client.Configuration) -> AsyncIterator[client.ApiClient]:
    """An ApiClient for ``cfg`` that is closed on exit."""
    api = client.ApiClient(configuration=cfg)
    try:
        yield api
    finally:
        await api.close()


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def create_node(
    api: client.ApiClient,
    name: str,
    allocatable: Mapping[str, str] | None = None,
    *,
    capacity: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: bool = True,
) -> client.V1Node:
    """Create Node ``name`` and set its status like a kubelet would; returns the Node.

    ``allocatable`` defaults to :data:`DEFAULT_NODE_RESOURCES`, ``capacity`` to
    ``allocatable``. The label ``kubernetes.io/hostname=NAME`` is always set. ``taints`` are
    dicts like ``{"key": "k", "value": "v", "effect": "NoSchedule"}``.
    """
    core = client.CoreV1Api(api)
    alloc = dict(allocatable if allocatable is not None else DEFAULT_NODE_RESOURCES)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": [dict(t) for t in taints], "unschedulable": unschedulable},
    }
    await core.create_node(body)
    now = _now()
    status = {
        "status": {
            "capacity": dict(capacity if capacity is not None else alloc),
            "allocatable": alloc,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "set by the e2e test bed",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
        }
    }
    return await core.patch_node_status(name, status)


async def delete_node(api: client.ApiClient, name: str) -> None:
    """Delete Node ``name``; a missing Node is fine."""
    try:
        await client.CoreV1Api(api).delete_node(name)
    except ApiException as e:
        if e.status != 404:
            raise


# --------------------------------------------------------------------------------------------
# Pods
# --------------------------------------------------------------------------------------------


async def create_pod(
    api: client.ApiClient,
    name: str,
    namespace: str = "default",
    *,
    requests: Mapping[str, str] | None = None,
    scheduler_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> client.V1Pod:
    """Create a one-container Pod; returns it.

    ``requests`` become the container's resource requests; ``scheduler_name`` None leaves
    ``schedulerName`` unset (the apiserver defaults it to ``default-scheduler``, i.e. the
    upstream kube-scheduler of the bed). ``spec`` entries are merged over the generated spec
    (e.g. ``{"nodeSelector": {...}, "tolerations": [...], "priorityClassName": ...}``).
    """
    container: dict[str, Any] = {"name": "main", "image": PAUSE_IMAGE}
    if requests:
        container["resources"] = {"requests": dict(requests)}
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if scheduler_name is not None:
        pod_spec["schedulerName"] = scheduler_name
    pod_spec.update(spec or {})
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": pod_spec,
    }
    return await client.CoreV1Api(api).create_namespaced_pod(namespace, body)


async def delete_pod(api: client.ApiClient, name: str, namespace: str = "default", *, wait: bool = True) -> None:
    """Delete a Pod at once (grace period 0: there is no kubelet to finish a graceful delete).

    A missing Pod is fine. With ``wait`` returns only once the Pod is gone from the API.
    """
    core = client.CoreV1Api(api)
    try:
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as e:
        if e.status == 404:
            return
        raise
    if wait:

        async def gone() -> bool:
            try:
                await core.read_namespaced_pod(name, namespace)
            except ApiException as e:
                if e.status == 404:
                    return True
                raise
            return False

        await wait_for(gone, timeout=30, what=f"pod {namespace}/{name} to be deleted")


async def wait_for_pod_scheduled(
    api: client.ApiClient, name: str, namespace: str = "default", timeout: float = 30.0
) -> client.V1Pod:
    """Wait until the Pod is bound (``spec.nodeName`` set); returns the bound Pod."""
    core = client.CoreV1Api(api)

    async def bound() -> client.V1Pod | None:
        pod = await core.read_namespaced_pod(name, namespace)
        return pod if pod.spec.node_name else None

    return await wait_for(bound, timeout=timeout, what=f"pod {namespace}/{name} to be bound to a node")


class JsonView:
    """Attribute access over an API JSON object with the generated models' snake_case names
    (``e.regarding.name``, ``e.reporting_instance``); a missing field reads as None.

    Used for events.k8s.io/v1 lists: kubernetes_asyncio's EventsV1Event model refuses Events
    without ``eventTime`` (core/v1 Events written by other clients), failing the whole list.
    """

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
        value = self._raw.get(camel, self._raw.get(name))
        if isinstance(value, Mapping):
            return JsonView(value)
        if isinstance(value, list):
            return [JsonView(v) if isinstance(v, Mapping) else v for v in value]
        return value


async def events_v1(api: client.ApiClient, namespace: str = "default") -> list[Any]:
    """events.k8s.io/v1 Events of ``namespace`` as :class:`JsonView` objects (raw JSON, see there)."""
    resp = await client.EventsV1Api(api).list_namespaced_event(namespace, _preload_content=False)
    try:
        doc = json.loads(await resp.read())
    finally:
        resp.release()
    return [JsonView(item) for item in doc.get("items") or []]


async def wait_for_failed_scheduling(api: client.ApiClient, name: str, needle: str, namespace: str = "default",
                                     timeout: float = 60.0) -> str:
    """The first FailedScheduling message about Pod ``name`` containing ``needle`` (polled every 0.2 s).

    Raises:
        AssertionError: none within ``timeout`` seconds.
    """

    async def event() -> str | None:
        for reason, msg in await pod_events(api, name, namespace):
            if reason == "FailedScheduling" and needle in msg:
                return msg
        return None

    msg: str = await wait_for(event, timeout=timeout, interval=0.2, what=f"FailedScheduling for {name}")
    return msg


async def pod_events(api: client.ApiClient, name: str, namespace: str = "default") -> list[tuple[str, str]]:
    """``(reason, message)`` of every event about Pod ``name``, from core/v1 and events.k8s.io/v1.

    Both APIs show the same stored events; kube-scheduler writes through events.k8s.io/v1
    (``note`` there, ``message`` in core/v1). Duplicates (same uid) are listed once.
    """
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    core_list = await client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}"
    )
    for ev in core_list.items:
        seen.add(ev.metadata.uid)
        out.append((ev.reason or "", ev.message or ""))
    for ev in await events_v1(api, namespace):
        reg = ev.regarding
        if ev.metadata.uid in seen or reg is None or reg.kind != "Pod" or reg.name != name:
            continue
        out.append((ev.reason or "", ev.note or ""))
    return out


@dataclass(frozen=True, slots=True)
class NamespacedPods(WatchedKind):
    """The Pods of one namespace (the LIST and WATCH path ``/api/v1/namespaces/{ns}/pods``): a
    reflector test on the shared bed sees only its own Pods."""

    ns: str = "default"

    @property
    def list_path(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods"
