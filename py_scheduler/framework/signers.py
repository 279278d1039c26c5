"""Signature fragments shared by plugins' ``sign_pod`` (OpportunisticBatching).

Upstream: ``staging/src/k8s.io/kube-scheduler/framework/signers.go`` (signer names word for word,
``HostPortsSigner``, ``NodeAffinitySigner`` and its term / requirement signers, ``TolerationsSigner``,
``VolumesSigner``) and ``pkg/scheduler/framework/plugins/noderesources/fit.go`` (``SignPod``: the
Pod's ``computePodResourceRequest``).

A plugin's ``sign_pod(pod: PodInfo, snapshot: Snapshot | None) -> (list[SignFragment], Status)``
returns the fragments (signer name, JSON-able value) describing every Pod input its PreFilter /
Filter / PreScore / Score read, or a non-success Status when it cannot express them (the Pod then
has no signature). Values only need to compare equal when upstream's would: they are JSON-encoded
by :func:`py_scheduler.framework.batch.canonical_signature`. Malformed Pod fields never raise here: they
are signed as they are (two Pods with the same malformed field get the same verdicts).
"""

from __future__ import annotations

import json
from typing import Any

from py_scheduler.framework.batch import SignFragment
from py_scheduler.framework.types import PodInfo, Status

IMAGE_NAMES_SIGNER_NAME = "v1.Pod.Spec.CanonicalImageNames()"
LABELS_SIGNER_NAME = "v1.Pod.Labels"
NODE_NAME_SIGNER_NAME = "v1.Pod.Spec.NodeName"
NODE_AFFINITY_SIGNER_NAME = "v1.Pod.Spec.Affinity.NodeAffinity"
NODE_SELECTOR_SIGNER_NAME = "v1.Pod.Spec.Affinity.NodeSelector"
HOST_PORTS_SIGNER_NAME = "v1.Pod.Spec.HostPorts()"
RESOURCES_SIGNER_NAME = "v1.Pod.Spec.ContainerRequestsAndOverheads()"
TOLERATIONS_SIGNER_NAME = "v1.Pod.Spec.Tolerations"
VOLUMES_SIGNER_NAME = "v1.Pod.Spec.Volumes.NonSyntheticSources()"
FEATURES_SIGNER_NAME = "v1.Pod.Spec.RequiredFeatures()"

SignResult = tuple[list[SignFragment], Status]


def _dumps(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def _dict(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _containers(pod: PodInfo) -> list[dict[str, Any]]:
    spec = pod.spec
    return [c for c in _list(spec.get("containers")) + _list(spec.get("initContainers")) if isinstance(c, dict)]


def host_ports_signer(pod: PodInfo) -> list[Any]:
    """``HostPortsSigner``: the distinct non-zero ``hostPort`` values of containers and init
    containers, sorted."""
    ports: set[Any] = set()
    for c in _containers(pod):
        for p in _list(c.get("ports")):
            hp = _dict(p).get("hostPort")
            if hp:
                ports.add(hp)
    return sorted(ports, key=_dumps)


def node_selector_requirements_signer(reqs: object) -> list[str]:
    """``NodeSelectorRequirementsSigner``: each requirement as JSON with its values sorted; sorted."""
    out = []
    for r in _list(reqs):
        t = dict(_dict(r))
        if isinstance(t.get("values"), list):
            t["values"] = sorted(t["values"], key=_dumps)
        out.append(_dumps(t))
    return sorted(out)


def _term_signer(term: object) -> dict[str, list[str]]:
    t = _dict(term)
    return {"MatchExpressions": node_selector_requirements_signer(t.get("matchExpressions")),
            "MatchFields": node_selector_requirements_signer(t.get("matchFields"))}


def node_affinity_signer(pod: PodInfo) -> dict[str, list[str]] | None:
    """``NodeAffinitySigner``: None without ``spec.affinity.nodeAffinity``; otherwise the required
    terms and the preferred (weight, term) entries, each canonicalised and sorted."""
    na = _dict(pod.spec.get("affinity")).get("nodeAffinity")
    if na is None:
        return None
    na = _dict(na)
    pref = sorted(_dumps({"Weight": _dict(p).get("weight"), "Preference": _term_signer(_dict(p).get("preference"))})
                  for p in _list(na.get("preferredDuringSchedulingIgnoredDuringExecution")))
    req_terms = _dict(na.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms")
    req = sorted(_dumps(_term_signer(t)) for t in _list(req_terms))
    return {"Required": req, "Preferred": pref}


def tolerations_signer(pod: PodInfo) -> list[Any]:
    """``TolerationsSigner``: the tolerations sorted (stably) by key, then value."""
    tols = list(_list(pod.spec.get("tolerations")))
    tols.sort(key=lambda t: (str(_dict(t).get("key") or ""), str(_dict(t).get("value") or "")))
    return tols


def volumes_signer(pod: PodInfo) -> list[str]:
    """``VolumesSigner``: the volume sources (the volume without its name) other than ConfigMap and
    Secret volumes, as JSON, sorted."""
    out = []
    for v in _list(pod.spec.get("volumes")):
        src = {k: val for k, val in _dict(v).items() if k != "name"}
        if src.get("configMap") is None and src.get("secret") is None:
            out.append(_dumps(src))
    return sorted(out)


def resources_signer(pod: PodInfo) -> list[Any]:
    """``computePodResourceRequest`` as signed by NodeResourcesFit / BalancedAllocation: the Pod's
    effective request (milli-CPU, memory bytes, ephemeral-storage bytes, scalar resources)."""
    r = pod.requests
    return [r.milli_cpu, r.memory, r.ephemeral_storage, r.allowed_pod_number, sorted(r.scalar.items())]


def volumes_fragment(pod: PodInfo) -> SignResult:
    """The VolumeRestrictions / NodeVolumeLimits / VolumeBinding / VolumeZone ``SignPod``."""
    return [(VOLUMES_SIGNER_NAME, volumes_signer(pod))], Status.success()


def tolerations_fragment(pod: PodInfo) -> SignResult:
    """The TaintToleration / NodeUnschedulable ``SignPod``."""
    return [(TOLERATIONS_SIGNER_NAME, tolerations_signer(pod))], Status.success()


def cannot_sign(reason: str) -> SignResult:
    """A refusal (``fwk.NewStatus(fwk.Unschedulable, reason)``): the Pod gets no signature."""
    return [], Status.unschedulable(reason)


def container_list(pod: PodInfo) -> list[dict[str, Any]]:
    """The Pod's containers then init containers (malformed entries left out)."""
    return _containers(pod)
