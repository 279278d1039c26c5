"""deploy/ for real: ``kubectl apply -k deploy/`` on the bed's real nodes (issue 27, item 3).

The py-scheduler image (``bash .ci/image-build``: cached by its build context's hash) is imported into
every node's containerd (what ``kind load`` does) under the name ``kubectl kustomize deploy/`` renders
(``py-scheduler:VERSION`` -> ``docker.io/library/py-scheduler:VERSION``), so deploy/ is applied exactly
as users get it: no overlay, no edit. The Deployment's two Pods are placed by the bed's upstream
kube-scheduler and run by the kubelets; everything below is read from what the kubelet, kube-proxy and
the controllers did:

* rollout status succeeds; the kubelet ran the startup, readiness and liveness probes (its own
  ``/metrics/probes`` counters, through the API server's node proxy), no restarts; a copy of the Pod
  template whose readiness probe asks ``/metrics`` (401 without a token) stays Running but unready;
* containerd applied the securityContext (host ``/proc`` of the real container: uid, capabilities,
  no-new-privs, seccomp, read-only root with the emptyDir as the only writable volume);
* the ServiceAccount token in the container is the kubelet's projected, Pod-bound token with an expiry,
  in the atomic-writer layout the kubelet swaps on refresh, and the kubelet puts its token back when the
  file is replaced (what it does at each refresh);
* in-cluster config reaches the API through the ``kubernetes`` Service (``10.0.0.1``, kube-proxy): the
  leader's log shows it leading and binding a ``schedulerName: py-scheduler`` Pod onto a real node,
  which then runs;
* the metrics Service is scraped over HTTPS from a Pod running the image, with the token of the
  ServiceAccount deploy/rbac.yaml binds to ``py-scheduler-metrics-reader`` (``monitoring/prometheus``,
  which the user creates, as docs/operations.md says); without a token 403 (anonymous, denied), as
  kube-scheduler answers;
* ``kubectl delete pod`` of the leader: the other replica takes the Lease within
  leaseDuration + 2 x 1.2 x retryPeriod and the Deployment replaces the Pod;
* ``kubectl drain`` honours the PodDisruptionBudget (minAvailable 1): with the other node cordoned,
  draining one node evicts its replica (1 disruption allowed), draining the second is refused while the
  replacement cannot run; uncordon and the rollout completes.

The bed has no cluster DNS: the scraper Pod names the Service by its DNS name through ``hostAliases``
(the Service's ClusterIP), the one stand-in here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shlex
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, unique_name, wait_for
from tests.e2e.realnodes.support import busybox_pod, delete_pods, kubectl, wait_pod_phase

REPO = Path(__file__).resolve().parents[3]
NS = "kube-system"
DEPLOYMENT = "py-scheduler"
SELECTOR = "app.kubernetes.io/name=py-scheduler,app.kubernetes.io/component=scheduler"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBELET_SA_TOKEN_SECONDS = 3607
"""expirationSeconds of the ``kube-api-access-*`` volume the ServiceAccount admission plugin adds."""


def version() -> str:
    m = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert m
    return m.group(1)


def rendered() -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(REPO / "deploy")], check=True, capture_output=True, text=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def leader_election() -> dict[str, Any]:
    (cm,) = [d for d in rendered() if d["kind"] == "ConfigMap"]
    return yaml.safe_load(cm["data"]["config.yaml"])["leaderElection"]  # type: ignore[no-any-return]


def seconds(d: str) -> float:
    assert d.endswith("s"), d
    return float(d[:-1])


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


async def replicas(core: client.CoreV1Api) -> list[Any]:
    """The Deployment's Pods that are not being deleted."""
    pods = (await core.list_namespaced_pod(NS, label_selector=SELECTOR)).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


async def lease_holder(api: client.ApiClient) -> str:
    lease = await client.CoordinationV1Api(api).read_namespaced_lease("py-scheduler", NS)
    return lease.spec.holder_identity or ""


def rollout(tb: Testbed, timeout: int = 150) -> str:
    return kubectl(tb, "-n", NS, "rollout", "status", f"deployment/{DEPLOYMENT}", f"--timeout={timeout}s",
                   timeout=timeout + 10)


