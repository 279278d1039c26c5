"""A costly DRA CEL selector cannot stall py-scheduler (issue 31, item 1).

Two claims whose selectors the API server accepts (far under its cost limit) but that take seconds in
cel-python without a budget: the issue's nested comprehension (rejected by py-scheduler's compile-time
estimate) and a single comprehension whose estimate passes but whose evaluation runs out of the runtime
budget. Their Pods get a FailedScheduling event naming the selector and upstream's wording, while
``/livez`` keeps answering in under a second and an ordinary DRA Pod binds.

Then a selector within every per-evaluation limit, over hundreds of devices with distinct attributes:
one cycle is cut short at the cycle's CEL budget (``CEL_CYCLE_COST_BUDGET``), the Pod is told which
selector and retried, ``/livez`` and an ordinary Pod are served in between, and the Pod ends on the
node and device kube-scheduler gives it.

The simulated driver and object builders are test_dra.py's (:class:`tests.e2e.test_dra.Run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, delete_pod
from tests.e2e.scheduler_proc import SchedulerProcess, running_scheduler
from tests.e2e.test_dra import Run, gpu

pytestmark = pytest.mark.timeout(300)

PROFILE = "py-dra-cost"
KUBE = "kube-dra-cost"
L100 = "[" + ",".join(str(i) for i in range(100)) + "]"
NESTED = f"{L100}.all(x, {L100}.all(y, x+y >= 0))"
MIDDLE = f"{L100}.all(x, x + 1 > x && x - 1 < x)"


@contextlib.asynccontextmanager
async def py_scheduler(testbed: Testbed) -> AsyncIterator[tuple[SchedulerProcess, str]]:
    """py-scheduler serving ``PROFILE`` over plain HTTP; yields it and its ``/livez`` URL."""
    cfg = Path(testbed.dir) / f"{PROFILE}.config.yaml"
    cfg.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                               "profiles": [{"schedulerName": PROFILE}]}))
    async with running_scheduler(testbed, PROFILE, verbosity=2,
                                 extra_args=["--config", str(cfg), "--plain-http"]) as sched:
        await sched.wait_synced()
        m = re.search(r"serving /metrics, /healthz, /livez, /readyz on [^:]+:(\d+)", sched.log())
        assert m is not None
        yield sched, f"http://127.0.0.1:{m.group(1)}/livez"


@contextlib.asynccontextmanager
async def probing(livez: str) -> AsyncIterator[list[float]]:
    """``/livez`` asked every 0.1 s while the block runs; yields the list of its answer times (s)."""
    latencies: list[float] = []
    done = asyncio.Event()

    async def probe(http: aiohttp.ClientSession) -> None:
        while not done.is_set():
            t0 = time.monotonic()
            async with http.get(livez, timeout=aiohttp.ClientTimeout(total=15)) as resp:
                assert (resp.status, await resp.text()) == (200, "ok")
            latencies.append(time.monotonic() - t0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.1)

    async with aiohttp.ClientSession() as http:
        prober = asyncio.create_task(probe(http))
        try:
            yield latencies
        finally:
            done.set()
            await prober


async def test_costly_selectors_fail_fast_and_livez_keeps_answering(testbed: Testbed, api_client: client.ApiClient,
                                                                    controller_manager: None) -> None:
    async with py_scheduler(testbed) as (sched, livez):
        r = Run(api_client, PROFILE)
        try:
            await r.add_nodes(1)
            await r.add_class()
            await r.add_slice("n1", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")])
            await r.add_claim("nested", [r.request(selectors=[NESTED])])
            await r.add_claim("middle", [r.request(selectors=[MIDDLE])])
            plain = f'device.attributes["{r.driver}"].productName.startsWith("NVIDIA")'
            await r.add_claim("plain", [r.request(selectors=[plain])])
            await r.add_claim("plain2", [r.request(selectors=[plain])])
            # the first selector loads cel-python and builds its parser (a one-time start-up cost,
            # ~0.3 s of CPU, 1-2 s on a loaded CI machine): paid before the probe starts
            await r.add_pod("plain", claims=["plain"])
            assert await r.bound("plain") == r.n("n1")
            async with probing(livez) as latencies:
                await r.add_pod("nested", claims=["nested"])
                await r.add_pod("middle", claims=["middle"])
                await r.add_pod("plain2", claims=["plain2"])
                nested = await r.failed_scheduling("nested", "too complex, exceeds cost limit")
                middle = await r.failed_scheduling("middle", "actual cost limit exceeded")
                assert await r.bound("plain2") == r.n("n1")
            assert f"claim default/{r.n('nested')}: selector #0: CEL compile error" in nested, nested
            assert re.search(rf"claim default/{r.n('middle')}: selector #0 on device {re.escape(r.driver)}/"
                             r"\S+: CEL runtime error: operation cancelled: actual cost limit exceeded", middle), middle
            assert len(latencies) >= 2 and max(latencies) < 1.0, latencies
            assert "Traceback" not in sched.log()
        finally:
            await r.cleanup()


async def warm_up(api: client.ApiClient) -> None:
    """A first DRA Pod bound by py-scheduler (in a run of its own, removed at once): it loads
    cel-python, a one-time start-up cost, before a probe starts."""
    warm = Run(api, PROFILE)
    try:
        await warm.add_nodes(1)
        await warm.add_class()
        await warm.add_slice("n1", [gpu("gpu-0")])
        await warm.add_claim("warm", [warm.request()])
        await warm.add_pod("warm", claims=["warm"])
        assert await warm.bound("warm") == warm.n("n1")
    finally:
        await warm.cleanup()


@pytest.fixture(scope="module")
def kube_cost(testbed: Testbed, controller_manager: None) -> Iterator[str]:
    """An upstream kube-scheduler serving profile ``kube-dra-cost`` on its own Lease."""
    testbed.start_kube_scheduler(KUBE, config={
        "leaderElection": {"leaderElect": True, "resourceNamespace": "kube-system", "resourceName": KUBE},
        "profiles": [{"schedulerName": KUBE}]})
    yield KUBE
    testbed.stop_kube_scheduler(KUBE)


NODES, PER_NODE = 8, 96
WANTED = 5 * PER_NODE + 70  # the one device the selector accepts: n6's gpu-70
L50 = "[" + ",".join(str(i) for i in range(50)) + "]"


async def _costly_case(r: Run, k: int) -> tuple[str, list[str]]:
    """NODES Nodes of PER_NODE devices whose ``index`` attributes differ (so no device's selector result
    stands for another's), and a Pod whose claim's selector costs ~1500 cost units per device
    (py-scheduler's per-evaluation limit is 2000) and accepts one device. Returns the short names of
    the Pod's node and of its claim's devices."""
    await r.add_nodes(NODES)
    await r.add_class()
    for n in range(NODES):
        await r.add_slice(f"n{n + 1}", [gpu(f"gpu-{i}", attributes={"index": {"int": n * PER_NODE + i}})
                                        for i in range(PER_NODE)])
    await r.add_claim("costly", [r.request(selectors=[
        f'{L50}.all(x, x >= -{k}) && device.attributes["{r.driver}"].index == {WANTED}'])])
    await r.add_pod("costly", claims=["costly"])
    node = (await r.bound("costly", timeout=150)).removeprefix(r.n(""))
    return node, (await r.outcome())["claims"]["X-costly"]["devices"]


@pytest.mark.timeout(400)
async def test_a_cycle_of_costly_selectors_is_cut_short_and_retried_side_by_side(
        testbed: Testbed, api_client: client.ApiClient, controller_manager: None, kube_cost: str) -> None:
    """kube-scheduler first (alone, so both do not share the two cores), then py-scheduler: its first
    attempt stops at the cycle's budget with a FailedScheduling event naming the claim's selector, an
    ordinary DRA Pod created then binds while the costly one backs off, ``/livez`` answers within
    2.5 s throughout (the 768 evaluations take ~5 s of CPU: one uncut cycle would block it that long),
    and the costly Pod ends where kube-scheduler put it."""
    kube = Run(api_client, kube_cost)
    try:
        want = await _costly_case(kube, 1)
    finally:
        await kube.cleanup()
    assert want == ("n6", ["X-n6/gpu-70"])
    async with py_scheduler(testbed) as (sched, livez):
        r = Run(api_client, PROFILE)
        try:
            await warm_up(api_client)
            plain = f'device.attributes["{r.driver}"].productName.startsWith("NVIDIA")'
            async with probing(livez) as latencies:
                task = asyncio.create_task(_costly_case(r, 2))
                try:
                    event = await r.failed_scheduling("costly", "spent its budget", timeout=120)
                    await r.add_claim("plain", [r.request(selectors=[plain])])
                    await r.add_pod("plain", claims=["plain"])
                    await r.bound("plain")
                    assert await r.node_of("costly") is None  # still backing off
                    got = await task
                finally:
                    task.cancel()
            assert got == want
            assert re.search(rf"claim default/{r.n('costly')}: selector #0 \(spec\.devices\.requests\[0\]\.exactly"
                             r"\.selectors\[0\]\.cel\.expression\): the CEL selectors of this scheduling cycle spent "
                             r"its budget of 200000 cost units \(\d+ by this one\) before device ", event), event
            assert len(latencies) >= 10 and max(latencies) < 2.5, latencies
            assert "Traceback" not in sched.log()
        finally:
            await r.cleanup()


async def _explosive_case(r: Run) -> str:
    """Four Nodes of 64 devices whose attribute ``a`` has 15 values, and a Pod whose claim wants 16
    devices with distinct ``a``: impossible, which the allocator finds out only by trying combinations
    (C(64, 16)) until a timeout. Returns the Pod's first FailedScheduling message that says so."""
    await r.add_nodes(4)
    await r.add_class()
    for n in range(4):
        await r.add_slice(f"n{n + 1}", [gpu(f"gpu-{i}", attributes={"a": {"int": i % 15}}) for i in range(64)])
    await r.add_claim("explosive", [r.request(count=16)],
                      constraints=[{"requests": ["r0"], "distinctAttribute": f"{r.driver}/a"}])
    await r.add_pod("explosive", claims=["explosive"])
    event = await r.failed_scheduling("explosive", "timed out trying to allocate devices", timeout=120)
    await delete_pod(r.api, r.n("explosive"))  # no retries eating the two cores
    r.pods.remove(r.n("explosive"))
    return event


@pytest.mark.timeout(400)
async def test_a_device_search_exploding_on_every_node_is_cut_at_the_cycles_bound_side_by_side(
        testbed: Testbed, api_client: client.ApiClient, controller_manager: None, kube_cost: str) -> None:
    """kube-scheduler searches each node for its ``filterTimeout`` (10 s, 16 nodes at once on other
    goroutines) and reports the timeout; py-scheduler, which searches node after node on the thread
    that answers ``/livez``, stops the cycle at its 2 s bound with the same Error, naming the claim,
    while ``/livez`` answers within 3.5 s and an ordinary DRA Pod binds. Without the bound the cycle
    ran 10 s per node: 40 s without an answer."""
    kube = Run(api_client, kube_cost)
    try:
        kube_event = await _explosive_case(kube)
    finally:
        await kube.cleanup()
    assert "timed out trying to allocate devices" in kube_event, kube_event
    async with py_scheduler(testbed) as (sched, livez):
        r = Run(api_client, PROFILE)
        try:
            await warm_up(api_client)
            async with probing(livez) as latencies:
                event = await _explosive_case(r)
                await r.add_claim("plain", [r.request()])
                await r.add_pod("plain", claims=["plain"])
                await r.bound("plain")
            assert re.search(rf"node {re.escape(r.n('n'))}\d: timed out trying to allocate devices: the "
                             r"DynamicResources Filter ran 2 s in this scheduling cycle, py-scheduler's bound on one "
                             rf"cycle \(filterTimeout bounds one node\), allocating claim default/{r.n('explosive')} "
                             r"\(spec\.devices\); the Pod is retried", event), event
            assert len(latencies) >= 3 and max(latencies) < 3.5, latencies
            assert "Traceback" not in sched.log()
        finally:
            await r.cleanup()
