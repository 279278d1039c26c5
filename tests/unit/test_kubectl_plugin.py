"""``kubectl py-scheduler`` without a cluster: kubeconfig/context/namespace resolution as kubectl does
it (the real kubectl resolves ``--context``), POD names, the decisions table, ``simulate -o``, the
``--version`` of both commands and the krew manifest's layout. The plugin run through the real
kubectl against the e2e bed: tests/e2e/test_kubectl_plugin.py."""

from __future__ import annotations

import json
import re
import stat
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from py_scheduler import cli, kubectl_plugin
from py_scheduler.kubectl_plugin import UsageError, decision_row, pod_name, resolved_kubeconfig

REPO = Path(__file__).resolve().parents[2]


def _kubeconfig(path: Path, current: str) -> Path:
    """Two contexts on two clusters: ``alpha`` (namespace team-a) and ``beta`` (no namespace)."""
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "a", "cluster": {"server": "https://127.0.0.1:1"}},
                     {"name": "b", "cluster": {"server": "https://127.0.0.2:2"}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "alpha", "context": {"cluster": "a", "user": "u", "namespace": "team-a"}},
                     {"name": "beta", "context": {"cluster": "b", "user": "u"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_one_file_and_no_context_is_used_as_it_is(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "config", "alpha")
    with resolved_kubeconfig(kc, None) as (path, ns):
        assert path == kc and ns == "team-a"
    with resolved_kubeconfig(_kubeconfig(tmp_path / "b", "beta"), None) as (_, ns):
        assert ns is None


def test_context_is_resolved_by_kubectl_into_a_private_file_removed_afterwards(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "config", "alpha")
    with resolved_kubeconfig(kc, "beta") as (path, ns):
        assert path != kc and ns is None
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        doc = yaml.safe_load(path.read_text())
        assert doc["current-context"] == "beta"
        assert [c["cluster"]["server"] for c in doc["clusters"]] == ["https://127.0.0.2:2"]  # --minify
        assert doc["users"][0]["user"]["token"] == "t0ken"  # --raw: credentials kept
    assert not path.exists() and not path.parent.exists()
    with pytest.raises(UsageError, match="nope"), resolved_kubeconfig(kc, "nope"):
        pass


def test_kubeconfig_env_with_several_files_is_merged_as_kubectl_merges_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "first"
    first.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "beta"}))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{_kubeconfig(tmp_path / 'second', 'alpha')}")
    with resolved_kubeconfig(None, None) as (path, ns):  # the first file's current-context wins
        assert yaml.safe_load(path.read_text())["current-context"] == "beta" and ns is None
    with resolved_kubeconfig(None, "alpha") as (path, ns):
        assert ns == "team-a"


def test_missing_kubeconfig_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(UsageError, match="no such file"), resolved_kubeconfig(None, None):
        pass


@pytest.mark.parametrize(("arg", "name"), [("web-0", "web-0"), ("pod/web-0", "web-0"), ("pods/web-0", "web-0"),
                                           ("po/web-0", "web-0")])
def test_pod_names_take_kubectl_type_slash_name(arg: str, name: str) -> None:
    assert pod_name(arg) == name


@pytest.mark.parametrize("arg", ["default/web-0", "deploy/web", "pod/", ""])
def test_other_pod_forms_are_refused(arg: str) -> None:
    with pytest.raises(UsageError):
        pod_name(arg)


RECORD = {"pod": "ml/a", "uid": "u-1", "profile": "py-scheduler", "attempt": 2, "time": "2026-12-05T01:00:00.000000Z",
          "duration_seconds": 0.0125, "result": "unschedulable", "nodes_total": 8, "nodes_evaluated": 8,
          "feasible_count": 0, "rejected_by": ["GPUFilter", "NodeResourcesFit"], "selected": None,
          "message": "0/8 nodes are available: 8 Insufficient cpu.", "nominated_node": "n3"}


def test_decision_rows_default_and_wide() -> None:
    assert decision_row(RECORD, wide=False) == ["2", "unschedulable", "nominated n3", "2026-12-05T01:00:00.000000Z",
                                                "0/8 nodes are available: 8 Insufficient cpu."]
    wide = dict(zip(kubectl_plugin.WIDE_DECISION_COLUMNS, decision_row(RECORD, wide=True), strict=True))
    assert wide["DURATION"] == "12.5ms" and wide["UID"] == "u-1" and wide["EVALUATED"] == "8/8"
    assert wide["FEASIBLE"] == "0" and wide["REJECTED-BY"] == "GPUFilter,NodeResourcesFit"
    assert decision_row({**RECORD, "message": None, "selected": "n1"}, wide=False)[2:5:2] == ["n1", "<none>"]


def test_simulate_outputs_json_yaml_and_wide() -> None:
    runner = CliRunner()
    as_json = runner.invoke(kubectl_plugin.app, ["simulate", "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    assert doc["scheduled"] + doc["unschedulable"] == len(doc["placements"]) > 0
    assert as_json.stdout.startswith('{\n    "source"')  # kubectl's 4-space JSON
    as_yaml = runner.invoke(kubectl_plugin.app, ["simulate", "-o", "yaml"])
    assert yaml.safe_load(as_yaml.stdout) == doc
    table = runner.invoke(kubectl_plugin.app, ["simulate"]).stdout
    wide = runner.invoke(kubectl_plugin.app, ["simulate", "-o", "wide"]).stdout
    assert "pending Pods scheduled" in table and "pending Pods scheduled" in wide
    assert "cells: normalized score × weight" in wide and "cells: normalized score × weight" not in table
    bad = runner.invoke(kubectl_plugin.app, ["simulate", "-o", "xml"])
    assert bad.exit_code == 2 and "must be one of json, yaml, wide" in bad.stderr


def test_version_of_both_commands() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for app, prog in ((cli.app, "py-scheduler"), (kubectl_plugin.app, "kubectl py-scheduler")):
        res = CliRunner().invoke(app, ["--version"])
        assert res.exit_code == 0
        assert re.fullmatch(rf"{prog} (\S+) \(kube-scheduler v1\.37\.2 default profile\)\n", res.stdout), res.stdout
        assert res.stdout.split()[len(prog.split())] in (version, "unknown")


def test_krew_manifest_layout_names_the_installed_executable() -> None:
    manifest = yaml.safe_load((REPO / "deploy" / "krew" / "py-scheduler.yaml").read_text())
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "py-scheduler"
    spec = manifest["spec"]
    assert spec["version"] == "v" + tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert spec["shortDescription"] and spec["homepage"].startswith("https://")
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["bin"] == "kubectl-py_scheduler" and platform["bin"] in scripts
        assert platform["selector"]["matchExpressions"][0]["key"] == "os"
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"]) and platform["uri"].startswith("https://")
        assert any(f["from"] == platform["bin"] for f in platform["files"])