def probe_counts(tb: Testbed, node: str, pod: str) -> dict[tuple[str, str], float]:
    """``(probe_type, result) -> count`` from the kubelet's ``/metrics/probes`` for ``pod``."""
    text = kubectl(tb, "get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics/probes")
    counts: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("prober_probe_total{") and f'pod="{pod}"' in line:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            counts[(labels["probe_type"], labels["result"])] = float(line.rsplit(" ", 1)[1])
    return counts


def exec_py(tb: Testbed, pod: str, code: str, namespace: str = NS) -> str:
    """Run ``python3 -c CODE`` in ``pod``'s container through the kubelet (``kubectl exec``)."""
    return kubectl(tb, "-n", namespace, "exec", pod, "--", "python3", "-c", code, timeout=60)


def sa_volume(pod: Any) -> Any:
    (vol,) = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
    return vol


def replace_token(tb: Testbed, pod: Any, token: str) -> str:
    """Write ``token`` into ``pod``'s projected ServiceAccount volume on its node, the way the kubelet's
    atomic writer refreshes it (a new directory, the ``..data`` link swapped by rename); returns the
    token the file held before."""
    node = tb.nodes.names().index(pod.spec.node_name)
    vdir = f"/var/lib/kubelet/pods/{pod.metadata.uid}/volumes/kubernetes.io~projected/{sa_volume(pod).name}"
    new = f"..swapped-{time.time_ns()}"
    swap = (f"cd {shlex.quote(vdir)} && cat token && cp -a \"$(readlink ..data)\" {new} && "
            f"printf %s {shlex.quote(token)} > {new}/token && ln -sfn {new} ..data_tmp && mv -T ..data_tmp ..data")
    return tb.nodes.nsexec(node, ["sh", "-c", swap])


@pytest.fixture(scope="module")
async def deployed(realnodes: Testbed, py_scheduler_image: str,
                   realnodes_api: client.ApiClient) -> AsyncIterator[Testbed]:
    """deploy/ applied as a user applies it, with the image imported into every node (conftest)."""
    tb = realnodes
    name = py_scheduler_image
    for i in range(tb.nodes.count):
        assert name in tb.nodes.ctr(i, "images", "ls", "-q"), f"{name} not on node {i}"
    kubectl(tb, "apply", "-k", str(REPO / "deploy"))
    try:
        yield tb
    finally:
        for n in tb.nodes.names():
            kubectl(tb, "uncordon", n, check=False)
        kubectl(tb, "delete", "-k", str(REPO / "deploy"), "--ignore-not-found", "--wait=true", "--timeout=60s",
                check=False, timeout=90)
        kubectl(tb, "delete", "namespace", "monitoring", "--ignore-not-found", "--wait=false", check=False)
        kubectl(tb, "-n", NS, "delete", "lease", "py-scheduler", "--ignore-not-found", check=False)


@pytest.mark.timeout(600)  # its set-up imports the image (built at collection by conftest)
async def test_rollout_and_kubelet_probes(deployed: Testbed, realnodes_core: client.CoreV1Api) -> None:
    """``kubectl rollout status`` succeeds; each replica runs on its own real node, the kubelet's
    startup, readiness and liveness probes all succeeded (its prober counters) and none failed
    enough to restart it: restartCount 0, started and ready."""
    tb = deployed
    assert "successfully rolled out" in await asyncio.to_thread(rollout, tb)
    pods = await replicas(realnodes_core)
    assert len(pods) == 2, [p.metadata.name for p in pods]
    assert sorted(p.spec.node_name for p in pods) == sorted(tb.nodes.names()), "one replica per node"
    for pod in pods:
        (cs,) = pod.status.container_statuses
        assert cs.ready and cs.started and cs.restart_count == 0, cs
        assert cs.state.running is not None, cs.state

    async def all_probes_ran() -> dict[str, Any] | None:
        seen = {}
        for pod in pods:
            c = await asyncio.to_thread(probe_counts, tb, pod.spec.node_name, pod.metadata.name)
            if not all(c.get((t, "successful"), 0) > 0 for t in ("Startup", "Readiness", "Liveness")):
                return None
            seen[pod.metadata.name] = c
        return seen

    # the liveness probe starts after initialDelaySeconds (10 s) and runs every 10 s
    seen = await wait_for(all_probes_ran, timeout=60, interval=2, what="startup, readiness and liveness successes")
    for name, c in seen.items():
        assert c.get(("Liveness", "failed"), 0) == 0, (name, c)
    for pod in await replicas(realnodes_core):
        assert pod.status.container_statuses[0].restart_count == 0, pod.status.container_statuses


