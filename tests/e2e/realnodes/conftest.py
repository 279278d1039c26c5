"""Session fixtures for tests on real nodes: one bed with 2 kubelets (tests/e2e/testbed/nodes.py).

Fixtures (all session-scoped, reusable by any module under tests/e2e/realnodes):

* ``realnodes`` - a running :class:`bed.Testbed` with etcd, kube-apiserver, kube-controller-manager
  (every controller, node lifecycle included), upstream kube-scheduler (``default-scheduler``) and
  :data:`NODE_COUNT` real nodes, each a kubelet v1.37.2 + containerd + kube-proxy in namespaces of
  its own. ``realnodes.nodes`` is its :class:`nodes.Nodes` (``.names()``, ``.stop_kubelet(i)``,
  ``.start_kubelet(i)``, ``.ctr(i, ...)``, ``.import_image(archive)``, ``.nsexec(i, argv)``).
* ``realnodes_api`` - an admin ``kubernetes_asyncio`` ApiClient for it; ``realnodes_core`` - CoreV1Api.

Everything is built before the first test (outside pytest-timeout's clock): Debian packages when
missing, kubelet + kube-proxy + containerd into ~/.cache, the pause and busybox images. The bed is
stopped, and the host restored, at teardown, at exit and on SIGTERM/SIGHUP; its directory is kept
when a test failed or TESTBED_KEEP=1.

The kubelets get small ``maxPods`` so a burst of Pods needs finished Pods' room (item 4 of issue 27);
``KUBELET_CONFIG`` is what the fixture merges over the bed's KubeletConfiguration.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import api_client_for, bed, client_configuration

sys.path.insert(0, str(Path(bed.__file__).resolve().parent))
import nodes  # tests/e2e/testbed (tests.e2e.helpers puts it on sys.path too)

NODE_COUNT = 2
KUBELET_CONFIG: dict[str, Any] = {"maxPods": 40}

_build_error: BaseException | None = None
REALNODES_DIR = Path(__file__).resolve().parent
REPO = REALNODES_DIR.parents[2]


FIRST, LAST = ("test_host_state",), ("test_lifecycle",)
"""Run order: the host check before the shared bed exists; the kubelet-stopping tests last; every other
module between them, in pytest's order."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order this directory's tests: :data:`FIRST`, the rest, :data:`LAST` (stable: other tests keep their
    places)."""
    mine = [i for i in items if REALNODES_DIR in Path(str(i.path)).resolve().parents]
    if not mine:
        return
    def rank(item: pytest.Item) -> int:
        stem = Path(str(item.path)).stem
        return 0 if stem in FIRST else 2 if stem in LAST else 1

    ordered = iter(sorted(mine, key=rank))
    items[:] = [next(ordered) if i in mine else i for i in items]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build what nodes need now, outside any test's timeout, if a test here is selected."""
    global _build_error
    if session.config.option.collectonly:
        return
    if not any(REALNODES_DIR in Path(str(i.path)).resolve().parents for i in session.items):
        return
    try:
        bed.build()
        nodes.build_all()
    except (bed.TestbedError, nodes.NodesError, OSError) as e:
        _build_error = e
    if any("py_scheduler_image" in getattr(i, "fixturenames", ()) for i in session.items
           if REALNODES_DIR in Path(str(i.path)).resolve().parents):
        _build_image()


_image_error: str | None = None


def _build_image() -> None:
    """``bash .ci/image-build`` (cached by its build context's hash: nothing to do when unchanged), once,
    before the tests run (a cold build takes minutes: outside any test's timeout)."""
    global _image_error
    out = subprocess.run(["bash", str(REPO / ".ci" / "image-build")], cwd=REPO, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        _image_error = f".ci/image-build failed ({out.returncode}):\n{out.stderr[-3000:]}"


@pytest.fixture(scope="session")
def py_scheduler_image(realnodes: bed.Testbed) -> str:
    """``localhost/py-scheduler:VERSION`` (built at collection by ``.ci/image-build``) imported into every
    node's containerd, also as ``docker.io/library/py-scheduler:VERSION``, the name the manifests'
    ``py-scheduler:VERSION`` resolves to; returns that name."""
    if _image_error is not None:
        pytest.fail(_image_error, pytrace=False)
    version = str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])
    return str(realnodes.nodes.import_py_scheduler_image(version))


class _Stopper:
    """Brings the bed down once: teardown, atexit or SIGTERM/SIGHUP, whichever comes first."""

    def __init__(self, tb: bed.Testbed) -> None:
        self.tb, self.done = tb, False
        self.previous: dict[int, Any] = {}
        atexit.register(self.run)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self.previous[sig] = signal.signal(sig, self._on_signal)

    def run(self) -> None:
        if not self.done:
            self.done = True
            self.tb.down()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.run()
        self.uninstall()
        os.kill(os.getpid(), signum)

    def uninstall(self) -> None:
        atexit.unregister(self.run)
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()


def bring_up(root: Path, count: int = NODE_COUNT, **kwargs: Any) -> bed.Testbed:
    """A bed with ``count`` real nodes in ``root`` (for tests that need their own, e.g. to check ``down``)."""
    tb = bed.Testbed(root, die_with_parent=True)
    tb.up(with_kube_scheduler=True, nodes=count, kubelet_config={**KUBELET_CONFIG, **kwargs})
    return tb


@pytest.fixture(scope="session")
def realnodes(request: pytest.FixtureRequest) -> Iterator[bed.Testbed]:
    """The running bed with :data:`NODE_COUNT` real nodes."""
    if _build_error is not None:
        pytest.fail(f"building the test bed's nodes failed: {_build_error}", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="py-scheduler-nodes-", dir="/tmp"))
    tb = bed.Testbed(root, die_with_parent=True)
    stopper = _Stopper(tb)
    try:
        tb.up(with_kube_scheduler=True, nodes=NODE_COUNT, kubelet_config=KUBELET_CONFIG)
        yield tb
    finally:
        stopper.run()
        stopper.uninstall()
        if request.session.testsfailed or os.environ.get("TESTBED_KEEP"):
            print(f"\n[testbed] kept {root} (logs in {root / 'logs'})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
async def realnodes_api(realnodes: bed.Testbed) -> AsyncIterator[client.ApiClient]:
    cfg = client_configuration(realnodes.server, str(realnodes.ca_file), cert_file=str(realnodes.admin_cert),
                               key_file=str(realnodes.admin_key))
    async with api_client_for(cfg) as api:
        yield api


@pytest.fixture(scope="session")
def realnodes_core(realnodes_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(realnodes_api)
