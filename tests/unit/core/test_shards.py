"""Filter and Score on more cores (py_scheduler/core/shards.py, issue 32 item 3) against the one-core path.

Property: on the same live-like snapshot (a :class:`Cache` updated between cycles, as the live loop
does), a profile with node shards schedules every Pod exactly as one without: the same selected
node, feasible nodes, per-node rejections, message, nodes evaluated and every node's total score.
Between cycles the cluster changes the ways the replica must follow: Pods assumed onto nodes, node
labels, taints and images changed, nodes added and removed, cluster objects added. The clusters and
Pods are the parity generator's scenarios (bench/parity_lib/generator.py). The pool is forced to
shard every request it may (``min_chunk_seconds=0``, one node per part), Filter chunks and Scores
alike, and the test asserts that it did.
"""

from __future__ import annotations

import copy
import functools
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.cache.cache import Cache
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.core.shards import NodeShardPool, cgroup_cpu_limit, machine_parallelism
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


def _wait_ready(pool: NodeShardPool, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pool.wait_ready(0.2):
        assert time.monotonic() < deadline, "the shard workers did not start"


@pytest.fixture(scope="module")
def pool() -> Iterator[NodeShardPool]:
    p = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 3,
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
        if rng.random() < 0.5:  # ImageLocality: the image summaries of nodes not sent again change too
            images = new.setdefault("status", {}).setdefault("images", [])
            if images and rng.random() < 0.5:
                images.pop(0)
            else:
                images.append({"names": [f"registry.local/shared:{k % 3}"], "sizeBytes": 300 * 1024 * 1024})
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


def test_sharded_filter_and_score_schedule_every_pod_as_the_one_core_path(pool: NodeShardPool) -> None:
    before, scores_before = pool.stats.sharded_chunks, pool.stats.sharded_scores
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
    assert pool.stats.sharded_scores - scores_before > 30, pool.stats
    assert pool.stats.diverged == 0
    assert not pool.broken


def test_a_dead_worker_stops_sharding_and_the_cycle_goes_on() -> None:
    p = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2,
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


def test_cheap_chunks_stay_on_the_cycle_thread(pool: NodeShardPool) -> None:
    cheap = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 1)
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
    lazy = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=10.0)
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
    pool = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=1e-12,
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
    pool = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=0.002)
    for cost in (pool.filter_cost, pool.score_cost):
        assert cost.threshold == 0.002 and cost.ratio is None
        cost.judge(0.005, 0.004)  # sharded: slower than the cycle's thread alone was predicted to be
        assert cost.threshold == pytest.approx(0.003) and cost.ratio == pytest.approx(1.25)
        for _ in range(40):
            cost.judge(0.01, 0.005)
        assert cost.threshold == 1.0  # capped: in effect nothing is sharded any more
        cost.judge(0.001, 0.005)  # one request that pays does not turn the model around at once
        assert cost.threshold == 1.0
        for _ in range(100):
            cost.judge(0.001, 0.005)  # sharding pays again: back down to the floor, not below
        assert cost.threshold == 0.002
    assert not pool._workers


def test_while_sharding_does_not_pay_one_chunk_in_fifty_is_sharded_to_measure_again() -> None:
    pool = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2, min_chunk_seconds=0.001,
                           warm_up=0)
    cost = pool.filter_cost
    cost.seconds_per_node = 1e-5
    cost.threshold = 1.0
    verdicts = [cost.why_not(200, pool.warm_up) for _ in range(100)]  # 2 ms each: above the floor only
    assert verdicts.count("") == 2 and verdicts.count("not paying") == 98
    assert cost.why_not(50, pool.warm_up) == "cheap"  # 0.5 ms: under the floor, never sharded


def test_something_that_does_not_pickle_stops_sharding_and_the_cycle_goes_on() -> None:
    import threading

    p = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2,
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