def container_pid(tb: Testbed, pod: Any) -> int:
    """The host pid of ``pod``'s container (node namespaces share the host's pid namespace)."""
    cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    node = tb.nodes.names().index(pod.spec.node_name)
    for line in tb.nodes.ctr(node, "tasks", "ls").splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == cid:
            return int(pid)
    raise AssertionError(f"no task {cid} on {pod.spec.node_name}")


async def test_runs_confined_under_the_kubelet(deployed: Testbed, realnodes_core: client.CoreV1Api) -> None:
    """What containerd made of the Deployment's securityContext (read from the host's /proc): uid/gid
    65532, no capability, no-new-privs, seccomp filtering, a read-only root whose only writable mounts
    are the emptyDir and the files the kubelet provides."""
    for pod in await replicas(realnodes_core):
        pid = container_pid(deployed, pod)
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        assert status["Uid"].split() == ["65532"] * 4 and status["Gid"].split() == ["65532"] * 4, status
        for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
            assert int(status[cap], 16) == 0, (cap, status[cap])
        assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2", status
        writable = []
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
            fields = line.split()
            mount_point, opts = fields[4], fields[5].split(",")
            if mount_point == "/":
                assert "ro" in opts, line
            elif "rw" in opts and not mount_point.startswith(("/proc", "/sys", "/dev")):
                writable.append(mount_point)
        assert set(writable) <= {"/tmp", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}, writable
        assert "/tmp" in writable, writable


async def test_failing_readiness_makes_unready(deployed: Testbed, realnodes_core: client.CoreV1Api) -> None:
    """The Deployment's Pod template with its readiness probe asking ``/metrics`` (401: the kubelet
    sends no token): the kubelet starts it (startup probe passes) but never marks it Ready."""
    tb = deployed
    dep = json.loads(kubectl(tb, "-n", NS, "get", "deployment", DEPLOYMENT, "-o", "json"))
    template = dep["spec"]["template"]
    name = unique_name("unready")
    template["metadata"] = {"name": name, "labels": {"app": name}}  # not selected by Deployment/Service/PDB
    (c,) = template["spec"]["containers"]
    c["readinessProbe"]["httpGet"]["path"] = "/metrics"
    c["readinessProbe"]["periodSeconds"] = 1
    kubectl(tb, "-n", NS, "create", "-f", "-", input_json={"apiVersion": "v1", "kind": "Pod", **template})
    try:
        async def started() -> Any:
            pod = await realnodes_core.read_namespaced_pod(name, NS)
            cs = (pod.status.container_statuses or [None])[0]
            return pod if cs is not None and cs.started else None

        pod = await wait_for(started, timeout=90, interval=1, what=f"{name} started")
        node = pod.spec.node_name
        def failing() -> dict[tuple[str, str], float] | None:
            counts = probe_counts(tb, node, name)
            return counts if counts.get(("Readiness", "failed"), 0) >= 3 else None

        counts = await wait_for(failing, timeout=30, interval=1, what=f"{name}'s readiness probe failing")
        pod = await realnodes_core.read_namespaced_pod(name, NS)
        assert pod.status.phase == "Running" and not ready(pod), pod.status
        assert counts.get(("Readiness", "successful"), 0) == 0, counts
    finally:
        await delete_pods(realnodes_core, [name], NS)


