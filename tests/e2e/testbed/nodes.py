"""Real nodes for the e2e test bed: kubelet + containerd + kube-proxy in namespaces the bed makes.

``Testbed.up(nodes=N)`` (``testbed up DIR --nodes N``) calls :func:`up_nodes` once the control
plane runs. Each node ``<bed>-node-<i>`` is, like a kind node container without the image:

* a holder process (``unshare --net --mount --propagation private sleep``) whose network and mount
  namespaces every process of the node joins (``nsenter``);
* in that mount namespace ``/var/lib``, ``/var/log`` and ``/run`` are bind mounts of
  ``DIR/nodes/<i>/{var-lib,var-log,run}``: so the kubelet's fixed paths (``/var/lib/kubelet``,
  its device-plugin socket directory, ``/var/log/pods``, ``/var/log/containers``), containerd's
  root, state, socket and shim sockets and the CNI plugins' state are the node's own, and the
  mounts the kubelet makes (volumes, ``rshared`` root dir) never reach the host;
* in that network namespace ``eth0`` (a veth whose host end is on the bed's bridge ``tb<id>``,
  node network ``172.30.X.0/24``: host ``.1``, node *i* ``.(i+2)``), the CNI bridge ``cni0`` with
  the node's Pod subnet ``10.(100+X).i.0/24`` and a route to every other node's Pod subnet; no
  default route, so nothing in a node reaches an address outside this machine;
* cgroups ``/<id>-node-<i>`` (the kubelet's ``cgroupRoot``; its ``system`` child holds the node's
  own processes, containerd's shims included, so ``down`` finds and kills everything by cgroup);
* its own containerd (``restrict_oom_score_adj``: root lacks CAP_SYS_RESOURCE here), kubelet
  (``failCgroupV1: false`` + ``cgroupDriver: cgroupfs`` on a cgroup v1 host; a ``resolvConf`` the
  bed writes with no nameserver) and kube-proxy (iptables mode, ``masqueradeAll``) - all on their
  default ports, which are per network namespace.

The API server listens on 127.0.0.1 only; a small TCP forwarder (``apiserver-proxy``) listens on
the bridge address ``172.30.X.1`` with the API server's port, and the ``kubernetes`` Service's
EndpointSlice names it, so Pods reach the API through kube-proxy. The API server reaches kubelets
by InternalIP (``--kubelet-preferred-address-types=InternalIP``), so no name is ever resolved.

Host changes (kernel tunables the kubelet sets, links, cgroups, mount-point directories) are
recorded before the first node bed comes up (:class:`HostState`, ``/run/py-scheduler-testbed/``,
shared by concurrent beds) and restored when the last one goes down.

Binaries: kubelet and kube-proxy from ``go.mod`` here (the same pinned k8s.io/kubernetes as the
control plane), containerd, ctr and containerd-shim-runc-v2 from ``containerd/go.mod``; runc, the
CNI plugins, iptables, conntrack and busybox-static from Debian (:func:`ensure_packages`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import gzip
import hashlib
import io
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bed import Testbed

MODULE_DIR = Path(__file__).resolve().parent
CONTAINERD_MODULE_DIR = MODULE_DIR / "containerd"
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_BINARIES = ("containerd", "ctr", "containerd-shim-runc-v2")
NODE_BINARIES = ("kubelet", "kube-proxy")
NODE_PACKAGES = ("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-proxy")

DEBIAN_PACKAGES = {  # command -> Debian package
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "busybox": "busybox-static",
    "gcc": "gcc",
}
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
"""The sandbox image containerd is told to use; built from upstream's pause.c (:func:`build_images`)."""
BUSYBOX_IMAGE = "docker.io/library/busybox:testbed"
"""A busybox image made from Debian's busybox-static; Pods use it with ``imagePullPolicy: Never``."""

NODE_DIRS = ("var-lib", "var-log", "run")
"""Per-node directories bind-mounted over /var/lib, /var/log and /run in the node's mount namespace."""
HOST_STATE_DIR = Path("/run/py-scheduler-testbed")
APISERVER_PROXY = "apiserver-proxy"

SYSCTLS = (
    "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding", "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables", "net/netfilter/nf_conntrack_max",
)
"""Kernel tunables (under /proc/sys) the kubelet, kube-proxy or the CNI plugins may change."""
WATCHED_DIRS = (
    "/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/containerd", "/run/containerd",
    "/var/lib/cni", "/etc/cni", "/opt/cni", "/opt/containerd", "/run/netns", "/run/nri", "/etc/cdi",
    "/run/cdi", "/etc/containerd", "/etc/kubernetes", "/run/runc", HOST_STATE_DIR.as_posix(),
)
"""Paths a kubelet or containerd on the host would create; none may appear because of the bed."""

ProgressFn = Callable[[str], None]


class NodesError(RuntimeError):
    """Anything that goes wrong building, starting or stopping the nodes."""


def _say(msg: str) -> None:
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


