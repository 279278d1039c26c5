"""Filter on more cores (py_scheduler/core/shards.py, issue 32 item 3) against the one-core path.

Property: on the same live-like snapshot (a :class:`Cache` updated between cycles, as the live loop
does), a profile with Filter shards schedules every Pod exactly as one without: the same selected
node, feasible nodes, per-node rejections, message and nodes evaluated. Between cycles the cluster
changes the ways the replica must follow: Pods assumed onto nodes, node labels and taints changed,
nodes added and removed, cluster objects added. The clusters and Pods are the parity generator's
scenarios (bench/parity_lib/generator.py). The pool is forced to shard every chunk it may
(``min_chunk_seconds=0``, one node per part), and the test asserts that it did.
"""

from __future__ import annotations

import copy
import functools
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.cache.cache import Cache
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.core.shards import FilterShardPool, cgroup_cpu_limit, machine_parallelism
from py_scheduler.framework.algorithm import Algorithm, ScheduleResult
from py_scheduler.framework.config import ProfileConfig, SchedulerConfig, build_framework
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import CycleState, PodInfo
from py_scheduler.plugins import registry

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.parity_lib.generator import scenario  # noqa: E402

PROFILE = ProfileConfig()
CFG = SchedulerConfig(profiles=[PROFILE])


def _wait_ready(pool: FilterShardPool, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pool.wait_ready(0.2):
        assert time.monotonic() < deadline, "the shard workers did not start"


@pytest.fixture(scope="module")
def pool() -> Iterator[FilterShardPool]:
    p = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 3,
                        min_chunk_seconds=0.0, min_part=1, warm_up=0)
    _wait_ready(p)
    yield p
    p.close()


def _framework() -> Framework:
    return build_framework(PROFILE, CFG, registry=registry)


def _outcome(r: ScheduleResult) -> tuple[Any, ...]:
    return (r.selected, r.feasible, r.filtered, r.message, r.nodes_evaluated, r.total_values)


def _mutate(cache: Cache, nodes: dict[str, dict[str, Any]], rng: random.Random, k: int) -> None:
    """One change of the kinds the live informers make."""
    what = rng.random()
    if what < 0.35 and nodes:
        name = rng.choice(sorted(nodes))
        old = nodes[name]
        new = copy.deepcopy(old)
        meta = new["metadata"]
        meta["labels"] = {**(meta.get("labels") or {}), "changed": str(k)}
        if rng.random() < 0.5:
            new.setdefault("spec", {})["taints"] = [{"key": "shard-test", "value": str(k), "effect": "NoSchedule"}]
        cache.update_node(old, new)
        nodes[name] = new
    elif what < 0.5 and nodes:
        src = nodes[rng.choice(sorted(nodes))]
        new = copy.deepcopy(src)
        new["metadata"]["name"] = f"added-{k}"
        cache.add_node(new)
        nodes[new["metadata"]["name"]] = new
    elif what < 0.6 and len(nodes) > 2:
        name = rng.choice(sorted(nodes))
        cache.remove_node(nodes.pop(name))
    elif what < 0.75:  # InterPodAffinity's namespaceSelector reads the Namespaces
        ns = rng.choice(["default", "team-a", "team-b"])
        labels = {"kubernetes.io/metadata.name": ns, **({"team": "yes"} if rng.random() < 0.5 else {})}
        cache.objects.upsert("Namespace", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns, "labels": labels}})
    elif what < 0.8:
        cache.objects.upsert("Service", {"apiVersion": "v1", "kind": "Service",
                                         "metadata": {"name": f"svc-{k}", "namespace": "default"},
                                         "spec": {"selector": {"app": "web"}}})