async def test_token_is_the_kubelets_projected_bound_token(deployed: Testbed,
                                                           realnodes_core: client.CoreV1Api) -> None:
    """The token py-scheduler reads (``SA_DIR/token``, in-cluster config) is the kubelet's: a
    ``kube-api-access-*`` projected volume, a JWT bound to this Pod (name and uid) with ``exp``, in the
    atomic-writer layout (``token -> ..data/token``, ``..data -> ..<timestamp>``). Replacing it on the
    node as a refresh would, the kubelet puts its own token back (a new ``..data``), which the container
    sees: the mechanism of the kubelet's rotation (its refresh at 80 % of the 3607 s lifetime is too
    slow for a test)."""
    tb = deployed
    pod = (await replicas(realnodes_core))[0]
    name, uid = pod.metadata.name, pod.metadata.uid
    vol = sa_volume(pod)
    (sat,) = [s.service_account_token for s in vol.projected.sources if s.service_account_token]
    assert sat.path == "token" and sat.expiration_seconds == KUBELET_SA_TOKEN_SECONDS, sat
    (mount,) = [m for m in pod.spec.containers[0].volume_mounts if m.name == vol.name]
    assert mount.mount_path == SA_DIR and mount.read_only

    read = (f"import os,json; d={SA_DIR!r}; print(json.dumps({{'token': open(d+'/token').read(), "
            "'link': os.readlink(d+'/token'), 'data': os.readlink(d+'/..data')}))")
    seen = json.loads(await asyncio.to_thread(exec_py, tb, name, read))
    assert seen["link"] == "..data/token" and seen["data"].startswith("..2"), seen
    claims = jwt_claims(seen["token"])
    k8s = claims["kubernetes.io"]
    assert k8s["pod"] == {"name": name, "uid": uid}, k8s
    assert k8s["serviceaccount"]["name"] == "py-scheduler" and k8s["namespace"] == NS, k8s
    assert claims["sub"] == "system:serviceaccount:kube-system:py-scheduler"
    assert claims["exp"] > time.time() and claims["exp"] - claims["iat"] >= KUBELET_SA_TOKEN_SECONDS, claims
    assert k8s.get("warnafter", claims["exp"]) - claims["iat"] == KUBELET_SA_TOKEN_SECONDS, claims

    # Replace the file on the node as the kubelet's atomic writer would, with a token the kubelet did not
    # make (same ServiceAccount, bound to the same Pod: harmless if py-scheduler reads it meanwhile).
    other = kubectl(tb, "-n", NS, "create", "token", "py-scheduler", "--bound-object-kind=Pod",
                    f"--bound-object-name={name}", f"--bound-object-uid={uid}", "--duration=10m").strip()
    await asyncio.to_thread(replace_token, tb, pod, other)
    token_now = f"print(open({SA_DIR + '/token'!r}).read())"
    t0 = time.monotonic()
    first = (await asyncio.to_thread(exec_py, tb, name, token_now)).strip()
    # Usually the container sees the swapped token first; a kubelet sync that lands between the swap
    # and this read (a full CI run saw it once) has already put its own back: the same mechanism.
    after = first if first != other else await wait_for(
        lambda: (t := exec_py(tb, name, token_now).strip()) != other and t,
        timeout=60, interval=2, what="the kubelet to write its token back")
    print(f"\n[deploy] kubelet rewrote the projected token {time.monotonic() - t0:.1f} s after it was replaced")
    assert jwt_claims(after)["kubernetes.io"]["pod"]["uid"] == uid
    again = json.loads(await asyncio.to_thread(exec_py, tb, name, read))
    assert again["data"].startswith("..2") and again["data"] != seen["data"], again["data"]


