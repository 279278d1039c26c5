"""Per-extension-point enable/disable lists in a profile (found by a newcomer's trial: the README's
sample config disabled ImageLocality at ``score`` and crashed every cycle)."""

from __future__ import annotations

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import parse_config
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins import registry

NODES = [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
          "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}} for n in ("a", "b")]
POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
       "spec": {"schedulerName": "py-scheduler", "containers": [{"name": "c", "image": "nginx"}]}}


def frameworks(plugins: dict[str, object]) -> dict[str, object]:
    from py_scheduler.framework.config import build_frameworks

    cfg = parse_config({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                        "profiles": [{"schedulerName": "py-scheduler", "plugins": plugins}]}, registry=registry)
    return dict(build_frameworks(cfg, registry=registry))


def test_score_disable_and_weight_keep_other_points_intact() -> None:
    fw = frameworks({"score": {"enabled": [{"name": "GPUScore", "weight": 5}],
                               "disabled": [{"name": "ImageLocality"}]}})["py-scheduler"]
    names = [p.name for p in fw.score_plugins]  # type: ignore[attr-defined]
    assert "ImageLocality" not in names and "SchedulingGates" not in names
    assert fw.score_weights["GPUScore"] == 5  # type: ignore[attr-defined]
    res = Algorithm().schedule(fw, Snapshot.from_objects(NODES), PodInfo(POD), explain=True)  # type: ignore[arg-type]
    assert res.selected in ("a", "b")
    assert "ImageLocality" not in res.scores and res.weights["GPUScore"] == 5


def test_filter_disable_removes_only_that_filter() -> None:
    fw = frameworks({"filter": {"disabled": [{"name": "NodePorts"}]}})["py-scheduler"]
    filters = [p.name for p in fw.filter_plugins]  # type: ignore[attr-defined]
    assert "NodePorts" not in filters and "NodeResourcesFit" in filters
    assert all(hasattr(p, "filter") for p in fw.filter_plugins)  # type: ignore[attr-defined]
    res = Algorithm().schedule(fw, Snapshot.from_objects(NODES), PodInfo(POD))  # type: ignore[arg-type]
    assert res.selected in ("a", "b")
