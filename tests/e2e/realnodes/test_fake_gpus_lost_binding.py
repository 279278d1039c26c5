"""A lost Binding response on real fake-GPU nodes (issue 29 item 4, its third race).

The fault suite plays it on an API-only bed (tests/e2e/faults/test_toxics.py
``test_lost_binding_response_binds_once``): toxiproxy (:mod:`tests.e2e.faults.toxiproxy`) between
py-scheduler and kube-apiserver holds the client-to-server direction 3 s, so a GPU Pod's Binding sits in
the proxy; a ``reset_peer`` toxic on the way back then resets its connection as the answer comes: the
Binding succeeded on the server, the client saw a failure, retried (409 already assigned) or forgot the
Pod, and the watch put it back as bound. Here the nodes are real (tests/e2e/realnodes, the fake-GPU
DaemonSet of test_fake_gpus.py), so the kubelet judges what py-scheduler did around the lost responses:
one lost Binding per node, then, as soon as the replica gave the last one up, a burst asking for more
GPUs than are left (a forgotten Pod's GPUs handed out again would make the kubelet refuse a Pod with
``OutOfnvidia.com/gpu`` / ``UnexpectedAdmissionError``). Afterwards every Pod py-scheduler placed is
admitted and Running, every Running container's ``NVIDIA_VISIBLE_DEVICES`` is distinct per node, no
``gpu-indices`` index is held twice on a node, the rest is Pending with a FailedScheduling reason, and
the scheduler's log shows each Binding response was really lost (the test cannot pass vacuously).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes_asyncio import client

from tests.e2e.faults.toxiproxy import Proxy, Toxiproxy
from tests.e2e.helpers import Testbed, pod_events, unique_name, wait_for
from tests.e2e.realnodes import test_fake_gpus
from tests.e2e.realnodes.test_fake_gpus import (
    DS_LABEL,
    GPU,
    IDX,
    FakeGPUs,
    _check_devices,
    _clean,
    _config,
    _gpu_pod,
    _settle,
)
from tests.e2e.scheduler_proc import SchedulerProcess

pytestmark = pytest.mark.timeout(300)

fake_gpus = test_fake_gpus.fake_gpus
"""test_fake_gpus.py's module fixture: the fake-GPU DaemonSet on the real nodes, again for this module."""


@pytest.fixture(scope="module", autouse=True)
async def _previous_plugins_gone(realnodes_core: client.CoreV1Api) -> None:
    """Before ``fake_gpus`` applies the DaemonSet again: the plugin Pods of a module that ran before
    (deleted with ``--wait=false``) are gone, so none stops mid-test and takes its node's GPUs away."""
    async def gone() -> bool:
        return not (await realnodes_core.list_namespaced_pod("kube-system", label_selector=DS_LABEL)).items

    await wait_for(gone, timeout=60, interval=0.5, what="earlier fake-GPU plugin Pods gone")


@pytest.fixture
async def toxi(realnodes: Testbed) -> AsyncIterator[Toxiproxy]:
    """A toxiproxy server (built into the bed's cache on first use), stopped at the end."""
    t = Toxiproxy(Path(realnodes.dir) / "logs" / f"{unique_name('toxiproxy')}.log")
    await t.start()
    try:
        yield t
    finally:
        await t.stop()


async def _bound_node(core: client.CoreV1Api, name: str) -> str:
    async def bound() -> str | None:
        return str((await core.read_namespaced_pod(name, "default")).spec.node_name or "") or None

    return await wait_for(bound, timeout=30, interval=0.05, what=f"{name} bound")


async def _lose_binding_response(core: client.CoreV1Api, sched: SchedulerProcess, proxy: Proxy,
                                 pod: dict[str, Any]) -> str:
    """Create ``pod`` with the client-to-server direction held 3 s; once the replica is scheduling it
    (its Binding held in the proxy), reset connections on the way back until the Pod is bound on the
    server and the replica's request failed (a ``retrying POST .../binding`` line, or the cycle's
    ``Failed to bind``). Returns the Pod's name."""
    name = str(pod["metadata"]["name"])
    before = len(sched.log())
    async with proxy.toxic("latency", "upstream", latency=3000):
        await core.create_namespaced_pod("default", pod)
        await wait_for(lambda: f"Attempting to schedule pod pod=default/{name}" in sched.log()[before:],
                       timeout=30, interval=0.01, what=f"the replica scheduling {name}")
        async with proxy.toxic("reset_peer", "downstream", timeout=0):
            await _bound_node(core, name)

            def noticed() -> bool:
                tail = sched.log()[before:]
                return f"/pods/{name}/binding" in tail and (
                    "retrying POST" in tail or f"Failed to bind pod pod=default/{name}" in tail)

            await wait_for(noticed, timeout=60, interval=0.05, what=f"the lost response of {name} noticed")
    return name


