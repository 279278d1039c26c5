"""deploy/ on the real test bed: the manifests apply, the ServiceAccount's RBAC is enough to schedule
and no more, and /metrics moves; the metrics port is HTTPS with delegated authentication and
authorization (issue 20 item 4): anonymous, unknown and unauthorized tokens are refused (403 / 401 /
403), the token of the ServiceAccount deploy/ binds to ``py-scheduler-metrics-reader`` reads the
metrics, the probes answer without a token.

Flow: every object of ``deploy/*.yaml`` except the Deployment is created with the admin client; a
token for ``kube-system/py-scheduler`` comes from the TokenRequest API; ``py-scheduler run`` runs as
a subprocess with a kubeconfig holding only that token and the ConfigMap's KubeSchedulerConfiguration
(leader election on, so the Lease rules are exercised too).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, utils
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.helpers import (
    Testbed,
    api_client_for,
    client_configuration,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    unique_name,
    wait_for,
    wait_for_pod_scheduled,
)

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SA_NAME, SA_NS = "py-scheduler", "kube-system"
PROFILE = "py-scheduler"


def deploy_objects() -> list[dict[str, Any]]:
    """Every object in deploy/*.yaml (not deploy/kind), the Deployment left out (no kubelet here)."""
    out: list[dict[str, Any]] = []
    for f in sorted(DEPLOY.glob("*.yaml")):
        if f.name == "kustomization.yaml":
            continue
        out.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return out


def test_kustomization_lists_every_manifest() -> None:
    """``kubectl apply -k deploy/`` must ship every manifest file of deploy/."""
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = {f.name for f in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files


def test_deployment_is_hardened() -> None:
    (dep,) = [d for d in deploy_objects() if d["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert c["command"] == ["py-scheduler"] and c["args"][0] == "run"
    assert "--config=/etc/py-scheduler/config.yaml" in c["args"] and "--leader-elect" in c["args"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # the port is HTTPS by default: the kubelet must probe with TLS (it does not verify the certificate)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["scheme"] == "HTTPS", probe
        assert c[probe]["httpGet"]["port"] == c["ports"][0]["name"], probe
    assert "--plain-http" not in c["args"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 65532
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert spec["serviceAccountName"] == SA_NAME


def test_cluster_role_grants_no_secrets_or_configmaps() -> None:
    roles = {d["metadata"]["name"]: d for d in deploy_objects() if d["kind"] == "ClusterRole"}
    assert set(roles) == {"py-scheduler", "py-scheduler-metrics-reader"}
    role = roles["py-scheduler"]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert not resources & {"secrets", "configmaps", "*"}
    assert all("*" not in rule["verbs"] for rule in role["rules"])
    # the reader may get /metrics and nothing else
    assert roles["py-scheduler-metrics-reader"]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


async def apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    """Create ``obj``; an existing one (409) is left as it is (the bed is fresh per session)."""
    try:
        await utils.create_from_dict(api, obj)
    except utils.FailToCreateError as e:
        if any(x.status != 409 for x in e.api_exceptions):
            raise


@dataclass
class SAAccess:
    token: str
    kubeconfig: Path
    config: client.Configuration


@pytest.fixture(scope="module")
async def sa_access(testbed: Testbed, api_client: client.ApiClient,
                    tmp_path_factory: pytest.TempPathFactory) -> SAAccess:
    """deploy/ applied (minus the Deployment) and a kubeconfig for the py-scheduler ServiceAccount."""
    for obj in deploy_objects():
        if obj["kind"] != "Deployment":
            await apply(api_client, obj)
    tr = await client.CoreV1Api(api_client).create_namespaced_service_account_token(
        SA_NAME, SA_NS, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=3600)))
    token: str = tr.status.token
    d = tmp_path_factory.mktemp("sa")
    kubeconfig = d / "py-scheduler.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "py-scheduler",
        "clusters": [{"name": "testbed", "cluster": {"server": testbed.server,
                                                     "certificate-authority": str(testbed.ca_file)}}],
        "users": [{"name": "py-scheduler", "user": {"token": token}}],
        "contexts": [{"name": "py-scheduler", "context": {"cluster": "testbed", "user": "py-scheduler"}}],
    }))
    kubeconfig.chmod(0o600)
    return SAAccess(token, kubeconfig, client_configuration(testbed.server, str(testbed.ca_file), token=token))


# --- what the ServiceAccount may and may not do (real RBAC authorizer) ------------------------------

ALLOWED = [
    # (verb, group, resource, subresource, namespace, name)
    ("list", "", "pods", "", "", ""), ("watch", "", "pods", "", "", ""), ("get", "", "pods", "", "default", "x"),
    ("create", "", "pods", "binding", "default", "x"), ("patch", "", "pods", "status", "default", "x"),
    ("update", "", "pods", "status", "default", "x"), ("delete", "", "pods", "", "default", "x"),
    ("list", "", "nodes", "", "", ""), ("watch", "", "nodes", "", "", ""),
    ("create", "", "events", "", "default", ""), ("patch", "", "events", "", "default", "e"),
    ("create", "events.k8s.io", "events", "", "default", ""),
    ("list", "", "namespaces", "", "", ""), ("watch", "", "services", "", "", ""),
    ("watch", "apps", "replicasets", "", "", ""), ("watch", "apps", "statefulsets", "", "", ""),
    ("watch", "", "replicationcontrollers", "", "", ""), ("watch", "", "persistentvolumeclaims", "", "", ""),
    ("watch", "", "persistentvolumes", "", "", ""), ("watch", "storage.k8s.io", "storageclasses", "", "", ""),
    ("watch", "storage.k8s.io", "csinodes", "", "", ""), ("watch", "storage.k8s.io", "csidrivers", "", "", ""),
    ("watch", "storage.k8s.io", "csistoragecapacities", "", "", ""),
    ("watch", "policy", "poddisruptionbudgets", "", "", ""),
    ("watch", "resource.k8s.io", "resourceclaims", "", "", ""),
    ("update", "resource.k8s.io", "resourceclaims", "status", "default", "c"),
    ("update", "", "persistentvolumeclaims", "", "default", "x"), ("update", "", "persistentvolumes", "", "", "p"),
    ("patch", "resource.k8s.io", "resourceclaims", "status", "default", "c"),
    ("update", "resource.k8s.io", "resourceclaims", "", "default", "c"),
    ("create", "resource.k8s.io", "resourceclaims", "", "default", ""),
    ("delete", "resource.k8s.io", "resourceclaims", "", "default", "c"),
    ("watch", "resource.k8s.io", "resourceslices", "", "", ""),
    ("watch", "resource.k8s.io", "deviceclasses", "", "", ""),
    ("watch", "resource.k8s.io", "devicetaintrules", "", "", ""),
    ("create", "coordination.k8s.io", "leases", "", SA_NS, ""),
    ("get", "coordination.k8s.io", "leases", "", SA_NS, "py-scheduler"),
    ("update", "coordination.k8s.io", "leases", "", SA_NS, "py-scheduler"),
    ("create", "authentication.k8s.io", "tokenreviews", "", "", ""),
    ("create", "authorization.k8s.io", "subjectaccessreviews", "", "", ""),
]
DENIED = [
    ("get", "", "secrets", "", SA_NS, "x"), ("list", "", "secrets", "", "", ""),
    ("list", "", "configmaps", "", SA_NS, ""), ("get", "", "configmaps", "", SA_NS, "py-scheduler-config"),
    ("create", "", "pods", "", "default", ""), ("update", "", "pods", "", "default", "x"),
    ("patch", "", "pods", "", "default", "x"),
    ("create", "", "pods", "exec", "default", "x"), ("create", "", "pods", "eviction", "default", "x"),
    ("update", "", "nodes", "", "", "n"), ("patch", "", "nodes", "", "", "n"), ("delete", "", "nodes", "", "", "n"),
    ("create", "", "serviceaccounts", "token", SA_NS, SA_NAME),
    ("get", "coordination.k8s.io", "leases", "", SA_NS, "kube-scheduler"),
    ("update", "coordination.k8s.io", "leases", "", SA_NS, "kube-scheduler"),
    ("delete", "coordination.k8s.io", "leases", "", SA_NS, "py-scheduler"),
    ("create", "coordination.k8s.io", "leases", "", "default", ""),
    ("list", "apps", "deployments", "", "", ""), ("delete", "", "persistentvolumeclaims", "", "default", "x"),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", ""),
    ("delete", "resource.k8s.io", "resourceslices", "", "", "s"),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""),
]


async def can(api: client.ApiClient, verb: str, group: str, resource: str, sub: str, ns: str, name: str) -> bool:
    review = await client.AuthorizationV1Api(api).create_self_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource, "subresource": sub,
                                        "namespace": ns, "name": name}}})
    return bool(review.status.allowed)


async def test_service_account_permissions(sa_access: SAAccess) -> None:
    async with api_client_for(sa_access.config) as api:
        wrong_allowed = [a for a in ALLOWED if not await can(api, *a)]
        wrong_denied = [d for d in DENIED if await can(api, *d)]
    assert wrong_allowed == [], f"should be allowed: {wrong_allowed}"
    assert wrong_denied == [], f"should be denied: {wrong_denied}"


async def test_secrets_and_pod_spec_updates_are_refused(sa_access: SAAccess, api_client: client.ApiClient) -> None:
    """Real requests, not only reviews: 403 on Secrets and ConfigMaps, and on rewriting a Pod."""
    name = unique_name("rbac-pod")
    await create_pod(api_client, name, scheduler_name="nobody", requests={"cpu": "10m"})
    try:
        async with api_client_for(sa_access.config) as api:
            core = client.CoreV1Api(api)
            for call in (core.list_namespaced_secret(SA_NS), core.list_secret_for_all_namespaces(),
                         core.read_namespaced_config_map("py-scheduler-config", SA_NS)):
                with pytest.raises(ApiException) as ei:
                    await call
                assert ei.value.status == 403
            pod = await core.read_namespaced_pod(name, "default")  # get: allowed
            pod.metadata.labels = {"changed": "yes"}
            with pytest.raises(ApiException) as ei:  # update (PUT) of the Pod: refused
                await core.replace_namespaced_pod(name, "default", pod)
            assert ei.value.status == 403
            with pytest.raises(ApiException) as ei:  # creating Pods: refused
                await core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod",
                                                             "metadata": {"name": name + "-x"},
                                                             "spec": {"containers": [{"name": "c", "image": "x"}]}})
            assert ei.value.status == 403
    finally:
        await delete_pod(api_client, name)


# --- py-scheduler running as the ServiceAccount -------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    proc: asyncio.subprocess.Process
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.asynccontextmanager
async def run_scheduler(kubeconfig: Path, config: Path, log: Path) -> AsyncIterator[Running]:
    """``py-scheduler run`` as a subprocess (stdout+stderr to ``log``), stopped with SIGTERM (then
    SIGKILL) on exit."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "py_scheduler.cli", "run", "--kubeconfig", str(kubeconfig), "--config", str(config),
            "--metrics-bind-address", f"127.0.0.1:{port}", "--v", "4",
            stdout=out, stderr=asyncio.subprocess.STDOUT, cwd=REPO, env=env)
    try:
        yield Running(proc, port, log)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def http_get(port: int, path: str, token: str | None = None) -> tuple[int, str]:
    """GET over HTTPS (the certificate is self-signed: not verified here, checked on its own)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s, \
            s.get(f"https://127.0.0.1:{port}{path}", ssl=False, headers=headers) as r:
        return r.status, await r.text()


async def sa_token(api: client.ApiClient, namespace: str, name: str) -> str:
    """A bound token of ServiceAccount ``namespace/name`` (namespace and account created if absent)."""
    core = client.CoreV1Api(api)
    for create in (lambda: core.create_namespace({"metadata": {"name": namespace}}),
                   lambda: core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})):
        try:
            await create()
        except ApiException as e:
            if e.status != 409:
                raise
    tr = await core.create_namespaced_service_account_token(name, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)))
    return str(tr.status.token)


def metrics_reader_subject() -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount deploy/ lets read /metrics."""
    (crb,) = [d for d in deploy_objects() if d["kind"] == "ClusterRoleBinding"
              and d["roleRef"]["name"] == "py-scheduler-metrics-reader"]
    (subject,) = crb["subjects"]
    return subject["namespace"], subject["name"]


def metric_value(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


async def test_scheduler_runs_with_deploy_rbac(sa_access: SAAccess, api_client: client.ApiClient,
                                               tmp_path: Path) -> None:
    """The deploy/ ServiceAccount is enough to elect a leader, schedule, bind, post events and annotate
    GPU indices; nothing the scheduler does is refused (no 403 in its log); /metrics counts it."""
    cm = next(d for d in deploy_objects() if d["kind"] == "ConfigMap")
    config = tmp_path / "config.yaml"
    config.write_text(cm["data"]["config.yaml"])
    zone = unique_name("rbac-zone")
    nodes = [unique_name("rbac-node") for _ in range(2)]
    gpu_node = unique_name("rbac-gpu")
    cpu_pod, gpu_pod = unique_name("rbac-cpu"), unique_name("rbac-gpu-pod")
    core = client.CoreV1Api(api_client)
    try:
        for n in nodes:
            await create_node(api_client, n, labels={"e2e-zone": zone})
        await create_node(api_client, gpu_node, {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"},
                          labels={"e2e-zone": zone, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                  "nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.count": "4"})
        async with run_scheduler(sa_access.kubeconfig, config, tmp_path / "py-scheduler.log") as sched:

            async def ready() -> bool:
                if sched.proc.returncode is not None:
                    raise AssertionError(f"py-scheduler exited {sched.proc.returncode}:\n{sched.output()[-4000:]}")
                status, _ = await http_get(sched.port, "/readyz")
                return status == 200

            await wait_for(ready, timeout=60, what="py-scheduler /readyz to answer 200")
            assert await http_get(sched.port, "/livez") == (200, "ok")
            assert await http_get(sched.port, "/healthz") == (200, "ok")
            reader = await sa_token(api_client, *metrics_reader_subject())
            nobody = await sa_token(api_client, "default", unique_name("no-metrics"))
            # anonymous, an unknown token, a token without the right: refused (403 / 401 / 403)
            status, body = await http_get(sched.port, "/metrics")
            assert status == 403 and "system:anonymous" in body, (status, body)
            assert (await http_get(sched.port, "/metrics", "not-a-token"))[0] == 401
            assert (await http_get(sched.port, "/metrics", nobody))[0] == 403
            assert (await http_get(sched.port, "/metrics", sa_access.token))[0] == 403  # not its own either
            status, body = await http_get(sched.port, "/metrics", reader)
            assert status == 200 and "scheduler_schedule_attempts_total" in body
            # not plain HTTP: a request without TLS is not answered with metrics
            with contextlib.suppress(aiohttp.ClientError):
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http, \
                        http.get(f"http://127.0.0.1:{sched.port}/metrics") as r:
                    assert r.status == 400, r.status
            # the made-up certificate names 127.0.0.1 and verifies when pinned (a partial chain: it is signed
            # by a CA of its own whose key is gone, which the chain sent carries too)
            pem = ssl.get_server_certificate(("127.0.0.1", sched.port))
            ctx = ssl.create_default_context(cadata=pem)
            ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
                    http.get(f"https://127.0.0.1:{sched.port}/readyz", ssl=ctx) as r:
                assert r.status == 200

            await create_pod(api_client, cpu_pod, scheduler_name=PROFILE, requests={"cpu": "100m", "memory": "64Mi"},
                             spec={"nodeSelector": {"e2e-zone": zone}})
            body = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": gpu_pod, "namespace": "default",
                                 "annotations": {"gpu-scheduler/gpu-model": "A100",
                                                 "gpu-scheduler/gpu-memory-gb": "40",
                                                 "gpu-scheduler/nvlink-required": "false"}},
                    "spec": {"schedulerName": PROFILE, "nodeSelector": {"e2e-zone": zone},
                             "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                             "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
            await core.create_namespaced_pod("default", body)

            bound = await wait_for_pod_scheduled(api_client, cpu_pod, timeout=60)
            assert bound.spec.node_name in [*nodes, gpu_node]
            gbound = await wait_for_pod_scheduled(api_client, gpu_pod, timeout=60)
            assert gbound.spec.node_name == gpu_node

            # The GPU indices Reserve chose reached the Pod through the Binding (no pods patch allowed).
            async def indices() -> str | None:
                p = await core.read_namespaced_pod(gpu_pod, "default")
                return (p.metadata.annotations or {}).get("gpu-scheduler/gpu-indices")

            idx = await wait_for(indices, timeout=30, what="the gpu-scheduler/gpu-indices annotation")
            assert len(idx.split(",")) == 2

            # events create: a Scheduled event from py-scheduler.
            async def scheduled_event() -> bool:
                evs = await core.list_namespaced_event("default", field_selector=f"involvedObject.name={cpu_pod}")
                return any(e.reason == "Scheduled" for e in evs.items)

            await wait_for(scheduled_event, timeout=30, what=f"a Scheduled event for {cpu_pod}")

            # leases create/get/update: py-scheduler holds its own Lease.
            lease = await client.CoordinationV1Api(api_client).read_namespaced_lease("py-scheduler", SA_NS)
            assert lease.spec.holder_identity

            # /metrics moved.
            async def scheduled_count() -> float:
                _, text = await http_get(sched.port, "/metrics", reader)
                return metric_value(text, "scheduler_schedule_attempts_total", result="scheduled", profile=PROFILE)

            assert await wait_for(scheduled_count, timeout=30, what="scheduled attempts in /metrics") >= 2
            _, text = await http_get(sched.port, "/metrics", reader)
            assert metric_value(text, "scheduler_framework_extension_point_duration_seconds_count",
                                extension_point="Filter", profile=PROFILE) > 0

            log = sched.output()
            # (py_scheduler.secure's lines are the refusals it served above, not refusals it got)
            forbidden = [ln for ln in log.splitlines() if ("forbidden" in ln.lower() or " 403" in ln)
                         and "py_scheduler.secure]" not in ln]
            assert forbidden == [], "py-scheduler was refused something by RBAC:\n" + "\n".join(forbidden[:20])
    finally:
        for p in (cpu_pod, gpu_pod):
            await delete_pod(api_client, p)
        for n in [*nodes, gpu_node]:
            await delete_node(api_client, n)
