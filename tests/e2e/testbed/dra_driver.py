"""Upstream's DRA test driver as a kubelet plugin on the bed's real nodes (issue 29, item 3).

``k8s.io/kubernetes/test/e2e/dra/test-driver`` from the bed's pinned module (a ``tool`` line in
``go.mod``), built like kubelet (:func:`nodes.build_node_binaries`) into
``CACHE_ROOT/dra-test-driver-k8s-<v>_<go>/dra-test-driver`` under a lock of its own.

On node ``i`` it runs as ``node-<i>-dra-driver`` inside the node's mount + network namespaces and
cgroup (so ``Nodes.down`` stops it with everything else)::

    dra-test-driver kubelet-plugin --node-name <node> --num-devices 4 --cdi-dir /run/cdi
        --enable-device-metadata --kubeconfig DIR/dra-driver.kubeconfig

Driver ``test-driver.cdi.k8s.io``, pool = the node's name, devices ``device-00`` .. ``device-03``
(no attributes). Its default ``--datadir`` ``/var/lib/kubelet/plugins`` and
``--plugin-registration-path`` ``/var/lib/kubelet/plugins_registry`` are the kubelet's; the driver only
creates the parent of its socket directory ``/var/lib/kubelet/plugins/test-driver.cdi.k8s.io``, which
is made first. Per prepared request it writes a CDI spec into ``/run/cdi`` (containerd's
``cdi_spec_dirs``) that sets ``claim_<claim>_<request>=true`` (plus ``user_<k>=<v>`` / ``admin_<k>=<v>``
from opaque config), and, with ``--enable-device-metadata``, one that mounts
``/var/run/kubernetes.io/dra-device-attributes/<claim>/<request>/metadata.json`` naming the devices.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bed
import nodes

DRIVER = "test-driver.cdi.k8s.io"
PACKAGE = "k8s.io/kubernetes/test/e2e/dra/test-driver"
BINARY = "dra-test-driver"
NUM_DEVICES = 4
PROC = "dra-driver"


def build(progress: nodes.ProgressFn = nodes._say) -> Path:
    """The driver binary (built once per k8s/go version, under ``.dra-test-driver.lock``)."""
    versions = bed.module_versions()
    dest = bed.CACHE_ROOT / f"dra-test-driver-k8s-{versions.kubernetes}_{versions.go}"

    def go_build(staging: Path) -> None:
        bed._run_go(["build", "-ldflags", bed._ldflags(versions.kubernetes), "-o", str(staging / BINARY), PACKAGE])

    out = nodes._build_into(dest, (BINARY,), ".dra-test-driver.lock", f"DRA test driver {versions.kubernetes}",
                            go_build, {"kubernetes": versions.kubernetes, "go": versions.go}, progress)
    return out / BINARY


def _kubeconfig(ns: nodes.Nodes) -> Path:
    """A kubeconfig (reaching the API server from inside a node) for the driver: it publishes
    ResourceSlices and reads claims; a system:masters certificate keeps it free of RBAC setup."""
    if not (ns.tb.pki_dir / "dra-driver.crt").exists():
        bed._Pki(ns.tb.pki_dir).issue("dra-driver", "dra-test-driver", ("system:masters",))
    return ns._kubeconfig("dra-driver", "dra-test-driver")


def start(ns: nodes.Nodes, i: int, binary: Path, *, timeout: float = 60.0) -> None:
    """Start the driver on node ``i`` and wait until its ResourceSlice for the node is published."""
    kubeconfig = _kubeconfig(ns)
    ns.nsexec(i, ["mkdir", "-p", f"/var/lib/kubelet/plugins/{DRIVER}", "/run/cdi"])
    ns._spawn_in_node(i, PROC, [str(binary), "kubelet-plugin", f"--kubeconfig={kubeconfig}",
                                f"--node-name={ns.name(i)}", f"--num-devices={NUM_DEVICES}", "--cdi-dir=/run/cdi",
                                "--enable-device-metadata", "-v=3"])
    ns.tb._wait(ns.proc(i, PROC), lambda: len(devices(ns, i)) == NUM_DEVICES, timeout,
                f"published a ResourceSlice with {NUM_DEVICES} devices")


def stop(ns: nodes.Nodes, i: int) -> bool:
    """Stop node ``i``'s driver (SIGTERM: it removes its sockets; its ResourceSlice stays)."""
    return ns.tb.stop(ns.proc(i, PROC))


def running(ns: nodes.Nodes, i: int) -> bool:
    return ns.tb.is_running(ns.proc(i, PROC))


def devices(ns: nodes.Nodes, i: int) -> list[str]:
    """Names of the devices the driver's ResourceSlices publish for node ``i``."""
    code, out = ns._api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
                        f"spec.nodeName={ns.name(i)},spec.driver={DRIVER}")
    if code != 200:
        return []
    items: list[dict[str, Any]] = out.get("items", [])
    return sorted(d["name"] for s in items for d in s.get("spec", {}).get("devices", []))


def start_all(ns: nodes.Nodes, progress: nodes.ProgressFn = nodes._say) -> None:
    """Build if needed, then run the driver on every node."""
    binary = build(progress)
    started = time.monotonic()
    for i in range(ns.count):
        if not running(ns, i):
            start(ns, i, binary)
    progress(f"DRA test driver on {ns.count} node(s) in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    print(json.dumps(str(build())))
