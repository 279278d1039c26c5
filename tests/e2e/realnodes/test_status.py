"""``testbed status`` on the shared real-node bed shows every node's kubelet and containerd (issue 27's
acceptance: "``testbed status`` shows kubelets and containerds").

Runs the real command line (``tests/e2e/testbed/testbed status DIR``) in a subprocess, as a user does,
and matches the exact lines it prints for each node against what this process sees: the pid ``status``
names for ``node-<i>-kubelet`` / ``node-<i>-containerd`` must be the one in the bed's pid file, and that
process's executable the kubelet / containerd binary the bed built. A node whose kubelet or containerd
were down would print ``stopped``/``CRASHED`` (and ``NotReady``) there and fail it; ``test_lifecycle``
checks that side on a kubelet it really stops.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.helpers import Testbed
from tests.e2e.realnodes.support import bed_status, status_line

pytestmark = pytest.mark.timeout(120)


def test_status_shows_each_nodes_kubelet_and_containerd_running(realnodes: Testbed) -> None:
    nodes = realnodes.nodes
    rc, lines = bed_status(realnodes)
    assert rc == 0, lines  # something runs and nothing crashed
    binaries = {"kubelet": Path(nodes.state["node_bin"]) / "kubelet",
                "containerd": Path(nodes.state["containerd_bin"]) / "containerd"}
    assert len(nodes.names()) == 2
    for i, name in enumerate(nodes.names()):
        pids: dict[str, int] = {}
        for what, binary in binaries.items():
            proc = nodes.proc(i, what)
            pid = realnodes.pid(proc)
            assert pid is not None, f"{proc} is not running"
            assert Path(f"/proc/{pid}/exe").resolve() == binary.resolve(), f"pid {pid} of {proc} is not {binary}"
            pids[what] = pid
            line = status_line(lines, proc)
            assert re.fullmatch(rf"{re.escape(proc)}\s+running\s+pid {pid}\s+port -\s+"
                                rf"log {re.escape(str(realnodes.log_file(proc)))}", line), line
        line = status_line(lines, "node", name)
        assert re.fullmatch(rf"node {re.escape(name)}\s+Ready\s+ip {re.escape(nodes.net.node_ip(i))}\s+"
                            rf"pods {re.escape(nodes.net.pod_cidr(i))}\s+kubelet running pid {pids['kubelet']}\s+"
                            rf"containerd running pid {pids['containerd']}\s+"
                            rf"socket {re.escape(str(nodes.socket(i)))}", line), line
