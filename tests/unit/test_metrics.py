"""Metrics (names, labels, buckets as kube-scheduler's), the framework observer, GPU gauges, and the
health/metrics HTTP server."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from py_scheduler.app.serving.health import HealthServer, parse_bind_address
from py_scheduler.app.telemetry import metrics as m
from py_scheduler.cache.cache import Cache
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.plugins import registry
from py_scheduler.plugins.gpu.filter import UNKNOWN_MODEL, GPUFilter

# (exposed name, type, label names, upstream bucket spec (start, factor, count) or None)
EXPECTED: list[tuple[Any, str, str, tuple[str, ...], tuple[float, float, int] | None]] = [
    (m.SCHEDULE_ATTEMPTS, "scheduler_schedule_attempts", "counter", ("result", "profile"), None),
    (m.SCHEDULING_ATTEMPT_DURATION, "scheduler_scheduling_attempt_duration_seconds", "histogram",
     ("result", "profile"), (0.001, 2, 15)),
    (m.SCHEDULING_ALGORITHM_DURATION, "scheduler_scheduling_algorithm_duration_seconds", "histogram", (),
     (0.001, 2, 15)),
    (m.PENDING_PODS, "scheduler_pending_pods", "gauge", ("queue",), None),
    (m.POD_SCHEDULING_SLI_DURATION, "scheduler_pod_scheduling_sli_duration_seconds", "histogram", ("attempts",),
     (0.01, 2, 20)),
    (m.POD_SCHEDULING_ATTEMPTS, "scheduler_pod_scheduling_attempts", "histogram", (), (1, 2, 5)),
    (m.FRAMEWORK_EXTENSION_POINT_DURATION, "scheduler_framework_extension_point_duration_seconds", "histogram",
     ("extension_point", "status", "profile"), (0.0001, 2, 12)),
    (m.PLUGIN_EXECUTION_DURATION, "scheduler_plugin_execution_duration_seconds", "histogram",
     ("plugin", "extension_point", "status"), (0.00001, 1.5, 20)),
    (m.QUEUE_INCOMING_PODS, "scheduler_queue_incoming_pods", "counter", ("queue", "event"), None),
    (m.CACHE_SIZE, "scheduler_cache_size", "gauge", ("type",), None),
    (m.UNSCHEDULABLE_PODS, "scheduler_unschedulable_pods", "gauge", ("plugin", "profile"), None),
    (m.PREEMPTION_ATTEMPTS, "scheduler_preemption_attempts", "counter", (), None),
    (m.PREEMPTION_VICTIMS, "scheduler_preemption_victims", "histogram", (), (1, 2, 7)),
    (m.GPU_ALLOCATED, "py_scheduler_gpu_allocated", "gauge", ("node", "model"), None),
    (m.GPU_FREE, "py_scheduler_gpu_free", "gauge", ("node", "model"), None),
]


@pytest.mark.parametrize(("metric", "name", "typ", "labels", "buckets"), EXPECTED, ids=[e[1] for e in EXPECTED])
def test_metric_shape(metric: Any, name: str, typ: str, labels: tuple[str, ...],
                      buckets: tuple[float, float, int] | None) -> None:
    assert metric._name == name
    assert metric._type == typ
    assert tuple(metric._labelnames) == labels
    if buckets is not None:
        start, factor, count = buckets
        want = [start * factor**i for i in range(count)] + [float("inf")]
        assert list(metric._upper_bounds) == pytest.approx(want)


def test_upstream_help_texts() -> None:
    assert m.SCHEDULE_ATTEMPTS._documentation.startswith("Number of attempts to schedule pods, by the result.")
    assert m.SCHEDULING_ATTEMPT_DURATION._documentation == \
        "Scheduling attempt latency in seconds (scheduling algorithm + binding)"
    assert m.PLUGIN_EXECUTION_DURATION._documentation == "Duration for running a plugin at a specific extension point."


def test_exponential_buckets_rejects_bad_arguments() -> None:
    assert m.exponential_buckets(1, 2, 3) == (1, 2, 4)
    for args in ((0, 2, 3), (1, 1, 3), (1, 2, 0)):
        with pytest.raises(ValueError):
            m.exponential_buckets(*args)


def value(name: str, **labels: str) -> float:
    v = m.REGISTRY.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_counter_exposed_with_total_suffix() -> None:
    before = value("scheduler_schedule_attempts_total", result="scheduled", profile="p-test")
    m.SCHEDULE_ATTEMPTS.labels(result="scheduled", profile="p-test").inc()
    assert value("scheduler_schedule_attempts_total", result="scheduled", profile="p-test") == before + 1


def test_framework_observer_routes_by_plugin() -> None:
    obs = m.framework_observer("obs-profile")
    ep = dict(extension_point="Filter", status="Success", profile="obs-profile")
    pl = dict(plugin="NodeName", extension_point="Filter", status="Unschedulable")
    ep0 = value("scheduler_framework_extension_point_duration_seconds_count", **ep)
    pl0 = value("scheduler_plugin_execution_duration_seconds_count", **pl)
    obs("Filter", "", "Success", 0.002)
    obs("Filter", "NodeName", "Unschedulable", 0.00003)
    obs("Filter", "NodeName", "Unschedulable", 0.00004)
    assert value("scheduler_framework_extension_point_duration_seconds_count", **ep) == ep0 + 1
    assert value("scheduler_framework_extension_point_duration_seconds_sum", **ep) >= 0.002
    assert value("scheduler_plugin_execution_duration_seconds_count", **pl) == pl0 + 2
    # The per-point histogram got no plugin observation and vice versa.
    assert value("scheduler_framework_extension_point_duration_seconds_count",
                 extension_point="Filter", status="Unschedulable", profile="obs-profile") == 0


def test_framework_observer_is_called_by_the_runtime() -> None:
    """End to end through Algorithm.schedule: the runtime reports Filter/Score timings per profile."""
    from py_scheduler.framework.algorithm import Algorithm
    from py_scheduler.framework.config import PluginSet, ProfileConfig, build_framework
    from py_scheduler.framework.types import PodInfo

    prof = ProfileConfig(scheduler_name="obs-rt", plugins={"multiPoint": PluginSet(
        enabled=[("PrioritySort", None), ("NodeName", None), ("DefaultBinder", None)], disabled=["*"])})
    fw = build_framework(prof, observer=m.framework_observer("obs-rt"), registry=registry)
    nodes = [{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}
             for i in range(3)]
    snap = Snapshot.from_objects(nodes)
    pod = PodInfo({"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
                   "spec": {"nodeName": "", "containers": [{"name": "c"}]}})
    before = value("scheduler_framework_extension_point_duration_seconds_count",
                   extension_point="Filter", status="Success", profile="obs-rt")
    res = Algorithm().schedule(fw, snap, pod)
    assert res.selected in {"n0", "n1", "n2"}
    assert value("scheduler_framework_extension_point_duration_seconds_count",
                 extension_point="Filter", status="Success", profile="obs-rt") == before + 1


# --- GPU gauges ----------------------------------------------------------------------------------------

def gpu_node(name: str, gpus: int, product: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.count": str(gpus)}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                       "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}}}


def gpu_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def gauge_by_node(gauge_name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in m.REGISTRY.collect():
        if fam.name == gauge_name:
            for s in fam.samples:
                out[s.labels["node"]] = out.get(s.labels["node"], 0.0) + s.value
    return out


def test_update_gpu_gauges_from_snapshot() -> None:
    nodes = [gpu_node("gpu-a", 8, "NVIDIA-A100-SXM4-40GB"), gpu_node("gpu-b", 4, "NVIDIA-H100-80GB-HBM3"),
             {"metadata": {"name": "cpu-only"}, "status": {"allocatable": {"cpu": "4"}}}]
    pods = [gpu_pod("p1", "gpu-a", 2), gpu_pod("p2", "gpu-a", 1), gpu_pod("p3", "gpu-b", 4)]
    m.update_gpu_gauges(Snapshot.from_objects(nodes, pods), [GPUFilter()])
    alloc, free = gauge_by_node("py_scheduler_gpu_allocated"), gauge_by_node("py_scheduler_gpu_free")
    assert alloc == {"gpu-a": 3, "gpu-b": 4}
    assert free == {"gpu-a": 5, "gpu-b": 0}
    # A node that left the cluster loses its series.
    m.update_gpu_gauges(Snapshot.from_objects(nodes[:1], pods[:1]), [GPUFilter()])
    assert gauge_by_node("py_scheduler_gpu_allocated") == {"gpu-a": 2}
    assert gauge_by_node("py_scheduler_gpu_free") == {"gpu-a": 6}


def test_gpu_inventory_model_label() -> None:
    node = gpu_node("gpu-x", 2, "NVIDIA-A100-SXM4-40GB")
    bare = {"metadata": {"name": "gpu-y"}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}}
    rows = GPUFilter().gpu_inventory(Snapshot.from_objects([node, bare], [gpu_pod("q", "gpu-y", 1)]))
    assert sorted(rows) == [("gpu-x", "NVIDIA-A100-SXM4-40GB", 0, 2), ("gpu-y", UNKNOWN_MODEL, 1, 0)]


def test_gpu_inventory_follows_the_nodes_that_gain_and_lose_gpus() -> None:
    """The inventory of a snapshot the cache keeps up to date in place (the housekeeping's, read each
    second) reads the GPU nodes from a derived index; on random node updates (GPUs added, removed,
    only the label left), Pods bound and nodes added, it equals the inventory of a snapshot built from
    scratch out of the same objects."""
    rng = random.Random(5)
    cache = Cache()
    nodes = {f"n{i}": gpu_node(f"n{i}", 4, "NVIDIA-A100-SXM4-40GB") if i % 3 == 0 else
             {"metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "8", "pods": "110"}}}
             for i in range(12)}
    for node in nodes.values():
        cache.add_node(node)
    pods: list[dict[str, Any]] = []
    snap = Snapshot()
    filt = GPUFilter()
    changed = 0
    for step in range(60):
        op = rng.randrange(4)
        name = f"n{rng.randrange(len(nodes))}"
        old = nodes[name]
        if op == 0:
            new = gpu_node(name, rng.randint(1, 8), "NVIDIA-H100-80GB-HBM3")
        elif op == 1:
            new = {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", "pods": "110"}}}
        elif op == 2:  # the label alone still declares GPUs
            new = {"metadata": {"name": name, "labels": {"nvidia.com/gpu.count": "2"}},
                   "status": {"allocatable": {"cpu": "8"}}}
        else:
            new = old
            pod = gpu_pod(f"p{step}", name, 1)
            pods.append(pod)
            cache.add_pod(pod)
        if new is not old:
            nodes[name] = new
            cache.update_node(old, new)
            changed += 1
        if step % 20 == 19:
            name = f"n{len(nodes)}"
            nodes[name] = gpu_node(name, 2, "NVIDIA-A100-SXM4-40GB")
            cache.add_node(nodes[name])
        cache.update_snapshot(snap)
        fresh = Snapshot.from_objects(list(nodes.values()), pods)
        assert sorted(filt.gpu_inventory(snap)) == sorted(filt.gpu_inventory(fresh)), step
    assert changed > 30


def test_update_gpu_gauges_never_raises() -> None:
    class Broken:
        @property
        def node_info_list(self) -> list[Any]:
            raise RuntimeError("boom")

    m.update_gpu_gauges(Broken(), [GPUFilter()])  # logged, not raised


# --- HTTP server ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("addr", "want"), [
    ("0.0.0.0:10259", ("0.0.0.0", 10259)), ("127.0.0.1:0", ("127.0.0.1", 0)), (":8080", ("0.0.0.0", 8080)),
    ("[::1]:9000", ("::1", 9000)),
])
def test_parse_bind_address(addr: str, want: tuple[str, int]) -> None:
    assert parse_bind_address(addr) == want


@pytest.mark.parametrize("addr", ["localhost", "h:x", "h:70000", "h:-1"])
def test_parse_bind_address_rejects(addr: str) -> None:
    with pytest.raises(ValueError, match="bind address"):
        parse_bind_address(addr)


async def test_health_server_endpoints() -> None:
    ready = False

    def is_ready() -> bool:
        return ready

    srv = HealthServer("127.0.0.1:0", is_ready)
    await srv.start()
    try:
        assert srv.port > 0
        base = f"http://127.0.0.1:{srv.port}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
            for path in ("/healthz", "/livez"):
                async with s.get(base + path) as r:
                    assert (r.status, await r.text()) == (200, "ok")
            async with s.get(base + "/readyz") as r:
                assert r.status == 503
            ready = True
            async with s.get(base + "/readyz") as r:
                assert (r.status, await r.text()) == (200, "ok")
            m.SCHEDULE_ATTEMPTS.labels(result="scheduled", profile="http-test").inc(3)
            async with s.get(base + "/metrics") as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/plain")
                text = await r.text()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        samples = [x for x in fams["scheduler_schedule_attempts"].samples
                   if x.name == "scheduler_schedule_attempts_total" and x.labels.get("profile") == "http-test"]
        assert [x.value for x in samples] == [3.0]
        assert "process_cpu_seconds" in fams  # process metrics are exposed too
    finally:
        await srv.stop()
    await srv.stop()  # idempotent


async def test_readyz_check_that_raises_is_not_ready() -> None:
    def boom() -> bool:
        raise RuntimeError("x")

    srv = HealthServer("127.0.0.1:0", boom)
    await srv.start()
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{srv.port}/readyz") as r:
            assert r.status == 503
    finally:
        await srv.stop()


async def test_port_in_use_raises_oserror() -> None:
    a = HealthServer("127.0.0.1:0", lambda: True)
    await a.start()
    try:
        b = HealthServer(f"127.0.0.1:{a.port}", lambda: True)
        with pytest.raises(OSError):
            await asyncio.wait_for(b.start(), 10)
    finally:
        await a.stop()