def test_sharded_filter_schedules_every_pod_as_the_one_core_path(pool: FilterShardPool) -> None:
    before = pool.stats.sharded_chunks
    cycles = stopped_early = 0
    for index in range(40):
        objs = scenario(11, index)
        cache = Cache()
        nodes: dict[str, dict[str, Any]] = {}
        pending: list[dict[str, Any]] = []
        try:
            for o in objs:
                kind = o.get("kind")
                if kind == "Node":
                    # every third cluster has each node 12 times: more than 100 nodes, so the search
                    # stops before the last node (percentageOfNodesToScore) and runs ahead of it
                    for j in range(12 if index % 3 == 0 else 1):
                        c = copy.deepcopy(o)
                        if j:
                            c["metadata"]["name"] += f"-r{j}"
                            c["metadata"].setdefault("labels", {})["kubernetes.io/hostname"] = c["metadata"]["name"]
                        cache.add_node(c)
                        nodes[c["metadata"]["name"]] = c
                elif kind == "Pod":
                    if (o.get("spec") or {}).get("nodeName"):
                        cache.add_pod(o)
                    else:
                        pending.append(o)
                else:
                    cache.objects.upsert(str(kind), o)
        except PodParseError:
            continue
        snap = Snapshot()
        plain, sharded = _framework(), _framework()
        sharded.connect_shards(pool)
        a1, a2 = Algorithm(rng=random.Random(index)), Algorithm(rng=random.Random(index))
        rng = random.Random(index)
        for k, raw in enumerate(pending):
            _mutate(cache, nodes, rng, k)
            cache.update_snapshot(snap)
            try:
                pi = PodInfo(raw)
            except PodParseError:
                continue
            r1 = a1.schedule(plain, snap, pi)
            r2 = a2.schedule(sharded, snap, pi)
            assert _outcome(r2) == _outcome(r1), (index, raw["metadata"]["name"])
            cycles += 1
            stopped_early += r1.nodes_evaluated < len(snap.node_info_list)
            if r1.selected:
                bound = dict(raw, spec={**raw["spec"], "nodeName": r1.selected})
                cache.assume_pod(PodInfo(bound))
                cache.update_snapshot(snap)
    assert cycles > 100
    assert stopped_early > 5  # the search stopped before the last node, after running ahead
    assert pool.stats.sharded_chunks - before > 50, pool.stats
    assert pool.stats.diverged == 0
    assert not pool.broken


def test_a_dead_worker_stops_sharding_and_the_cycle_goes_on() -> None:
    p = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2,
                        min_chunk_seconds=0.0, min_part=1, timeout=5.0, warm_up=0)
    try:
        _wait_ready(p)
        objs = scenario(11, 3)
        snap = Snapshot.from_object_list(objs)
        pods = [o for o in objs if o.get("kind") == "Pod" and not o["spec"].get("nodeName")]
        plain, sharded = _framework(), _framework()
        sharded.connect_shards(p)
        p._workers[0].process.kill()  # the worker dies between two cycles
        p._workers[0].process.join(5)
        for raw in pods[:3]:
            pi = PodInfo(raw)
            r1 = Algorithm(rng=random.Random(1)).schedule(plain, snap, pi)
            r2 = Algorithm(rng=random.Random(1)).schedule(sharded, snap, pi)
            assert _outcome(r2) == _outcome(r1)
        assert p.broken
        assert p.stats.sharded_chunks == 0
    finally:
        p.close()


def test_cheap_chunks_stay_on_the_cycle_thread(pool: FilterShardPool) -> None:
    cheap = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 1)
    assert cheap.stats.sharded_chunks == 0 and not cheap._workers  # parallelism 1: no worker at all
    objs = scenario(11, 5)
    snap = Snapshot.from_object_list(objs)
    fw = _framework()
    fw.connect_shards(cheap)
    for raw in [o for o in objs if o.get("kind") == "Pod" and not o["spec"].get("nodeName")][:3]:
        Algorithm(rng=random.Random(1)).schedule(fw, snap, PodInfo(raw))
    assert cheap.stats.sharded_chunks == 0


