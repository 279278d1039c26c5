"""Start and stop ``py-scheduler run`` as a subprocess against the test bed, and read its log.

Usage::

    async with running_scheduler(testbed, "main-job") as sched:
        await sched.wait_leading()
        ...
        sched.final_scores("default/pod-a")   # {"node": total} from the --v 10 log

The process runs ``sys.executable -m py_scheduler.cli run --kubeconfig <admin> --v 10`` with a
metrics port picked by the OS, its own Lease (unique name by default, so tests never wait for a
predecessor's lease) and its output in ``<bed dir>/logs/<name>.log``. It dies with the test process
(PR_SET_PDEATHSIG). Waiting is by polling the log with a timeout, never by sleeping blindly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

from kubernetes_asyncio import client

from py_scheduler.framework.memo import VIOLATION
from tests.e2e.helpers import Testbed, delete_node, delete_pod, unique_name, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]

_FINAL = re.compile(r"Calculated node's final score for pod pod=(?P<pod>\S+) node=(?P<node>\S+) score=(?P<score>-?\d+)")
_PLUGIN = re.compile(
    r"Plugin scored node for pod pod=(?P<pod>\S+) plugin=(?P<plugin>\S+) node=(?P<node>\S+) score=(?P<score>-?\d+)")
_IDENTITY = re.compile(r"Starting py-scheduler identity=(\S+)")
_BOUND = re.compile(r"^I(?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d\.\d{6}) .*Successfully bound pod to node "
                    r"pod=(?P<pod>\S+) node=(?P<node>\S+)", re.MULTILINE)


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class SchedulerProcess:
    """One ``py-scheduler run`` subprocess.

    Args:
        kubeconfig: admin kubeconfig of the bed.
        log_path: where stdout+stderr go (appended).
        lease_name / lease_namespace: its Lease; replicas that should compete share a name.
        leader_elect: ``--leader-elect`` / ``--no-leader-elect``.
        verbosity: ``--v``.
        extra_args: more CLI arguments (e.g. ``--config FILE``).
        launcher: the interpreter arguments before ``run`` (default ``-m py_scheduler.cli``; the soak's
            ``--fill-bounds`` uses ``-m bench.bench_lib.soak_caps --report FILE --``).
    """

    def __init__(self, kubeconfig: Path, log_path: Path, *, lease_name: str, lease_namespace: str = "kube-system",
                 leader_elect: bool = True, verbosity: int = 10, extra_args: Sequence[str] = (),
                 launcher: Sequence[str] = ("-m", "py_scheduler.cli")) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.lease_name = lease_name
        self.lease_namespace = lease_namespace
        self.argv = [sys.executable, *launcher, "run", "--kubeconfig", str(kubeconfig),
                     "--v", str(verbosity), "--metrics-bind-address", "127.0.0.1:0",
                     "--lease-name", lease_name, "--lease-namespace", lease_namespace,
                     "--leader-elect" if leader_elect else "--no-leader-elect", *extra_args,
                     # e.g. "--no-request-process": the whole e2e suite run with another option
                     *shlex.split(os.environ.get("PY_SCHEDULER_E2E_RUN_ARGS", ""))]
        self.proc: subprocess.Popen[bytes] | None = None
        self._offset = 0

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env,
                                         start_new_session=True, preexec_fn=_set_pdeathsig)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait; returns the exit code (SIGKILL after ``timeout``).

        Raises:
            AssertionError: the log reports an in-place change of a delivered API object (tests/conftest.py
                turns that check on: ``PY_SCHEDULER_DEBUG_IMMUTABLE_OBJECTS``)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        rc = self.proc.wait()
        bad = [line for line in self.log().splitlines() if VIOLATION in line]
        assert not bad, f"{self.log_path}: " + "\n".join(bad[:5])
        return rc

    def kill(self) -> None:
        """SIGKILL (a crash: no lease release, no cleanup)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # -- the log -------------------------------------------------------------------------------------
    def log(self) -> str:
        """This run's output so far."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            return f.read().decode("utf-8", "replace")

    def identity(self) -> str:
        m = _IDENTITY.search(self.log())
        return m.group(1) if m else ""

    async def wait_log(self, needle: str, timeout: float = 60.0) -> str:
        """Wait until ``needle`` appears in the log; fails early if the process exits."""

        def check() -> str | None:
            text = self.log()
            if needle in text:
                return text
            if not self.alive():
                raise AssertionError(f"py-scheduler exited ({self.proc and self.proc.returncode}):\n{text[-4000:]}")
            return None

        try:
            return await wait_for(check, timeout=timeout, interval=0.1, what=f"{needle!r} in {self.log_path}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- log tail ---\n{self.log()[-4000:]}") from None

    async def wait_synced(self, timeout: float = 60.0) -> None:
        await self.wait_log("informer caches synced", timeout)

    async def wait_leading(self, timeout: float = 60.0) -> None:
        await self.wait_log("became the leader", timeout)

    def final_scores(self, pod: str) -> dict[str, int]:
        """``node -> total`` from the last ``Calculated node's final score`` lines for ``pod``
        (``namespace/name``)."""
        out: dict[str, int] = {}
        for m in _FINAL.finditer(self.log()):
            if m.group("pod") == pod:
                out[m.group("node")] = int(m.group("score"))
        return out

    def bound_times(self) -> dict[str, float]:
        """``namespace/name -> epoch seconds`` of each ``Successfully bound pod to node`` line
        (local time, as the log prints it)."""
        out: dict[str, float] = {}
        year = time.localtime().tm_year
        for m in _BOUND.finditer(self.log()):
            t = time.strptime(f"{year}{m.group('md')} {m.group('hms')[:8]}", "%Y%m%d %H:%M:%S")
            out[m.group("pod")] = time.mktime(t) + float("0." + m.group("hms")[9:])
        return out

    def plugin_scores(self, pod: str) -> dict[tuple[str, str], int]:
        """``(plugin, node) -> weighted score`` from the ``Plugin scored node`` lines for ``pod``."""
        out: dict[tuple[str, str], int] = {}
        for m in _PLUGIN.finditer(self.log()):
            if m.group("pod") == pod:
                out[(m.group("plugin"), m.group("node"))] = int(m.group("score"))
        return out


@contextlib.asynccontextmanager
async def running_scheduler(testbed: Testbed, name: str, *, lease_name: str | None = None,
                            wait: bool = True, **kwargs: object) -> AsyncIterator[SchedulerProcess]:
    """A started :class:`SchedulerProcess` (leading when ``wait``), terminated on exit."""
    proc = SchedulerProcess(Path(testbed.kubeconfig), Path(testbed.dir) / "logs" / f"{name}.log",
                            lease_name=lease_name or unique_name("py-sched-e2e"), **kwargs)  # type: ignore[arg-type]
    proc.start()
    try:
        if wait:
            await proc.wait_leading()
        yield proc
    finally:
        proc.terminate()


@contextlib.asynccontextmanager
async def serving_profile(testbed: Testbed, profile: str, *, verbosity: int) -> AsyncIterator[SchedulerProcess]:
    """py-scheduler (leading, informers synced) serving one default profile named ``profile``, from a
    KubeSchedulerConfiguration written to ``<bed dir>/<profile>.config.yaml``; its log is
    ``<profile>.log``. Terminated on exit."""
    cfg = Path(testbed.dir) / f"{profile}.config.yaml"
    cfg.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                               "profiles": [{"schedulerName": profile}]}))
    async with running_scheduler(testbed, profile, extra_args=["--config", str(cfg)], verbosity=verbosity) as sched:
        await sched.wait_synced()
        yield sched


async def wait_exit(proc: SchedulerProcess, timeout: float = 30.0) -> int:
    """Wait for the process to exit on its own; returns its code."""

    def code() -> int | None:
        return proc.proc.poll() if proc.proc is not None else None

    await wait_for(lambda: code() is not None, timeout=timeout, what="py-scheduler to exit")
    rc = code()
    assert rc is not None
    return rc


async def stop_and_clean_up(api: client.ApiClient, replicas: Iterable[SchedulerProcess], pods: Iterable[str],
                            nodes: Iterable[str]) -> None:
    """End of a test that ran its own replicas: terminate them, then delete its Pods (concurrently, errors
    ignored) and its Nodes."""
    for r in replicas:
        r.terminate()
    await asyncio.gather(*(delete_pod(api, p) for p in pods), return_exceptions=True)
    for n in nodes:
        await delete_node(api, n)
