"""GPU request / node parsing and the model matching rule."""

from __future__ import annotations

import pytest

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.types import NodeInfo, PodInfo
from py_scheduler.plugins.gpu.inventory import parse_node
from py_scheduler.plugins.gpu.model import (
    GB,
    MIB,
    GPUKeys,
    GPUParseError,
    model_matches,
    parse_groups,
    parse_indices,
    parse_model,
    parse_request,
    pod_gpu_usage,
)
from tests.unit.plugins.gpu.gpu_objects import A100_40, A100_80, H100_80, gpu_node, gpu_pod

KEYS = GPUKeys()


@pytest.mark.parametrize(("model", "product", "ok"), [
    ("A100", A100_40, True),
    ("a100", A100_40, True),
    ("A100", A100_80, True),
    ("A100-80GB", A100_80, True),
    ("A100-80GB", A100_40, False),
    ("A100-40GB", A100_40, True),
    ("a100_40gb", A100_40, True),
    ("A100-SXM4", A100_40, True),
    ("SXM4-A100", A100_40, False),          # order matters
    ("NVIDIA-SXM4", A100_40, False),         # must be contiguous
    ("A10", A100_40, False),                 # whole tokens only
    ("H100", H100_80, True),
    ("H100-80GB", H100_80, True),
    ("H100-HBM3", H100_80, True),            # memory tokens are set aside before the run check
    ("H100", A100_40, False),
    ("T4", "Tesla-T4", True),
    ("T4-16GB", "Tesla-T4", False),          # product names no memory size
    ("A100", "", False),
    ("80GB", A100_80, True),
])
def test_model_matching(model: str, product: str, ok: bool) -> None:
    assert model_matches(parse_model(model), product) is ok


def test_request_from_resource_and_annotations() -> None:
    pod = PodInfo(gpu_pod("p", 2, annotations={
        "gpu-scheduler/gpu-model": "H100, A100-80GB", "gpu-scheduler/gpu-memory-gb": "7.5",
        "gpu-scheduler/nvlink-required": "True"}))
    req = parse_request(pod, KEYS)
    assert req.count == 2
    assert [m.raw for m in req.models] == ["H100", "A100-80GB"]
    assert req.models[1].memory_token == "80gb"
    assert req.memory_bytes == 7_500_000_000
    assert req.nvlink is True


def test_request_limits_only_and_annotation_count() -> None:
    assert parse_request(PodInfo(gpu_pod("p", 3, limits_only=True)), KEYS).count == 3
    assert parse_request(PodInfo(gpu_pod("q", 0, annotations={"gpu-scheduler/gpu-count": "4"})), KEYS).count == 4
    assert parse_request(PodInfo(gpu_pod("r", 2, annotations={"gpu-scheduler/gpu-count": "2"})), KEYS).count == 2
    assert parse_request(PodInfo(gpu_pod("s")), KEYS).count == 0


def test_init_container_gpus_follow_upstream_request_rules() -> None:
    pod = gpu_pod("p", 1)
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert parse_request(PodInfo(pod), KEYS).count == 4  # max(init, sum(containers))


@pytest.mark.parametrize(("ann", "message"), [
    ({"gpu-scheduler/gpu-memory-gb": "abc"},
     'invalid annotation gpu-scheduler/gpu-memory-gb="abc": not a non-negative number'),
    ({"gpu-scheduler/gpu-memory-gb": "-4"},
     'invalid annotation gpu-scheduler/gpu-memory-gb="-4": not a non-negative number'),
    ({"gpu-scheduler/gpu-memory-gb": "nan"},
     'invalid annotation gpu-scheduler/gpu-memory-gb="nan": not a non-negative number'),
    ({"gpu-scheduler/gpu-count": "two"},
     'invalid annotation gpu-scheduler/gpu-count="two": not a non-negative integer'),
    ({"gpu-scheduler/gpu-count": "3"},
     'invalid annotation gpu-scheduler/gpu-count="3": does not equal the nvidia.com/gpu request 2'),
    ({"gpu-scheduler/nvlink-required": "yes"},
     'invalid annotation gpu-scheduler/nvlink-required="yes": not "true" or "false"'),
    ({"gpu-scheduler/gpu-model": "A100,"},
     'invalid annotation gpu-scheduler/gpu-model="A100,": empty GPU model name in list'),
    ({"gpu-scheduler/gpu-model": "A100!"},
     "invalid annotation gpu-scheduler/gpu-model=\"A100!\": invalid token 'a100!' in GPU model name"),
    ({"gpu-scheduler/gpu-model": "A100-40GB-80GB"},
     'invalid annotation gpu-scheduler/gpu-model="A100-40GB-80GB": more than one memory size in GPU model name'),
])
def test_bad_pod_annotations_name_the_annotation_and_value(ann: dict[str, str], message: str) -> None:
    pod = PodInfo(gpu_pod("p", 2, annotations=ann))
    with pytest.raises(GPUParseError) as ei:
        parse_request(pod, KEYS)
    assert str(ei.value) == message
    # memoized: the same error again, without re-parsing
    with pytest.raises(GPUParseError):
        parse_request(pod, KEYS)


