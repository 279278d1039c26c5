"""The ClusterRole of ``deploy/rbac.yaml`` lets the informers list and watch every kind of the one
table (``py_scheduler/cache/kinds.py``): a kind added to the table without its RBAC rule would leave
its reflector retrying a 403 forever and the scheduler never ready."""

from __future__ import annotations

from pathlib import Path

import yaml

from py_scheduler.cache.kinds import KINDS

RBAC = Path(__file__).resolve().parents[3] / "deploy" / "rbac.yaml"


def test_cluster_role_grants_list_and_watch_on_every_watched_kind() -> None:
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d.get("kind") == "ClusterRole")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule.get("apiGroups", []):
            for res in rule.get("resources", []):
                granted.setdefault((group, res), set()).update(rule.get("verbs", []))
    for wk in KINDS:
        group = "" if wk.group_version == "v1" else wk.group_version.split("/")[0]
        assert {"list", "watch"} <= granted.get((group, wk.plural), set()), (wk.kind, group, wk.plural)