async def test_lost_binding_responses_kubelet_admits_all(realnodes: Testbed, fake_gpus: FakeGPUs,
                                                         realnodes_core: client.CoreV1Api, toxi: Toxiproxy,
                                                         tmp_path: Path) -> None:
    """py-scheduler's only way to the API server is toxiproxy. A 1-GPU Pod per node binds normally;
    then per node a 2-GPU Pod (pinned there) whose Binding response is lost (upstream held 3 s, then
    ``reset_peer`` downstream): it is bound exactly once, to its node, with at most one Scheduled
    event, and the replica never logged it bound (it failed the cycle: 409 on the resend, or retries
    out). Between the rounds a 1-GPU Pod on node 0 binds normally (a live connection for the next
    round). Right after the last ``Failed to bind``, a burst of 1- and 2-GPU Pods asks for 2 GPUs
    more than each node has left. The kubelets admit every Pod bound, devices and
    ``gpu-indices`` are distinct per node, every GPU is in use and the Pods left over are Pending
    with a FailedScheduling reason naming the GPUs. The writes go out from their own process
    (``--request-process``, the default where the scheduler has more than one CPU)."""
    core = realnodes_core
    names = fake_gpus.names
    size = {n: len(fake_gpus.profiles[n].devices) for n in names}
    name = unique_name("fg-lost")
    run = unique_name("fg-lost")
    up = urlsplit(realnodes.server)
    proxy = await toxi.proxy(f"{up.hostname or '127.0.0.1'}:{up.port or 443}")
    logs = Path(realnodes.dir) / "logs"
    kc = proxy.kubeconfig(Path(realnodes.kubeconfig), logs / f"{unique_name('toxic')}.kubeconfig")
    sched = SchedulerProcess(kc, logs / f"{name}.log", lease_name=unique_name("py-sched-fg-lost"), verbosity=4,
                             leader_elect=False,
                             extra_args=["--config", str(_config(tmp_path, name)), "--request-process"])
    sched.start()
    lost: dict[str, str] = {}  # Pod -> the node its (only) Binding named
    try:
        await sched.wait_synced()
        # the Bindings go out from the writes' own process (its own connection, warmed by the 1-GPU Pods)
        await sched.wait_log("API writes go out from process", timeout=60)
        warm = [_gpu_pod(unique_name("fg-warm"), 1, scheduler=name, run=run, node=n) for n in names]
        await asyncio.gather(*(core.create_namespaced_pod("default", w) for w in warm))
        for w in warm:
            await _bound_node(core, w["metadata"]["name"])
        used = dict.fromkeys(names, 1)
        for i, n in enumerate(names):
            if i:  # a Binding through the proxy again (a live connection for the next one), on node 0
                between = _gpu_pod(unique_name("fg-warm"), 1, scheduler=name, run=run, node=names[0])
                await core.create_namespaced_pod("default", between)
                bname = between["metadata"]["name"]
                await sched.wait_log(f"Successfully bound pod to node pod=default/{bname} ", timeout=60)
                warm.append(between)
                used[names[0]] += 1
            pname = await _lose_binding_response(core, sched, proxy, _gpu_pod(
                unique_name("fg-lost"), 2, scheduler=name, run=run, node=n))
            lost[pname] = await _bound_node(core, pname)
            assert lost[pname] == n, (pname, lost[pname])
            used[n] += 2
            # the resend (toxics gone) ends in 409 already assigned, or the retries ran out: the cycle failed
            await sched.wait_log(f"Failed to bind pod pod=default/{pname} ", timeout=60)
        # right after the replica gave the last Binding up: 2 GPUs more than each node has left
        burst: list[str] = []
        for n in names:
            left = size[n] - used[n]
            for g in [2] * (left // 2) + [1] * (left % 2) + [1, 1]:
                pod = _gpu_pod(unique_name("fg-burst"), g, scheduler=name, run=run, node=n)
                burst.append(pod["metadata"]["name"])
                await core.create_namespaced_pod("default", pod)
        pods = await _settle(core, run, timeout=150)
        held = await _check_devices(core, pods)  # no device in two Running containers on a node
        by_node = {n: [h for h in held if h.node == n] for n in names}
        for n in names:
            assert sum(h.asked for h in by_node[n]) == size[n], (n, [(h.pod, h.asked) for h in by_node[n]])
            indices = [int(i) for h in by_node[n] if IDX in h.annotations for i in h.annotations[IDX].split(",")]
            assert len(indices) == len(set(indices)), f"gpu-indices twice on {n}: {sorted(indices)}"
        running = {h.pod for h in held}
        pending = [p.metadata.name for p in pods if p.status.phase != "Running"]
        assert set(lost) <= running and {w["metadata"]["name"] for w in warm} <= running, (lost, pending)
        assert pending and set(pending) <= set(burst), pending
        for p in pending:
            msgs = [m for r, m in await pod_events(core.api_client, p) if r == "FailedScheduling"]
            assert any(GPU in m or "GPU" in m for m in msgs), (p, msgs)
        text = sched.log()
        for pname, node in lost.items():
            assert f"Successfully bound pod to node pod=default/{pname} " not in text, f"{pname}: response not lost"
            final = await core.read_namespaced_pod(pname, "default")
            assert final.spec.node_name == node, (pname, final.spec.node_name, node)
            scheduled = [m for r, m in await pod_events(core.api_client, pname) if r == "Scheduled"]
            assert len(scheduled) <= 1, scheduled
        conflicts = len(re.findall(r"is already assigned to node", text))
        print(f"lost Binding responses: {sorted(lost.items())}; {conflicts} retry(ies) got 409 already assigned; "
              f"{len(held)} Pods Running on {sum(size.values())} GPUs, {len(pending)} Pending with a reason; "
              "kubelet admitted every bound Pod, devices and gpu-indices distinct")
        assert "Traceback" not in text
        assert sched.alive(), text[-3000:]
    finally:
        sched.terminate()
        await _clean(core, run)
