"""Read a live cluster's scheduling-relevant objects into the same :class:`ClusterData` a snapshot
file gives (``py-scheduler explain --kubeconfig``).

Every kind the loader knows is listed once (cluster-wide) with kubernetes_asyncio. Objects are
taken from the raw JSON response (``_preload_content=False``), i.e. exactly the camelCase dicts the
API server sent: going through the generated models and
``ApiClient.sanitize_for_serialization`` would silently drop fields newer than the client library
(pod-level resources, new DRA fields). List items carry no ``kind``; the loader's typed-list
handling (``NodeList`` -> ``Node``) fills it in.

Kinds whose API group the server does not serve (404, e.g. ``resource.k8s.io/v1`` switched off)
are skipped; any other API error stops with :class:`~py_scheduler.offline.loader.SnapshotError`.

Note: ``py_scheduler/app/kube.py`` (the live scheduler's typed adapter) has no generic "list every
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

from py_scheduler.offline.loader import ClusterData, SnapshotError, parse_objects

__all__ = ["LIST_CALLS", "load_live"]

# (List kind, API class name in kubernetes_asyncio.client, method)
LIST_CALLS: tuple[tuple[str, str, str], ...] = (
    ("NodeList", "CoreV1Api", "list_node"),
    ("PodList", "CoreV1Api", "list_pod_for_all_namespaces"),
    ("NamespaceList", "CoreV1Api", "list_namespace"),
    ("ServiceList", "CoreV1Api", "list_service_for_all_namespaces"),
    ("ReplicationControllerList", "CoreV1Api", "list_replication_controller_for_all_namespaces"),
    ("PersistentVolumeClaimList", "CoreV1Api", "list_persistent_volume_claim_for_all_namespaces"),
    ("PersistentVolumeList", "CoreV1Api", "list_persistent_volume"),
    ("ReplicaSetList", "AppsV1Api", "list_replica_set_for_all_namespaces"),
    ("StatefulSetList", "AppsV1Api", "list_stateful_set_for_all_namespaces"),
    ("StorageClassList", "StorageV1Api", "list_storage_class"),
    ("CSINodeList", "StorageV1Api", "list_csi_node"),
    ("CSIDriverList", "StorageV1Api", "list_csi_driver"),
    ("CSIStorageCapacityList", "StorageV1Api", "list_csi_storage_capacity_for_all_namespaces"),
    ("VolumeAttachmentList", "StorageV1Api", "list_volume_attachment"),
    ("ResourceClaimList", "ResourceV1Api", "list_resource_claim_for_all_namespaces"),
    ("ResourceSliceList", "ResourceV1Api", "list_resource_slice"),
    ("DeviceClassList", "ResourceV1Api", "list_device_class"),
    ("PodDisruptionBudgetList", "PolicyV1Api", "list_pod_disruption_budget_for_all_namespaces"),
    ("PriorityClassList", "SchedulingV1Api", "list_priority_class"),
)


async def _list_all(kubeconfig: Path) -> list[dict[str, Any]]:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException

    cfg = client.Configuration()
    try:
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    except (OSError, config.ConfigException, ValueError, TypeError, KeyError, yaml.YAMLError) as exc:
        raise SnapshotError(f"kubeconfig {kubeconfig}: cannot load: {' '.join(str(exc).split())}") from exc
    docs: list[dict[str, Any]] = []
    async with client.ApiClient(cfg) as api:
        for list_kind, api_cls, method in LIST_CALLS:
            fn = getattr(getattr(client, api_cls)(api), method)
            try:
                resp = await fn(_preload_content=False)
                body = await resp.read()
            except ApiException as exc:
                if exc.status == 404:
                    continue  # API group not served by this cluster
                raise SnapshotError(f"kubeconfig {kubeconfig}: listing {list_kind[:-4]}s: HTTP {exc.status} "
                                    f"{exc.reason}") from exc
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                raise SnapshotError(f"kubeconfig {kubeconfig}: cannot reach the API server "
                                    f"({cfg.host}): {exc}") from exc
            try:
                obj = json.loads(body)
            except ValueError as exc:
                raise SnapshotError(f"kubeconfig {kubeconfig}: listing {list_kind[:-4]}s: response is not "
                                    "JSON") from exc
            if isinstance(obj, dict):
                obj["kind"] = list_kind  # the server sets it already; be explicit for the loader
                docs.append(obj)
    return docs


def load_live(kubeconfig: Path) -> ClusterData:
    """List every scheduling-relevant kind from the cluster of ``kubeconfig``.

    Raises:
        SnapshotError: unreadable kubeconfig, unreachable server, a list call failing with other
        than 404, or a malformed object (see :func:`~py_scheduler.offline.loader.parse_objects`).
    """
    docs = asyncio.run(_list_all(kubeconfig))
    return parse_objects(docs, f"kubeconfig {kubeconfig}")
