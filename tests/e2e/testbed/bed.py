"""A real Kubernetes control plane for end-to-end tests: etcd + kube-apiserver (+ kube-scheduler).

The binaries are built from the Go module next to this file (``go.mod`` pins k8s.io/kubernetes
and go.etcd.io/etcd/server/v3) into a per-version cache directory, then started as detached
processes (own session) whose pids, logs and ports live in a test bed directory:

    DIR/pki/            CA, serving cert, client certs, service-account key
    DIR/etcd/           etcd data
    DIR/logs/NAME.log   one log per process (appended to across restarts)
    DIR/pids/NAME.pid   pid of each running process
    DIR/state.json      ports, binaries, argv of each process
    DIR/admin.kubeconfig, DIR/kube-scheduler.kubeconfig, DIR/kube-controller-manager.kubeconfig

There is no kubelet: nothing removes the not-ready taint a node gets at creation or finishes
graceful Pod deletion. kube-controller-manager is started on request
(:meth:`Testbed.start_kube_controller_manager`, ``up(with_kube_controller_manager=True)``; its
controllers are :data:`KCM_CONTROLLERS`); without it nothing creates ``default`` ServiceAccounts,
binds PersistentVolumeClaims or empties deleted namespaces. The apiserver therefore runs with the
``ServiceAccount`` and ``TaintNodesByCondition`` admission plugins off (see
:data:`APISERVER_DISABLED_ADMISSION`).

This module is stdlib-only except for certificate generation, which uses ``cryptography``
(imported lazily). The ``testbed`` script next to it is the command line front end.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import ipaddress
import json
import os
import queue
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

MODULE_DIR = Path(__file__).resolve().parent
"""The Go module that pins the upstream versions."""

CACHE_ROOT = Path(os.environ.get("TESTBED_CACHE_DIR", "~/.cache/py-scheduler/testbed")).expanduser()
"""Where built binaries are kept, one sub-directory per (k8s, etcd, go) version triple."""

K8S_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
GO_PACKAGES = (
    ETCD_MODULE,
    "k8s.io/kubernetes/cmd/kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-scheduler",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
)
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
APISERVER_DISABLED_ADMISSION = ("ServiceAccount", "TaintNodesByCondition")
"""Admission plugins that model controllers this test bed does not run.

