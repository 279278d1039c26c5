"""The Handle is complete at construction and never reassigned; feature gates have one source (issue 28,
item 3). Upstream: ``pkg/scheduler/framework/interface.go`` ``Handle``, ``runtime/framework.go``'s options."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.framework import features
from py_scheduler.framework.config import ProfileConfig, SchedulerConfig, build_framework, build_frameworks
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.handle import Handle, LateClient, LateObjects, QueueActivator
from py_scheduler.framework.runtime import Framework
from py_scheduler.plugins import registry

PACKAGE = Path(__file__).resolve().parents[3] / "py_scheduler"
FULL: dict[str, Any] = {"objects": LateObjects(), "client": None, "events": None, "feature_gates": FeatureGates(),
                        "activator": QueueActivator()}


@pytest.mark.parametrize("missing", sorted(FULL))
def test_a_handle_without_a_capability_cannot_be_constructed(missing: str) -> None:
    with pytest.raises(TypeError, match=missing):
        Handle(**{k: v for k, v in FULL.items() if k != missing})


@pytest.mark.parametrize("field", [*sorted(FULL), "profile", "snapshot"])
def test_a_handle_is_never_assigned_after_construction(field: str) -> None:
    h = Handle(**FULL)
    # FrozenInstanceError (an AttributeError) for a field; for a property CPython's frozen + slots
    # dataclass refuses with AttributeError or, before 3.12, TypeError from its __setattr__
    with pytest.raises((AttributeError, TypeError)):
        setattr(h, field, None)


def test_no_module_assigns_to_a_handle() -> None:
    """No ``handle.X = ...`` / ``fw.handle.X = ...`` anywhere in the package (the frozen dataclass
    refuses it at run time; this finds it before)."""
    bad = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
            for t in targets:
                if isinstance(t, ast.Attribute):
                    owner = t.value
                    name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                    if name in ("handle", "_handle", "h") and t.attr in {f.name for f in dataclasses.fields(Handle)}:
                        bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert bad == []


def test_the_profile_binds_once_and_each_profile_has_its_own() -> None:
    h = Handle(**FULL)
    with pytest.raises(RuntimeError, match="not connected"):
        _ = h.profile
    fw = Framework("a", [], handle=h)
    assert h.profile is fw and h.waiting_pods is fw.waiting_pods
    with pytest.raises(RuntimeError, match="already connected"):
        Framework("b", [], handle=h)
    cfg = SchedulerConfig(profiles=[ProfileConfig(scheduler_name="x"), ProfileConfig(scheduler_name="y")])
    fws = build_frameworks(cfg, handle=Handle(**FULL), registry=registry)
    assert fws["x"].handle is not fws["y"].handle
    assert fws["x"].handle.profile is fws["x"] and fws["y"].handle.profile is fws["y"]


def test_ports_connect_once() -> None:
    class Queue:
        def __init__(self) -> None:
            self.got: list[Any] = []

        def activate(self, pods: Any) -> None:
            self.got.extend(pods)

    act, q = QueueActivator(), Queue()
    act.activate([{"a": 1}])  # unconnected (offline): nothing, no error
    act.connect(q)
    act.activate([{"b": 2}])
    assert q.got == [{"b": 2}]
    with pytest.raises(RuntimeError, match="already connected"):
        act.connect(Queue())
    objs = LateObjects()
    assert objs.get("Pod", "ns", "p") is None and list(objs.list("Pod")) == []
    client = LateClient()
    with pytest.raises(RuntimeError, match="not connected"):
        asyncio.run(client.get("/api/v1/namespaces/ns/pods/p"))


def test_feature_gates_have_one_source() -> None:
    """One immutable value: ``SchedulerConfig.feature_gates`` is the object every profile's Handle
    carries; a Handle with other gates is refused; no module keeps a process-global gate table."""
    gates = FeatureGates.parse("GenericWorkload=true")
    cfg = SchedulerConfig(feature_gates=gates)
    fw = build_framework(ProfileConfig(), cfg, registry=registry)
    assert fw.handle.feature_gates is gates and "GangScheduling" in fw.plugins
    with pytest.raises(ValueError, match="configuration's"):
        build_framework(ProfileConfig(), cfg, handle=Handle.detached(FeatureGates()), registry=registry)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gates.generic_workload = False  # type: ignore[misc]
    assert not any(isinstance(v, dict | set | list) for k, v in vars(features).items() if not k.startswith("__")), \
        "a mutable module-level gate table is back"
    src = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    for old in ("apply_feature_gates", "set_feature_gates", "OPPORTUNISTIC_BATCHING_DEFAULT", "features.enabled("):
        assert old not in src, old
