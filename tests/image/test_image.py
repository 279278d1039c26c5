"""The py-scheduler image, run as deploy/'s Deployment runs it, against the real e2e test bed.

What a kubelet would do with the rendered Deployment (``kubectl kustomize deploy/``) is done here
with podman + runc, one container per replica:

* image, command and args, env (``POD_NAME`` from ``metadata.name``, ``POD_IP`` from ``status.podIP``:
  the sandbox's loopback address), resources (memory limit,
  cpu shares) taken from the rendered container spec;
* securityContext: read-only root file system (``--read-only`` without podman's extra tmpfs
  mounts), the pod's uid/gid and fsGroup, ``allowPrivilegeEscalation: false`` (no-new-privileges),
  ``capabilities.drop: [ALL]``, seccomp ``RuntimeDefault`` (the runtime's default profile);
* volumes: the ConfigMap's keys mounted read-only at its mountPath, the emptyDir as a tmpfs of its
  sizeLimit;
* in-cluster configuration as a kubelet provides it: a ServiceAccount token (TokenRequest API),
  the cluster CA and the namespace at ``/var/run/secrets/kubernetes.io/serviceaccount`` (read-only),
  ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` pointing at the apiserver;
* the hostname is the Pod's name (a kubelet's UTS namespace), so the leader identity reads
  ``POD_hostname_uuid`` as in a cluster;
* each replica gets its own network namespace (a Pod sandbox: ``ip netns add``, loopback only), so
  both bind the Deployment's ``0.0.0.0:10259`` unchanged and the probes reach that port inside
  the Pod's namespace, as a kubelet's do on the Pod IP.

Differences forced by this machine, and only these: the bed's apiserver listens on the host's
127.0.0.1 only and there is no kube-proxy, so a small forwarder (:class:`PodSandbox`) plays the
Service: ``KUBERNETES_SERVICE_HOST=127.0.0.1`` inside the Pod's namespace, forwarded to the
host's apiserver port (TLS end to end; the serving certificate names 127.0.0.1). runc needs
explicit rlimits here (``--ulimit``; crun fails on this host's hybrid cgroup layout).

The deploy/ objects other than the Deployment are applied (its RBAC is what the token may do);
the whole of deploy/ is validated by a strict server-side dry run first.

Upstream: ``pkg/kubelet/kuberuntime/kuberuntime_container.go`` (command/args/env), the projected
ServiceAccount volume of ``plugin/pkg/admission/serviceaccount/admission.go`` and
``staging/src/k8s.io/client-go/rest/config.go`` (``InClusterConfig``: the token and CA paths and
the two environment variables).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.e2e.helpers import (
    Testbed,
    api_client_for,
    bed,
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
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
NPROC = 4096
"""RLIMIT_NPROC given to the containers (runc sets rlimits explicitly here; within the host's)."""

pytestmark = pytest.mark.timeout(300)


def run(*argv: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise AssertionError with its output (so the test says why)."""
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


# ------------------------------------------------------------------------------------------------
# Pod network namespaces
# ------------------------------------------------------------------------------------------------

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_netns(path: str) -> Iterator[None]:
    """Run the body with the *calling thread* in network namespace ``path`` (setns(2)), then
    switch back. Sockets keep the namespace they were created in, so create them inside."""

    def setns(fd: int) -> None:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns: {os.strerror(err)}")

    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(path, os.O_RDONLY)
    try:
        setns(target)
        try:
            yield
        finally:
            setns(home)
    finally:
        os.close(home)
        os.close(target)


class PodSandbox:
    """A Pod's network namespace (loopback up) and the forwarder that plays the ``kubernetes``
    Service in it: connections to ``127.0.0.1:port`` inside go to ``127.0.0.1:port`` of the host.

    Raises:
        AssertionError: ``ip netns`` failed (the command's output is in the message).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = f"/run/netns/{name}"
        self._listeners: list[socket.socket] = []
        self._conns: list[socket.socket] = []
        run("ip", "netns", "add", name)
        run("ip", "-n", name, "link", "set", "lo", "up")

    def forward(self, port: int) -> None:
        with in_netns(self.path):
            listener = socket.create_server(("127.0.0.1", port))
        self._listeners.append(listener)
        threading.Thread(target=self._accept, args=(listener, port), daemon=True,
                         name=f"{self.name}:{port}").start()

    def _accept(self, listener: socket.socket, port: int) -> None:
        while True:
            try:
                inside, _ = listener.accept()
                outside = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                return  # listener closed (teardown) or host port gone
            outside.settimeout(None)
            self._conns += [inside, outside]
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def http_get(self, port: int, path: str, scheme: str = "HTTP") -> tuple[int, str]:
        """``(status, body)`` of ``GET path`` on ``127.0.0.1:port`` inside the namespace, as a
        kubelet's httpGet probe (``HTTPS``: TLS without certificate verification, as the kubelet's
        prober); ``(0, error)`` when nothing answers."""
        with in_netns(self.path):
            sock = socket.socket()
        try:
            sock.settimeout(5)
            sock.connect(("127.0.0.1", port))
            if scheme.upper() == "HTTPS":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        except OSError as e:
            return 0, str(e)
        finally:
            sock.close()
        head, _, body = raw.decode(errors="replace").partition("\r\n\r\n")
        return int(head.split()[1]), body

    def delete(self) -> None:
        for s in self._listeners + self._conns:
            s.close()
        run("ip", "netns", "delete", self.name, check=False)


# ------------------------------------------------------------------------------------------------
# deploy/ rendered, the bed, the RBAC
# ------------------------------------------------------------------------------------------------


@dataclass
class Rendered:
    """``kubectl kustomize deploy/``: every object, and the Deployment's pieces the runner uses."""

    objects: list[dict[str, Any]]

    def one(self, kind: str) -> dict[str, Any]:
        (obj,) = [o for o in self.objects if o["kind"] == kind]
        return obj

    @property
    def pod_spec(self) -> dict[str, Any]:
        return self.one("Deployment")["spec"]["template"]["spec"]  # type: ignore[no-any-return]

    @property
    def container(self) -> dict[str, Any]:
        (c,) = self.pod_spec["containers"]
        return c  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    out = run("kubectl", "kustomize", str(DEPLOY)).stdout
    return Rendered([o for o in yaml.safe_load_all(out) if o])


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    """etcd + kube-apiserver (no upstream kube-scheduler: only py-scheduler binds here). The
    binaries are built beforehand (``make image-test`` runs ``testbed build``, outside any timeout)."""
    bed.build()
    root = Path(tempfile.mkdtemp(prefix="py-scheduler-image-", dir="/tmp"))
    tb = bed.Testbed(root, die_with_parent=True)
    ok = False
    try:
        tb.up(with_kube_scheduler=False)
        yield tb
        ok = True
    finally:
        tb.down()
        if ok and not os.environ.get("TESTBED_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"\n[image-test] kept {root} (bed logs, container logs)")


@pytest.fixture(scope="module")
async def admin(testbed: Testbed) -> AsyncIterator[client.ApiClient]:
    cfg = client_configuration(testbed.server, str(testbed.ca_file), cert_file=str(testbed.admin_cert),
                               key_file=str(testbed.admin_key))
    async with api_client_for(cfg) as api:
        yield api


def kubectl(testbed: Testbed, *args: str, input: str | None = None) -> str:
    return run("kubectl", f"--kubeconfig={testbed.kubeconfig}", *args, input=input).stdout


def test_deploy_renders_eleven_objects(rendered: Rendered) -> None:
    """The scheduler's objects, plus the metrics reader's ClusterRole and its binding (secure serving:
    Prometheus needs ``get`` on ``/metrics``)."""
    kinds = sorted(o["kind"] for o in rendered.objects)
    assert kinds == sorted(["ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding",
                            "Role", "RoleBinding", "ConfigMap", "Deployment", "PodDisruptionBudget", "Service"]), kinds


def test_deploy_server_side_dry_run_strict(testbed: Testbed) -> None:
    """Every object of deploy/ (the Deployment too) passes the apiserver's strict validation."""
    out = kubectl(testbed, "apply", "--dry-run=server", "--validate=strict", "-k", str(DEPLOY))
    assert out.count("(server dry run)") == 11, out


@pytest.fixture(scope="module")
def applied(testbed: Testbed, rendered: Rendered) -> Rendered:
    """deploy/ applied, the Deployment left out (no kubelet / controller here: the test runs it)."""
    rest = [o for o in rendered.objects if o["kind"] != "Deployment"]
    kubectl(testbed, "apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(rest))
    return rendered


# ------------------------------------------------------------------------------------------------
# Running a replica as a kubelet would
# ------------------------------------------------------------------------------------------------


@dataclass
class Replica:
    """One container of the Deployment: its Pod name (= hostname), sandbox, podman name."""

    pod_name: str
    sandbox: PodSandbox
    container: str
    args: list[str] = field(default_factory=list)

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(*PODMAN, *args, check=check)

    def pid(self) -> int:
        return int(self.podman("inspect", "--format", "{{.State.Pid}}", self.container).stdout.strip())

    def running(self) -> bool:
        out = self.podman("inspect", "--format", "{{.State.Running}}", self.container, check=False).stdout
        return out.strip() == "true"

    def logs(self) -> str:
        p = self.podman("logs", self.container, check=False)
        return p.stdout + p.stderr


class Kubelet:
    """Turns the rendered pod template into ``podman run`` arguments for one replica."""

    def __init__(self, testbed: Testbed, rendered: Rendered, workdir: Path, token: str) -> None:
        self.tb, self.r, self.dir = testbed, rendered, workdir
        pod, c = rendered.pod_spec, rendered.container
        self.volumes: list[str] = []
        # The ServiceAccount volume a kubelet projects (token, ca.crt, namespace; 0644, read-only).
        sa = workdir / "serviceaccount"
        sa.mkdir()
        (sa / "token").write_text(token)
        shutil.copy(testbed.ca_file, sa / "ca.crt")
        (sa / "namespace").write_text(self.r.one("Deployment")["metadata"]["namespace"])
        for f in sa.iterdir():
            f.chmod(0o644)
        self.volumes += ["--volume", f"{sa}:{SA_DIR}:ro"]
        by_name = {v["name"]: v for v in pod.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            v = by_name[m["name"]]
            if "configMap" in v:
                cm = next(o for o in rendered.objects
                          if o["kind"] == "ConfigMap" and o["metadata"]["name"] == v["configMap"]["name"])
                d = workdir / f"cm-{m['name']}"
                d.mkdir()
                for key, text in cm["data"].items():
                    (d / key).write_text(text)
                    (d / key).chmod(0o644)
                self.volumes += ["--volume", f"{d}:{m['mountPath']}:{'ro' if m.get('readOnly') else 'rw'}"]
            elif "emptyDir" in v:
                size = str(v["emptyDir"].get("sizeLimit", "64Mi")).replace("Mi", "m").replace("Gi", "g")
                self.volumes += ["--mount", f"type=tmpfs,destination={m['mountPath']},tmpfs-size={size},"
                                 "tmpfs-mode=1777"]
            else:
                raise AssertionError(f"volume kind of {v} not modelled by this test")

    def run_args(self, pod_name: str, sandbox: PodSandbox) -> list[str]:
        pod, c = self.r.pod_spec, self.r.container
        psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup"))
        assert uid not in (None, 0) and (csc.get("runAsNonRoot") or psc.get("runAsNonRoot"))
        argv = ["run", "--detach", "--name", f"{pod_name}-{c['name']}", "--hostname", pod_name,
                "--network", f"ns:{sandbox.path}", "--user", f"{uid}:{gid}"]
        if psc.get("fsGroup") is not None:
            argv += ["--group-add", str(psc["fsGroup"])]
        if csc.get("readOnlyRootFilesystem"):
            argv += ["--read-only", "--read-only-tmpfs=false"]
        if csc.get("allowPrivilegeEscalation") is False:
            argv += ["--security-opt", "no-new-privileges"]
        caps = csc.get("capabilities", {})
        argv += [a for cap in caps.get("drop", []) for a in ("--cap-drop", cap)]
        argv += [a for cap in caps.get("add", []) for a in ("--cap-add", cap)]
        seccomp = csc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        assert seccomp == "RuntimeDefault", "only RuntimeDefault (podman's default profile) is modelled"
        limits = c.get("resources", {}).get("limits", {})
        if "memory" in limits:
            argv += ["--memory", str(limits["memory"]).replace("Gi", "g").replace("Mi", "m")]
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        argv += ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={NPROC}:{NPROC}"]
        # In-cluster configuration: the kubelet's service environment variables.
        argv += ["--env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
                 "--env", f"KUBERNETES_SERVICE_PORT={self.tb.ports['kube-apiserver']}"]
        for e in c.get("env", []):
            if "value" in e:
                argv += ["--env", f"{e['name']}={e['value']}"]
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                argv += ["--env", f"{e['name']}={pod_name}"]
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
                # the sandbox's network namespace has loopback only: its one address is the Pod's IP here
                argv += ["--env", f"{e['name']}=127.0.0.1"]
            else:
                raise AssertionError(f"env {e} not modelled by this test")
        argv += self.volumes
        if "command" in c:
            argv += ["--entrypoint", json.dumps(c["command"])]
        argv.append(c["image"])
        argv += c.get("args", [])
        return argv


@pytest.fixture(scope="module")
async def replicas(testbed: Testbed, applied: Rendered, admin: client.ApiClient) -> AsyncIterator[list[Replica]]:
    """The Deployment's replicas, each a container started as a kubelet would start it."""
    image = applied.container["image"]
    assert run(*PODMAN, "image", "exists", image, check=False).returncode == 0, (
        f"image {image} (what deploy/ names) is not in local storage: run .ci/image-build first")
    sa = applied.one("ServiceAccount")["metadata"]
    tr = await client.CoreV1Api(admin).create_namespaced_service_account_token(
        sa["name"], sa["namespace"], client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3607)))
    kubelet = Kubelet(testbed, applied, Path(tempfile.mkdtemp(prefix="kubelet-", dir=testbed.dir)),
                      tr.status.token)
    template_hash = secrets.token_hex(5)
    reps: list[Replica] = []
    sandboxes: list[PodSandbox] = []
    try:
        for _ in range(applied.one("Deployment")["spec"]["replicas"]):
            pod_name = f"py-scheduler-{template_hash}-{secrets.token_hex(3)[:5]}"
            sandbox = PodSandbox(pod_name)
            sandboxes.append(sandbox)
            sandbox.forward(testbed.ports["kube-apiserver"])
            argv = kubelet.run_args(pod_name, sandbox)
            rep = Replica(pod_name, sandbox, f"{pod_name}-{applied.container['name']}", argv)
            reps.append(rep)
            rep.podman(*argv)
            print(f"[image-test] started {rep.container}: podman {' '.join(argv)}")
        yield reps
    finally:
        for rep in reps:
            (testbed.dir / f"{rep.container}.log").write_text(rep.logs())
            rep.podman("rm", "--force", "--time", "0", rep.container, check=False)
        for sandbox in sandboxes:
            sandbox.delete()


async def lease_holder(admin: client.ApiClient, rendered: Rendered) -> str:
    cfg = yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])["leaderElection"]
    lease = await client.CoordinationV1Api(admin).read_namespaced_lease(cfg["resourceName"],
                                                                        cfg["resourceNamespace"])
    return str(lease.spec.holder_identity or "")


def leader_election(rendered: Rendered) -> dict[str, Any]:
    return yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])["leaderElection"]  # type: ignore[no-any-return]