``ServiceAccount`` rejects Pods whose namespace has no ``default`` ServiceAccount (normally made
by kube-controller-manager); ``TaintNodesByCondition`` taints every new Node
``node.kubernetes.io/not-ready:NoSchedule`` (normally lifted by the node lifecycle controller
once the kubelet reports Ready), which would make every Node unschedulable here.
"""

ETCD = "etcd"
APISERVER = "kube-apiserver"
KUBE_SCHEDULER = "kube-scheduler"
KUBE_CONTROLLER_MANAGER = "kube-controller-manager"
KCM_CONTROLLERS = ("*", "-node-lifecycle-controller")
"""kube-controller-manager's default controllers (``*``: the PV binder, attach/detach, the
ephemeral-volume and resourceclaim controllers, the namespace, service-account and token
controllers, garbage collection...) without the node lifecycle controller: the bed's Nodes have no
kubelet, so it would mark each one ``Unknown`` after the 40 s grace period and taint it
``node.kubernetes.io/unreachable`` (NoSchedule + NoExecute), which no test wants."""

ProgressFn = Callable[[str], None]
T = TypeVar("T")


class TestbedError(RuntimeError):
    """Anything that goes wrong building, starting or stopping the test bed."""

    __test__ = False  # not a pytest test class despite the name


def _say(msg: str) -> None:
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Versions:
    """The upstream versions the Go module pins, and the Go toolchain that builds them."""

    kubernetes: str
    etcd: str
    go: str

    @property
    def key(self) -> str:
        """Name of the cache directory for this version triple."""
        return f"k8s-{self.kubernetes}_etcd-{self.etcd}_{self.go}"


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "").split()
    if not any(f.startswith("-mod=") for f in flags):
        flags.append("-mod=mod")
    env["GOFLAGS"] = " ".join(flags)
    return env


def _run_go(args: Sequence[str], cwd: Path = MODULE_DIR) -> str:
    try:
        out = subprocess.run(["go", *args], cwd=cwd, env=_go_env(), check=True, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise TestbedError("`go` is not on PATH: the test bed builds its binaries with Go 1.24+") from e
    except subprocess.CalledProcessError as e:
        raise TestbedError(f"go {' '.join(args)} failed:\n{e.stderr}") from e
    return out.stdout.strip()


def module_versions() -> Versions:
    """Read the pinned versions with ``go list -m`` and the toolchain with ``go env GOVERSION``."""
    k8s, etcd = _run_go(["list", "-m", "-f", "{{.Version}}", K8S_MODULE, ETCD_MODULE]).split()
    return Versions(kubernetes=k8s, etcd=etcd, go=_run_go(["env", "GOVERSION"]))


def _ldflags(k8s_version: str) -> str:
    """Version stamping that hack/lib/version.sh does for release builds.

    Without it a plain ``go build`` reports ``v0.0.0-master+$Format:%H$`` from ``/version``.
    """
    major, minor = k8s_version.lstrip("v").split(".")[:2]
    values = {"gitVersion": k8s_version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(
        f"-X {pkg}.{key}={val}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, val in values.items()
    )


def bin_dir_for(versions: Versions) -> Path:
    """The cache directory holding the binaries for ``versions``."""
    return CACHE_ROOT / versions.key


def _complete(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / b, os.X_OK) for b in BINARIES)


@contextlib.contextmanager
def _build_lock(progress: ProgressFn) -> Iterator[None]:
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / ".build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another build holds the lock; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(progress: ProgressFn = _say, heartbeat: float = 30.0) -> Path:
    """Build etcd, kube-apiserver and kube-scheduler unless the cache already has them.

    Returns the directory holding the three binaries. A cold build compiles a few thousand Go
    packages (many minutes on 2 cores); ``progress`` is told what happens at least every
    ``heartbeat`` seconds. Concurrent callers serialise on a lock file.
    """
    versions = module_versions()
    dest = bin_dir_for(versions)
    if _complete(dest):
        return dest
    with _build_lock(progress):
        if _complete(dest):  # someone else built it while we waited
            return dest
        staging = CACHE_ROOT / f".{versions.key}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        build_log = staging / "build.log"
        cmd = [
            "go",
            "build",
            "-v",
            "-ldflags",
            _ldflags(versions.kubernetes),
            "-o",
            f"{staging}/",
            *GO_PACKAGES,
        ]
        progress(
            f"building k8s {versions.kubernetes} + etcd {versions.etcd} with {versions.go} into {dest}"
            " (cold: 5-9 min on 2 cores; log {build_log})".replace("{build_log}", str(build_log))
        )
        total = _count_deps()
        start = time.monotonic()
        with open(build_log, "w") as log:
            log.write(" ".join(cmd) + "\n")
            proc = subprocess.Popen(
                cmd,
                cwd=MODULE_DIR,
                env=_go_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            rc = _follow(proc, log, start, heartbeat, total, progress)
        if rc != 0:
            raise TestbedError(f"go build failed (exit {rc}); last lines of {build_log}:\n{_tail(build_log)}")
        for name in ("v3", "server"):  # the binary is named after the package's last non-version element
            if (staging / name).exists():
                (staging / name).rename(staging / "etcd")
        if not _complete(staging):
            raise TestbedError(f"go build succeeded but {staging} lacks one of {BINARIES}")
        seconds = time.monotonic() - start
        (staging / "versions.json").write_text(
            json.dumps(
                {
                    "kubernetes": versions.kubernetes,
                    "etcd": versions.etcd,
                    "go": versions.go,
                    "build_seconds": round(seconds),
                    "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                },
                indent=2,
            )
            + "\n"
        )
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
        progress(f"built in {_fmt_secs(seconds)}: {', '.join(BINARIES)} in {dest}")
        return dest


TOXIPROXY_MODULE_DIR = MODULE_DIR / "toxiproxy"
"""The Go module that pins toxiproxy (its own module: its pin never changes the Kubernetes cache key)."""

TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2"
TOXIPROXY_PACKAGE = f"{TOXIPROXY_MODULE}/cmd/server"
TOXIPROXY_BINARY = "toxiproxy-server"


def build_toxiproxy(progress: ProgressFn = _say) -> Path:
    """Build toxiproxy's server (the TCP fault proxy of ``tests/e2e/faults``) unless cached.

    Returns the path of the binary, ``CACHE_ROOT/toxiproxy-<version>_<go>/toxiproxy-server``, the
    version being what ``toxiproxy/go.mod`` pins (``go list -m``). About 12 s cold on 2 cores once the
    module cache holds its ~15 modules; nothing at all when cached. Concurrent callers serialise on
    a lock file of their own (a Kubernetes build holding the main lock does not delay it).

    Raises:
        TestbedError: ``go`` missing, the module not fetchable, or the build failing.
    """
    version = _run_go(["list", "-m", "-f", "{{.Version}}", TOXIPROXY_MODULE], cwd=TOXIPROXY_MODULE_DIR)
    go = _run_go(["env", "GOVERSION"], cwd=TOXIPROXY_MODULE_DIR)
    dest = CACHE_ROOT / f"toxiproxy-{version}_{go}"
    binary = dest / TOXIPROXY_BINARY
    if os.access(binary, os.X_OK):
        return binary
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / ".toxiproxy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(binary, os.X_OK):  # someone else built it while we waited
            return binary
        staging = CACHE_ROOT / f".toxiproxy-{version}_{go}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        progress(f"building toxiproxy {version} with {go} into {dest}")
        start = time.monotonic()
        _run_go(["build", "-ldflags", f"-X {TOXIPROXY_MODULE}.Version={version}",  # else `-version` says "git"
                 "-o", str(staging / TOXIPROXY_BINARY), TOXIPROXY_PACKAGE], cwd=TOXIPROXY_MODULE_DIR)
        (staging / "versions.json").write_text(json.dumps(
            {"toxiproxy": version, "go": go, "build_seconds": round(time.monotonic() - start),
             "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
        progress(f"built toxiproxy in {_fmt_secs(time.monotonic() - start)}: {binary}")
        return binary


def _count_deps() -> int | None:
    """How many packages the build involves (``go list -deps``), for progress; None if unknown."""
    try:
        return len(_run_go(["list", "-deps", *GO_PACKAGES]).splitlines())
    except TestbedError:
        return None


def _follow(
    proc: subprocess.Popen[str],
    log: IO[str],
    start: float,
    heartbeat: float,
    total: int | None,
    progress: ProgressFn,
) -> int:
    """Copy ``go build -v`` output (one line per package compiled) to ``log``; report every
    ``heartbeat`` seconds, also while go is silent (linking). Returns the exit status."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="go-build-output", daemon=True).start()
    compiled, last_pkg = 0, ""
    next_report = start + heartbeat
    while True:
        try:
            line = lines.get(timeout=max(0.0, next_report - time.monotonic()))
        except queue.Empty:
            line = ""
        if line is None:
            break
        if line:
            log.write(line)
            compiled += 1
            last_pkg = line.strip()
        now = time.monotonic()
        if now >= next_report:
            next_report = now + heartbeat
            log.flush()
            done = f"{compiled} of at most {total}" if total else str(compiled)
            progress(f"  {_fmt_secs(now - start)}: {done} packages compiled; last: {last_pkg or '-'}")
    return proc.wait()