async def test_binds_through_the_kubernetes_service(deployed: Testbed, realnodes_api: client.ApiClient,
                                                    realnodes_core: client.CoreV1Api) -> None:
    """In-cluster config (``KUBERNETES_SERVICE_HOST``=the ``kubernetes`` Service's ClusterIP, reached
    through kube-proxy): the leader's log says it leads and binds a py-scheduler Pod onto a real node;
    the kubelet runs that Pod to completion. Only that replica ever led."""
    tb = deployed
    svc = await realnodes_core.read_namespaced_service("kubernetes", "default")
    holder = await wait_for(lambda: lease_holder(realnodes_api), timeout=30, interval=0.5, what="a Lease holder")
    leader = holder.split("_")[0]
    env = json.loads(await asyncio.to_thread(
        exec_py, tb, leader, "import os,json; print(json.dumps({k: v for k, v in os.environ.items() "
                             "if k.startswith('KUBERNETES_SERVICE')}))"))
    assert env["KUBERNETES_SERVICE_HOST"] == svc.spec.cluster_ip and env["KUBERNETES_SERVICE_PORT"] == "443", env
    name = unique_name("deployed-binds")
    await realnodes_core.create_namespaced_pod("default", busybox_pod(name, ["sh", "-c", "echo ran-on-$(hostname)"],
                                                                      requests={"cpu": "10m"}))
    try:
        pod = await wait_pod_phase(realnodes_core, name, ["Succeeded"], timeout=90)
        assert pod.spec.node_name in tb.nodes.names()
        assert "ran-on-" in await realnodes_core.read_namespaced_pod_log(name, "default")
        log = kubectl(tb, "-n", NS, "logs", leader)
        assert "became the leader" in log, log[-3000:]
        assert f"Successfully bound pod to node pod=default/{name} node={pod.spec.node_name}" in log, log[-3000:]
        for other in {p.metadata.name for p in await replicas(realnodes_core)} - {leader}:
            assert "became the leader" not in kubectl(tb, "-n", NS, "logs", other), f"{other} leads too"
    finally:
        await delete_pods(realnodes_core, [name])


async def test_metrics_scraped_over_https_from_a_pod(deployed: Testbed, realnodes_core: client.CoreV1Api) -> None:
    """A Pod running the image as ``monitoring/prometheus`` (the subject deploy/rbac.yaml binds to
    ``py-scheduler-metrics-reader``) GETs ``https://py-scheduler-metrics.kube-system.svc:10259/metrics``
    with its own projected token: 200 with kube-scheduler's metric names; without a token the request
    is anonymous and the SubjectAccessReview denies it: 403, as kube-scheduler answers."""
    tb = deployed
    kubectl(tb, "create", "namespace", "monitoring", check=False)
    kubectl(tb, "-n", "monitoring", "create", "serviceaccount", "prometheus", check=False)
    svc = await realnodes_core.read_namespaced_service("py-scheduler-metrics", NS)
    host = "py-scheduler-metrics.kube-system.svc"
    script = f"""
import ssl, urllib.request, urllib.error
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE  # self-signed
url = "https://{host}:10259/metrics"
token = open("{SA_DIR}/token").read()
for auth in (True, False):
    req = urllib.request.Request(url, headers={{"Authorization": "Bearer " + token}} if auth else {{}})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            print("STATUS", auth, r.status); print(r.read().decode())
    except urllib.error.HTTPError as e:
        print("STATUS", auth, e.code)
"""
    name = unique_name("scraper")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "monitoring"},
           "spec": {"serviceAccountName": "prometheus", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                    "hostAliases": [{"ip": svc.spec.cluster_ip, "hostnames": [host]}],  # no cluster DNS here
                    "containers": [{"name": "scrape", "image": f"py-scheduler:{version()}",
                                    "imagePullPolicy": "Never", "command": ["python3", "-c", script]}]}}
    await realnodes_core.create_namespaced_pod("monitoring", pod)
    try:
        await wait_pod_phase(realnodes_core, name, ["Succeeded"], namespace="monitoring", timeout=90)
        out = await realnodes_core.read_namespaced_pod_log(name, "monitoring")
        assert "STATUS True 200" in out, out[-2000:]
        assert re.search(r"^# TYPE scheduler_schedule_attempts_total counter$", out, re.M), out[-2000:]
        assert "STATUS False 403" in out, out[-2000:]  # anonymous, denied by the SubjectAccessReview
    finally:
        await delete_pods(realnodes_core, [name], "monitoring")