def seconds(d: str) -> float:
    assert d.endswith("s"), d
    return float(d[:-1])


# ------------------------------------------------------------------------------------------------
# The checks
# ------------------------------------------------------------------------------------------------


async def test_runs_confined(replicas: list[Replica]) -> None:
    """The process runs as the non-root uid with no capability, no-new-privs and seccomp filtering,
    on a read-only root whose only writable mount of its own is the emptyDir tmpfs."""
    for rep in replicas:
        pid = rep.pid()
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        assert status["Uid"].split() == ["65532"] * 4, status["Uid"]
        assert status["Gid"].split() == ["65532"] * 4, status["Gid"]
        for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
            assert int(status[cap], 16) == 0, (cap, status[cap])
        assert status["NoNewPrivs"].strip() == "1"
        assert status["Seccomp"].strip() == "2"  # SECCOMP_MODE_FILTER
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(rep.sandbox.path).st_ino  # its own Pod network
        writable = []
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
            fields = line.split()
            mount_point, opts = fields[4], fields[5].split(",")
            if mount_point == "/":
                assert "ro" in opts, line
            elif "rw" in opts and not mount_point.startswith(("/proc", "/sys", "/dev")):
                writable.append(mount_point)
        # /tmp: the emptyDir; /etc/hosts, /etc/hostname, /etc/resolv.conf, /run/.containerenv: files
        # the runtime provides (a kubelet bind-mounts the first three too).
        assert set(writable) <= {"/tmp", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
                                 "/run/.containerenv"}, writable