def test_bad_gpu_limit_quantity() -> None:
    raw = gpu_pod("p", 1, limits_only=True)
    raw["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    # PodInfo validates limits as the API server would, before the GPU plugin parses them.
    with pytest.raises(PodParseError, match=r"'lots' for spec.containers\[0\].resources.limits.nvidia.com/gpu"):
        parse_request(PodInfo(raw), KEYS)


def test_memo_follows_annotation_changes() -> None:
    a = PodInfo(gpu_pod("p", 1))
    assert parse_request(a, KEYS).memory_bytes == 0
    b = a.derive(gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-memory-gb": "40"}))  # the same Pod, annotated
    assert parse_request(b, KEYS).memory_bytes == 40 * GB


def test_custom_prefix() -> None:
    keys = GPUKeys("example.com/")
    pod = PodInfo(gpu_pod("p", 0, annotations={"example.com/gpu-count": "2", "gpu-scheduler/gpu-count": "x"}))
    assert parse_request(pod, keys).count == 2


def test_indices_and_groups_syntax() -> None:
    assert parse_indices("3,1", "k") == (1, 3)
    assert parse_indices("0-3", "k") == (0, 1, 2, 3)
    for bad in ("", "a", "1,1", "3-1", "1,", 5):
        with pytest.raises(GPUParseError):
            parse_indices(bad, "k")
    assert parse_groups("0-3;4-7", "k") == parse_groups("0,1,2,3;4,5,6,7", "k") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for bad in ("0-3;3-7", "0-3;", "x;y", "0-3,,4"):
        with pytest.raises(GPUParseError):
            parse_groups(bad, "k")


def test_a_huge_overlapping_index_list_is_refused_at_its_first_duplicate() -> None:
    """A ``gpu-indices`` value of thousands of ``0-4095`` ranges (the API server takes 256 KiB) was
    expanded range by range before duplicates were checked: 600 MiB for 4 000 ranges, a MemoryError
    at full size, on every GPU Pod's cycle (found by an adversarial run). Now the parse stops at the
    first index seen twice; its memory stays that of the string."""
    import tracemalloc

    hostile = ",".join(["0-4095"] * 4000)
    tracemalloc.start()
    try:
        with pytest.raises(GPUParseError, match="duplicate GPU index"):
            parse_indices(hostile, "k")
        with pytest.raises(GPUParseError, match="GPU index 0 is in more than one group"):
            parse_groups(";".join(["0-4095"] * 4000), "k")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak


def test_usage_of_bound_pods_never_raises() -> None:
    p = PodInfo(gpu_pod("p", 2, node="n", annotations={"gpu-scheduler/gpu-indices": "0,x",
                                                        "gpu-scheduler/gpu-memory-gb": "abc"}))
    assert pod_gpu_usage(p, KEYS) == (2, None)
    q = PodInfo(gpu_pod("q", 2, node="n", annotations={"gpu-scheduler/gpu-indices": "5,6"}))
    assert pod_gpu_usage(q, KEYS) == (2, (5, 6))
    assert pod_gpu_usage(PodInfo(gpu_pod("r", 0, node="n")), KEYS) == (0, None)


def test_parse_node_gfd_and_simple_labels() -> None:
    spec = parse_node(NodeInfo(gpu_node("n", 8, product=A100_40, memory_mib=40960,
                                        annotations={"gpu-scheduler/nvlink-groups": "0-3;4-7",
                                                     "gpu-scheduler/used-memory-gb": "12",
                                                     "gpu-scheduler/current-queue": "5"})), KEYS)
    assert spec.error is None
    assert (spec.total, spec.product, spec.memory_bytes) == (8, A100_40, 40960 * MIB)
    assert spec.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (spec.used_memory_bytes, spec.queue) == (12 * GB, 5)
    simple = parse_node(NodeInfo(gpu_node("m", 4, labels={"gpu-scheduler/gpu-model": "A100-80GB",
                                                          "gpu-scheduler/gpu-memory-gb": "80",
                                                          "gpu-scheduler/max-nvlink-group-size": "2"})), KEYS)
    assert (simple.product, simple.memory_bytes, simple.groups) == ("A100-80GB", 80 * GB, ((0, 1), (2, 3)))
    # no NVLink description: every GPU is its own group; groups beyond allocatable are clipped
    assert parse_node(NodeInfo(gpu_node("x", 2)), KEYS).groups == ((0,), (1,))
    clipped = parse_node(NodeInfo(gpu_node("y", 6, annotations={"gpu-scheduler/nvlink-groups": "0-3;4-7"})), KEYS)
    assert clipped.groups == ((0, 1, 2, 3), (4, 5))
    # allocatable absent: a GFD count label offers nothing (issue 17: stale label, device plugin gone)
    no_alloc = gpu_node("z", 0, labels={"nvidia.com/gpu.count": "4"})
    stale = parse_node(NodeInfo(no_alloc), KEYS)
    assert stale.total == 0
    assert stale.inventory.notes == (
        "label nvidia.com/gpu.count=4 but no allocatable nvidia.com/gpu: the kubelet grants none",)


@pytest.mark.parametrize(("labels", "reason"), [
    ({"nvidia.com/gpu.memory": "abc"},
     'node(s) had invalid label nvidia.com/gpu.memory="abc": not a non-negative integer'),
    ({"gpu-scheduler/gpu-memory-gb": "-1"},
     'node(s) had invalid label gpu-scheduler/gpu-memory-gb="-1": not a non-negative number'),
])
def test_malformed_memory_label_makes_memory_unknown(labels: dict[str, str], reason: str) -> None:
    spec = parse_node(NodeInfo(gpu_node("n", 4, labels=labels)), KEYS)
    assert spec.error is None and spec.memory_bytes is None and spec.memory_error == reason


@pytest.mark.parametrize(("labels", "annotations", "reason"), [
    ({"gpu-scheduler/max-nvlink-group-size": "0"}, {},
     'node(s) had invalid label gpu-scheduler/max-nvlink-group-size="0": not a positive integer'),
    ({}, {"gpu-scheduler/nvlink-groups": "0-3;2-5"},
     'node(s) had invalid annotation gpu-scheduler/nvlink-groups="0-3;2-5": GPU index 2 is in more than one group'),
    ({}, {"gpu-scheduler/current-queue": "many"},
     'node(s) had invalid annotation gpu-scheduler/current-queue="many": not a non-negative integer'),
    ({}, {"gpu-scheduler/used-memory-gb": "x"},
     'node(s) had invalid annotation gpu-scheduler/used-memory-gb="x": not a non-negative number'),
])
def test_malformed_node_metadata_gives_a_reason(labels: dict[str, str], annotations: dict[str, str],
                                                reason: str) -> None:
    spec = parse_node(NodeInfo(gpu_node("n", 4, labels=labels, annotations=annotations)), KEYS)
    assert spec.error == reason


def test_oddly_typed_pod_fields_do_not_raise_unexpected_errors() -> None:
    pod = {"metadata": {"name": "p", "annotations": "not-a-map"},
           "spec": {"containers": [{"name": "a", "resources": {"limits": "x"}},
                                   {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": None}}]}}
    req = parse_request(PodInfo(pod), KEYS)
    assert req.count == 2 and req.models == ()


def test_oddly_typed_node_metadata_fails_the_node_not_the_plugin() -> None:
    node = gpu_node("n", 2)
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = 7
    want = 'node(s) had invalid label nvidia.com/gpu.product="7": not a string'
    assert parse_node(NodeInfo(node), KEYS).error == want
    node["metadata"]["labels"] = ["x"]
    node["metadata"]["annotations"] = None
    spec = parse_node(NodeInfo(node), KEYS)
    assert spec.error is None and spec.total == 2
