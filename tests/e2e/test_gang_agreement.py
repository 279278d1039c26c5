"""``explain --snapshot`` (every pending Pod), ``simulate`` and the live scheduler place the gangs of each
case file of tests/gang_cases alike (issue 28: one pod group cycle, in py_scheduler.core, for all three).

Offline: the two commands as a user runs them (``python -m py_scheduler.cli``, ``--feature-gates
GenericWorkload=true``). Live: the file's Nodes, PodGroups and Pods created on the real bed under names of
this run (a prefix that keeps the Pods' name order, hence the queue's initial order, equal to file order;
the Pods select this run's Nodes by a label), then a py-scheduler started with the same gate. Compared:
which Pods are placed, and how many land on each used Node (the nodes themselves up to renaming: live
tie-breaks are random, offline ones seeded).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import PAUSE_IMAGE, Testbed, create_node, unique_name, wait_for
from tests.e2e.test_gang import GROUP_LABEL, NOT_BOUND_FOR, GangBed
from tests.gang_cases import CASES, GATES, check_whole_or_none, explain_placements, occupancy, simulate_placements


@pytest.fixture
async def gbed(testbed: Testbed, api_client: client.ApiClient, tmp_path: Path) -> AsyncIterator[GangBed]:
    b = GangBed(testbed, api_client, tmp_path)
    try:
        yield b
    finally:
        await b.close()


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "py_scheduler.cli", *args, "-o", "json", "--feature-gates", GATES],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _live(gbed: GangBed, case: Path) -> dict[str, str | None]:
    """The case on the bed: {default/<case pod name>: <case node name> or None} once the scheduler settled."""
    prefix = unique_name("agree")
    items: list[dict[str, Any]] = json.loads(case.read_text())["items"]
    for o in items:
        if o["kind"] == "Node":
            name = f"{prefix}-{o['metadata']['name']}"
            gbed.nodes[name] = int(o["status"]["allocatable"].get("nvidia.com/gpu", "0"))
            await create_node(gbed.api, name, o["status"]["allocatable"], labels={GROUP_LABEL: prefix})
        elif o["kind"] == "PodGroup":
            await gbed.pod_group(f"{prefix}-{o['metadata']['name']}",
                                 o["spec"]["schedulingPolicy"]["gang"]["minCount"])
    pods = [o for o in items if o["kind"] == "Pod"]
    for o in pods:  # one at a time: creation order is file order
        name = f"{prefix}-{o['metadata']['name']}"
        spec = {**o["spec"], "schedulerName": prefix, "terminationGracePeriodSeconds": 0,
                "nodeSelector": {GROUP_LABEL: prefix},
                "containers": [{**c, "image": PAUSE_IMAGE} for c in o["spec"]["containers"]]}
        if "schedulingGroup" in spec:
            spec["schedulingGroup"] = {"podGroupName": f"{prefix}-{spec['schedulingGroup']['podGroupName']}"}
        gbed.pods.append(name)
        await gbed.core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod",
                                                          "metadata": {"name": name, "namespace": "default"},
                                                          "spec": spec})
    sched = gbed.py_scheduler(prefix)  # started once every Pod exists: the whole case is in its first list
    await sched.wait_leading()
    names = [f"{prefix}-{o['metadata']['name']}" for o in pods]
    return await _settled(gbed, prefix, names)


async def _settled(gbed: GangBed, prefix: str, names: list[str]) -> dict[str, str | None]:
    """Bindings once they stop changing for :data:`NOT_BOUND_FOR` seconds (sampled each second)."""
    loop = asyncio.get_running_loop()
    last: dict[str, str] = {}
    since = loop.time()

    async def stable() -> dict[str, str] | None:
        nonlocal last, since
        got = await gbed.bound(names)
        if got != last:
            last, since = got, loop.time()
        return got if loop.time() - since >= NOT_BOUND_FOR else None

    got = await wait_for(stable, timeout=120, interval=1.0, what="the live bindings stopped changing")
    return {f"default/{n.removeprefix(prefix + '-')}": (got[n].removeprefix(prefix + "-") if n in got else None)
            for n in names}


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
async def test_explain_simulate_and_live_place_gangs_alike(gbed: GangBed, case: Path) -> None:
    explained = explain_placements(_cli("explain", "--snapshot", str(case)))
    simulated = simulate_placements(_cli("simulate", str(case)))
    assert explained == simulated
    check_whole_or_none(case, simulated)
    live = await _live(gbed, case)
    check_whole_or_none(case, live)
    placed = {p for p, n in simulated.items() if n}
    assert {p for p, n in live.items() if n} == placed, (live, simulated)
    assert occupancy(live) == occupancy(simulated), (live, simulated)
    assert "Traceback" not in gbed.replicas[0].log()