@pytest.fixture(scope="module")
async def node(admin: client.ApiClient, replicas: list[Replica]) -> AsyncIterator[str]:
    name = unique_name("image-node")
    await create_node(admin, name)
    yield name
    await delete_node(admin, name)


async def test_binds_its_pods_only(admin: client.ApiClient, node: str, rendered: Rendered) -> None:
    """A Pod naming the default scheduler stays Pending (no other scheduler runs on this bed)
    while the py-scheduler Pod created after it is bound; the Scheduled event names us."""
    profile = yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])["profiles"][0]["schedulerName"]
    other, ours = unique_name("default-sched"), unique_name("ours")
    await create_pod(admin, other, requests={"cpu": "100m"})
    await create_pod(admin, ours, requests={"cpu": "100m"}, scheduler_name=profile)
    try:
        bound = await wait_for_pod_scheduled(admin, ours, timeout=60)
        assert bound.spec.node_name == node
        pod = await client.CoreV1Api(admin).read_namespaced_pod(other, "default")
        assert pod.spec.node_name is None and pod.spec.scheduler_name == "default-scheduler"
    finally:
        await delete_pod(admin, ours)
        await delete_pod(admin, other)


async def test_leader_killed_hands_over(replicas: list[Replica], admin: client.ApiClient, rendered: Rendered,
                                        node: str) -> None:
    """SIGKILL the leader's container: the standby takes the Lease and binds.

    The bound is client-go's: the standby takes over ``leaseDuration`` after it last *observed* a
    renewal, which it sees up to one jittered retry period late, and acquires on its next
    jittered retry: leaseDuration + 2 x 1.2 x retryPeriod (19.8 s with deploy/'s 15 s / 2 s).
    """
    le = leader_election(rendered)
    lease, retry = seconds(le["leaseDuration"]), seconds(le["retryPeriod"])
    h = await lease_holder(admin, rendered)
    (leader,) = [r for r in replicas if h.split("_")[0] == r.pod_name]
    (standby,) = [r for r in replicas if r is not leader]
    t0 = time.monotonic()
    leader.podman("kill", "--signal", "KILL", leader.container)

    async def new_holder() -> str | None:
        h2 = await lease_holder(admin, rendered)
        return h2 if h2.split("_")[0] == standby.pod_name else None

    bound = lease + 2 * 1.2 * retry
    await wait_for(new_holder, timeout=bound + 5, interval=0.2, what=f"{standby.pod_name} to take the Lease")
    took = time.monotonic() - t0
    print(f"\n[image-test] hand-over after SIGKILL of the leader: {took:.1f} s (lease {lease:.0f} s)")
    assert took <= bound, f"hand-over took {took:.1f} s > {bound:.1f} s"
    profile = yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])["profiles"][0]["schedulerName"]
    name = unique_name("after-handover")
    await create_pod(admin, name, requests={"cpu": "100m"}, scheduler_name=profile)
    try:
        assert (await wait_for_pod_scheduled(admin, name, timeout=60)).spec.node_name == node
    finally:
        await delete_pod(admin, name)


def test_no_writes_outside_tmpfs(replicas: list[Replica], rendered: Rendered) -> None:
    """Nothing changed in either container's root file system (``podman diff``) except the mount
    points of its volumes, which the runtime creates before the root becomes read-only (a kubelet's
    runtime does the same), and the process never met a read-only error."""
    mounts = [m["mountPath"] for m in rendered.container.get("volumeMounts", [])] + [SA_DIR]
    allowed = {"/"}
    for m in mounts:
        p = Path("/run" + m[len("/var/run"):] if m.startswith("/var/run/") else m)  # /var/run -> /run
        allowed |= {str(p), *map(str, p.parents)}
    for rep in replicas:
        diff = rep.podman("diff", rep.container).stdout.split("\n")
        changed = [line for line in diff if line.strip() and line.split(maxsplit=1)[1] not in allowed]
        assert not changed, f"{rep.container} wrote outside its tmpfs:\n" + "\n".join(changed)
        assert "Read-only file system" not in rep.logs(), rep.logs()
