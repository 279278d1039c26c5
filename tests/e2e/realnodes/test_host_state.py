"""``testbed down`` leaves the host as ``up`` found it (issue 27, item 1).

A bed of its own (one node), so that the shared ``realnodes`` bed is not up yet when this module runs
first (file order): the kubelet really sets its kernel tunables, containerd and the CNI plugins
really make their directories, mounts, links, cgroups and iptables chains, and ``down`` must undo
every one of them on the host.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.realnodes.conftest import bring_up, nodes
from tests.e2e.realnodes.support import busybox_pod, kubectl

pytestmark = pytest.mark.timeout(240)


def test_down_restores_the_host() -> None:
    before = nodes.host_snapshot()
    root = Path(tempfile.mkdtemp(prefix="py-scheduler-nodes-down-", dir="/tmp"))
    tb = bring_up(root, count=1)
    try:
        during = nodes.host_snapshot()
        n = tb.nodes
        # a Pod really runs (volumes mounted, a sandbox network made, logs written)
        pod = busybox_pod("host-state", ["sh", "-c", "echo ran"], scheduler="default-scheduler")
        kubectl(tb, "create", "-f", "-", input_json=pod)
        kubectl(tb, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/host-state", "--timeout=60s")
        assert kubectl(tb, "logs", "host-state").strip() == "ran"
        assert n.cgroup(0) in " ".join(during["cgroups"].get(str(nodes.cgroup_hierarchies()[0]), []))
        assert n.bridge in during["links"]
    finally:
        tb.down()
    after = nodes.host_snapshot()
    shutil.rmtree(root, ignore_errors=True)
    mine = tb.nodes.id
    others = _other_beds(before, mine) | _other_beds(after, mine)
    before, during, after = (_without(s, others) for s in (before, during, after))
    assert nodes.diff_snapshots(before, after) == {}
    if not others:
        # the last bed down removes the beds' own bookkeeping, a dead bed's leftover included
        assert not nodes.HOST_STATE_DIR.exists()
    # the bed changed the host while it ran (else this test proves nothing)
    assert nodes.diff_snapshots(before, during)


_BED = re.compile(r"^tb[0-9a-f]{4}")


def _other_beds(snapshot: dict[str, Any], mine: str) -> set[str]:
    """Ids of other node beds on this machine (another session's tests running at the same time)."""
    names = [*snapshot["links"], *(c for cs in snapshot["cgroups"].values() for c in cs)]
    return {m.group(0) for n in names if (m := _BED.match(n)) and m.group(0) != mine}


def _without(snapshot: dict[str, Any], others: set[str]) -> dict[str, Any]:
    """``snapshot`` without the beds' bookkeeping directory, podman's container mounts and other beds'
    links and cgroups; while other node beds come and go their kubelets set the same kernel tunables, so
    those are compared only when this bed is alone (as in CI)."""
    out = dict(snapshot)
    # the beds' own bookkeeping (a bed killed outright in an earlier run leaves it; ``down`` removes it),
    # not a change the nodes make to the host
    out["dirs"] = [d for d in snapshot["dirs"] if d != nodes.HOST_STATE_DIR.as_posix()]
    # podman/buildah containers (tests/image, .ci/image-build) mount there; the bed never does
    out["mounts"] = [m for m in snapshot["mounts"] if not m.startswith("/var/lib/containers/")]
    if not others:
        return out
    out["links"] = [x for x in snapshot["links"] if not (_BED.match(x) and x[:6] in others)]
    out["cgroups"] = {h: [c for c in cs if not (_BED.match(c) and c[:6] in others)]
                      for h, cs in snapshot["cgroups"].items()}
    out.pop("sysctls")
    return out
