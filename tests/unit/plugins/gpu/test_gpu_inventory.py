"""GPU nodes as they really are (issue 17): MIG single / mixed, time-slicing, stale labels, cloud labels.

Every test here names the "Why" bullet of issue 17 it covers; each failed before the inventory
(``py_scheduler/plugins/gpu/inventory.py``) existed. Nodes come from public label sets
(:mod:`tests.unit.plugins.gpu.real_nodes`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from py_scheduler.framework.types import Code, NodeInfo, PodInfo
from py_scheduler.plugins.gpu.accounting import clear_memo
from py_scheduler.plugins.gpu.filter import (
    ERR_INSUFFICIENT,
    ERR_MEMORY,
    ERR_MIG_PROFILE,
    ERR_MIG_SLICES,
    ERR_MODEL,
    ERR_SHARED,
    ERR_UNKNOWN_MEMORY,
)
from py_scheduler.plugins.gpu.inventory import UNIT_GPU, UNIT_MIG, UNIT_REPLICA, parse_node, split_product_suffixes
from py_scheduler.plugins.gpu.model import GB, MIB, GPUKeys, GPUParseError, parse_request
from tests.unit.plugins.gpu import real_nodes as rn
from tests.unit.plugins.gpu.test_gpu_filter import filter_all

Obj = dict[str, Any]
KEYS = GPUKeys()
MODEL = "gpu-scheduler/gpu-model"
MEM = "gpu-scheduler/gpu-memory-gb"
PROFILE = "gpu-scheduler/mig-profile"
WHOLE = "gpu-scheduler/whole-gpu"
FAIL_GT_ONE = "gpu-scheduler/fail-requests-greater-than-one"


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    clear_memo()


def verdict(node: Obj, pod: Obj, pods: list[Obj] | None = None) -> tuple[Code, list[str]]:
    s = filter_all([node], pods or [], pod)
    st = s.get(node["metadata"]["name"]) or s[""]
    return st.code, st.reasons


def gpus(n: int, **ann: str) -> Obj:
    return rn.pod("p", {"nvidia.com/gpu": str(n)}, {k.replace("_", "-"): v for k, v in ann.items()})


def annotated(n: int, annotations: dict[str, str]) -> Obj:
    return rn.pod("p", {"nvidia.com/gpu": str(n)} if n else None, annotations)


def two_containers(a: int, b: int) -> Obj:
    """A Pod whose two containers ask ``a`` and ``b`` nvidia.com/gpu as limits only."""
    pod = rn.pod("p")
    c = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [
        {**c, "name": "a", "resources": {"limits": {"nvidia.com/gpu": str(a)}}},
        {**c, "name": "b", "resources": {"limits": {"nvidia.com/gpu": str(b)}}}]
    return pod


# -- MIG single: a plain request gets a slice, as the kubelet grants it ----------------------------------
def test_mig_single_serves_a_plain_gpu_request_with_a_slice() -> None:
    """Issue 30: NVIDIA's MIG single example (``nvidia.com/gpu: 1`` on an A100-80GB cut into 1g.10gb)
    was refused ("MIG slices, not whole GPUs") although the kubelet grants a slice. The model is the
    card's (``A100``, ``A100-80GB``); memory is the slice's, so a Pod wanting a whole card's memory
    still does not land; ``whole-gpu: "true"`` opts out."""
    node = rn.a100_mig_single("mig")
    spec = parse_node(NodeInfo(node), KEYS)
    assert (spec.inventory.unit_kind, spec.inventory.slice_profile, spec.product) == (UNIT_MIG, "1g.10gb",
                                                                                      "NVIDIA-A100-80GB-PCIe")
    assert spec.memory_bytes == 9728 * MIB  # the slice's memory, as GFD overrides it
    assert verdict(node, gpus(1))[0] == Code.SUCCESS
    assert verdict(node, gpus(7))[0] == Code.SUCCESS
    for model in ("A100", "A100-80GB"):
        assert verdict(node, annotated(1, {MODEL: model, MEM: "10"}))[0] == Code.SUCCESS
    assert verdict(node, annotated(1, {MEM: "20"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MEMORY])
    assert verdict(node, annotated(1, {MODEL: "H100"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MODEL])
    assert verdict(node, annotated(1, {WHOLE: "true"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MIG_SLICES])
    assert verdict(rn.openshift_v100("v"), annotated(1, {WHOLE: "true"}))[0] == Code.SUCCESS


def test_20gb_request_fits_40gb_slices() -> None:
    """Issue 30: a Pod asking 20 GB was refused on a node of 3g.40gb slices."""
    node = rn.a100_mig_single("mig")
    node["metadata"]["labels"].update({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
                                       "nvidia.com/gpu.memory": "40192", "nvidia.com/gpu.count": "2"})
    node["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    assert verdict(node, annotated(1, {MEM: "20", MODEL: "A100"}))[0] == Code.SUCCESS
    assert verdict(node, annotated(1, {MEM: "43"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MEMORY])
    assert verdict(node, annotated(1, {PROFILE: "1g.10gb"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                                   [ERR_MIG_PROFILE])


def test_whole_gpu_annotation_is_validated() -> None:
    with pytest.raises(GPUParseError, match=re.escape('invalid annotation gpu-scheduler/whole-gpu="yes"')):
        parse_request(PodInfo(annotated(1, {WHOLE: "yes"})), KEYS)
    with pytest.raises(GPUParseError, match=re.escape("contradicts the MIG profile 1g.10gb")):
        parse_request(PodInfo(annotated(1, {WHOLE: "true", PROFILE: "1g.10gb"})), KEYS)


def test_a_pod_may_name_a_mig_profile_and_get_a_slice() -> None:
    node = rn.a100_mig_single("mig")
    assert verdict(node, annotated(2, {PROFILE: "1g.10gb", MODEL: "A100"}))[0] == Code.SUCCESS
    assert verdict(node, annotated(1, {PROFILE: "1g.10gb", MODEL: "A100-80GB", MEM: "9.5"}))[0] == Code.SUCCESS
    assert verdict(node, annotated(1, {PROFILE: "1g.10gb", MEM: "20"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                                              [ERR_MEMORY])
    assert verdict(node, annotated(1, {PROFILE: "1g.10gb", MODEL: "H100"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                                                  [ERR_MODEL])
    assert verdict(node, annotated(1, {PROFILE: "3g.40gb"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                                   [ERR_MIG_PROFILE])
    # a whole card never serves a Pod that asked for a slice (it would hold a whole GPU)
    assert verdict(rn.openshift_v100("v"), annotated(1, {PROFILE: "1g.10gb"}))[1][0].startswith(ERR_MIG_PROFILE)


# -- MIG mixed: per-profile resources -----------------------------------------------------------------
def test_mig_mixed_node_offers_no_whole_gpu_and_says_why() -> None:
    """Why #2: with no nvidia.com/gpu allocatable the gpu.count label offered a whole card split into MIG."""
    node = rn.a100_mig_mixed("mixed")
    spec = parse_node(NodeInfo(node), KEYS)
    assert spec.total == 0
    assert [(p.name, p.count, p.memory_bytes) for p in spec.inventory.mig] == [
        ("1g.5gb", 2, 4864 * MIB), ("2g.10gb", 1, 9984 * MIB), ("3g.20gb", 1, 20096 * MIB)]
    code, reasons = verdict(node, annotated(0, {"gpu-scheduler/gpu-count": "1"}))
    assert code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert reasons == [f"{ERR_INSUFFICIENT} (label nvidia.com/gpu.count=1 but no allocatable nvidia.com/gpu: "
                       "its GPUs are split into MIG instances (nvidia.com/mig-*))"]


