"""Extended resources backed by DRA (``DRAExtendedResource``): a Pod's extended-resource requests
that a DeviceClass backs become the requests of one special ResourceClaim per Pod, allocated on nodes
whose device plugins do not advertise the resource.

Upstream: ``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go``
(``preFilterExtendedResources``, ``filterExtendedResources``, ``createRequestsAndMappings``,
``createResourceRequestAndMappings``, ``createExtendedResourceClaimInAPI``,
``patchPodExtendedResourceClaimStatus``).
"""

from __future__ import annotations

import copy
from typing import Any

from py_scheduler.framework import quantity as qty
from py_scheduler.framework.handle import APIClient, APIError
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import NodeInfo, PodInfo, Status
from py_scheduler.plugins.dynamic_resources.binding import BindingError, claim_path
from py_scheduler.plugins.dynamic_resources.claims import allocation_of, claim_meta, claim_uid
from py_scheduler.plugins.dynamic_resources.state import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    SPECIAL_CLAIM_NAME,
    DRAState,
    unresolvable,
)
from py_scheduler.plugins.helpers.extended_resources import DeviceClassResolver, is_dra_extended_resource_name

RequestMapping = dict[str, str]
"""A ``ContainerExtendedResourceRequest``: ``{"containerName", "resourceName", "requestName"}``."""


def container_request(index: int, container: Obj, resource: str, class_name: str,
                        reusable: list[Obj | None]) -> tuple[Obj | None, list[RequestMapping]]:
    """``createResourceRequestAndMappings``: the device request of one container for ``resource``
    (named ``container-<index>-request-<position of resource in the sorted request names>``), less
    what ``reusable`` requests of later long-lived containers already provide (None if they
    provide it all), and the container's mappings to the requests that serve it."""
    creqs = (container.get("resources") or {}).get("requests") or {}
    if not isinstance(creqs, dict) or resource not in creqs:
        return None, []
    q = qty.parse(creqs[resource])
    if q != q.to_integral_value() or q == 0:
        return None, []
    crq = int(q)
    cname = str(container.get("name") or "")
    mappings: list[RequestMapping] = []
    total = 0
    for r in reusable:
        if r is not None:
            total += int(r["exactly"]["count"])
            mappings.append({"containerName": cname, "resourceName": resource, "requestName": str(r["name"])})
            if total >= crq:
                return None, mappings
    ridx = sorted(str(k) for k in creqs).index(resource)
    name = f"container-{index}-request-{ridx}"
    mappings.append({"containerName": cname, "resourceName": resource, "requestName": name})
    return ({"name": name,
             "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": crq - total}},
            mappings)


