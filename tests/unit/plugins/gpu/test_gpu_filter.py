"""GPUFilter: PreFilter Skip / errors, the Filter checks and their reasons and codes, args."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from py_scheduler.plugins.gpu.accounting import clear_memo
from py_scheduler.plugins.gpu.filter import (
    ERR_INSUFFICIENT,
    ERR_MEMORY,
    ERR_MODEL,
    ERR_NVLINK,
    ERR_UNKNOWN_MEMORY,
    GPUFilter,
)
from tests.unit.plugins.gpu.gpu_objects import (
    A100_80,
    a100_node,
    cpu_node,
    gpu_node,
    gpu_pod,
    h100_node,
    l4_node,
)
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    clear_memo()


def filter_all(nodes: list[Obj], pods: list[Obj], pod: Obj, plugin: GPUFilter | None = None) -> dict[str, Status]:
    """PreFilter + Filter on every node: node -> Status (PreFilter's status under key ``""`` if not success)."""
    pl = plugin or GPUFilter()
    snap = Snapshot.from_objects(nodes, pods)
    state = CycleState(snap)
    pi = PodInfo(pod)
    res, s = pl.pre_filter(state, pi, snap.node_info_list)
    assert res is None
    if not s.is_success():
        return {"": s}
    return {ni.name: pl.filter(state, pi, ni) for ni in snap.node_info_list}


def test_pre_filter_skips_pods_without_gpus() -> None:
    out = filter_all([a100_node("a")], [], gpu_pod("p", 0, annotations={"gpu-scheduler/gpu-model": "A100"}))
    assert out[""].code == Code.SKIP


def test_pre_filter_rejects_bad_annotation_with_its_name_and_value() -> None:
    out = filter_all([a100_node("a")], [], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-memory-gb": "abc"}))
    st = out[""]
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ['invalid annotation gpu-scheduler/gpu-memory-gb="abc": not a non-negative number']
    assert st.plugin == "GPUFilter"


def test_free_gpu_count() -> None:
    nodes = [a100_node("a"), l4_node("l"), cpu_node("c")]
    bound = [gpu_pod("x", 6, node="a")]
    out = filter_all(nodes, bound, gpu_pod("p", 2))
    assert out["a"].is_success()
    assert (out["l"].code, out["l"].reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_INSUFFICIENT])
    assert (out["c"].code, out["c"].reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_INSUFFICIENT])
    out = filter_all(nodes, bound, gpu_pod("p", 3))
    assert (out["a"].code, out["a"].reasons) == (Code.UNSCHEDULABLE, [ERR_INSUFFICIENT])
    out = filter_all(nodes, bound, gpu_pod("p", 9))
    assert out["a"].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE  # more than the node has: preemption can't help


def test_annotation_count_pod_is_filtered_too() -> None:
    out = filter_all([l4_node("l")], [], gpu_pod("p", 0, annotations={"gpu-scheduler/gpu-count": "2"}))
    assert out["l"].reasons == [ERR_INSUFFICIENT]