def test_mig_mixed_profile_request_checks_model_and_memory() -> None:
    """Why #2: ``nvidia.com/mig-1g.10gb: 1`` plus ``gpu-model: H100`` landed on an A100 node unchecked."""
    node = rn.a100_mig_mixed("mixed")
    req = parse_request(PodInfo(rn.pod("p", {"nvidia.com/mig-1g.5gb": "1"})), KEYS)
    assert (req.count, req.mig_profile, req.mig_count, req.wants_gpu) == (0, "1g.5gb", 1, True)
    h100 = rn.pod("p", {"nvidia.com/mig-1g.5gb": "1"}, {MODEL: "H100"})
    assert verdict(node, h100) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MODEL])
    assert verdict(node, rn.pod("p", {"nvidia.com/mig-1g.5gb": "2"}, {MODEL: "A100"}))[0] == Code.SUCCESS
    assert verdict(node, rn.pod("p", {"nvidia.com/mig-3g.20gb": "1"}, {MEM: "20"}))[0] == Code.SUCCESS
    assert verdict(node, rn.pod("p", {"nvidia.com/mig-2g.10gb": "1"}, {MEM: "20"})) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MEMORY])
    assert verdict(node, rn.pod("p", {"nvidia.com/mig-7g.40gb": "1"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                                            [ERR_MIG_PROFILE])
    # a whole-GPU node has no MIG profile
    assert verdict(rn.openshift_v100("v"), rn.pod("p", {"nvidia.com/mig-1g.5gb": "1"}))[0] == \
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_mig_profile_labels_without_allocatable_are_noted() -> None:
    node = rn.a100_mig_mixed("mixed")
    del node["status"]["allocatable"]["nvidia.com/mig-1g.5gb"]
    notes = parse_node(NodeInfo(node), KEYS).inventory.notes
    assert "label nvidia.com/mig-1g.5gb.count=2 but no allocatable nvidia.com/mig-1g.5gb" in notes
    assert verdict(node, rn.pod("p", {"nvidia.com/mig-1g.5gb": "1"}))[1] == [
        f"{ERR_MIG_PROFILE} (label nvidia.com/mig-1g.5gb.count=2 but no allocatable nvidia.com/mig-1g.5gb)"]


def test_mig_profile_read_from_limits_only() -> None:
    """Issue 30: ``limits: {nvidia.com/mig-3g.20gb: 1}`` (no requests, the form docs/gpu.md documents)
    was ignored, so such Pods landed on nodes without that profile."""
    pod = rn.pod("p", {"nvidia.com/mig-3g.20gb": "1"})
    del pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-3g.20gb"]
    req = parse_request(PodInfo(pod), KEYS)
    assert (req.mig_profile, req.mig_count, req.wants_gpu) == ("3g.20gb", 1, True)
    assert verdict(rn.openshift_v100("v"), pod) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MIG_PROFILE])
    assert verdict(rn.a100_mig_mixed("mixed"), pod)[0] == Code.SUCCESS