def extended_resource_requests(spec: Obj, resources: dict[str, int],
                                resolver: DeviceClassResolver) -> tuple[list[Obj], list[RequestMapping]]:
    """``createRequestsAndMappings``: the device requests of the special claim for the extended
    resources the node must provide through DRA: one per long-lived container (regular and sidecar
    init containers) plus the largest one of the short-lived init containers, sorted by name; and
    the containers' request mappings (short-lived ones pointing at that largest request)."""
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    containers = inits + [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    long_lived = [i for i, c in enumerate(containers) if i >= len(inits) or c.get("restartPolicy") == "Always"]
    short_lived = [i for i in range(len(inits)) if i not in long_lived]
    out: list[Obj] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(resources):
        dc = resolver.get(resource)
        if dc is None:
            continue
        class_name = str(claim_meta(dc).get("name") or "")
        long_reqs: list[Obj | None] = [None] * len(containers)
        long_maps: list[RequestMapping] = []
        for i in long_lived:
            long_reqs[i], m = container_request(i, containers[i], resource, class_name, [])
            long_maps += m
        biggest: Obj | None = None
        short_names: set[str] = set()
        short_maps: list[RequestMapping] = []
        for i in short_lived:
            r, m = container_request(i, containers[i], resource, class_name, long_reqs[i:])
            short_maps += m
            if r is not None:
                short_names.add(str(r["name"]))
                if biggest is None or biggest["exactly"]["count"] < r["exactly"]["count"]:
                    biggest = r
        if biggest is not None and len(short_names) > 1:
            short_names.discard(str(biggest["name"]))
            for sm in short_maps:
                if sm["requestName"] in short_names:
                    sm["requestName"] = str(biggest["name"])
        if biggest is not None:
            out.append(biggest)
        out.extend(r for r in long_reqs if r is not None)
        mappings += long_maps + short_maps
    out.sort(key=lambda r: str(r["name"]))
    return out, mappings


def pre_filter_extended(pod: PodInfo, objects: Any, s: DRAState) -> Obj | None:
    """``preFilterExtendedResources``: the special claim when the Pod requests an extended
    resource that a DeviceClass backs (an existing extended-resource claim owned by the Pod, or
    an in-memory one without requests)."""
    scalar = {k: v for k, v in pod.requests.scalar.items() if v != 0 and is_dra_extended_resource_name(k)}
    if not scalar or objects is None:
        return None
    resolver = DeviceClassResolver(objects.list("DeviceClass"))
    if not any(resolver.get(k) is not None for k in scalar):
        return None
    s.ext_resources = scalar
    s.resolver = resolver
    s.pod_spec = pod.spec
    for c in objects.list("ResourceClaim", pod.namespace):
        meta = claim_meta(c)
        if (meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
            continue
        for ref in meta.get("ownerReferences") or []:
            if (isinstance(ref, dict) and ref.get("name") == pod.name and ref.get("controller")
                    and ref.get("uid") == pod.uid):
                found: Obj = c
                return found
    return {"metadata": {"namespace": pod.namespace, "name": SPECIAL_CLAIM_NAME,
                         "uid": f"{pod.uid or pod.key}-extended-resources",
                         "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                                              "uid": pod.uid, "controller": True}]},
            "spec": {}}


def filter_extended(s: DRAState, node_info: NodeInfo) -> tuple[Obj | None, Status | None]:
    """``filterExtendedResources``: None when the node's device plugins provide every extended
    resource; DRA-provided extended resources are not supported by py-scheduler."""
    ext = s.extended_claim()
    if ext is None:
        return None, None
    if ((ext.get("spec") or {}).get("devices") or {}).get("requests") is not None:
        return None, unresolvable("cannot schedule extended resource claim")
    need: list[str] = []
    resolver = s.resolver or DeviceClassResolver()
    for name, q in s.ext_resources.items():
        if q == 0:
            continue
        ok = name in node_info.allocatable.scalar
        backed = resolver.get(name) is not None
        if backed and node_info.allocatable.scalar.get(name, 0) == 0:
            need.append(name)
        elif not ok:
            return None, unresolvable("cannot fit resource")
    if s.num_user == 0 and not need:
        return None, None
    if allocation_of(ext) is not None:
        return None, None
    node_claim = copy.deepcopy(ext)
    try:
        reqs, mappings = extended_resource_requests(s.pod_spec, {n: s.ext_resources[n] for n in need},
                                                     resolver)
    except (TypeError, ValueError, AttributeError) as exc:
        return None, unresolvable(f"invalid extended resource request: {exc}")
    node_claim["spec"] = {"devices": {"requests": reqs}}
    s.node_ext[node_info.name] = (node_claim, mappings)
    return node_claim, None


async def create_extended_claim(client: APIClient, s: DRAState, special: Obj, pod: PodInfo, node_name: str,
                                in_flight: dict[str, list[Any]]) -> Obj:
    """``createExtendedResourceClaimInAPI``: the node's special claim created under the generated
    name ``<pod>-extended-resources-*``; the in-flight entry (``in_flight``: the plugin's claim UID ->
[claim, sharers]) moves to the created claim's UID.

    Raises:
        BindingError: no special claim for the node, or the API refused the claim.
    """
    node_claim = s.node_ext.get(node_name)
    if node_claim is None:
        raise BindingError(f"extended resource claim not found for node {node_name}")
    meta = dict(claim_meta(node_claim[0]))
    body: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {k: v for k, v in meta.items() if k not in ("name", "uid", "resourceVersion")},
                 "spec": copy.deepcopy(node_claim[0].get("spec") or {})}
    body["metadata"]["generateName"] = f"{pod.name}-extended-resources-"
    try:
        created = await client.create(claim_path(pod.namespace), body)
    except APIError as exc:
        raise BindingError(f"create claim for extended resources {pod.namespace}/: {exc.message}") from exc
    s.created_ext = created
    entry = in_flight.pop(claim_uid(special), None)
    if entry is not None:
        allocated = copy.deepcopy(created)
        allocated["status"] = {"allocation": allocation_of(entry[0])}
        in_flight[claim_uid(created)] = [allocated, entry[1], None]
    return created

async def patch_extended_status(client: APIClient, s: DRAState, claim: Obj, pod: PodInfo, node_name: str) -> None:
    """``patchPodExtendedResourceClaimStatus``: the Pod's ``status.extendedResourceClaimStatus``
    names the claim and maps each container's extended resource to its request.

    Raises:
        BindingError: no mappings for the node, or the API refused the patch.
    """
    mappings = s.node_ext.get(node_name, (None, []))[1]
    if not mappings:
        raise BindingError(f"nil or empty request mappings, no update of pod {pod.namespace}/{pod.name} "
                           f"ExtendedResourceClaimStatus")
    patch = {"status": {"extendedResourceClaimStatus": {"requestMappings": mappings,
                                                        "resourceClaimName": claim_meta(claim).get("name")}}}
    try:
        await client.patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", patch,
                           content_type="application/strategic-merge-patch+json")
    except APIError as exc:
        raise BindingError(f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: "
                           f"{exc.message}") from exc