def test_machine_parallelism_is_capped_by_the_cpus_and_the_container_limit(tmp_path: Path) -> None:
    import os

    cpus = len(os.sched_getaffinity(0))
    assert machine_parallelism(16, tmp_path) == min(16, cpus)  # no cgroup files: affinity only
    assert machine_parallelism(1, tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 processes may run
    assert cgroup_cpu_limit(tmp_path) == 2
    assert machine_parallelism(16, tmp_path) == min(2, cpus)
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1
    assert machine_parallelism(16, tmp_path) == 1


def test_workers_start_only_when_a_chunk_is_worth_sharding() -> None:
    objs = scenario(11, 5)
    snap = Snapshot.from_object_list(objs)
    lazy = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=10.0)
    try:
        fw = _framework()
        fw.connect_shards(lazy)
        for raw in [o for o in objs if o.get("kind") == "Pod" and not o["spec"].get("nodeName")][:3]:
            Algorithm(rng=random.Random(1)).schedule(fw, snap, PodInfo(raw))
        assert not lazy._workers  # every chunk was cheap: no process was spawned
        assert lazy.stats.reasons.get("cheap", 0) > 0
    finally:
        lazy.close()


def test_workers_spawn_after_enough_costly_chunks_not_one() -> None:
    objs = scenario(11, 5)
    snap = Snapshot.from_object_list(objs)
    pods = [o for o in objs if o.get("kind") == "Pod" and not o["spec"].get("nodeName")]
    pool = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=1e-12,
                           min_part=1, warm_up=2, spawn_after=4)
    try:
        fw = _framework()
        fw.connect_shards(pool)
        seen: list[bool] = []
        for raw in pods * 10:
            Algorithm(rng=random.Random(1)).schedule(fw, snap, PodInfo(raw))
            seen.append(bool(pool._workers))
        assert pool.stats.local_chunks >= 6
        assert pool.stats.reasons.get("cheap", 0) == 2  # the warm-up: its chunks' times are not trusted
        assert pool._costly >= 4 and any(seen) and not seen[0]  # spawned at the 4th costly chunk, not the 1st
    finally:
        pool.close()


def test_the_cost_model_backs_off_where_sharding_does_not_pay() -> None:
    pool = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=0.002)
    assert pool.threshold == 0.002 and pool.ratio is None
    pool._judge(0.005, 0.004)  # sharded: slower than the cycle's thread alone was predicted to be
    assert pool.threshold == pytest.approx(0.003) and pool.ratio == pytest.approx(1.25)
    for _ in range(40):
        pool._judge(0.01, 0.005)
    assert pool.threshold == 1.0  # capped: in effect no chunk is sharded any more
    pool._judge(0.001, 0.005)  # one chunk that pays does not turn the model around at once
    assert pool.threshold == 1.0
    for _ in range(100):
        pool._judge(0.001, 0.005)  # sharding pays again: back down to the floor, not below
    assert pool.threshold == 0.002
    assert not pool._workers


def test_while_sharding_does_not_pay_one_chunk_in_fifty_is_sharded_to_measure_again() -> None:
    pool = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=0.001,
                           warm_up=0)
    pool._seconds_per_node = 1e-5
    pool.threshold = 1.0
    snap = Snapshot()
    state = CycleState(snap)
    verdicts = [pool._unshardable([], state, 200) for _ in range(100)]  # 2 ms each: above the floor only
    assert verdicts.count("") == 2 and verdicts.count("not paying") == 98
    assert pool._unshardable([], state, 50) == "cheap"  # 0.5 ms: under the floor, never sharded


def test_something_that_does_not_pickle_stops_sharding_and_the_cycle_goes_on() -> None:
    import threading

    p = FilterShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2,
                        min_chunk_seconds=0.0, min_part=1, warm_up=0)
    try:
        _wait_ready(p)
        objs = scenario(11, 3)
        snap = Snapshot.from_object_list(objs)
        snap.objects.upsert("Service", {"metadata": {"name": "odd", "namespace": "default"}, "lock": threading.Lock()})
        pods = [o for o in objs if o.get("kind") == "Pod" and not o["spec"].get("nodeName")]
        plain, sharded = _framework(), _framework()
        sharded.connect_shards(p)
        for raw in pods[:3]:
            pi = PodInfo(raw)
            r1 = Algorithm(rng=random.Random(1)).schedule(plain, snap, pi)
            r2 = Algorithm(rng=random.Random(1)).schedule(sharded, snap, pi)
            assert _outcome(r2) == _outcome(r1)
        assert "sending to a worker failed" in p.broken and "pickle" in p.broken
        assert not p._workers
    finally:
        p.close()