async def test_leader_pod_deleted_hands_over(deployed: Testbed, realnodes_api: client.ApiClient,
                                             realnodes_core: client.CoreV1Api) -> None:
    """``kubectl delete pod`` of the leader: another replica holds the Lease within
    leaseDuration + 2 x 1.2 x retryPeriod (client-go's bound; 19.8 s with deploy/'s 15 s / 2 s), and the
    Deployment brings back two ready replicas with a new Pod.

    "Another replica" is the standby or the Deployment's replacement: the leader releases the Lease on
    SIGTERM, and the first candidate to try afterwards takes it, as with kube-scheduler (client-go polls
    every retryPeriod; a replacement that starts before the standby's next try wins, seen here: released
    at 1.0 s, replacement leading at 2.0 s). Starts from two ready replicas, one holding the Lease. Every
    holder seen after the deletion, and the old leader's log up to its exit, are in the failure message."""
    tb = deployed
    le = leader_election()
    bound = seconds(le["leaseDuration"]) + 2 * 1.2 * seconds(le["retryPeriod"])
    await asyncio.to_thread(rollout, tb)
    before = await wait_for(lambda: _two_ready(realnodes_core), timeout=90, interval=1, what="two ready replicas")

    async def held_by_a_replica() -> str | None:
        holder = (await lease_holder(realnodes_api)).split("_")[0]
        return holder if holder in before else None

    leader = await wait_for(held_by_a_replica, timeout=60, interval=0.5, what=f"one of {before} to hold the Lease")
    # the old leader's log, followed until its container exits (it is gone from the API afterwards)
    follow = subprocess.Popen(["kubectl", "--kubeconfig", str(tb.kubeconfig), "-n", NS, "logs", "-f", leader],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    kubectl(tb, "-n", NS, "delete", "pod", leader, "--wait=false")
    seen: list[tuple[float, str]] = []

    async def another_leads() -> str | None:
        holder = (await lease_holder(realnodes_api)).split("_")[0]
        if not seen or seen[-1][1] != holder:
            seen.append((round(time.monotonic() - t0, 1), holder))
        return holder if holder not in ("", leader) else None

    try:
        successor = await wait_for(another_leads, timeout=bound + 5, interval=0.2, what="another replica to lead")
    except AssertionError as exc:
        follow.terminate()
        old_log = follow.communicate(timeout=10)[0]
        raise AssertionError(f"{exc}\nholders after the deletion (s, pod): {seen}\nold leader's log:\n"
                             f"{old_log[-4000:]}") from None
    took = time.monotonic() - t0
    follow.terminate()
    old_log = follow.communicate(timeout=10)[0]
    print(f"\n[deploy] hand-over after deleting the leader Pod: {took:.1f} s (bound {bound:.1f} s); holders {seen}")
    assert took <= bound, f"hand-over took {took:.1f} s > {bound:.1f} s; holders {seen}"
    assert "released lease" in old_log, old_log[-3000:]  # a clean shutdown gave it up (no wait for expiry)
    await asyncio.to_thread(rollout, tb)
    after = await wait_for(lambda: _two_ready(realnodes_core), timeout=60, interval=1, what="two ready replicas")
    assert leader not in after and successor in after and len(after - before) == 1, (before, after, successor)
    assert "became the leader" in kubectl(tb, "-n", NS, "logs", successor)
    assert (await lease_holder(realnodes_api)).split("_")[0] == successor  # and it kept leading


async def _two_ready(core: client.CoreV1Api) -> set[str] | None:
    pods = await replicas(core)
    return {p.metadata.name for p in pods} if len(pods) == 2 and all(ready(p) for p in pods) else None


async def test_drain_honours_the_pdb(deployed: Testbed, realnodes_core: client.CoreV1Api) -> None:
    """With a replica on each node and the second node cordoned, ``kubectl drain`` of the first evicts
    its replica (the PDB's minAvailable 1 allows one disruption); the replacement cannot run anywhere,
    so draining the second node is refused by the PDB and its replica keeps running. Uncordoned, the
    rollout completes."""
    tb = deployed
    n0, n1 = tb.nodes.names()
    pods = await wait_for(lambda: _two_ready(realnodes_core), timeout=60, interval=1, what="two ready replicas")
    on = {p.spec.node_name: p.metadata.name for p in await replicas(realnodes_core)}
    assert set(on) == {n0, n1}, ("need one replica per node", on, pods)
    drain = ["drain", "--ignore-daemonsets", "--delete-emptydir-data", f"--pod-selector={SELECTOR}"]
    try:
        kubectl(tb, "cordon", n1)
        out = kubectl(tb, *drain, "--timeout=90s", n0, timeout=120)
        assert f"pod/{on[n0]} evicted" in out, out

        def pdb_at_minimum() -> dict[str, Any] | None:
            st: dict[str, Any] = json.loads(kubectl(tb, "-n", NS, "get", "pdb", "py-scheduler", "-o", "json"))["status"]
            return st if st.get("currentHealthy") == 1 and st.get("disruptionsAllowed") == 0 else None

        await wait_for(pdb_at_minimum, timeout=30, interval=1, what="the PDB at 1 healthy, 0 disruptions allowed")
        refused = subprocess.run(["kubectl", "--kubeconfig", str(tb.kubeconfig), *drain, "--timeout=12s", n1],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0, refused.stdout
        assert "disruption budget" in refused.stderr + refused.stdout, refused.stderr
        survivor = await realnodes_core.read_namespaced_pod(on[n1], NS)
        assert survivor.metadata.deletion_timestamp is None and ready(survivor), survivor.status
        pending = [p for p in await replicas(realnodes_core) if p.metadata.name != on[n1]]
        assert len(pending) == 1 and pending[0].spec.node_name is None, [p.spec.node_name for p in pending]
    finally:
        for n in (n0, n1):
            kubectl(tb, "uncordon", n)
    await asyncio.to_thread(rollout, tb)
    await wait_for(lambda: _two_ready(realnodes_core), timeout=60, interval=1, what="two ready replicas again")


async def test_scheduler_rereads_the_token_file(deployed: Testbed, realnodes_api: client.ApiClient,
                                               realnodes_core: client.CoreV1Api) -> None:
    """py-scheduler re-reads the token file (every minute, py_scheduler/app/client/credentials.py), so it
    follows the kubelet's rotation. With the standby's kubelet stopped (so it cannot put its own token
    back), the standby's file gets a token of ServiceAccount ``py-scheduler-rotated`` (no RBAC): within
    the minute its Lease requests are refused for that user, so it read the new file. Then the original
    token goes back and the kubelet starts again, which writes a token of its own, newly issued. Last in
    the module: the standby keeps the refused token until its next re-read (a minute)."""
    tb = deployed
    leader = (await lease_holder(realnodes_api)).split("_")[0]
    (standby,) = [p for p in await replicas(realnodes_core) if p.metadata.name != leader]
    node = tb.nodes.names().index(standby.spec.node_name)
    user = "system:serviceaccount:kube-system:py-scheduler-rotated"
    kubectl(tb, "-n", NS, "create", "serviceaccount", "py-scheduler-rotated")
    rotated = kubectl(tb, "-n", NS, "create", "token", "py-scheduler-rotated", "--duration=10m").strip()
    log = (tb.nodes.dir(node) / "var-log" / "pods" / f"{NS}_{standby.metadata.name}_{standby.metadata.uid}"
           / "py-scheduler" / "0.log")
    assert log.exists(), log
    original = ""
    await asyncio.to_thread(tb.nodes.stop_kubelet, node)
    try:
        original = await asyncio.to_thread(replace_token, tb, standby, rotated)
        t0 = time.monotonic()
        await wait_for(lambda: user in log.read_text(), timeout=80, interval=1,
                       what=f"{standby.metadata.name} to use the replaced token (a request refused for {user})")
        print(f"\n[deploy] standby used the replaced token {time.monotonic() - t0:.1f} s after the swap")
    finally:
        if original:
            await asyncio.to_thread(replace_token, tb, standby, original)
        await asyncio.to_thread(tb.nodes.start_kubelet, node)
        kubectl(tb, "-n", NS, "delete", "serviceaccount", "py-scheduler-rotated", "--ignore-not-found")
    tpath = SA_DIR + "/token"
    fresh = await wait_for(
        lambda: (t := exec_py(tb, standby.metadata.name, f"print(open({tpath!r}).read())").strip())
        not in (original, rotated) and t,
        timeout=60, interval=2, what="the restarted kubelet to write a token of its own")
    assert jwt_claims(fresh)["iat"] > jwt_claims(original)["iat"], "a newly issued token"
