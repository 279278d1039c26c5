"""py-scheduler and kube-scheduler side by side on the same real nodes (issue 27, item 4).

A mixed burst of 200 Pods - bare Pods of mixed CPU/memory requests that finish after a moment, a
ReplicaSet per scheduler, a Job whose Pods finish - split between ``py-scheduler`` and
``default-scheduler`` onto the same 2 nodes. The bare Pods come in waves, each half py-scheduler's and
half kube-scheduler's; a wave is created when the one before it has finished, and the waves' requests
add up to several times the nodes' allocatable CPU, so most Pods only fit in room that finished Pods
gave back: a scheduler whose cache kept finished Pods would leave later waves Pending. The kubelets
admit every Pod: none is rejected (``status.reason`` OutOfcpu, OutOfmemory, OutOfpods,
UnexpectedAdmissionError...), every Pod ends Running or Succeeded, and the kubelets' own view
(allocatable minus the requests of the Pods they run) is never negative.

Why zero rejections is the right oracle here: two independent schedulers race for a node's last room
(each binds before it sees the other's binding; in a first version of this test, which let the burst
fill the nodes, the kubelet refused the later of two such Bindings 16 ms apart, for either scheduler).
kube-scheduler does the same beside any second scheduler (the Kubernetes docs on multiple schedulers).
So the burst is sized so that even if every Pod alive at one time landed on ONE node, that node's
allocatable would hold them (checked at the start): a rejection can then only come from a scheduler
whose view is wrong, which is what the kubelet judges.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, unique_name, wait_for
from tests.e2e.realnodes.support import BUSYBOX_IMAGE, admission_rejections, busybox_pod
from tests.e2e.scheduler_proc import running_scheduler

pytestmark = [pytest.mark.timeout(420)]

SCHEDULERS = ("py-scheduler", "default-scheduler")
WAVES, WAVE = 14, 12  # 168 bare Pods, 6 per scheduler a wave
RS_REPLICAS, RS_CPU = 5, "25m"  # per scheduler
JOB_COMPLETIONS, JOB_PARALLELISM, JOB_CPU = 30, 4, "100m"
CPU = ("50m", "100m", "150m")
MEMORY = ("16Mi", "48Mi", "96Mi")


def _milli(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _container(command: list[str], cpu: str, memory: str) -> dict[str, Any]:
    return {"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": command,
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def _template(labels: dict[str, str], scheduler: str, command: list[str], cpu: str, memory: str,
              restart: str) -> dict[str, Any]:
    return {"metadata": {"labels": labels},
            "spec": {"schedulerName": scheduler, "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                     "automountServiceAccountToken": False, "containers": [_container(command, cpu, memory)]}}


async def test_burst_split_between_schedulers_is_admitted(realnodes: Testbed, realnodes_api: client.ApiClient,
                                                          realnodes_core: client.CoreV1Api) -> None:
    run = unique_name("burst")
    core, apps, batch = realnodes_core, client.AppsV1Api(realnodes_api), client.BatchV1Api(realnodes_api)
    names = realnodes.nodes.names()
    alloc = {n.metadata.name: _milli(n.status.allocatable["cpu"]) for n in (await core.list_node()).items}
    sizes = itertools.cycle(MEMORY)
    # The sizing that rules out a race for the last room (module docstring): every Pod that can be alive at
    # once (both ReplicaSets, the Job's parallelism, one wave) on one node still fits its allocatable CPU.
    wave_cpu = sum(_milli(CPU[j % len(CPU)]) for j in range(WAVE))
    worst = 2 * RS_REPLICAS * _milli(RS_CPU) + JOB_PARALLELISM * _milli(JOB_CPU) + wave_cpu
    assert worst <= min(alloc.values()), f"the burst can contest a node's last room: {worst}m"
    assert WAVES * wave_cpu > 2 * sum(alloc.values()), "the waves must need finished Pods' room"
    negative: list[str] = []
    sampling = True

    async def sample() -> None:
        """The kubelets' view: allocatable CPU minus the requests of the Pods each node runs."""
        while sampling:
            used: dict[str, int] = defaultdict(int)
            for p in (await core.list_namespaced_pod("default", label_selector=f"run={run}")).items:
                if p.spec.node_name and p.status.phase == "Running":
                    used[p.spec.node_name] += sum(_milli(c.resources.requests["cpu"]) for c in p.spec.containers)
            negative.extend(f"{n}: {used[n]}m > {alloc[n]}m" for n in names if used[n] > alloc[n])
            await asyncio.sleep(0.5)

    async with running_scheduler(realnodes, unique_name("py-sched-burst"), verbosity=2):
        sampler = asyncio.create_task(sample())
        try:
            started = time.monotonic()
            for k, scheduler in enumerate(SCHEDULERS):
                mem = next(sizes)
                await apps.create_namespaced_replica_set("default", {
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": f"{run}-rs{k}", "labels": {"run": run}},
                    "spec": {"replicas": RS_REPLICAS, "selector": {"matchLabels": {"rs": f"{run}-rs{k}"}},
                             "template": _template({"run": run, "rs": f"{run}-rs{k}"}, scheduler,
                                                   ["sleep", "3600"], RS_CPU, mem, "Always")}})
            await batch.create_namespaced_job("default", {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{run}-job"},
                "spec": {"completions": JOB_COMPLETIONS, "parallelism": JOB_PARALLELISM, "backoffLimit": 0,
                         "template": _template({"run": run}, "py-scheduler", ["sleep", "1"], JOB_CPU, "32Mi",
                                               "Never")}})
            for w in range(WAVES):
                wave = []
                for j in range(WAVE):
                    cpu, mem = CPU[j % len(CPU)], MEMORY[(j + w) % len(MEMORY)]
                    wave.append(busybox_pod(f"{run}-{w}-{j}", ["sleep", "1"], scheduler=SCHEDULERS[j % 2],
                                            requests={"cpu": cpu, "memory": mem}, labels={"run": run}))
                await asyncio.gather(*(core.create_namespaced_pod("default", p) for p in wave))

                async def wave_done(names: frozenset[str] = frozenset(p["metadata"]["name"] for p in wave)) -> bool:
                    pods = (await core.list_namespaced_pod("default", label_selector=f"run={run}")).items
                    mine = [p for p in pods if p.metadata.name in names]
                    if any(p.status.phase == "Failed" for p in mine):
                        return True  # judged below
                    return sum(p.status.phase == "Succeeded" for p in mine) == len(names)

                await wait_for(wave_done, timeout=120, interval=0.5, what=f"wave {w} Succeeded")

            async def all_done() -> list[Any] | None:
                pods = (await core.list_namespaced_pod("default", label_selector=f"run={run}")).items
                if [p for p in pods if p.status.phase == "Failed"]:
                    return list(pods)  # fail now, below, not at the timeout
                bare_done = sum(1 for p in pods if p.status.phase == "Succeeded" and not
                                {"job-name", "rs"} & set(p.metadata.labels or {}))
                job_done = sum(1 for p in pods if p.status.phase == "Succeeded" and "job-name" in
                               (p.metadata.labels or {}))
                rs_running = sum(1 for p in pods if "rs" in (p.metadata.labels or {}) and p.status.phase == "Running")
                if bare_done == WAVES * WAVE and job_done == JOB_COMPLETIONS and rs_running == 2 * RS_REPLICAS:
                    return list(pods)
                return None

            pods = await wait_for(all_done, timeout=300, interval=2.0, what="every Pod Running or Succeeded")
            elapsed = time.monotonic() - started
            rejected = admission_rejections(pods)
            by = defaultdict(list)
            for p in pods:
                if p.metadata.name in {r.split(":")[0] for r in rejected}:
                    by[p.spec.scheduler_name].append(p.metadata.name)
            assert not rejected, f"kubelet rejected {len(rejected)} Pods (by scheduler: {dict(by)}): {rejected[:5]}"
            failed = [p.metadata.name for p in pods if p.status.phase == "Failed"]
            assert not failed, f"failed: {failed}"
        finally:
            sampling = False
            await sampler
            await apps.delete_collection_namespaced_replica_set("default", label_selector=f"run={run}")
            await batch.delete_namespaced_job(f"{run}-job", "default", propagation_policy="Background")
            await core.delete_collection_namespaced_pod("default", label_selector=f"run={run}",
                                                        grace_period_seconds=1)
    assert len(pods) >= 200
    assert not negative, negative[:10]
    by_scheduler: dict[str, int] = defaultdict(int)
    for p in pods:
        by_scheduler[p.spec.scheduler_name] += 1
        assert p.spec.node_name in names
    assert all(by_scheduler[s] >= 80 for s in SCHEDULERS), by_scheduler
    # reuse: the CPU that finished Pods requested on a node is more than that node ever had free
    finished_cpu: dict[str, int] = defaultdict(int)
    for p in pods:
        if p.status.phase == "Succeeded":
            finished_cpu[p.spec.node_name] += sum(_milli(c.resources.requests["cpu"]) for c in p.spec.containers)
    assert all(finished_cpu[n] > alloc[n] for n in names), (finished_cpu, alloc)
    print(f"burst of {len(pods)} Pods done in {elapsed:.0f}s; by scheduler {dict(by_scheduler)}")
