"""Session fixtures for tests/e2e: one real control plane (etcd + kube-apiserver + upstream
kube-scheduler, see testbed/README.md) per pytest session.

Fixtures:

* ``testbed`` (session): the running :class:`bed.Testbed` - ``.dir``, ``.kubeconfig`` (admin),
  ``.server`` (URL), ``.ca_file``, ``.admin_cert``/``.admin_key``, ``.client_kubeconfig()``,
  ``.restart_apiserver()``, ``.restart_etcd()``, ``.start_kube_scheduler()``, ``.stop()``...
* ``api_client`` (session): an admin (system:masters) ``kubernetes_asyncio.client.ApiClient``.
* ``core_v1`` (session): ``CoreV1Api(api_client)``.

Every test under tests/e2e gets ``pytest.mark.e2e``, so ``-m "not e2e"`` skips them all (and
the build). The binaries are built before the first test runs (outside pytest-timeout's
clock); a cold build takes ~5 minutes. The processes are always stopped: at fixture teardown
(also after Ctrl-C), at interpreter exit, on SIGTERM/SIGHUP, and - should pytest be killed -
by the kernel (PR_SET_PDEATHSIG). The bed's directory (logs!) is kept when a test failed or
TESTBED_KEEP=1, else removed. TESTBED_DIR=/some/dir picks the directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import api_client_for, bed, client_configuration

E2E_DIR = Path(__file__).resolve().parent

_build_error: BaseException | None = None


def _is_e2e(item: pytest.Item) -> bool:
    return E2E_DIR in Path(str(item.path)).resolve().parents


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e ``e2e`` (before ``-m`` deselects)."""
    for item in items:
        if _is_e2e(item):
            item.add_marker(pytest.mark.e2e)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries now, outside any test's timeout, if an e2e test is selected."""
    global _build_error
    if session.config.option.collectonly or not any(_is_e2e(i) for i in session.items):
        return
    try:
        bed.build()
    except (bed.TestbedError, OSError) as e:  # reported by the fixture, not as a crash of the run
        _build_error = e
    # Go tools a selected module names in GO_TOOLS (helm, promtool: testbed/gotools.py), cold builds of
    # minutes, also outside the timeout; a failure here is the tool's fixture's failure (it builds again).
    import gotools  # beside bed.py, on sys.path through tests.e2e.helpers

    for name in sorted({t for i in session.items for t in getattr(getattr(i, "module", None), "GO_TOOLS", ())}):
        with contextlib.suppress(bed.TestbedError, OSError):
            gotools.build(gotools.TOOLS[name])


class _Cleanup:
    """Stops the bed once, from whichever comes first: teardown, atexit, SIGTERM/SIGHUP."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self, tb: bed.Testbed) -> None:
        self.tb = tb
        self.done = False
        self.previous: dict[int, Any] = {}
        atexit.register(self.run)
        for sig in self.SIGNALS:
            self.previous[sig] = signal.signal(sig, self._on_signal)

    def run(self) -> None:
        if not self.done:
            self.done = True
            self.tb.down()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.run()
        self.uninstall()
        os.kill(os.getpid(), signum)  # die (or whatever the previous handler did) as intended

    def uninstall(self) -> None:
        atexit.unregister(self.run)
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()


@pytest.fixture(scope="session")
def testbed(request: pytest.FixtureRequest) -> Iterator[bed.Testbed]:
    """The running control plane (etcd, kube-apiserver, upstream kube-scheduler) for this session."""
    if _build_error is not None:
        pytest.fail(f"building the test bed failed: {_build_error}", pytrace=False)
    fixed = os.environ.get("TESTBED_DIR")
    root = Path(fixed) if fixed else Path(tempfile.mkdtemp(prefix="py-scheduler-e2e-", dir="/tmp"))
    tb = bed.Testbed(root, die_with_parent=True)
    cleanup = _Cleanup(tb)
    try:
        tb.up(with_kube_scheduler=True)
        yield tb
    finally:
        cleanup.run()
        cleanup.uninstall()
        failed = request.session.testsfailed > 0
        if failed or os.environ.get("TESTBED_KEEP") or fixed:
            print(f"\n[testbed] kept {root} (logs in {root / 'logs'})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
async def api_client(testbed: bed.Testbed) -> AsyncIterator[client.ApiClient]:
    """An admin (system:masters, client certificate) ApiClient for the bed's apiserver."""
    cfg = client_configuration(
        testbed.server,
        str(testbed.ca_file),
        cert_file=str(testbed.admin_cert),
        key_file=str(testbed.admin_key),
    )
    async with api_client_for(cfg) as api:
        yield api


@pytest.fixture(scope="session")
def core_v1(api_client: client.ApiClient) -> client.CoreV1Api:
    """``CoreV1Api`` on the admin client."""
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def controller_manager(testbed: bed.Testbed) -> Iterator[None]:
    """kube-controller-manager for the requesting module only (its PV binder, resourceclaim and
    ephemeral-volume controllers change what other modules would see)."""
    started = not testbed.is_running("kube-controller-manager")
    if started:
        testbed.start_kube_controller_manager()
    yield
    if started:
        testbed.stop_kube_controller_manager()