def test_mig_request_errors() -> None:
    with pytest.raises(GPUParseError, match="more than one MIG profile"):
        parse_request(PodInfo(rn.pod("p", {"nvidia.com/mig-1g.5gb": "1", "nvidia.com/mig-2g.10gb": "1"})), KEYS)
    with pytest.raises(GPUParseError, match=re.escape('not a MIG profile like "1g.10gb"')):
        parse_request(PodInfo(annotated(1, {PROFILE: "small"})), KEYS)
    with pytest.raises(GPUParseError, match=re.escape("does not equal the requested resource nvidia.com/mig-1g.5gb")):
        parse_request(PodInfo(rn.pod("p", {"nvidia.com/mig-1g.5gb": "1"}, {PROFILE: "2g.10gb"})), KEYS)


# -- time-slicing: replicas are not cards --------------------------------------------------------------
def test_time_sliced_replicas_are_granted_as_the_device_plugin_grants_them() -> None:
    """Issue 30: NVIDIA's device plugin hands out time-sliced replicas "to anyone that asks", several
    to one container too (README, "With CUDA Time-Slicing"), unless ``failRequestsGreaterThanOne``;
    py-scheduler refused a 2-replica request. A share still counts a quarter of the card's memory."""
    node = rn.a100_time_sliced("ts")
    inv = parse_node(NodeInfo(node), KEYS).inventory
    assert (inv.unit_kind, inv.physical, inv.replicas, inv.per_container) == (UNIT_REPLICA, 2, 4, None)
    assert verdict(node, annotated(5, {}))[0] == Code.SUCCESS
    assert verdict(node, annotated(2, {MODEL: "A100"}))[0] == Code.SUCCESS
    assert verdict(node, annotated(9, {})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_INSUFFICIENT])
    # a share can count on a quarter of the card's memory (time-slicing isolates none)
    assert verdict(node, annotated(5, {MEM: "40"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MEMORY])
    assert verdict(node, annotated(1, {MEM: "10", MODEL: "A100-40GB"}))[0] == Code.SUCCESS


def test_fail_requests_greater_than_one_node_label() -> None:
    """``failRequestsGreaterThanOne: true`` in the device plugin's config, stated on the node by the
    label ``gpu-scheduler/fail-requests-greater-than-one``: more than 1 per container fails Allocate
    (``UnexpectedAdmissionError``), so such a node is refused; one per container in two containers is not."""
    node = rn.a100_time_sliced("ts")
    node["metadata"]["labels"][FAIL_GT_ONE] = "true"
    assert verdict(node, annotated(2, {})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_SHARED])
    assert verdict(node, annotated(1, {}))[0] == Code.SUCCESS
    assert verdict(node, two_containers(1, 1))[0] == Code.SUCCESS
    assert parse_request(PodInfo(two_containers(1, 1)), KEYS).per_container == 1


