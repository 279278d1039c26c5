"""Read a live cluster's scheduling-relevant objects into the same :class:`ClusterData` a snapshot
file gives (``py-scheduler explain --kubeconfig``).

Every kind of :data:`py_scheduler.cache.kinds.KINDS` (the table the live informers watch) is listed
once (cluster-wide, the Pods with the informer's terminal-phase field selector) with
kubernetes_asyncio's ``ApiClient.call_api`` on the table's path. Objects are taken from the raw JSON
response (``_preload_content=False``), i.e. exactly the camelCase dicts the API server sent: going
through the generated models and ``ApiClient.sanitize_for_serialization`` would silently drop fields
newer than the client library (pod-level resources, new DRA fields). List items carry no ``kind``;
the loader's typed-list handling (``NodeList`` -> ``Node``) fills it in. The Pods are stored ones,
so the loader refuses none at admission (``admitted=True``; RuntimeClasses are not listed).

Kinds whose API group the server does not serve (404, e.g. ``resource.k8s.io/v1`` switched off)
are skipped; any other API error stops with :class:`~py_scheduler.offline.loader.SnapshotError`.

Note: ``py_scheduler/app/client/kube.py`` (the live scheduler's typed adapter) has no generic "list every
kind" call, so the listing lives here; it only reads, with no retries, since it runs once per
command.

Upstream: the informers kube-scheduler starts (``pkg/scheduler/scheduler.go``,
``framework/plugins/*`` ``EventsToRegister``) decide the kinds listed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from py_scheduler.cache.kinds import KINDS
from py_scheduler.offline.loader import ClusterData, SnapshotError, parse_objects

__all__ = ["load_live"]

async def _list_all(kubeconfig: Path) -> list[dict[str, Any]]:
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    try:
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    except (OSError, config.ConfigException, ValueError, TypeError, KeyError, yaml.YAMLError) as exc:
        raise SnapshotError(f"kubeconfig {kubeconfig}: cannot load: {' '.join(str(exc).split())}") from exc
    docs: list[dict[str, Any]] = []
    async with client.ApiClient(cfg) as api:
        for wk in KINDS:
            query = [("fieldSelector", wk.field_selector)] if wk.field_selector else []
            try:
                resp = await api.call_api(wk.list_path, "GET", query_params=query,
                                          header_params={"Accept": "application/json"},
                                          auth_settings=["BearerToken"], _preload_content=False)
                try:
                    status, body = resp.status, await resp.read()
                finally:
                    resp.release()
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                raise SnapshotError(f"kubeconfig {kubeconfig}: cannot reach the API server "
                                    f"({cfg.host}): {exc}") from exc
            if status == 404 and not wk.list_path.startswith("/api/v1/"):
                continue  # API group not served by this cluster (the core group always is)
            if status == 404:
                raise SnapshotError(f"kubeconfig {kubeconfig}: listing {wk.kind}s: HTTP 404 from {cfg.host}: every "
                                    "API server serves /api/v1; is this a Kubernetes API server?")
            if not 200 <= status < 300:
                raise SnapshotError(f"kubeconfig {kubeconfig}: listing {wk.kind}s: HTTP {status} "
                                    f"{body.decode('utf-8', 'replace')[:200]}")
            try:
                obj = json.loads(body)
            except ValueError as exc:
                raise SnapshotError(f"kubeconfig {kubeconfig}: listing {wk.kind}s: response is not "
                                    "JSON") from exc
            if isinstance(obj, dict):
                obj["kind"] = f"{wk.kind}List"  # the server sets it already; be explicit for the loader
                docs.append(obj)
    return docs


def load_live(kubeconfig: Path) -> ClusterData:
    """List every scheduling-relevant kind from the cluster of ``kubeconfig``.

    Raises:
        SnapshotError: unreadable kubeconfig, unreachable server, a list call failing with other
        than 404, or a malformed object (see :func:`~py_scheduler.offline.loader.parse_objects`).
    """
    docs = asyncio.run(_list_all(kubeconfig))
    return parse_objects(docs, f"kubeconfig {kubeconfig}", admitted=True)