def _fmt_secs(s: float) -> str:
    return f"{int(s) // 60}m{int(s) % 60:02d}s"


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return f"(no {path})"


# --------------------------------------------------------------------------------------------
# Certificates and kubeconfigs
# --------------------------------------------------------------------------------------------


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# The request-header (front-proxy) CA's name differs from the cluster CA's, as kubeadm's "front-proxy-ca"
# differs from "kubernetes". kube-apiserver checks every client certificate against the front-proxy CA
# first (k8s.io/apiserver pkg/authentication/request/x509 Verifier); with one name for both CAs, Go's
# chain builder took the front-proxy CA as a candidate parent of each cluster-CA client certificate and
# ran an ECDSA verification that could only fail, on every such request: about 5 % of the API
# server's CPU in the MixedChurn bench (bench/RESULTS.md, "Client certificates").
CLUSTER_CA_NAME = "py-scheduler-testbed-ca"
FRONT_PROXY_CA_NAME = "py-scheduler-testbed-front-proxy-ca"


class _Pki:
    """A tiny CA (ECDSA P-256) that issues the test bed's serving and client certificates."""

    def __init__(self, pki_dir: Path, ca_name: str = CLUSTER_CA_NAME) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        self._x509, self._hashes, self._ser, self._ec = x509, hashes, serialization, ec
        self._eku, self._name_oid = ExtendedKeyUsageOID, NameOID
        self.dir = pki_dir
        pki_dir.mkdir(parents=True, exist_ok=True)
        ca_crt, ca_key = pki_dir / "ca.crt", pki_dir / "ca.key"
        if ca_crt.exists() and ca_key.exists():
            self.ca_cert = x509.load_pem_x509_certificate(ca_crt.read_bytes())
            key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            self.ca_key = key
            return
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
        now = dt.datetime.now(dt.UTC)
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        ca_crt.write_bytes(self.ca_cert.public_bytes(serialization.Encoding.PEM))
        _write_private(ca_key, self._key_pem(self.ca_key))

    def _key_pem(self, key: Any) -> bytes:
        return key.private_bytes(  # type: ignore[no-any-return]
            self._ser.Encoding.PEM, self._ser.PrivateFormat.PKCS8, self._ser.NoEncryption()
        )

    def issue(
        self,
        stem: str,
        common_name: str,
        organizations: Sequence[str] = (),
        *,
        server: bool = False,
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
    ) -> tuple[Path, Path]:
        """Issue a leaf certificate; returns ``(DIR/pki/STEM.crt, DIR/pki/STEM.key)``."""
        x509, oid = self._x509, self._name_oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        attrs = [x509.NameAttribute(oid.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(oid.COMMON_NAME, common_name))
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([self._eku.SERVER_AUTH if server else self._eku.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False)
        )
        if dns_names or ips:
            sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.ca_key, self._hashes.SHA256())
        crt_path, key_path = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        crt_path.write_bytes(cert.public_bytes(self._ser.Encoding.PEM))
        _write_private(key_path, self._key_pem(key))
        return crt_path, key_path

    def service_account_keys(self) -> tuple[Path, Path]:
        """The key pair that signs ServiceAccount tokens: ``(sa.key, sa.pub)``."""
        key_path, pub_path = self.dir / "sa.key", self.dir / "sa.pub"
        if not (key_path.exists() and pub_path.exists()):
            key = self._ec.generate_private_key(self._ec.SECP256R1())
            _write_private(key_path, self._key_pem(key))
            pub_path.write_bytes(
                key.public_key().public_bytes(self._ser.Encoding.PEM, self._ser.PublicFormat.SubjectPublicKeyInfo)
            )
        return key_path, pub_path


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> Path:
    """Write a kubeconfig (YAML; file paths, not inline data) for one client certificate."""
    q = json.dumps  # a JSON string is a valid YAML double-quoted scalar
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: {q(server)}
    certificate-authority: {q(str(ca))}
users:
- name: {q(user)}
  user:
    client-certificate: {q(str(cert))}
    client-key: {q(str(key))}
contexts:
- name: testbed
  context:
    cluster: testbed
    user: {q(user)}