def test_nvidia_mps_grants_one_per_container() -> None:
    """NVIDIA's device plugin always sets ``failRequestsGreaterThanOne`` under MPS (v0.15.0 on)."""
    node = rn.a100_time_sliced("mps")
    node["metadata"]["labels"].update({"nvidia.com/gpu.sharing-strategy": "mps", FAIL_GT_ONE: "false"})
    assert verdict(node, annotated(2, {})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_SHARED])
    assert verdict(node, annotated(1, {}))[0] == Code.SUCCESS


def test_openshift_t4_shared_product_suffix() -> None:
    node = rn.openshift_t4_shared("t4")
    spec = parse_node(NodeInfo(node), KEYS)
    assert (spec.product, spec.inventory.unit_kind, spec.inventory.physical) == ("Tesla-T4", UNIT_REPLICA, 1)
    assert verdict(node, annotated(1, {MODEL: "T4"}))[0] == Code.SUCCESS
    assert verdict(node, annotated(2, {MODEL: "T4"}))[0] == Code.SUCCESS


def test_split_product_suffixes() -> None:
    assert split_product_suffixes("NVIDIA-A100-80GB-PCIe-MIG-1g.10gb") == ("NVIDIA-A100-80GB-PCIe", "1g.10gb", False)
    assert split_product_suffixes("A100-SXM4-40GB-MIG-1g.5gb-SHARED") == ("A100-SXM4-40GB", "1g.5gb", True)
    assert split_product_suffixes("Tesla-T4-SHARED") == ("Tesla-T4", None, True)
    assert split_product_suffixes("NVIDIA-H100-80GB-HBM3") == ("NVIDIA-H100-80GB-HBM3", None, False)


# -- stale labels ------------------------------------------------------------------------------------
def test_stale_count_label_offers_nothing_and_explains_it() -> None:
    """Why #4: a stale GFD gpu.count label on a node publishing no nvidia.com/gpu still offered 8 GPUs."""
    code, reasons = verdict(rn.stale_a100("stale"), annotated(0, {"gpu-scheduler/gpu-count": "1"}))
    assert code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert reasons == [f"{ERR_INSUFFICIENT} (label nvidia.com/gpu.count=8 but no allocatable nvidia.com/gpu: "
                       "the kubelet grants none)"]


def test_count_label_disagreeing_with_allocatable_resolves_to_allocatable() -> None:
    node = rn.openshift_v100("v")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "2"  # two cards fell off the bus; GFD not re-run yet
    spec = parse_node(NodeInfo(node), KEYS)
    assert spec.total == 2
    assert spec.inventory.notes == ("label nvidia.com/gpu.count=4 disagrees with allocatable nvidia.com/gpu=2",)
    assert verdict(node, gpus(3))[1] == [f"{ERR_INSUFFICIENT} (label nvidia.com/gpu.count=4 disagrees with "
                                         "allocatable nvidia.com/gpu=2)"]


