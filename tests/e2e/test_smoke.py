"""Smoke tests of the test bed itself: version, upstream scheduling, RBAC."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.helpers import (
    Testbed,
    api_client_for,
    client_configuration,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    pod_events,
    unique_name,
    wait_for,
    wait_for_pod_scheduled,
)


async def test_version_is_1_37(api_client: client.ApiClient) -> None:
    info = await client.VersionApi(api_client).get_code()
    assert info.git_version.startswith("v1.37."), info
    assert (info.major, info.minor) == ("1", "37")


async def test_upstream_scheduler_binds_pod(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    nodes = [unique_name("smoke-node") for _ in range(3)]
    pod = unique_name("smoke-pod")
    try:
        for name in nodes:
            node = await create_node(api_client, name, {"cpu": "2", "memory": "4Gi", "pods": "10"})
            assert node.status.allocatable["cpu"] == "2"
            assert not node.spec.taints, f"nothing should taint a test Node: {node.spec.taints}"
        created = await create_pod(api_client, pod, requests={"cpu": "100m", "memory": "64Mi"})
        assert created.spec.scheduler_name == "default-scheduler"

        bound = await wait_for_pod_scheduled(api_client, pod)
        assert bound.spec.node_name in nodes
        condition = {c.type: c.status for c in bound.status.conditions or []}
        assert condition.get("PodScheduled") == "True", bound.status

        events = await wait_for(
            lambda: _scheduled_events(api_client, pod), timeout=30, what=f"a Scheduled event for {pod}"
        )
        assert any(bound.spec.node_name in msg for _, msg in events), events
    finally:
        await delete_pod(api_client, pod)
        for name in nodes:
            await delete_node(api_client, name)
    remaining = {n.metadata.name for n in (await core.list_node()).items}
    assert not remaining & set(nodes)


async def _scheduled_events(api: client.ApiClient, pod: str) -> list[tuple[str, str]]:
    return [(reason, msg) for reason, msg in await pod_events(api, pod) if reason == "Scheduled"]


async def test_rbac_denies_service_account_without_bindings(api_client: client.ApiClient, testbed: Testbed) -> None:
    core = client.CoreV1Api(api_client)
    sa = unique_name("smoke-sa")
    await core.create_namespaced_service_account("default", {"metadata": {"name": sa}})
    try:
        token_request = await core.create_namespaced_service_account_token(
            sa, "default", {"spec": {"audiences": [], "expirationSeconds": 600}}
        )
        token = token_request.status.token
        assert token
        cfg = client_configuration(testbed.server, str(testbed.ca_file), token=token)
        async with api_client_for(cfg) as as_sa:
            review = await client.AuthenticationV1Api(as_sa).create_self_subject_review({})
            assert review.status.user_info.username == f"system:serviceaccount:default:{sa}"
            with pytest.raises(ApiException) as denied:
                await client.CoreV1Api(as_sa).list_namespaced_pod("default")
            assert denied.value.status == 403, denied.value
    finally:
        await core.delete_namespaced_service_account(sa, "default")