current-context: testbed
"""
    )
    return path


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------

_PORT_LOW, _PORT_HIGH = 20000, 32000  # below Linux's ephemeral range: no client socket lands there
_ports_handed_out: set[int] = set()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners do
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1, outside the ephemeral range, not handed out before."""
    for _ in range(1000):
        port = random.randrange(_PORT_LOW, _PORT_HIGH)
        if port not in _ports_handed_out and _port_free(port):
            _ports_handed_out.add(port)
            return port
    raise TestbedError("no free port found on 127.0.0.1")


def _proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (None if gone or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # fields after "pid (comm)"
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is in process group ``pgid``."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def supervise(argv: Sequence[str], restart_delay: float = 1.0) -> int:
    """Run ``argv`` and start it again whenever it exits, until SIGTERM/SIGINT/SIGHUP.

    What a kubelet does for a static Pod: kube-scheduler exits on purpose when it loses its
    Lease (e.g. while a test restarts kube-apiserver) and expects to be restarted. The child
    gets SIGKILL if this supervisor dies; a signal to the supervisor is forwarded to it.
    Output is the supervisor's (the log file); each restart is marked by a line ``=====``.
    """
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    while True:
        child = subprocess.Popen(list(argv), preexec_fn=_set_pdeathsig)
        rc = child.wait()
        if stopping:
            return rc
        print(f"===== {_now()} {argv[0]} exited with {rc}; restarting in {restart_delay:g}s", flush=True)
        deadline = time.monotonic() + restart_delay
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.05)
        if stopping:
            return rc


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class ProcInfo:
    """What ``status`` reports about one process of the test bed."""

    name: str
    pid: int | None
    alive: bool
    port: int | None
    log: Path
    crashed: bool = False
    """It has a pid file (nobody stopped it) but is not alive."""

    @property
    def state(self) -> str:
        """``running``, ``stopped`` (by ``stop``/``down``) or ``CRASHED``."""
        return "running" if self.alive else "CRASHED" if self.crashed else "stopped"


