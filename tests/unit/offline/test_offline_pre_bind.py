"""Offline PreBind (``explain`` / ``simulate`` with an in-memory API) runs the live binding cycle's
runners, ``Framework.run_pre_bind_pre_flights`` / ``run_pre_bind``: the same plugins, order, skips and
messages as the live loop (issue 28 item 1: one code path), and nothing of a failed Pod stays assumed."""

from __future__ import annotations

import asyncio

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from py_scheduler.offline.engine import OfflineScheduler, load_frameworks
from py_scheduler.offline.memapi import MemoryAPI


class _PreBind:
    """A PreBind plugin whose pre-flight and PreBind answers are given; counts its PreBind calls."""

    def __init__(self, name: str, flight: Status, outcome: Status | Exception) -> None:
        self.name, self.flight, self.outcome, self.calls = name, flight, outcome, 0

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return self.flight

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self.calls += 1
        await asyncio.sleep(0)  # a bare yield, as the in-memory API's writes make
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def _node(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def _pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


@pytest.mark.parametrize(("plugins", "message"), [
    ([("A", Status.success(), Status(Code.ERROR, ["disk on fire"]))], 'running PreBind plugin "A": disk on fire'),
    ([("A", Status.success(), RuntimeError("boom"))], 'running PreBind plugin "A": RuntimeError: boom'),
    ([("A", Status.error("no"), Status.success())], 'running PreBindPreFlight "A": no'),
    ([("A", Status.skip(), Status(Code.ERROR, ["never run"])), ("B", Status.success(), Status.success())], ""),
])
def test_offline_pre_bind_reads_as_the_live_runners(plugins: list[tuple[str, Status, Status | Exception]],
                                                    message: str) -> None:
    fws, default, pct = load_frameworks(None)
    fw = fws[default]
    fakes = [_PreBind(*p) for p in plugins]
    fw.pre_bind_plugins = fakes  # type: ignore[assignment]
    snap = Snapshot.from_objects([_node("n1")])
    sched = OfflineScheduler(fws, default, snap, pct, api=MemoryAPI())
    out = sched.schedule(_pod("p"))
    if message:
        assert out.result.selected is None and out.result.message == message
        assert not [pi for ni in snap.node_info_list for pi in ni.pods]  # unreserved and forgotten
    else:
        assert out.result.selected == "n1"
        assert fakes[0].calls == 0 and fakes[1].calls == 1  # skipped at pre-flight: never run