def _run(argv: Sequence[str], *, check: bool = True, input: str | None = None,
         cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    try:
        out = subprocess.run(list(argv), check=check, capture_output=True, text=True, input=input,
                             cwd=cwd, env=env)
    except subprocess.CalledProcessError as e:
        raise NodesError(f"{' '.join(argv)} failed (exit {e.returncode}):\n{e.stdout}{e.stderr}") from e
    return out.stdout


# --------------------------------------------------------------------------------------------
# Building: binaries, Debian packages, images
# --------------------------------------------------------------------------------------------


def _cache_root() -> Path:
    import bed

    return bed.CACHE_ROOT


@contextlib.contextmanager
def _lock(name: str, progress: ProgressFn, what: str) -> Iterator[None]:
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / name, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"another process builds {what}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_into(dest: Path, binaries: Sequence[str], lock_name: str, what: str,
                go_build: Callable[[Path], None], meta: dict[str, Any], progress: ProgressFn) -> Path:
    """The cache pattern of bed.build: DEST complete -> nothing; else build into DEST.partial under a lock."""
    def complete() -> bool:
        return all(os.access(dest / b, os.X_OK) for b in binaries)

    if complete():
        return dest
    with _lock(lock_name, progress, what):
        if complete():
            return dest
        staging = dest.with_name(f".{dest.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        progress(f"building {what} into {dest} (cold: minutes on 2 cores)")
        start = time.monotonic()
        go_build(staging)
        missing = [b for b in binaries if not (staging / b).exists()]
        if missing:
            raise NodesError(f"go build succeeded but {staging} lacks {missing}")
        seconds = time.monotonic() - start
        (staging / "versions.json").write_text(json.dumps(
            {**meta, "build_seconds": round(seconds),
             "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
        progress(f"built {what} in {seconds:.0f}s")
        return dest


def build_node_binaries(progress: ProgressFn = _say) -> Path:
    """kubelet and kube-proxy from the bed's go.mod: ``CACHE_ROOT/nodes-k8s-<v>_<go>/``.

    Same pinned k8s.io/kubernetes and version stamping as the control plane; a directory (and
    lock) of its own so the control plane's cache key and directory stay as they are.
    """
    import bed

    versions = bed.module_versions()
    dest = _cache_root() / f"nodes-k8s-{versions.kubernetes}_{versions.go}"

    def go_build(staging: Path) -> None:
        bed._run_go(["build", "-ldflags", bed._ldflags(versions.kubernetes), "-o", f"{staging}/", *NODE_PACKAGES])

    return _build_into(dest, NODE_BINARIES, ".nodes-k8s.lock", f"kubelet + kube-proxy {versions.kubernetes}",
                       go_build, {"kubernetes": versions.kubernetes, "go": versions.go}, progress)


def build_containerd(progress: ProgressFn = _say) -> Path:
    """containerd, ctr, containerd-shim-runc-v2 from ``containerd/go.mod`` (``-tags no_btrfs``):
    ``CACHE_ROOT/containerd-<v>_<go>/``."""
    import bed

    version = bed._run_go(["list", "-m", "-f", "{{.Version}}", CONTAINERD_MODULE], cwd=CONTAINERD_MODULE_DIR)
    go = bed._run_go(["env", "GOVERSION"], cwd=CONTAINERD_MODULE_DIR)
    dest = _cache_root() / f"containerd-{version}_{go}"
    ldflags = f"-X {CONTAINERD_MODULE}/version.Version={version}"

    def go_build(staging: Path) -> None:
        bed._run_go(["build", "-tags", "no_btrfs", "-ldflags", ldflags, "-o", f"{staging}/",
                     *(f"{CONTAINERD_MODULE}/cmd/{b}" for b in CONTAINERD_BINARIES)], cwd=CONTAINERD_MODULE_DIR)

    return _build_into(dest, CONTAINERD_BINARIES, ".containerd.lock", f"containerd {version}", go_build,
                       {"containerd": version, "go": go}, progress)


def ensure_packages(progress: ProgressFn = _say) -> None:
    """Install the Debian packages a node needs (runc, CNI plugins, iptables, conntrack,
    busybox-static, gcc) with apt-get when missing; says what it installs."""
    missing = sorted({pkg for cmd, pkg in DEBIAN_PACKAGES.items() if shutil.which(cmd) is None})
    if not all(os.access(CNI_BIN_DIR / p, os.X_OK) for p in CNI_PLUGINS):
        missing.append("containernetworking-plugins")
    if _deb_version("busybox-static") == "unknown":  # the image needs the static build
        missing.append("busybox-static")
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise NodesError(f"real nodes need the Debian packages {missing} (install them as root)")
    with _lock(".apt.lock", progress, "Debian packages"):
        progress(f"installing {' '.join(missing)} with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "update", "-qq"], env=env, check=False)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600",
              *missing], env=env)


def _deb_version(pkg: str) -> str:
    return _run(["dpkg-query", "-W", "-f", "${Version}", pkg], check=False).strip() or "unknown"


def _tar_bytes(entries: Sequence[tuple[str, bytes | None, str | None, int]]) -> bytes:
    """A reproducible tar: (path, file content or None, symlink target or None, mode)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data, link, mode in entries:
            info = tarfile.TarInfo(path)
            info.mtime, info.mode = 0, mode
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_oci_archive(path: Path, name: str, layer_tar: bytes, config: dict[str, Any]) -> Path:
    """Write a one-layer OCI image layout as a tar (what ``ctr images import`` and
    ``kind load image-archive`` read). ``name`` becomes the ``io.containerd.image.name`` and
    ``org.opencontainers.image.ref.name`` annotations."""
    def sha(b: bytes) -> str:
        return "sha256:" + hashlib.sha256(b).hexdigest()

    layer = gzip.compress(layer_tar, mtime=0)
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": config,
                      "rootfs": {"type": "layers", "diff_ids": [sha(layer_tar)]}}, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(cfg), "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(layer),
                    "size": len(layer)}],
    }, sort_keys=True).encode()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(manifest),
                       "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": name}}],
    }, sort_keys=True).encode()
    entries: list[tuple[str, bytes | None, str | None, int]] = [
        ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}', None, 0o644),
        ("index.json", index, None, 0o644),
        ("blobs", None, None, 0o755), ("blobs/sha256", None, None, 0o755),
    ]
    entries += [(f"blobs/sha256/{sha(b)[7:]}", b, None, 0o644) for b in (layer, cfg, manifest)]
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(_tar_bytes(entries))
    tmp.rename(path)
    return path


def build_images(progress: ProgressFn = _say) -> dict[str, Path]:
    """The pause and busybox images as OCI archives, cached under
    ``CACHE_ROOT/images-k8s-<v>_busybox-<deb version>/``; returns ``{image name: archive}``.

    pause: upstream's ``build/pause/linux/pause.c`` from the module cache, ``gcc -Os -static``.
    busybox: Debian's busybox-static at ``/bin/busybox`` with a symlink per applet.
    """
    import bed

    k8s = bed.module_versions().kubernetes
    busybox = shutil.which("busybox")
    if busybox is None:
        raise NodesError("busybox missing (ensure_packages installs busybox-static)")
    dest = _cache_root() / f"images-k8s-{k8s}_busybox-{_deb_version('busybox-static').replace(':', '_')}"
    out = {PAUSE_IMAGE: dest / "pause.oci.tar", BUSYBOX_IMAGE: dest / "busybox.oci.tar"}
    if all(p.exists() for p in out.values()):
        return out
    with _lock(".images.lock", progress, "images"):
        if all(p.exists() for p in out.values()):
            return out
        dest.mkdir(parents=True, exist_ok=True)
        src = Path(bed._run_go(["list", "-m", "-f", "{{.Dir}}", bed.K8S_MODULE])) / "build/pause/linux/pause.c"
        binary = dest / "pause"
        _run(["gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10-testbed", "-o", str(binary), str(src)])
        _run(["strip", str(binary)], check=False)
        write_oci_archive(out[PAUSE_IMAGE], PAUSE_IMAGE,
                          _tar_bytes([("pause", binary.read_bytes(), None, 0o755)]),
                          {"Entrypoint": ["/pause"], "User": "65535:65535"})
        applets = sorted(set(_run([busybox, "--list"]).split()) - {"busybox"})
        entries: list[tuple[str, bytes | None, str | None, int]] = [
            (d, None, None, 0o755) for d in ("bin", "etc", "tmp", "root")]
        entries.append(("bin/busybox", Path(busybox).read_bytes(), None, 0o755))
        entries += [(f"bin/{a}", None, "busybox", 0o777) for a in applets]
        entries.append(("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
                        None, 0o644))
        entries.append(("etc/group", b"root:x:0:\nnogroup:x:65534:\n", None, 0o644))
        write_oci_archive(out[BUSYBOX_IMAGE], BUSYBOX_IMAGE, _tar_bytes(entries),
                          {"Cmd": ["sh"], "Env": ["PATH=/bin"]})
        progress(f"images: {', '.join(str(p) for p in out.values())}")
        return out


def export_image(ref: str, archive: Path) -> Path:
    """Write image ``ref`` from root's containers storage (podman/buildah) to a docker-archive at
    ``archive`` (it keeps the name ``ref``, which ``ctr images import`` takes over)."""
    archive.unlink(missing_ok=True)
    if shutil.which("podman"):
        _run(["podman", "save", "--format", "docker-archive", "-o", str(archive), ref])
    elif shutil.which("buildah"):
        _run(["buildah", "push", ref, f"docker-archive:{archive}:{ref}"])
    else:
        raise NodesError(f"neither podman nor buildah to export {ref} (`bash .ci/image-build` installs them)")
    return archive


def build_all(progress: ProgressFn = _say) -> tuple[Path, Path, dict[str, Path]]:
    """Packages, kubelet + kube-proxy, containerd and images; what ``up_nodes`` needs."""
    ensure_packages(progress)
    node_bin = build_node_binaries(progress)
    ctrd_bin = build_containerd(progress)
    return node_bin, ctrd_bin, build_images(progress)


# --------------------------------------------------------------------------------------------
# Host state: what the nodes may change, recorded before and restored after
# --------------------------------------------------------------------------------------------


def _cgroup_v2() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


def cgroup_hierarchies() -> list[Path]:
    """Mount points of the cgroup hierarchies: [/sys/fs/cgroup] on v2, one per controller on v1."""
    if _cgroup_v2():
        return [Path("/sys/fs/cgroup")]
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        if fstype in ("cgroup", "cgroup2"):
            out.append(Path(left.split()[4]))
    return sorted(out)


def _iptables_chains() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for tool in ("iptables-save", "ip6tables-save"):
        if shutil.which(tool) is None:
            continue
        chains, table = [], ""
        for line in _run([tool], check=False).splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":"):
                chains.append(f"{table}/{line[1:].split()[0]}")
        out[tool.split("-")[0]] = sorted(chains)
    return out


def host_snapshot() -> dict[str, Any]:
    """What a node bed may change on the host: kernel tunables, iptables chains (v4, v6), mount
    points, top-level cgroups, watched directories, network links and named network namespaces."""
    sysctls = {}
    for key in SYSCTLS:
        with contextlib.suppress(OSError):
            sysctls[key] = Path("/proc/sys", key).read_text().strip()
    mounts = sorted({line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()})
    cgroups = {str(h): sorted(p.name for p in h.iterdir() if p.is_dir()) for h in cgroup_hierarchies()}
    links = sorted(json.loads(_run(["ip", "-j", "link", "show"]) or "[]"), key=lambda x: x["ifname"])
    netns = sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
    return {
        "sysctls": sysctls,
        "iptables": _iptables_chains(),
        "mounts": mounts,
        "cgroups": cgroups,
        "dirs": sorted(d for d in WATCHED_DIRS if os.path.lexists(d)),
        "links": [x["ifname"] for x in links],
        "netns": netns,
    }


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    HOST_STATE_DIR.mkdir(exist_ok=True)
    with open(HOST_STATE_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _host_register(bed_dir: Path, bed: dict[str, Any]) -> None:
    """Record the host's state before the first node bed; note ``bed_dir`` (``bed``: its id and node
    count) as an owner. Owners whose processes are gone (a pytest killed outright: the kubelets die
    with it, containerd's shims do not) are cleaned up first."""
    baseline = HOST_STATE_DIR / "baseline.json"
    # snapshot before HOST_STATE_DIR exists, so that the baseline does not list it
    snap = host_snapshot() if not HOST_STATE_DIR.exists() else None
    with _host_lock():
        state = json.loads(baseline.read_text()) if baseline.exists() else {"owners": {}, "snapshot": snap}
        if state["snapshot"] is None:
            state["snapshot"] = host_snapshot()
        state["owners"] = _live_owners(state["owners"], skip=bed_dir)
        state["owners"][str(bed_dir)] = bed
        baseline.write_text(json.dumps(state, indent=1) + "\n")


def _live_owners(owners: dict[str, Any], skip: Path) -> dict[str, Any]:
    """``owners`` without ``skip`` and without beds whose node processes are all gone, whose
    leftovers (processes in their cgroups, their bridge) are removed here."""
    if isinstance(owners, list):  # written by an older version of this file
        owners = {o: {"id": bed_id(Path(o)), "count": 0} for o in owners}
    live = {}
    for o, info in owners.items():
        if o == str(skip):
            continue
        # a bed registers before it starts its first node process: young ones count as live
        if time.time() - float(info.get("since", 0)) < 300 or _bed_has_live_nodes(Path(o)):
            live[o] = info
            continue
        for i in range(int(info.get("count", 0))):
            with contextlib.suppress(NodesError):
                _remove_cgroup(f"{info['id']}-node-{i}", timeout=10)
        _run(["ip", "link", "del", str(info["id"])], check=False)
    return live


def _host_unregister(bed_dir: Path, progress: ProgressFn) -> None:
    """Forget ``bed_dir``; when no node bed is left, restore the recorded host state."""
    baseline = HOST_STATE_DIR / "baseline.json"
    if not baseline.exists():
        return
    with _host_lock():
        state = json.loads(baseline.read_text())
        owners = _live_owners(state["owners"], skip=bed_dir)
        if owners:
            state["owners"] = owners
            baseline.write_text(json.dumps(state, indent=1) + "\n")
            return
        restore_host(state["snapshot"], progress)
        baseline.unlink()
    with contextlib.suppress(OSError):
        (HOST_STATE_DIR / "lock").unlink()
        HOST_STATE_DIR.rmdir()


def _bed_has_live_nodes(bed_dir: Path) -> bool:
    try:
        state = json.loads((bed_dir / "state.json").read_text())
    except (OSError, ValueError):
        return False
    import bed

    tb = bed.Testbed.__new__(bed.Testbed)
    tb.dir, tb._state, tb._popen, tb.die_with_parent = bed_dir, state, {}, False
    return any(tb.is_running(n) for n in state.get("processes", {}) if n.startswith("node-"))


def restore_host(snapshot: dict[str, Any], progress: ProgressFn = _say) -> list[str]:
    """Undo what differs from ``snapshot``: tunables written back, iptables chains that appeared
    flushed and deleted, directories that appeared removed. Returns what it changed."""
    done = []
    now = host_snapshot()
    for key, value in snapshot["sysctls"].items():
        if now["sysctls"].get(key) != value:
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value + "\n")
                done.append(f"{key.replace('/', '.')}={value}")
    for family, chains in now["iptables"].items():
        before = set(snapshot["iptables"].get(family, []))
        new = [c for c in chains if c not in before]
        tool = "iptables" if family == "iptables" else "ip6tables"
        for c in new:  # flush all first: a chain referenced by a rule cannot be deleted
            table, chain = c.split("/", 1)
            _run([tool, "-w", "-t", table, "-F", chain], check=False)
        for c in new:
            table, chain = c.split("/", 1)
            for builtin in ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"):
                while _run([tool, "-w", "-t", table, "-D", builtin, "-j", chain], check=False) == "" and \
                        subprocess.run([tool, "-w", "-t", table, "-C", builtin, "-j", chain],
                                       capture_output=True).returncode == 0:
                    pass
            _run([tool, "-w", "-t", table, "-X", chain], check=False)
            done.append(f"{tool} -t {table} -X {chain}")
    for d in now["dirs"]:
        if d not in snapshot["dirs"] and d != HOST_STATE_DIR.as_posix():
            with contextlib.suppress(OSError):
                if os.path.isdir(d) and not os.path.islink(d):
                    shutil.rmtree(d)
                else:
                    os.unlink(d)
                done.append(f"rm {d}")
    if done:
        progress(f"restored the host: {'; '.join(done)}")
    return done


def diff_snapshots(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``{key: (before, after)}`` for every part of two :func:`host_snapshot` results that differs."""
    return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after))
            if before.get(k) != after.get(k)}


# --------------------------------------------------------------------------------------------
# The nodes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeNet:
    """Addresses of one bed's node network (index ``x`` in 1..99)."""

    x: int

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"172.30.{self.x}.0/24")

    @property
    def host_ip(self) -> str:
        """The bridge's address on the host (the apiserver proxy listens here)."""
        return f"172.30.{self.x}.1"

    def node_ip(self, i: int) -> str:
        return f"172.30.{self.x}.{i + 2}"

    def pod_cidr(self, i: int) -> str:
        return f"10.{100 + self.x}.{i}.0/24"

    @property
    def cluster_cidr(self) -> str:
        return f"10.{100 + self.x}.0.0/16"


def bed_id(bed_dir: Path) -> str:
    """A short id of the bed (link and cgroup names): ``tb`` + 4 hex digits of its directory's hash."""
    return "tb" + hashlib.sha256(str(bed_dir).encode()).hexdigest()[:4]


def _pick_net() -> NodeNet:
    used = _run(["ip", "-4", "-o", "addr", "show"])
    for x in range(1, 100):
        if f" 172.30.{x}." not in used and f" 10.{100 + x}." not in used:
            return NodeNet(x)
    raise NodesError("no free 172.30.X.0/24 node network (1..99 all in use)")


def _cgroup_paths(name: str) -> list[Path]:
    return [h / name for h in cgroup_hierarchies()]


def _make_cgroup(rel: str) -> None:
    """mkdir ``rel`` in every hierarchy (cpuset: cpus and mems copied from the parent)."""
    for h in cgroup_hierarchies():
        path = h / rel
        parts = Path(rel).parts
        for depth in range(1, len(parts) + 1):
            p = h.joinpath(*parts[:depth])
            if not p.exists():
                p.mkdir()
                for f in ("cpuset.cpus", "cpuset.mems"):
                    if (p / f).exists() and not (p / f).read_text().strip():
                        (p / f).write_text((p.parent / f).read_text())
        assert path.is_dir()


def _cgroup_pids(rel: str) -> set[int]:
    pids: set[int] = set()
    for h in cgroup_hierarchies():
        root = h / rel
        if not root.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(root):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
    return pids


def _remove_cgroup(rel: str, timeout: float = 30.0) -> None:
    """SIGKILL every process in cgroup ``rel`` (all hierarchies), then rmdir it bottom-up."""
    deadline = time.monotonic() + timeout
    while pids := _cgroup_pids(rel):
        for h in cgroup_hierarchies():  # thaw, in case a freezer holds them
            with contextlib.suppress(OSError):
                if (h / rel / "freezer.state").exists():
                    (h / rel / "freezer.state").write_text("THAWED")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise NodesError(f"processes {sorted(pids)} in cgroup {rel} survive SIGKILL")
        time.sleep(0.1)
    for h in cgroup_hierarchies():
        root = h / rel
        if not root.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda t: -len(t[0])):
            for _ in range(50):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the kernel finishes with exited tasks
                    time.sleep(0.1)


class Nodes:
    """The real nodes of one :class:`bed.Testbed` (state in ``DIR/state.json`` under ``"nodes"``)."""

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb
        self.id = bed_id(tb.dir)

    # -- state and names -------------------------------------------------------------------------
    @property
    def state(self) -> dict[str, Any]:
        return self.tb._state.setdefault("nodes", {})  # type: ignore[no-any-return]

    @property
    def count(self) -> int:
        return int(self.state.get("count", 0))

    @property
    def net(self) -> NodeNet:
        return NodeNet(int(self.state["net"]))

    @property
    def bridge(self) -> str:
        return self.id

    def name(self, i: int) -> str:
        """The Node's name: ``<id>-node-<i>`` (unique per bed, so beds never share a Node)."""
        return f"{self.id}-node-{i}"

    def names(self) -> list[str]:
        return [self.name(i) for i in range(self.count)]

    def dir(self, i: int) -> Path:
        return self.tb.dir / "nodes" / str(i)

    def cgroup(self, i: int) -> str:
        """The kubelet's cgroupRoot; the node's own processes are in its ``system`` child."""
        return f"{self.id}-node-{i}"

    def proc(self, i: int, what: str) -> str:
        """Process name in the bed (pid file, log): ``node-<i>-<what>``."""
        return f"node-{i}-{what}"

    def socket(self, i: int) -> Path:
        """containerd's socket as seen from the host."""
        return self.dir(i) / "run" / "containerd" / "containerd.sock"

    def holder_pid(self, i: int) -> int:
        pid = self.tb.pid(self.proc(i, "ns"))
        if pid is None:
            raise NodesError(f"node {i}'s namespaces are gone (its holder process is not running)")
        return pid

    # -- bring-up --------------------------------------------------------------------------------
    def up(self, count: int, progress: ProgressFn = _say, kubelet_config: dict[str, Any] | None = None) -> None:
        """Build what is missing, then bring up ``count`` nodes and wait until all are Ready."""
        if count < 1:
            return
        node_bin, ctrd_bin, images = build_all(progress)
        started = time.monotonic()
        _host_register(self.tb.dir, {"id": self.id, "count": count, "since": time.time()})
        self.state.update({"count": count, "node_bin": str(node_bin), "containerd_bin": str(ctrd_bin),
                           "images": {k: str(v) for k, v in images.items()},
                           "kubelet_config": kubelet_config or {}})
        with open(_cache_root() / ".nodes-net.lock", "a") as lock:  # one bridge per 172.30.X at a time
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.state.setdefault("net", _pick_net().x)
            self.tb._save_state()
            self._make_bridge()
        self._credentials()
        self._start_apiserver_proxy()
        self._kubernetes_endpoints()
        for i in range(count):
            self._make_namespaces(i)
        for i in range(count):
            self._start_containerd(i)
        threads = [threading.Thread(target=self._import_images, args=(i, list(images.values())))
                   for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(count):
            self.start_kubelet(i, wait_ready=False)
            self._start_kube_proxy(i)
        for i in range(count):
            self.wait_ready(i)
        # the ServiceAccount admission plugin is on: Pods in `default` need its `default` ServiceAccount
        self.tb._wait("kube-controller-manager",
                      lambda: self._api("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
                      60.0, "made ServiceAccount default/default")
        progress(f"{count} node(s) Ready in {time.monotonic() - started:.1f}s: {', '.join(self.names())}")

    def _make_bridge(self) -> None:
        net, br = self.net, self.bridge
        if not Path(f"/sys/class/net/{br}").exists():
            _run(["ip", "link", "add", br, "type", "bridge"])
        _run(["ip", "addr", "replace", f"{net.host_ip}/24", "dev", br])
        _run(["ip", "link", "set", br, "up"])

    def _credentials(self) -> None:
        import bed

        pki = bed._Pki(self.tb.pki_dir)
        for stem, cn, orgs in (("kube-proxy", "system:kube-proxy", ()),
                               *((f"kubelet-{i}", f"system:node:{self.name(i)}", ("system:nodes",))
                                 for i in range(self.count))):
            if not (self.tb.pki_dir / f"{stem}.crt").exists():
                pki.issue(stem, cn, orgs)
            self._kubeconfig(stem, cn)

    def _kubeconfig(self, stem: str, user: str) -> Path:
        """A kubeconfig that reaches the API server through the proxy on the bridge address."""
        q = json.dumps
        pki = self.tb.pki_dir
        path = self.tb.dir / f"{stem}.kubeconfig"
        path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: {q(f"https://{self.net.host_ip}:{self.tb.ports['kube-apiserver']}")}
    certificate-authority: {q(str(self.tb.ca_file))}
    tls-server-name: localhost
users:
- name: {q(user)}
  user:
    client-certificate: {q(str(pki / f"{stem}.crt"))}
    client-key: {q(str(pki / f"{stem}.key"))}
contexts:
- name: testbed
  context: {{cluster: testbed, user: {q(user)}}}
current-context: testbed
""")
        return path

    def _start_apiserver_proxy(self) -> None:
        port = self.tb.ports["kube-apiserver"]
        if self.tb.is_running(APISERVER_PROXY):
            return
        self.tb._spawn(APISERVER_PROXY, [sys.executable, str(Path(__file__).resolve()), "forward",
                                         self.net.host_ip, str(port), "127.0.0.1", str(port)], port)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection((self.net.host_ip, port), timeout=1):
                return
            if time.monotonic() > deadline:
                raise NodesError(f"{APISERVER_PROXY} does not listen on {self.net.host_ip}:{port}")
            time.sleep(0.05)

    def _api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        import ssl
        import urllib.error
        import urllib.request

        ctx = self.tb._admin_ssl()
        req = urllib.request.Request(f"{self.tb.server}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")
        except (urllib.error.URLError, ssl.SSLError, OSError) as e:
            return 0, {"error": str(e)}

    def _kubernetes_endpoints(self) -> None:
        """The ``kubernetes`` Service's EndpointSlice: the API server via the bridge-address proxy
        (the bed's API server runs with ``--endpoint-reconciler-type=none``)."""
        port = self.tb.ports["kube-apiserver"]
        body = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes",
                                    "endpointslice.kubernetes.io/managed-by": "py-scheduler-testbed"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.net.host_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }
        self._api("DELETE", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")
        code, out = self._api("POST", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", body)
        if code not in (200, 201):
            raise NodesError(f"creating the kubernetes EndpointSlice: HTTP {code} {out}")

    def _make_namespaces(self, i: int) -> None:
        """The holder process (network + mount namespace), the bind mounts, eth0, routes, cgroups."""
        d = self.dir(i)
        for sub in NODE_DIRS:
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "var-lib" / "kubelet").mkdir(exist_ok=True)
        _make_cgroup(f"{self.cgroup(i)}/system")
        if _cgroup_v2():  # the kubelet's kubepods (a sibling of `system`) needs the controllers delegated
            node_cg = Path("/sys/fs/cgroup", self.cgroup(i))
            wanted = " ".join(f"+{c}" for c in (node_cg / "cgroup.controllers").read_text().split())
            if wanted:
                (node_cg / "cgroup.subtree_control").write_text(wanted)
        name = self.proc(i, "ns")
        if not self.tb.is_running(name):
            self.tb._spawn(name, ["unshare", "--net", "--mount", "--propagation", "private", "--",
                                  "sleep", "infinity"])
        pid = self.holder_pid(i)
        self._join_cgroup(i, pid)
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            if time.monotonic() > deadline:
                raise NodesError("unshare did not create a network namespace")
            time.sleep(0.01)
        net = self.net
        script = "\n".join([
            "set -e",
            *(f"mount --bind {d / sub} {target}" for sub, target in zip(NODE_DIRS, ("/var/lib", "/var/log", "/run"),
                                                                         strict=True)),
            "ip link set lo up",
        ])
        self._nsexec(i, ["sh", "-c", script])
        host_end, peer = f"{self.id}n{i}", f"{self.id}p{i}"
        if not Path(f"/sys/class/net/{host_end}").exists():
            _run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", peer])
            _run(["ip", "link", "set", peer, "netns", str(pid)])
        _run(["ip", "link", "set", host_end, "master", self.bridge, "up"])
        routes = [f"ip route replace {net.pod_cidr(j)} via {net.node_ip(j)}" for j in range(self.count) if j != i]
        script = "\n".join([
            "set -e",
            f"ip link set {peer} name eth0 2>/dev/null || true",
            f"ip addr replace {net.node_ip(i)}/24 dev eth0",
            "ip link set eth0 up",
            # Service addresses: DNAT'd by kube-proxy; the route only has to exist for the node's
            # own connections (its OUTPUT chain runs after the routing decision)
            f"ip route replace 10.0.0.0/24 via {net.host_ip}",
            *routes,
            "echo 1 > /proc/sys/net/ipv4/ip_forward",
        ])
        self._nsexec(i, ["sh", "-c", script])
        (d / "resolv.conf").write_text("# written by the test bed: no nameserver, Pods resolve nothing\n"
                                       "options ndots:1\n")
        cni = d / "cni" / "net.d"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-testbed.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "testbed",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": net.pod_cidr(i)}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=1) + "\n")

    def _nsexec(self, i: int, argv: Sequence[str], *, check: bool = True) -> str:
        return _run(["nsenter", "-t", str(self.holder_pid(i)), "-n", "-m", "--", *argv], check=check)

    def nsexec(self, i: int, argv: Sequence[str], *, check: bool = True) -> str:
        """Run ``argv`` in node ``i``'s network and mount namespaces; returns stdout."""
        return self._nsexec(i, argv, check=check)

    def _join_cgroup(self, i: int, pid: int) -> None:
        for p in _cgroup_paths(f"{self.cgroup(i)}/system"):
            with contextlib.suppress(OSError):
                (p / "cgroup.procs").write_text(f"{pid}\n")

    def _spawn_in_node(self, i: int, what: str, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
        """Start ``argv`` as ``node-<i>-<what>``, in the node's cgroup and namespaces."""
        procs = " ".join(str(p / "cgroup.procs") for p in _cgroup_paths(f"{self.cgroup(i)}/system"))
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        wrapper = ("for f in " + procs + "; do echo $$ > $f 2>/dev/null || true; done; "
                   f'exec nsenter -t {self.holder_pid(i)} -n -m -- env {" ".join(envs)} "$@"')
        return self.tb._spawn(self.proc(i, what), ["sh", "-c", wrapper, "sh", *argv])

    def _containerd_config(self, i: int) -> Path:
        d = self.dir(i)
        cfg = f"""version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["/run/cdi"]
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{d / 'cni' / 'net.d'}"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{shutil.which('runc') or 'runc'}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd-opt"
"""
        path = d / "containerd.toml"
        path.write_text(cfg)
        return path

    def _start_containerd(self, i: int, timeout: float = 60.0) -> None:
        bin_dir = Path(self.state["containerd_bin"])
        cfg = self._containerd_config(i)
        name = self.proc(i, "containerd")
        self._spawn_in_node(i, "containerd", [str(bin_dir / "containerd"), "--config", str(cfg)],
                            env={"PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})

        def ready() -> bool:
            out = subprocess.run([str(bin_dir / "ctr"), "--address", str(self.socket(i)), "version"],
                                 capture_output=True, timeout=5)
            return out.returncode == 0

        self.tb._wait(name, ready, timeout, "serving (ctr version)")

    def ctr(self, i: int, *args: str, check: bool = True) -> str:
        """Run ``ctr -n k8s.io ARGS`` against node ``i``'s containerd; returns stdout."""
        return _run([str(Path(self.state["containerd_bin"]) / "ctr"), "--address", str(self.socket(i)),
                     "-n", "k8s.io", *args], check=check)

    def _import_images(self, i: int, archives: Sequence[Path]) -> None:
        for a in archives:
            self.ctr(i, "images", "import", "--local", str(a))

    def import_image(self, archive: Path, nodes: Sequence[int] | None = None,
                     tags: Sequence[tuple[str, str]] = ()) -> None:
        """Import an OCI/Docker image archive into the containerd of every node (or of ``nodes``)
        (what ``kind load image-archive`` does); then ``ctr images tag SRC DST`` for each of ``tags``."""
        for i in range(self.count) if nodes is None else nodes:
            self.ctr(i, "images", "import", "--local", str(archive))
            for src, dst in tags:
                self.ctr(i, "images", "tag", "--force", src, dst)

    def import_py_scheduler_image(self, version: str, archive: Path | None = None) -> str:
        """Import ``localhost/py-scheduler:VERSION`` (what ``bash .ci/image-build`` builds into root's
        containers storage) into every node, also tagged ``docker.io/library/py-scheduler:VERSION``:
        the name containerd gives the ``py-scheduler:VERSION`` that ``kubectl kustomize deploy/``
        renders. Returns that name."""
        src, dst = f"localhost/py-scheduler:{version}", f"docker.io/library/py-scheduler:{version}"
        archive = archive or self.tb.dir / f"py-scheduler-{version}.docker.tar"
        export_image(src, archive)
        self.import_image(archive, tags=[(src, dst)])
        return dst

    def _kubelet_config(self, i: int) -> Path:
        cfg: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup(i)}",
            "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
            "address": self.net.node_ip(i),
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.tb.ca_file)}},
            "authorization": {"mode": "AlwaysAllow"},
            "resolvConf": str(self.dir(i) / "resolv.conf"),
            "clusterDomain": "cluster.local",
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "failSwapOn": False,
            "nodeStatusUpdateFrequency": "4s",
            "nodeLeaseDurationSeconds": 12,  # renewed every 3 s; kube-controller-manager's grace is 20 s
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "shutdownGracePeriod": "0s",
            "containerLogMaxSize": "5Mi",
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
        }
        if not _cgroup_v2():
            cfg["failCgroupV1"] = False
        cfg.update(self.state.get("kubelet_config") or {})
        path = self.dir(i) / "kubelet.config.json"
        path.write_text(json.dumps(cfg, indent=1) + "\n")  # JSON is YAML
        return path

    def start_kubelet(self, i: int, *, wait_ready: bool = True, timeout: float = 60.0) -> None:
        """Start node ``i``'s kubelet (again); with ``wait_ready``, until its Node is Ready."""
        cfg = self._kubelet_config(i)
        v = os.environ.get("TESTBED_KUBELET_V", "1")
        argv = [str(Path(self.state["node_bin"]) / "kubelet"), f"--config={cfg}",
                f"--kubeconfig={self.tb.dir / f'kubelet-{i}.kubeconfig'}", f"--hostname-override={self.name(i)}",
                f"--node-ip={self.net.node_ip(i)}", f"--v={v}"]
        self._spawn_in_node(i, "kubelet", argv,
                            env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
        if wait_ready:
            self.wait_ready(i, timeout)

    def stop_kubelet(self, i: int, *, kill: bool = False) -> bool:
        """Stop node ``i``'s kubelet (its containers keep running, as when a real kubelet stops)."""
        return self.tb.stop(self.proc(i, "kubelet"), kill=kill)

    def node_ready(self, i: int) -> bool:
        code, node = self._api("GET", f"/api/v1/nodes/{self.name(i)}")
        if code != 200:
            return False
        conds = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def wait_ready(self, i: int, timeout: float = 60.0) -> None:
        self.tb._wait(self.proc(i, "kubelet"), lambda: self.node_ready(i), timeout, f"Node {self.name(i)} Ready")

    def _start_kube_proxy(self, i: int) -> None:
        cfg = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.tb.dir / "kube-proxy.kubeconfig")},
            "hostnameOverride": self.name(i),
            "mode": "iptables",
            "clusterCIDR": self.net.cluster_cidr,
            "iptables": {"masqueradeAll": True},
            # conntrack tunables are host-wide or read-only in a network namespace: leave them
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                          "udpTimeout": "0s", "udpStreamTimeout": "0s"},
            "metricsBindAddress": "127.0.0.1:10249",
            "healthzBindAddress": "127.0.0.1:10256",
        }
        path = self.dir(i) / "kube-proxy.config.json"
        path.write_text(json.dumps(cfg, indent=1) + "\n")
        v = os.environ.get("TESTBED_KUBE_PROXY_V", "1")
        self._spawn_in_node(i, "kube-proxy",
                            [str(Path(self.state["node_bin"]) / "kube-proxy"), f"--config={path}", f"--v={v}"],
                            env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})

    # -- tear-down -------------------------------------------------------------------------------
    def down(self, progress: ProgressFn = _say) -> list[str]:
        """Stop every node (kubelet, kube-proxy, then everything left in its cgroup: containers,
        shims, containerd, the namespace holder), remove cgroups, links and the proxy; restore the
        host once no other node bed runs. Returns the processes stopped."""
        stopped = []
        for i in range(self.count):
            for what in ("kube-proxy", "kubelet"):
                if self.tb.stop(self.proc(i, what), 10.0):
                    stopped.append(self.proc(i, what))
        for i in range(self.count):
            for what in ("containerd", "ns"):
                if self.tb.stop(self.proc(i, what), 5.0, kill=True):
                    stopped.append(self.proc(i, what))
            _remove_cgroup(self.cgroup(i))
        if self.tb.stop(APISERVER_PROXY, 5.0):
            stopped.append(APISERVER_PROXY)
        if self.count and "net" in self.state:
            for i in range(self.count):
                _run(["ip", "link", "del", f"{self.id}n{i}"], check=False)
            _run(["ip", "link", "del", self.bridge], check=False)
        if self.count:
            _host_unregister(self.tb.dir, progress)
        return stopped


# --------------------------------------------------------------------------------------------
# The API server forwarder (``python3 nodes.py forward LISTEN_IP PORT TARGET_IP PORT``)
# --------------------------------------------------------------------------------------------


def forward(listen_ip: str, listen_port: int, target_ip: str, target_port: int) -> None:
    """Copy bytes between each connection to LISTEN and a new one to TARGET, both ways."""
    import asyncio

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target_ip, target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main() -> None:
        server = await asyncio.start_server(handle, listen_ip, listen_port, reuse_address=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "forward":
        sys.path.insert(0, str(MODULE_DIR))
        forward(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit("usage: nodes.py forward LISTEN_IP PORT TARGET_IP PORT  (the CLI is ./testbed)")