class Testbed:
    """One control plane rooted at ``dir``; every method is synchronous and idempotent where it can be.

    Attributes useful to tests: :attr:`dir`, :attr:`kubeconfig` (admin), :attr:`server` (URL),
    :attr:`ca_file`, :attr:`admin_cert`, :attr:`admin_key`.
    """

    __test__ = False  # tests import it (as the fixture's type); not a test class

    def __init__(self, directory: str | os.PathLike[str], *, die_with_parent: bool = False) -> None:
        """``die_with_parent``: children get SIGKILL when this process dies (used by pytest).

        Linux delivers that signal when the *thread* that forked the child exits, so it only
        applies to processes started from the main thread.
        """
        self.dir = Path(directory).resolve()
        self.die_with_parent = die_with_parent
        self._popen: dict[str, subprocess.Popen[bytes]] = {}
        self._state: dict[str, Any] = self._load_state()
        self._state_lock = threading.RLock()
        """Held while the state changes and is written: processes start from several threads at once
        (a test restarting both nodes' DRA drivers through ``asyncio.to_thread``), and two writers
        sharing one ``state.tmp`` lost the second's rename (FileNotFoundError)."""

    # -- paths --------------------------------------------------------------------------------

    @property
    def pki_dir(self) -> Path:
        return self.dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def pids_dir(self) -> Path:
        return self.dir / "pids"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (client certificate in group system:masters)."""
        return self.dir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def admin_cert(self) -> Path:
        return self.pki_dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.pki_dir / "admin.key"

    @property
    def ports(self) -> dict[str, int]:
        """Port of each component: etcd-client, etcd-peer, kube-apiserver, kube-scheduler[...]."""
        return dict(self._state.setdefault("ports", {}))

    @property
    def server(self) -> str:
        """The apiserver's URL, e.g. ``https://127.0.0.1:23456``."""
        return f"https://127.0.0.1:{self.ports[APISERVER]}"

    @property
    def bin_dir(self) -> Path:
        if "bin_dir" not in self._state:
            raise TestbedError(f"{self.dir} was never brought up")
        return Path(self._state["bin_dir"])

    def log_file(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.pids_dir / f"{name}.pid"

    # -- state --------------------------------------------------------------------------------

    def _load_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())  # type: ignore[no-any-return]
        except FileNotFoundError:
            return {}

    def _save_state(self) -> None:
        with self._state_lock:
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._state, indent=2, sort_keys=True) + "\n")
            tmp.rename(self.state_file)

    def _port(self, key: str) -> int:
        """The port recorded for ``key``, else a new free one (recorded).

        A port, once recorded, stays: restarts come back on it and kubeconfigs name it.
        """
        ports = self._state.setdefault("ports", {})
        port = ports.get(key)
        if port is None:
            port = free_port()
            ports[key] = port
        _ports_handed_out.add(port)
        return int(port)

    # -- process control ----------------------------------------------------------------------

    def pid(self, name: str) -> int | None:
        """Pid of ``name`` if its pid file names a live process we started, else None."""
        try:
            pid = int(self.pid_file(name).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        ticks = _proc_start_ticks(pid)
        recorded = self._state.get("processes", {}).get(name, {}).get("start_ticks")
        if ticks is None or (recorded is not None and ticks != recorded):
            return None  # exited, or the pid was reused by something else
        return pid

    def is_running(self, name: str) -> bool:
        return self.pid(name) is not None

    def running(self) -> list[str]:
        """Names of the processes with a pid file that are alive."""
        if not self.pids_dir.exists():
            return []
        return sorted(p.stem for p in self.pids_dir.glob("*.pid") if self.is_running(p.stem))

    def _spawn(self, name: str, argv: list[str], port: int | None = None, *, restart: bool = False) -> int:
        """Start ``argv`` as ``name`` in a new session (process group); with ``restart`` under
        :func:`supervise`, so that it comes back whenever it exits."""
        if self.is_running(name):
            raise TestbedError(f"{name} already runs (pid {self.pid(name)}) in {self.dir}")
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.pids_dir.mkdir(parents=True, exist_ok=True)
        preexec = None
        if self.die_with_parent and threading.current_thread() is threading.main_thread():
            preexec = _set_pdeathsig
        with open(self.log_file(name), "ab") as log:
            log.write(f"\n===== {_now()} starting: {' '.join(argv)}\n".encode())
            log.flush()
            log_offset = log.tell()
            cmd = [sys.executable, str(Path(__file__).resolve()), "supervise", *argv] if restart else argv
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
                preexec_fn=preexec,  # only a prctl(2) call between fork and exec
            )
        self._popen[name] = proc
        self.pid_file(name).write_text(f"{proc.pid}\n")
        ticks = _proc_start_ticks(proc.pid)
        with self._state_lock:
            self._state.setdefault("processes", {})[name] = {
                "pid": proc.pid,
                "argv": argv,
                "port": port,
                "start_ticks": ticks,
                "log_offset": log_offset,
                "restart": restart,
            }
            self._save_state()
        return proc.pid

    def stop(self, name: str, timeout: float = 15.0, *, kill: bool = False) -> bool:
        """Stop ``name`` and remove its pid file; True if it was running.

        SIGTERM, then SIGKILL after ``timeout`` seconds; ``kill=True`` sends SIGKILL right away
        (a crash, as a fault test wants it: no graceful shutdown, no lease release).
        """
        pid = self.pid(name)
        was_running = pid is not None
        if pid is not None:
            gone = not kill and self._signal_and_wait(name, pid, signal.SIGTERM, timeout)
            if not gone and not self._signal_and_wait(name, pid, signal.SIGKILL, 10.0):
                raise TestbedError(f"{name} (pid {pid}) survived SIGKILL")
        self.pid_file(name).unlink(missing_ok=True)
        return was_running

    def _signal_and_wait(self, name: str, pid: int, sig: int, timeout: float) -> bool:
        """Send ``sig`` to ``pid``'s process group (its own session: the process, plus the
        supervised child if any); True once all of it has exited (our own child reaped)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + timeout
        proc = self._popen.get(name)
        ours = proc is not None and proc.pid == pid
        while time.monotonic() < deadline:
            if _group_alive(pid):
                pass
            elif ours:
                assert proc is not None
                if proc.poll() is not None:  # reaped: no zombie left behind
                    self._popen.pop(name, None)
                    return True
            elif _proc_start_ticks(pid) is None:  # exited; init reaps it (see `down`)
                return True
            time.sleep(0.05)
        return False

    def _log_since_start(self, name: str) -> str:
        offset = self._state.get("processes", {}).get(name, {}).get("log_offset", 0)
        try:
            with open(self.log_file(name), "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ready`` until true; fail early if ``name`` died, or at ``timeout`` with its log tail."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.is_running(name):
                raise TestbedError(
                    f"{name} exited while waiting for {what}; last lines of {self.log_file(name)}:\n"
                    f"{_tail(self.log_file(name))}"
                )
            with contextlib.suppress(OSError, ssl.SSLError, urllib.error.URLError):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise TestbedError(
                    f"{name} not {what} after {timeout:.0f}s; last lines of {self.log_file(name)}:\n"
                    f"{_tail(self.log_file(name))}"
                )
            time.sleep(0.2)

    # -- components ---------------------------------------------------------------------------

    def _admin_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return ctx

    def _get(self, url: str, ctx: ssl.SSLContext | None = None) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def start_etcd(self, timeout: float = 60.0) -> None:
        """Start etcd (data in DIR/etcd; ports reused from state.json) and wait for /health."""
        self._with_port_retry(ETCD, ["etcd-client", "etcd-peer"], lambda: self._start_etcd(timeout))

    def _start_etcd(self, timeout: float) -> None:
        client, peer = self._port("etcd-client"), self._port("etcd-peer")
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        argv = [
            str(self.bin_dir / "etcd"),
            "--name=testbed",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=testbed={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]
        self._spawn(ETCD, argv, client)

        def healthy() -> bool:
            code, body = self._get(f"{client_url}/health")
            return code == 200 and '"health":"true"' in body.replace(" ", "")

        self._wait(ETCD, healthy, timeout, "healthy")

    def start_apiserver(self, timeout: float = 180.0) -> None:
        """Start kube-apiserver against the running etcd and wait for /readyz."""
        self._with_port_retry(APISERVER, [APISERVER], lambda: self._start_apiserver(timeout))

    def _start_apiserver(self, timeout: float) -> None:
        port = self._port(APISERVER)
        pki = self.pki_dir
        argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd-client']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # the lease reconciler refuses a loopback address for the `kubernetes` Service's
            # endpoints; nothing here needs those endpoints
            "--endpoint-reconciler-type=none",
            f"--secure-port={port}",
            f"--cert-dir={pki / 'apiserver'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # front-proxy (request header) CA: without it kube-scheduler's delegated authn keeps
            # logging "missing content for CA bundle ... requestheader-client-ca-file"
            f"--requestheader-client-ca-file={pki / 'front-proxy' / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy' / 'client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy' / 'client.key'}",
            "--authorization-mode=Node,RBAC",
            *self._apiserver_node_args(),
            "--allow-privileged=true",
            # Workload-aware scheduling (tests/e2e/test_gang.py): the PodGroup API and Pod.spec.schedulingGroup.
            # The schedulers keep their own gates (off unless a test turns them on).
            "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
            # resource.k8s.io v1beta1 / v1beta2 (off by default since 1.34): tests/e2e/test_dra_versions.py
            # round-trips older DRA objects through the server's conversion to v1.
            "--runtime-config=scheduling.k8s.io/v1beta1=true,resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true",
            "--profiling=false",
            f"--v={os.environ.get('TESTBED_APISERVER_V', '1')}",
        ]
        self._spawn(APISERVER, argv, port)
        ctx = self._admin_ssl()

        def ready() -> bool:
            return self._get(f"https://127.0.0.1:{port}/readyz", ctx)[0] == 200

        self._wait(APISERVER, ready, timeout, "ready (/readyz)")

    def _apiserver_node_args(self) -> list[str]:
        """With real nodes (``up(nodes=N)``): every default admission plugin (kube-controller-manager
        runs, with its node lifecycle controller), kubelets reached by InternalIP with a client
        certificate; without: the admission plugins of :data:`APISERVER_DISABLED_ADMISSION` off."""
        if not self._state.get("nodes", {}).get("count"):
            return [f"--disable-admission-plugins={','.join(APISERVER_DISABLED_ADMISSION)}"]
        crt, key = self.pki_dir / "apiserver-kubelet-client.crt", self.pki_dir / "apiserver-kubelet-client.key"
        if not crt.exists():
            _Pki(self.pki_dir).issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ["system:masters"])
        return ["--kubelet-preferred-address-types=InternalIP", f"--kubelet-client-certificate={crt}",
                f"--kubelet-client-key={key}"]

    @property
    def nodes(self) -> Any:
        """The real nodes (:class:`nodes.Nodes`): ``.names()``, ``.start_kubelet(i)``, ``.ctr(i, ...)``..."""
        import nodes

        return nodes.Nodes(self)

    def start_kube_scheduler(
        self,
        name: str = KUBE_SCHEDULER,
        *,
        config: dict[str, Any] | None = None,
        verbosity: int | None = None,
        wait_leading: bool = True,
        timeout: float = 90.0,
        extra_args: Sequence[str] = (),
        restart: bool = True,
    ) -> int:
        """Start an upstream kube-scheduler called ``name``; returns its (secure) port.

        It authenticates as ``system:kube-scheduler`` (DIR/kube-scheduler.kubeconfig), elects a
        leader on Lease kube-system/kube-scheduler and uses the default profile, unless
        ``config`` (merged over the generated KubeSchedulerConfiguration) says otherwise. Start
        a second one with another ``name`` for fail-over tests (pass ``wait_leading=False``:
        it waits as a follower). Verbosity: ``verbosity``, else env TESTBED_KUBE_SCHEDULER_V, else 2.

        With ``restart`` (default) it runs under :func:`supervise`: kube-scheduler exits when it
        loses its Lease (kube-apiserver restarted or unreachable for >10 s) and, as a kubelet
        would, the bed starts it again. ``stop_kube_scheduler`` stops it for good.
        """
        return self._with_port_retry(
            name,
            [name],
            lambda: self._start_kube_scheduler(name, config, verbosity, wait_leading, timeout, extra_args, restart),
        )

    def _start_kube_scheduler(
        self,
        name: str,
        config: dict[str, Any] | None,
        verbosity: int | None,
        wait_leading: bool,
        timeout: float,
        extra_args: Sequence[str],
        restart: bool,
    ) -> int:
        port = self._port(name)
        kubeconfig = self.dir / "kube-scheduler.kubeconfig"
        cfg: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "leaderElection": {
                "leaderElect": True,
                "resourceNamespace": "kube-system",
                "resourceName": "kube-scheduler",
            },
        }
        cfg.update(config or {})
        cfg_path = self.dir / f"{name}.config.yaml"
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")  # JSON is YAML
        v = verbosity if verbosity is not None else int(os.environ.get("TESTBED_KUBE_SCHEDULER_V", "2"))
        argv = [
            str(self.bin_dir / "kube-scheduler"),
            f"--config={cfg_path}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.dir / 'pki' / name}",
            f"--v={v}",
            *extra_args,
        ]
        self._spawn(name, argv, port, restart=restart)

        def healthy() -> bool:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # self-signed serving cert made by kube-scheduler itself
            if self._get(f"https://127.0.0.1:{port}/healthz", ctx)[0] != 200:
                return False
            return not wait_leading or self.is_leading(name)

        self._wait(name, healthy, timeout, "healthy and leading" if wait_leading else "healthy")
        return port

    def start_kube_controller_manager(
        self,
        *,
        controllers: Sequence[str] = KCM_CONTROLLERS,
        verbosity: int | None = None,
        timeout: float = 90.0,
        extra_args: Sequence[str] = (),
    ) -> int:
        """Start upstream kube-controller-manager; returns its (secure, loopback) port.

        It authenticates as ``system:kube-controller-manager`` (DIR/kube-controller-manager.kubeconfig)
        and, with ``--use-service-account-credentials``, runs each controller as its own
        ServiceAccount (tokens signed with the bed's service-account key). Leader election on Lease
        kube-system/kube-controller-manager; the call returns once it leads (its controllers run).
        Runs under :func:`supervise` like kube-scheduler (it exits when it loses its Lease).
        Verbosity: ``verbosity``, else env TESTBED_KCM_V, else 1.
        """
        return self._with_port_retry(
            KUBE_CONTROLLER_MANAGER,
            [KUBE_CONTROLLER_MANAGER],
            lambda: self._start_kube_controller_manager(controllers, verbosity, timeout, extra_args),
        )

    def _start_kube_controller_manager(
        self, controllers: Sequence[str], verbosity: int | None, timeout: float, extra_args: Sequence[str]
    ) -> int:
        name = KUBE_CONTROLLER_MANAGER
        port = self._port(name)
        kubeconfig = self.dir / "kube-controller-manager.kubeconfig"
        if not kubeconfig.exists():
            crt, key = _Pki(self.pki_dir).issue(name, "system:kube-controller-manager")
            write_kubeconfig(kubeconfig, self.server, self.ca_file, crt, key, "system:kube-controller-manager")
        v = verbosity if verbosity is not None else int(os.environ.get("TESTBED_KCM_V", "1"))
        argv = [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.pki_dir / name}",
            f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            "--use-service-account-credentials=true",
            f"--controllers={','.join(controllers)}",
            "--leader-elect=true",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--profiling=false",
            f"--v={v}",
            *extra_args,
        ]
        self._spawn(name, argv, port, restart=True)

        def healthy() -> bool:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # self-signed serving cert made by the process itself
            if self._get(f"https://127.0.0.1:{port}/healthz", ctx)[0] != 200:
                return False
            return self.is_leading(name)

        self._wait(name, healthy, timeout, "healthy and leading")
        return port

    def stop_kube_controller_manager(self, *, kill: bool = False) -> bool:
        """Stop kube-controller-manager (its Lease is not released: a successor waits ~15 s)."""
        return self.stop(KUBE_CONTROLLER_MANAGER, kill=kill)

    def _with_port_retry(self, name: str, port_keys: Sequence[str], start: Callable[[], T]) -> T:
        """Run ``start``; if it fails on a port it just picked that another process grabbed
        first (other test beds run concurrently), pick new ports and try again."""
        fresh = [k for k in port_keys if k not in self._state.get("ports", {})]
        for attempt in range(3):
            try:
                return start()
            except TestbedError:
                clash = "address already in use" in self._log_since_start(name).lower()
                if not (fresh and clash) or attempt == 2:
                    raise
                self.stop(name, kill=True)
                for k in fresh:
                    self._state["ports"].pop(k, None)
        raise AssertionError("unreachable")

    def is_leading(self, name: str = KUBE_SCHEDULER) -> bool:
        """Whether ``name``'s log (since its last start) says it acquired its leader lease."""
        log = self._log_since_start(name)
        return "acquired lease" in log[log.rfind("\n=====") + 1 :].lower()

    def stop_etcd(self, *, kill: bool = False) -> bool:
        """Stop etcd (SIGTERM takes ~7 s while kube-apiserver is connected; ``kill`` is instant)."""
        return self.stop(ETCD, kill=kill)

    def stop_apiserver(self, *, kill: bool = False) -> bool:
        """Stop kube-apiserver (SIGTERM takes ~1 s, ~15 s while etcd is down)."""
        return self.stop(APISERVER, 30.0, kill=kill)

    def stop_kube_scheduler(self, name: str = KUBE_SCHEDULER, *, kill: bool = False) -> bool:
        """Stop one kube-scheduler. It does not release its Lease: a successor waits ~15 s."""
        return self.stop(name, kill=kill)

    def restart_etcd(self, *, kill: bool = False) -> None:
        """Stop etcd and start it again on the same ports and data (waits for /health)."""
        self.stop_etcd(kill=kill)
        self.start_etcd()

    def restart_apiserver(self, *, kill: bool = False) -> None:
        """Stop kube-apiserver and start it again on the same port (waits for /readyz)."""
        self.stop_apiserver(kill=kill)
        self.start_apiserver()

    # -- whole bed ------------------------------------------------------------------------------

    def _prepare(self, bin_dir: Path) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._state["bin_dir"] = str(bin_dir)
        pki = _Pki(self.pki_dir)
        hosts = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
        hosts.append("kubernetes.default.svc.cluster.local")
        service_ip = str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))
        if not (self.pki_dir / "apiserver.crt").exists():
            pki.issue("apiserver", "kube-apiserver", server=True, dns_names=hosts, ips=["127.0.0.1", service_ip])
        if not self.admin_cert.exists():
            pki.issue("admin", "testbed-admin", ["system:masters"])
        if not (self.pki_dir / "kube-scheduler.crt").exists():
            pki.issue("kube-scheduler", "system:kube-scheduler")
        pki.service_account_keys()
        front_proxy = self.pki_dir / "front-proxy"
        front_proxy_ca = front_proxy / "ca.crt"
        if (front_proxy_ca.exists()
                and pki.ca_cert.subject == pki._x509.load_pem_x509_certificate(front_proxy_ca.read_bytes()).subject):
            for old in front_proxy.iterdir():  # a bed kept from before the CAs were named apart
                old.unlink()
        if not (front_proxy / "client.crt").exists():
            _Pki(front_proxy, FRONT_PROXY_CA_NAME).issue("client", "front-proxy-client")
        self._save_state()

    def client_kubeconfig(self, stem: str, user: str, groups: Sequence[str] = ()) -> Path:
        """Issue a client certificate for ``user`` in ``groups``; returns DIR/STEM.kubeconfig.

        Handy for running py-scheduler as its own identity against the bed.
        """
        crt, key = _Pki(self.pki_dir).issue(stem, user, groups)
        return write_kubeconfig(self.dir / f"{stem}.kubeconfig", self.server, self.ca_file, crt, key, user)

    def up(self, *, with_kube_scheduler: bool = False, with_kube_controller_manager: bool = False,
           nodes: int = 0, kubelet_config: dict[str, Any] | None = None, progress: ProgressFn = _say) -> None:
        """Build if needed, then start etcd, kube-apiserver and optionally kube-scheduler and
        kube-controller-manager; with ``nodes`` > 0 also kube-controller-manager with all its
        controllers and that many real nodes (kubelet + containerd + kube-proxy, see nodes.py;
        ``kubelet_config`` is merged over their KubeletConfiguration).

        On failure the processes started so far are stopped before the error propagates.
        """
        if running := self.running():
            raise TestbedError(f"{self.dir} already runs {', '.join(running)}; `down` it first")
        bin_dir = build(progress)
        if nodes:
            import nodes as nodes_mod

            nodes_mod.build_all(progress)
        started = time.monotonic()
        self._state["nodes"] = {**self._state.get("nodes", {}), "count": nodes}
        self._prepare(bin_dir)
        try:
            self.start_etcd()
            progress(f"etcd up on 127.0.0.1:{self.ports['etcd-client']}")
            self.start_apiserver()
            progress(f"kube-apiserver ready at {self.server}")
            write_kubeconfig(
                self.kubeconfig, self.server, self.ca_file, self.admin_cert, self.admin_key, "testbed-admin"
            )
            write_kubeconfig(
                self.dir / "kube-scheduler.kubeconfig",
                self.server,
                self.ca_file,
                self.pki_dir / "kube-scheduler.crt",
                self.pki_dir / "kube-scheduler.key",
                "system:kube-scheduler",
            )
            if with_kube_scheduler:
                port = self.start_kube_scheduler()
                progress(f"kube-scheduler leading, healthz on 127.0.0.1:{port}")
            if with_kube_controller_manager or nodes:
                port = self.start_kube_controller_manager(
                    controllers=("*",) if nodes else KCM_CONTROLLERS,
                    # real nodes: NotReady ~20 s after a kubelet stops (default 50 s)
                    extra_args=("--node-monitor-period=2s", "--node-monitor-grace-period=20s") if nodes else ())
                progress(f"kube-controller-manager leading, healthz on 127.0.0.1:{port}")
            if nodes:
                self.nodes.up(nodes, progress, kubelet_config)
        except BaseException:
            self.down()
            raise
        progress(f"up in {time.monotonic() - started:.1f}s; export KUBECONFIG={self.kubeconfig}")

    def down(self, timeout: float = 15.0) -> list[str]:
        """Stop every process with a pid file (schedulers first, etcd last); returns those stopped."""
        if not self.pids_dir.exists():
            return []
        stopped: list[str] = []
        if self._state.get("nodes", {}).get("count"):
            stopped += self.nodes.down()
        names = sorted(p.stem for p in self.pids_dir.glob("*.pid"))
        order = {ETCD: 2, APISERVER: 1}
        pids = []
        for name in sorted(names, key=lambda n: order.get(n, 0)):
            pid = self.pid(name)
            if self.stop(name, timeout) and pid is not None:
                stopped.append(name)
                pids.append(pid)
        # Processes started by an earlier `testbed up` are init's children now, and init reaps
        # them within ~2 s here; wait for that so `pgrep` right after `down` shows no <defunct>.
        gone_by = time.monotonic() + 3.0
        while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < gone_by:
            time.sleep(0.05)
        return stopped

    def status(self) -> list[ProcInfo]:
        """One entry per process the bed knows of (from state.json), alive or not."""
        out = []
        for name, info in sorted(self._state.get("processes", {}).items()):
            pid = self.pid(name)
            crashed = pid is None and self.pid_file(name).exists()
            out.append(
                ProcInfo(name, pid or info.get("pid"), pid is not None, info.get("port"), self.log_file(name), crashed)
            )
        return out


if __name__ == "__main__":
    # `python3 bed.py supervise ARGV...`: how _spawn runs a process that must be restarted
    if len(sys.argv) < 3 or sys.argv[1] != "supervise":
        sys.exit("usage: bed.py supervise COMMAND [ARG...]  (the CLI is ./testbed)")
    sys.exit(supervise(sys.argv[2:]))
