"""A costly DRA CEL selector cannot stall py-scheduler (issue 31, item 1).

Two claims whose selectors the API server accepts (far under its cost limit) but that take seconds in
cel-python without a budget: the issue's nested comprehension (rejected by py-scheduler's compile-time
estimate) and a single comprehension whose estimate passes but whose evaluation runs out of the runtime
budget. Their Pods get a FailedScheduling event naming the selector and upstream's wording, while
``/livez`` keeps answering in under a second and an ordinary DRA Pod binds.

The simulated driver and object builders are test_dra.py's (:class:`tests.e2e.test_dra.Run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed
from tests.e2e.scheduler_proc import running_scheduler
from tests.e2e.test_dra import Run, gpu

pytestmark = pytest.mark.timeout(300)

PROFILE = "py-dra-cost"
L100 = "[" + ",".join(str(i) for i in range(100)) + "]"
NESTED = f"{L100}.all(x, {L100}.all(y, x+y >= 0))"
MIDDLE = f"{L100}.all(x, x + 1 > x && x - 1 < x)"


async def test_costly_selectors_fail_fast_and_livez_keeps_answering(testbed: Testbed, api_client: client.ApiClient,
                                                                    controller_manager: None) -> None:
    cfg = Path(testbed.dir) / f"{PROFILE}.config.yaml"
    cfg.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                               "profiles": [{"schedulerName": PROFILE}]}))
    async with running_scheduler(testbed, PROFILE, verbosity=2,
                                 extra_args=["--config", str(cfg), "--plain-http"]) as sched:
        await sched.wait_synced()
        m = re.search(r"serving /metrics, /healthz, /livez, /readyz on [^:]+:(\d+)", sched.log())
        assert m is not None
        livez = f"http://127.0.0.1:{m.group(1)}/livez"
        r = Run(api_client, PROFILE)
        latencies: list[float] = []
        done = asyncio.Event()

        async def probe(http: aiohttp.ClientSession) -> None:
            while not done.is_set():
                t0 = time.monotonic()
                async with http.get(livez, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    assert (resp.status, await resp.text()) == (200, "ok")
                latencies.append(time.monotonic() - t0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.1)

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
            async with aiohttp.ClientSession() as http:
                prober = asyncio.create_task(probe(http))
                try:
                    await r.add_pod("nested", claims=["nested"])
                    await r.add_pod("middle", claims=["middle"])
                    await r.add_pod("plain2", claims=["plain2"])
                    nested = await r.failed_scheduling("nested", "too complex, exceeds cost limit")
                    middle = await r.failed_scheduling("middle", "actual cost limit exceeded")
                    assert await r.bound("plain2") == r.n("n1")
                finally:
                    done.set()
                    await prober
            assert f"claim default/{r.n('nested')}: selector #0: CEL compile error" in nested, nested
            assert re.search(rf"claim default/{r.n('middle')}: selector #0 on device {re.escape(r.driver)}/"
                             r"\S+: CEL runtime error: operation cancelled: actual cost limit exceeded", middle), middle
            assert len(latencies) >= 2 and max(latencies) < 1.0, latencies
            assert "Traceback" not in sched.log()
        finally:
            await r.cleanup()