def _score_cluster(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """80 nodes whose PreScore inputs differ part by part (GPU models, NVLink groups, zones, images)
    and 60 Pods whose raw scores read PreScore's view of every feasible node: GPU Pods (model, queue
    and packing parts over the feasible nodes), ScheduleAnyway spread (the topology weights count the
    feasible nodes' domains), preferred pod affinity."""
    from tests.unit.plugins.gpu.gpu_objects import a100_node, gpu_node, gpu_pod, h100_node, l4_node

    makers: tuple[Callable[[str], dict[str, Any]], ...] = (a100_node, h100_node, l4_node, gpu_node)
    nodes: list[dict[str, Any]] = []
    for i in range(80):
        node = makers[i % 4](f"n{i:02d}")
        node["metadata"]["labels"]["topology.kubernetes.io/zone"] = f"z{i % 5}"
        if rng.random() < 0.4:
            node["status"]["images"] = [{"names": [f"registry.local/app:{rng.randint(0, 3)}"],
                                         "sizeBytes": rng.randint(100, 900) * 1024 * 1024}]
        nodes.append(node)
    pods: list[dict[str, Any]] = []
    for k in range(60):
        pod = gpu_pod(f"p{k:02d}", rng.choice([0, 1, 2, 4]), cpu=f"{rng.randint(1, 8)}")
        pod["metadata"]["labels"] = {"app": rng.choice(["web", "db"])}
        pod["spec"]["containers"][0]["image"] = f"registry.local/app:{rng.randint(0, 3)}"
        if rng.random() < 0.5:
            pod["spec"]["topologySpreadConstraints"] = [{
                "maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway",
                "topologyKey": rng.choice(["kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
                "labelSelector": {"matchLabels": {"app": pod["metadata"]["labels"]["app"]}}}]
        if rng.random() < 0.3:
            pod["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 10, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                                                  "labelSelector": {"matchLabels": {"app": "db"}}}}]}}
        pods.append(pod)
    return nodes, pods


def test_sharded_score_reads_prescore_over_every_feasible_node(pool: NodeShardPool) -> None:
    """Scores whose raw values depend on PreScore's view of all feasible nodes (not only a worker's
    part) and image summaries shared across nodes: every total equal to the one-core path's."""
    before = pool.stats.sharded_scores
    rng = random.Random(7)
    nodes, pods = _score_cluster(rng)
    cache = Cache()
    for node in nodes:
        cache.add_node(node)
    snap = Snapshot()
    plain, sharded = _framework(), _framework()
    sharded.connect_shards(pool)
    gpu_cycles = 0
    for raw in pods:
        # a node gains or loses an image the Pods use: the summaries of nodes not sent again change
        k = rng.randrange(len(nodes))
        new = copy.deepcopy(nodes[k])
        new["status"]["images"] = [] if new["status"].get("images") else [
            {"names": [f"registry.local/app:{rng.randint(0, 3)}"], "sizeBytes": 500 * 1024 * 1024}]
        cache.update_node(nodes[k], new)
        nodes[k] = new
        cache.update_snapshot(snap)
        pi = PodInfo(raw)
        r1 = Algorithm(rng=random.Random(1)).schedule(plain, snap, pi)
        r2 = Algorithm(rng=random.Random(1)).schedule(sharded, snap, pi)
        assert _outcome(r2) == _outcome(r1), raw["metadata"]["name"]
        assert r1.score_columns == r2.score_columns
        gpu_cycles += "GPUScore" in dict(r1.score_columns)
        if r1.selected:
            cache.assume_pod(PodInfo(dict(raw, spec={**raw["spec"], "nodeName": r1.selected})))
    assert gpu_cycles > 20
    assert pool.stats.sharded_scores - before == len(pods), pool.stats
    assert pool.stats.diverged == 0


def _boom(fw: Framework) -> Framework:
    """``fw`` whose NodeResourcesFit Score fails (Error) on nodes named ``*-boom``, in its batch form."""
    plain = fw._batch_score["NodeResourcesFit"]

    def score_nodes(state: Any, pod: Any, nodes: list[Any]) -> tuple[list[int], Any]:
        from py_scheduler.framework.types import Status

        if any(ni.name.endswith("-boom") for ni in nodes):
            return [], Status.error("boom", "NodeResourcesFit")
        values, s = plain(state, pod, nodes)
        return list(values), s

    fw._batch_score["NodeResourcesFit"] = score_nodes
    return fw


def _boom_replica(profile: ProfileConfig, cfg: SchedulerConfig, objects: Any) -> Framework:
    """The workers' :func:`_boom` profile (module-level: it pickles into a spawned worker)."""
    return _boom(registry.replica_framework(profile, cfg, objects))


@pytest.mark.parametrize("where", [0, 39])  # the boom node in the cycle thread's part / a worker's
def test_a_failing_score_plugin_raises_the_one_core_error_wherever_it_failed(where: int) -> None:
    from py_scheduler.framework.runtime import SchedulingError

    p = NodeShardPool(functools.partial(_boom_replica, PROFILE, CFG), 2, min_chunk_seconds=0.0, min_part=1,
                      warm_up=0)
    try:
        _wait_ready(p)
        nodes = [{"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": f"n{i:02d}" + ("-boom" if i == where else ""), "labels": {}},
                  "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}} for i in range(40)]
        snap = Snapshot.from_object_list(nodes)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u"},
               "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
        plain, sharded = _boom(_framework()), _boom(_framework())
        sharded.connect_shards(p)
        errors = []
        for fw in (plain, sharded):
            with pytest.raises(SchedulingError) as exc:
                Algorithm(rng=random.Random(1)).schedule(fw, snap, PodInfo(pod))
            errors.append(str(exc.value))
        assert errors[1] == errors[0] and "boom" in errors[0]
        assert p.stats.sharded_chunks > 0 and not p.broken  # the workers were used, and still are
        # the Score was sent to the worker (no reason to score locally) and given back to the caller
        assert p.stats.local_scores == 0 and p.stats.sharded_scores == 0, p.stats
    finally:
        p.close()


def _images_of(snap: Snapshot) -> dict[str, Any]:
    """Every node's view of its images' summaries: node -> image -> (size, holders)."""
    return {ni.name: {name: (st.size, sorted(st.nodes)) for name, st in ni.image_states.items()}
            for ni in snap.node_info_list}


def test_the_replica_image_summaries_follow_the_main_side_sizes_and_holders() -> None:
    """ImageLocality reads an image's size and holder count from a summary shared by the nodes. The
    cache sets a summary's size from whichever node created it first, so nodes that report one tag
    at different sizes (pulled at different times) must give the replica the main side's size, after
    whole replicas and changed nodes alike (no worker process: the sync is pickled and applied here)."""
    import pickle

    from py_scheduler.core.shard_worker import apply_sync

    rng = random.Random(5)
    pool = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2)
    cache, snap, replica = Cache(), Snapshot(), Snapshot()
    nodes: dict[str, dict[str, Any]] = {}

    def node(name: str) -> dict[str, Any]:
        images = [{"names": [f"app:{t}"], "sizeBytes": rng.choice([100, 900]) * 1024 * 1024}
                  for t in range(2) if rng.random() < 0.6]
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
                "status": {"allocatable": {"cpu": "4", "pods": "10"}, "images": images}}

    for i in range(6):
        nodes[f"n{i}"] = node(f"n{i}")
        cache.add_node(nodes[f"n{i}"])
    full = partial = 0
    for k in range(300):
        what = rng.random()
        if what < 0.03:  # a node comes: the list changes, a whole replica is sent
            name = f"x{k}"
            nodes[name] = node(name)
            cache.add_node(nodes[name])
        elif what < 0.06 and len(nodes) > 3:
            cache.remove_node(nodes.pop(rng.choice(sorted(nodes))))
        elif what < 0.5:  # a Pod lands: the node is sent again, its images unchanged
            cache.add_pod({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": f"p{k}", "namespace": "default", "uid": f"u{k}"},
                           "spec": {"nodeName": rng.choice(sorted(nodes)), "containers": [{"name": "c"}]}})
        else:  # a node reports other images, or the same tag at another size
            name = rng.choice(sorted(nodes))
            new = node(name)
            cache.update_node(nodes[name], new)
            nodes[name] = new
        cache.update_snapshot(snap)
        sync = pool._sync(CycleState(snap))
        if sync is None:
            continue
        full += bool(sync.get("full"))
        partial += not sync.get("full")
        apply_sync(replica, pickle.loads(pickle.dumps(sync, protocol=pickle.HIGHEST_PROTOCOL)))
        assert _images_of(replica) == _images_of(snap), k
        assert replica.images is not None and snap.images is not None
        assert {n: (st.size, sorted(st.nodes)) for n, st in replica.images.items()} == {
            n: (st.size, sorted(st.nodes)) for n, st in snap.images.items()}, k
    assert full > 5 and partial > 150


def test_a_worker_that_stops_answering_costs_one_timeout_then_is_killed() -> None:
    """A worker stuck in a plugin (here: stopped by SIGSTOP) makes the cycle wait ``timeout`` once;
    sharding then stops for good, the worker is killed rather than waited for, and the cycle's
    outcome is the one-core path's."""
    import os
    import signal

    p = NodeShardPool(functools.partial(registry.replica_framework, PROFILE, CFG), 2,
                      min_chunk_seconds=0.0, min_part=1, timeout=1.0, warm_up=0)
    try:
        _wait_ready(p)
        worker = p._workers[0].process
        objs = scenario(11, 3)
        snap = Snapshot.from_object_list(objs)
        pods = [o for o in objs if o.get("kind") == "Pod" and not o["spec"].get("nodeName")]
        plain, sharded = _framework(), _framework()
        sharded.connect_shards(p)
        os.kill(worker.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        for raw in pods[:3]:
            pi = PodInfo(raw)
            r1 = Algorithm(rng=random.Random(1)).schedule(plain, snap, pi)
            r2 = Algorithm(rng=random.Random(1)).schedule(sharded, snap, pi)
            assert _outcome(r2) == _outcome(r1)
        assert "did not answer" in p.broken
        assert time.monotonic() - t0 < 20.0  # one timeout (1 s), not one per cycle or per worker
        worker.join(5.0)
        assert not worker.is_alive()
    finally:
        p.close()