def test_model() -> None:
    nodes = [a100_node("a40"), gpu_node("a80", 8, product=A100_80, memory_mib=81920), h100_node("h")]
    out = filter_all(nodes, [], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-model": "A100"}))
    assert out["a40"].is_success() and out["a80"].is_success()
    assert (out["h"].code, out["h"].reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MODEL])
    out = filter_all(nodes, [], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-model": "A100-80GB"}))
    assert out["a80"].is_success()
    assert out["a40"].reasons == [ERR_MODEL] and out["h"].reasons == [ERR_MODEL]
    out = filter_all(nodes, [], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-model": "H100,A100-80GB"}))
    assert [n for n, s in out.items() if s.is_success()] == ["a80", "h"]
    # a node with no product at all never matches a model request
    out = filter_all([gpu_node("anon", 4)], [], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-model": "A100"}))
    assert out["anon"].reasons == [ERR_MODEL]


def test_memory_and_unknown_memory() -> None:
    nodes = [a100_node("a"), h100_node("h"), l4_node("l"), gpu_node("anon", 4)]
    out = filter_all(nodes, [], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-memory-gb": "40"}))
    assert out["a"].is_success() and out["h"].is_success()
    assert (out["l"].code, out["l"].reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_MEMORY])
    assert (out["anon"].code, out["anon"].reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_UNKNOWN_MEMORY])
    out = filter_all(nodes, [], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-memory-gb": "80"}))
    assert [n for n, s in out.items() if s.is_success()] == ["h"]  # 81559 MiB >= 80 * 10^9 bytes
    out = filter_all(nodes, [], gpu_pod("p", 1))  # no memory request: unknown memory is fine
    assert all(s.is_success() for s in out.values())


def test_nvlink_group_fit() -> None:
    nodes = [a100_node("a"), gpu_node("flat", 8, product="NVIDIA-A100-PCIE-40GB", memory_mib=40960)]
    # group 0-3 has 2 free (0,1 taken), group 4-7 has 2 free (4,5 taken): 4 free GPUs but no group of 3
    bound = [gpu_pod("x", 2, node="a", annotations={"gpu-scheduler/gpu-indices": "0,1"}),
             gpu_pod("y", 2, node="a", annotations={"gpu-scheduler/gpu-indices": "4,5"})]
    nv = {"gpu-scheduler/nvlink-required": "true"}
    out = filter_all(nodes, bound, gpu_pod("p", 3, annotations=nv))
    assert (out["a"].code, out["a"].reasons) == (Code.UNSCHEDULABLE, [ERR_NVLINK])
    assert (out["flat"].code, out["flat"].reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_NVLINK])
    out = filter_all(nodes, bound, gpu_pod("p", 2, annotations=nv))
    assert out["a"].is_success()
    out = filter_all(nodes, bound, gpu_pod("p", 3))  # NVLink not required: 4 free GPUs suffice
    assert out["a"].is_success()
    out = filter_all(nodes, [], gpu_pod("p", 5, annotations=nv))  # larger than any group: unresolvable
    assert out["a"].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    out = filter_all(nodes, [], gpu_pod("p", 1, annotations=nv))  # one GPU is trivially one group
    assert out["flat"].is_success()


def test_malformed_node_fails_only_that_node() -> None:
    nodes = [a100_node("good"), gpu_node("bad", 8, product="NVIDIA-A100-SXM4-40GB",
                                          labels={"gpu-scheduler/max-nvlink-group-size": "0"})]
    out = filter_all(nodes, [], gpu_pod("p", 1))
    assert out["good"].is_success()
    assert out["bad"].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert out["bad"].reasons == [
        'node(s) had invalid label gpu-scheduler/max-nvlink-group-size="0": not a positive integer']


def test_malformed_memory_label_fails_only_pods_asking_memory() -> None:
    """Issue 17: a malformed memory label used to reject Pods that ask no memory at all."""
    nodes = [gpu_node("bad", 8, product="NVIDIA-A100-SXM4-40GB", labels={"nvidia.com/gpu.memory": "lots"})]
    assert filter_all(nodes, [], gpu_pod("p", 1))["bad"].is_success()
    out = filter_all(nodes, [], gpu_pod("q", 1, annotations={"gpu-scheduler/gpu-memory-gb": "20"}))["bad"]
    assert out.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert out.reasons == ['node(s) had invalid label nvidia.com/gpu.memory="lots": not a non-negative integer']


def test_create_validates_args() -> None:
    assert GPUFilter.create({}, plain_handle()).keys.prefix == "gpu-scheduler/"
    pl = GPUFilter.create({"prefix": "example.com/", "resourceName": "amd.com/gpu"}, plain_handle())
    assert (pl.keys.gpu_indices, pl.keys.resource_name) == ("example.com/gpu-indices", "amd.com/gpu")
    with pytest.raises(ConfigError, match=r"^prefix: "):
        GPUFilter.create({"prefix": "Bad Prefix"}, plain_handle())
    with pytest.raises(ConfigError, match=r"^resourceName: "):
        GPUFilter.create({"resourceName": "gpu"}, plain_handle())
    with pytest.raises(ConfigError, match=r"^bogus: unknown field"):
        GPUFilter.create({"bogus": 1}, plain_handle())


def test_custom_resource_name_and_prefix() -> None:
    pl = GPUFilter.create({"prefix": "example.com/", "resourceName": "amd.com/gpu"}, plain_handle())
    node = gpu_node("n", 0, cpu="8", labels={"example.com/gpu-model": "MI300X"})
    node["status"]["allocatable"]["amd.com/gpu"] = "4"
    pod = gpu_pod("p", 0)
    pod["spec"]["containers"][0]["resources"]["requests"]["amd.com/gpu"] = "2"
    pod["metadata"]["annotations"]["example.com/gpu-model"] = "MI300X"
    assert filter_all([node], [], pod, pl)["n"].is_success()
    pod["metadata"]["annotations"]["example.com/gpu-model"] = "MI250"
    assert filter_all([node], [], pod, pl)["n"].reasons == [ERR_MODEL]