# -- cloud labels --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("node", "model", "memory_gb"), [
    (rn.gke_l4("n"), "L4", None),
    (rn.gke_a100_80("n"), "A100-80GB", 80),
    (rn.karpenter_a100("n"), "A100", 40),
    (rn.eks_t4("n"), "T4", None),
])
def test_cloud_nodes_match_a_model(node: Obj, model: str, memory_gb: int | None) -> None:
    """Why #5: GKE / EKS nodes publish no GFD labels, so no model ever matched."""
    assert verdict(node, annotated(1, {MODEL: model}))[0] == Code.SUCCESS
    spec = parse_node(NodeInfo(node), KEYS)
    if memory_gb is None:
        assert spec.memory_bytes is None
        assert verdict(node, annotated(1, {MEM: "1"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_UNKNOWN_MEMORY])
    else:
        assert spec.memory_bytes is not None and spec.memory_bytes >= memory_gb * GB
        assert verdict(node, annotated(1, {MEM: str(memory_gb)}))[0] == Code.SUCCESS


def test_gke_mig_partition_and_time_sharing() -> None:
    """GKE partitions serve plain requests with a slice (as MIG single); GKE time-sharing refuses
    more than 1 nvidia.com/gpu per container at admission ("at most 1 nvidia.com/gpu can be requested
    on GPU nodes", UnexpectedAdmissionError), which py-scheduler accepted (issue 30)."""
    mig = rn.gke_a100_mig("mig")
    assert verdict(mig, annotated(1, {MODEL: "A100"}))[0] == Code.SUCCESS
    assert verdict(mig, annotated(1, {MODEL: "A100", WHOLE: "true"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                                           [ERR_MIG_SLICES])
    assert verdict(mig, annotated(1, {MODEL: "A100", PROFILE: "1g.5gb", MEM: "5"}))[0] == Code.SUCCESS
    ts = rn.gke_l4_time_sharing("ts")
    inv = parse_node(NodeInfo(ts), KEYS).inventory
    assert (inv.unit_kind, inv.physical, inv.replicas, inv.per_container) == (UNIT_REPLICA, 1, 2, 1)
    assert verdict(ts, annotated(2, {MODEL: "L4"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_SHARED])
    assert verdict(ts, annotated(1, {MODEL: "L4"}))[0] == Code.SUCCESS
    assert verdict(ts, two_containers(1, 1))[0] == Code.SUCCESS  # the limit is per container
    ts["metadata"]["labels"]["cloud.google.com/gke-gpu-sharing-strategy"] = "mps"
    clear_memo()
    assert verdict(ts, annotated(2, {})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_SHARED])


def test_aks_accelerator_label_is_a_vendor_not_a_model() -> None:
    node = rn.aks_nc("aks")
    spec = parse_node(NodeInfo(node), KEYS)
    assert (spec.product, spec.inventory.unit_kind, spec.total) == ("", UNIT_GPU, 1)
    assert verdict(node, annotated(1, {}))[0] == Code.SUCCESS
    assert verdict(node, annotated(1, {MODEL: "nvidia"})) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MODEL])


def test_gfd_wins_over_cloud_and_own_labels() -> None:
    node = rn.gke_l4("n")
    node["metadata"]["labels"].update({"nvidia.com/gpu.product": "NVIDIA-L4", "gpu-scheduler/gpu-model": "T4"})
    spec = parse_node(NodeInfo(node), KEYS)
    assert (spec.product, spec.inventory.product_source) == ("NVIDIA-L4", "nvidia.com/gpu.product")


def test_explain_shows_the_disagreement_for_that_node() -> None:
    """Deliver #2: the stale / MIG-split count label is visible in ``explain`` for the node it concerns."""
    from py_scheduler.cache.snapshot import Snapshot
    from py_scheduler.offline.engine import OfflineScheduler, load_frameworks

    fws, default, pct = load_frameworks(None)
    nodes = [rn.stale_a100("stale"), rn.a100_mig_mixed("mixed"), rn.openshift_v100("v100")]
    sched = OfflineScheduler(fws, default, Snapshot.from_objects(nodes), pct)
    out = sched.schedule(annotated(0, {"gpu-scheduler/gpu-count": "1"})).result.to_json()
    assert out["selected"] == "v100"
    filtered = json.dumps(out["filtered"])
    assert "label nvidia.com/gpu.count=8 but no allocatable nvidia.com/gpu: the kubelet grants none" in filtered
    assert "its GPUs are split into MIG instances" in filtered
