"""The "blind binder": binds every pending Pod of one schedulerName round-robin over the nodes, with no
logic at all. It measures what the API server (and this machine) allow: the ceiling any scheduler's
throughput is compared with.

Run as ``python -m bench.bench_lib.blind --server URL --ca F --cert F --key F [--scheduler-name
blind-binder] [--qps 5000 --burst 5000]``. It lists the nodes once, then watches Pods with
``spec.schedulerName=<name>,spec.nodeName=`` and POSTs a Binding for each (client-side token bucket
as kube-scheduler's ``clientConnection.qps/burst``). Prints ``ready`` once it watches.

``--events``: after each Binding also POST the ``Scheduled`` Event (events.k8s.io/v1) kube-scheduler
and py-scheduler record for every bound Pod (``schedule_one.go`` ``finishBinding``), so the ceiling
includes the API server's cost of the writes every upstream-faithful scheduler makes per Pod.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys
import time

from bench.bench_lib.kubeapi import Api, ApiError, Endpoint, binding


def endpoint_from_args(args: argparse.Namespace) -> Endpoint:
    return Endpoint(args.server, args.ca, args.cert, args.key)


def scheduled_event(ns: str, name: str, uid: str, node: str) -> dict[str, object]:
    """The ``Scheduled`` Event of a bound Pod, shaped as kube-scheduler's (events.k8s.io/v1)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": ns},
            "eventTime": now, "reportingController": "blind-binder", "reportingInstance": "blind-binder",
            "action": "Binding", "reason": "Scheduled", "type": "Normal",
            "note": f"Successfully assigned {ns}/{name} to {node}",
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name, "uid": uid}}


async def run(endpoint: Endpoint, scheduler_name: str, qps: float, burst: int, connections: int,
              events: bool = False) -> None:
    """Bind forever (until cancelled)."""
    async with Api(endpoint, qps=qps, burst=burst, connections=connections) as api:
        nodes = await api.request("GET", "/api/v1/nodes")
        names = [n["metadata"]["name"] for n in nodes.get("items", [])]
        if not names:
            raise SystemExit("no nodes")
        rr = itertools.cycle(names)
        selector = f"spec.schedulerName={scheduler_name},spec.nodeName="
        tasks: set[asyncio.Task[None]] = set()
        seen: set[str] = set()

        async def bind(ns: str, name: str, uid: str, node: str) -> None:
            try:
                await api.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding(ns, name, node))
                if events:
                    await api.request("POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events",
                                      scheduled_event(ns, name, uid, node))
            except ApiError as exc:
                print(f"bind {ns}/{name}: {exc}", file=sys.stderr)

        def submit(pod: dict[str, object]) -> None:
            meta = pod["metadata"]
            assert isinstance(meta, dict)
            uid = str(meta.get("uid"))
            if uid in seen:
                return
            seen.add(uid)
            t = asyncio.ensure_future(bind(str(meta["namespace"]), str(meta["name"]), uid, next(rr)))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        while True:
            listed = await api.request("GET", "/api/v1/pods", params={"fieldSelector": selector})
            for pod in listed.get("items", []):
                submit(pod)
            print("ready", flush=True)
            try:
                async for ev in api.watch("/api/v1/pods", listed["metadata"]["resourceVersion"],
                                          {"fieldSelector": selector}):
                    if ev.get("type") == "ADDED":
                        submit(ev["object"])
            except ApiError as exc:  # 410 Gone and friends: list again
                print(f"watch: {exc}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description="bind pending pods round-robin, no logic")
    ap.add_argument("--server", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--scheduler-name", default="blind-binder")
    ap.add_argument("--qps", type=float, default=5000.0)
    ap.add_argument("--burst", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--events", action="store_true", help="also POST the Scheduled Event of each bound Pod")
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(endpoint_from_args(args), args.scheduler_name, args.qps, args.burst, args.connections,
                        args.events))
    return 0


if __name__ == "__main__":
    sys.exit(main())
