"""Preemption while a victim terminates, py-scheduler and kube-scheduler v1.37.2 side by side.

A victim does not vanish at once on a real node: the kubelet stops it within its grace period. Here a
finalizer holds the victim in that state (deletionTimestamp set, the object kept) for as long as the test
wants. Per scheduler, on Nodes of its own:

- n1 holds ``v1`` (priority 100, 3 CPUs, the finalizer) and n2 ``v2`` (priority 200, 3 CPUs); a Pod of
  priority 1000 asking 2 CPUs fits on neither, and preempts ``v1`` (the cheaper victim, on n1).
- ``v1`` gets the DisruptionTarget condition (True, ``PreemptionByScheduler``, ``<scheduler>:
  preempting to accommodate a higher priority pod``) before its deletion (``PreemptPod``). That
  condition is what a Job's ``podFailurePolicy`` matches, and what the preemptor's next attempt reads.
- A Node that fits nothing is added, so both retry the preemptor while ``v1`` terminates: each says
  ``not eligible due to a terminating pod on the nominated node.`` and evicts nobody else (``v2``
  stays).
- The finalizer is removed: ``v1`` goes and the preemptor binds to n1.

Upstream: ``pkg/scheduler/framework/preemption/executor.go`` (``PreemptPod``),
``plugins/defaultpreemption/default_preemption.go`` (``PodEligibleToPreemptOthers``).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.e2e.helpers import (
    PAUSE_IMAGE,
    Testbed,
    create_node,
    unique_name,
    wait_for,
    wait_for_failed_scheduling,
)
from tests.e2e.scheduler_proc import SchedulerProcess, stop_and_clean_up

GROUP_LABEL = "py-scheduler-e2e/preempt-group"
HOLD = "py-scheduler-e2e/hold"


def _pod(name: str, cpu: str, priority_class: str, *, node: str = "", scheduler: str = "", group: str = "",
         hold: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"priorityClassName": priority_class, "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "main", "image": PAUSE_IMAGE,
                                            "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
        spec["nodeSelector"] = {GROUP_LABEL: group}
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if hold:
        meta["finalizers"] = [HOLD]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def test_a_terminating_victim_holds_off_a_second_preemption_side_by_side(
        testbed: Testbed, api_client: client.ApiClient, tmp_path: Path) -> None:
    core = client.CoreV1Api(api_client)
    sched_api = client.SchedulingV1Api(api_client)
    pcs = {"low": 100, "mid": 200, "high": 1000}
    names = {k: unique_name(f"pre-{k}") for k in pcs}
    for k, value in pcs.items():
        await sched_api.create_priority_class({"metadata": {"name": names[k]}, "value": value})
    scheds = {"py": unique_name("pre-py"), "kube": unique_name("pre-ks")}
    log = Path(testbed.dir) / "logs" / f"{scheds['py']}.log"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                               "profiles": [{"schedulerName": scheds["py"]}]}))
    py = SchedulerProcess(Path(testbed.kubeconfig), log, lease_name=unique_name("pre-lease"), verbosity=4,
                          extra_args=["--config", str(cfg)])
    nodes: list[str] = []
    pods: list[str] = []
    try:
        py.start()
        testbed.start_kube_scheduler(scheds["kube"], config={"leaderElection": {"leaderElect": False},
                                                             "profiles": [{"schedulerName": scheds["kube"]}]},
                                     wait_leading=False, restart=False)
        await py.wait_leading()
        runs: dict[str, dict[str, str]] = {}
        for impl in scheds:
            group = unique_name(f"pre-{impl}")
            n1, n2 = unique_name(f"pre-{impl}-n1"), unique_name(f"pre-{impl}-n2")
            for n in (n1, n2):
                nodes.append(n)
                await create_node(api_client, n, {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                  labels={GROUP_LABEL: group})
            run = {"group": group, "n1": n1, "v1": unique_name(f"pre-{impl}-v1"), "v2": unique_name(f"pre-{impl}-v2"),
                   "high": unique_name(f"pre-{impl}-high")}
            pods.extend([run["v1"], run["v2"], run["high"]])
            await core.create_namespaced_pod("default", _pod(run["v1"], "3", names["low"], node=n1, hold=True))
            await core.create_namespaced_pod("default", _pod(run["v2"], "3", names["mid"], node=n2))
            runs[impl] = run
        # The preemptors come once every Node exists: a Node added while a preemption runs would move its
        # preemptor into PreEnqueue's gate, where only a Pod deletion lets it out (upstream's queue too).
        for impl, sched in scheds.items():
            run = runs[impl]
            await core.create_namespaced_pod("default", _pod(run["high"], "2", names["high"], scheduler=sched,
                                                             group=run["group"]))
        for impl, run in runs.items():
            async def disrupted(run: dict[str, str] = run) -> dict[str, Any] | None:
                pod = await core.read_namespaced_pod(run["v1"], "default")
                if pod.metadata.deletion_timestamp is None:
                    return None
                conds = [c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"]
                return {"status": conds[0].status, "reason": conds[0].reason, "message": conds[0].message} \
                    if conds else {}

            got = await wait_for(disrupted, timeout=60, what=f"{impl}: v1 terminating")
            assert got == {"status": "True", "reason": "PreemptionByScheduler",
                           "message": f"{scheds[impl]}: preempting to accommodate a higher priority pod"}, (impl, got)
        for impl, run in runs.items():
            # both preemptions under way: a cluster event (a Node too small for anything) retries the Pod
            small = unique_name(f"pre-{impl}-small")
            nodes.append(small)
            await create_node(api_client, small, {"cpu": "1", "memory": "1Gi", "pods": "110"},
                              labels={GROUP_LABEL: run["group"]})
            await wait_for_failed_scheduling(api_client, run["high"],
                                             "not eligible due to a terminating pod on the nominated node.",
                                             timeout=60)
            v2 = await core.read_namespaced_pod(run["v2"], "default")
            assert v2.metadata.deletion_timestamp is None, impl
        for impl, run in runs.items():
            await core.patch_namespaced_pod(run["v1"], "default", {"metadata": {"finalizers": None}})

            async def bound(run: dict[str, str] = run) -> str | None:
                pod = await core.read_namespaced_pod(run["high"], "default")
                return pod.spec.node_name or None

            assert await wait_for(bound, timeout=60, what=f"{impl}: the preemptor bound") == run["n1"], impl
            v2 = await core.read_namespaced_pod(run["v2"], "default")
            assert v2.metadata.deletion_timestamp is None, impl
        assert "Traceback" not in py.log()
    finally:
        testbed.stop_kube_scheduler(scheds["kube"], kill=True)
        for p in pods:
            with contextlib.suppress(client.ApiException):
                await core.patch_namespaced_pod(p, "default", {"metadata": {"finalizers": None}})
        await stop_and_clean_up(api_client, [py], pods, nodes)
        for name in names.values():
            with contextlib.suppress(client.ApiException):
                await sched_api.delete_priority_class(name)
