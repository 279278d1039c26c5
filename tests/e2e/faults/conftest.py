"""Fixtures and the end-of-run summary of the fault suite.

``FAULTS_PROFILE`` picks the size: ``ci`` (default: short leases, small bursts, 40 hypothesis Pods,
a few minutes on 2 cores) or ``full`` (``bench/faults``: kube-scheduler's default 15 s lease, larger
bursts and more kills, 300 hypothesis Pods). ``FAULTS_SUMMARY_JSON=PATH`` also writes the summary
as JSON.

The summary (``pytest_terminal_summary``) prints the faults injected, the Pods bound by py-scheduler
in the scenarios, the invariant violations found (must be 0) and the leader failover times.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

import pytest
from _pytest.terminal import TerminalReporter
from kubernetes_asyncio import client

from tests.e2e.faults.scenarios import STATS, FaultEnv, Scale, scale_for
from tests.e2e.helpers import Testbed


@pytest.fixture(scope="session")
def scale() -> Scale:
    """Sizes of this run (``FAULTS_PROFILE``)."""
    return scale_for(os.environ.get("FAULTS_PROFILE", "ci"))


@pytest.fixture
async def env(testbed: Testbed, api_client: client.ApiClient, scale: Scale,
              request: pytest.FixtureRequest) -> AsyncIterator[FaultEnv]:
    """A fresh group of Nodes/Pods/replicas for one scenario; everything is removed at the end."""
    e = FaultEnv(testbed, api_client, scale, request.node.name)
    try:
        yield e
    finally:
        await e.close()


def pytest_terminal_summary(terminalreporter: TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """Print what the fault suite did (only when one of its scenarios ran)."""
    if not STATS.scenarios:
        return
    tr = terminalreporter
    tr.write_sep("=", "py-scheduler fault suite summary")
    for line in STATS.lines():
        tr.write_line(line)
    path = os.environ.get("FAULTS_SUMMARY_JSON")
    if path:
        with open(path, "w") as f:
            json.dump(STATS.to_json(), f, indent=2)
            f.write("\n")
        tr.write_line(f"summary written to {path}")
