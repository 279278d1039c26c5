"""API Priority and Fairness throttles py-scheduler (issue 20 item 2): it backs off as client-go does
and never drops a Pod.

The bed's kube-apiserver gets a PriorityLevelConfiguration with the smallest share there is
(``nominalConcurrencyShares: 1``, nothing borrowed, ``Reject`` when full: an immediate 429 with
``Retry-After``) and a FlowSchema sending every write (or, second variant, every request: LISTs and
WATCHes too) of the deploy/ ServiceAccount ``kube-system/py-scheduler`` to it (Bindings,
``pods/status`` and annotation patches, Events); its
Lease stays on the built-in ``leader-election`` level (upstream's ``system-leader-election``
FlowSchema already matches every kube-system ServiceAccount's Lease calls; the test's own copy makes
that explicit). py-scheduler runs as that ServiceAccount and gets a burst of Pods. Then:

* the API server did reject its requests (``apiserver_flowcontrol_rejected_requests_total`` of the
  FlowSchema moved) and py-scheduler waited the ``Retry-After`` it was given (its log);
* every Pod ends bound exactly once (one ``Scheduled`` event each), none failed to bind, the Lease
  was never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.faults import invariants
from tests.e2e.helpers import (
    Testbed,
    create_node,
    create_pod,
    delete_node,
    events_v1,
    unique_name,
    wait_for,
)
from tests.e2e.test_deploy_rbac import (  # noqa: F401 (sa_access is a fixture)
    SA_NAME,
    SA_NS,
    SAAccess,
    deploy_objects,
    http_get,
    metric_value,
    metrics_reader_subject,
    run_scheduler,
    sa_access,
    sa_token,
)

GROUP, VERSION = "flowcontrol.apiserver.k8s.io", "v1"
PODS = 120


def _flow_schema(name: str, precedence: int, level: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "FlowSchema", "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{"subjects": [{"kind": "ServiceAccount",
                                              "serviceAccount": {"name": SA_NAME, "namespace": SA_NS}}],
                                "resourceRules": resources}]}}


@contextlib.asynccontextmanager
async def throttled(api: client.ApiClient, verbs: list[str]) -> AsyncIterator[str]:
    """The throttling FlowSchema for ``verbs`` (its name is yielded) and priority level, removed at
    the end."""
    co = client.CustomObjectsApi(api)
    suffix = unique_name("apf")
    level, lease_fs, writes_fs = f"{suffix}-level", f"{suffix}-lease", f"{suffix}-writes"
    objects = [
        ("prioritylevelconfigurations", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PriorityLevelConfiguration", "metadata": {"name": level},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0,
                                                    "borrowingLimitPercent": 0,
                                                    "limitResponse": {"type": "Reject"}}}}),
        ("flowschemas", _flow_schema(lease_fs, 100, "leader-election", [
            {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "namespaces": ["*"]}])),
        ("flowschemas", _flow_schema(writes_fs, 101, level, [
            {"verbs": verbs, "apiGroups": ["*"], "resources": ["*"],
             "clusterScope": True, "namespaces": ["*"]}])),
    ]
    try:
        for plural, body in objects:
            await co.create_cluster_custom_object(GROUP, VERSION, plural, body)

        async def active() -> bool:  # the APF controller has taken the FlowSchema in
            fs = await co.get_cluster_custom_object(GROUP, VERSION, "flowschemas", writes_fs)
            conds = {c.get("type"): c.get("status") for c in (fs.get("status") or {}).get("conditions") or []}
            return conds.get("Dangling") == "False"

        await wait_for(active, timeout=30, what="the APF controller to take the FlowSchema in")
        yield writes_fs
    finally:
        for plural, body in reversed(objects):
            with contextlib.suppress(ApiException):
                await co.delete_cluster_custom_object(GROUP, VERSION, plural, body["metadata"]["name"])


async def rejected(api: client.ApiClient, flow_schema: str) -> float:
    """``apiserver_flowcontrol_rejected_requests_total`` summed over ``flow_schema``'s series."""
    from prometheus_client.parser import text_string_to_metric_families

    resp = await api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    text = (await resp.read()).decode()
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "apiserver_flowcontrol_rejected_requests_total" and s.labels.get("flow_schema") == flow_schema:
                total += s.value
    return total


@pytest.mark.parametrize("verbs", [["create", "update", "patch", "delete"], ["*"]], ids=["writes", "everything"])
async def test_throttled_requests_back_off_and_no_pod_is_dropped(
        testbed: Testbed, api_client: client.ApiClient, sa_access: SAAccess, tmp_path: Path,  # noqa: F811
        verbs: list[str]) -> None:
    """``writes``: Bindings, patches, Events; ``everything``: also the LISTs and WATCHes of start-up
    and of every re-list."""
    cm = next(d for d in deploy_objects() if d["kind"] == "ConfigMap")
    config = tmp_path / "config.yaml"
    config.write_text(cm["data"]["config.yaml"])
    zone = unique_name("apf-zone")
    nodes = [unique_name("apf-node") for _ in range(2)]
    core = client.CoreV1Api(api_client)
    label = {"py-scheduler-e2e/apf": zone}
    try:
        for n in nodes:
            await create_node(api_client, n, {"cpu": "32", "memory": "64Gi", "pods": "110"}, labels=label)
        async with throttled(api_client, verbs) as flow_schema, \
                run_scheduler(sa_access.kubeconfig, config, tmp_path / "py-scheduler.log") as sched:

            async def ready() -> bool:
                if sched.proc.returncode is not None:
                    raise AssertionError(f"py-scheduler exited {sched.proc.returncode}:\n{sched.output()[-4000:]}")
                return (await http_get(sched.port, "/readyz"))[0] == 200

            await wait_for(ready, timeout=90, what="py-scheduler /readyz to answer 200")
            await wait_for(lambda: "became the leader" in sched.output(), timeout=60, what="py-scheduler leads")
            before = await rejected(api_client, flow_schema)
            names = [unique_name("apf-pod") for _ in range(PODS)]
            sem = asyncio.Semaphore(32)

            async def one(name: str) -> None:
                async with sem:
                    await create_pod(api_client, name, scheduler_name="py-scheduler", requests={"cpu": "10m"},
                                     labels=label, spec={"nodeSelector": label})

            await asyncio.gather(*(one(x) for x in names))

            async def all_bound() -> bool:
                if sched.proc.returncode is not None:
                    raise AssertionError(f"py-scheduler exited {sched.proc.returncode}:\n{sched.output()[-4000:]}")
                pods = await core.list_namespaced_pod("default", label_selector=f"py-scheduler-e2e/apf={zone}")
                return len(pods.items) == PODS and all(p.spec.node_name for p in pods.items)

            await wait_for(all_bound, timeout=300, interval=1.0, what=f"all {PODS} Pods bound while throttled")
            got = await rejected(api_client, flow_schema) - before
            log = sched.output()
            assert got > 0, "the API server never rejected py-scheduler: the test throttled nothing"
            assert "Got a Retry-After" in log and "server-side throttling" in log, log[-3000:]
            assert "Failed to bind" not in log and "lost leadership" not in log
            # py-scheduler's own client-go style metrics saw them too (read over HTTPS with the reader's token)
            reader = await sa_token(api_client, *metrics_reader_subject())
            status, text = await http_get(sched.port, "/metrics", reader)
            assert status == 200
            seen = metric_value(text, "rest_client_requests_total", code="429")
            retried = metric_value(text, "rest_client_request_retries_total", code="429")
            if verbs == ["*"]:
                # kopf's own LISTs / WATCHes (same ServiceAccount, its own HTTP client) are rejected too
                assert seen > 0 and retried > 0, (seen, retried, got)
            else:  # every write goes through Kube.request
                assert seen >= got and retried >= got, (seen, retried, got)
            scheduled: dict[str, int] = {}
            for e in await events_v1(api_client):
                if e.reason == "Scheduled" and e.regarding is not None and e.regarding.name in names:
                    scheduled[e.regarding.name] = scheduled.get(e.regarding.name, 0) + 1
            # the fault suite's invariants: no overcommit, bound once (events and log)
            report = invariants.Report()
            all_nodes, all_pods, all_events = await invariants.cluster_state(api_client)
            invariants.check_capacity(all_nodes, all_pods, report)
            invariants.check_bound_once(all_pods, all_events, {"py-scheduler": log}, report)
            assert report.violations == [], report.violations
            # Events trail their Bindings (a throttled Event may still be waiting out its Retry-After) and
            # are best effort; none may be doubled:
            assert all(v == 1 for v in scheduled.values()), {k: v for k, v in scheduled.items() if v != 1}
            print(f"APF rejected {got:.0f} requests of py-scheduler (it counted {seen:.0f} 429s since start); "
                  f"{log.count('Got a Retry-After')} "
                  f"Retry-After waits; {len(scheduled)}/{PODS} Scheduled events")
    finally:  # best effort: a failing clean-up must not hide the test's own failure
        with contextlib.suppress(Exception):
            await core.delete_collection_namespaced_pod("default", label_selector=f"py-scheduler-e2e/apf={zone}",
                                                        grace_period_seconds=0, _request_timeout=30)
        for n in nodes:
            with contextlib.suppress(Exception):
                await delete_node(api_client, n)
