"""KubeSchedulerConfiguration parsing: defaults, strictness, validation messages (field path + value)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.framework.config import (
    API_VERSION,
    KIND,
    ConfigError,
    LeaderElectionConfig,
    ProfileConfig,
    SchedulerConfig,
    build_frameworks,
    load_config,
    parse_config,
    parse_go_duration,
)
from py_scheduler.plugins import registry

REPO = Path(__file__).resolve().parents[2]


def doc(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, **fields}


def errors_of(d: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        parse_config(d, registry=registry)
    return ei.value.errors


# --- defaults ------------------------------------------------------------------------------------------

def test_empty_config_gets_kube_scheduler_defaults() -> None:
    cfg = parse_config(doc(), registry=registry)
    assert cfg.parallelism == 16
    assert cfg.percentage_of_nodes_to_score == 0
    assert cfg.pod_initial_backoff_seconds == 1.0
    assert cfg.pod_max_backoff_seconds == 10.0
    assert (cfg.qps, cfg.burst) == (50.0, 100)
    le = cfg.leader_election
    assert le.leader_elect is True
    assert (le.lease_duration_seconds, le.renew_deadline_seconds, le.retry_period_seconds) == (15.0, 10.0, 2.0)
    assert (le.resource_lock, le.resource_name, le.resource_namespace) == ("leases", "py-scheduler", "kube-system")
    assert len(cfg.profiles) == 1
    assert cfg.profiles[0].scheduler_name == "py-scheduler"
    assert cfg.profiles[0].percentage_of_nodes_to_score is None
    assert cfg.profiles[0].plugins == {}
    # The file defaults equal the in-code defaults (one source of truth for both paths).
    assert cfg == SchedulerConfig()


def test_full_config_round_trip() -> None:
    cfg = parse_config(doc(
        parallelism=4, percentageOfNodesToScore=50, podInitialBackoffSeconds=2, podMaxBackoffSeconds=20,
        leaderElection={"leaderElect": False, "leaseDuration": "1m", "renewDeadline": "30s",
                        "retryPeriod": "1500ms", "resourceLock": "leases", "resourceName": "my-lock",
                        "resourceNamespace": "sched"},
        clientConnection={"kubeconfig": "/etc/kube/config", "qps": 20.5, "burst": 40,
                          "contentType": "application/json"},
        enableProfiling=False,
        profiles=[
            {"schedulerName": "a", "percentageOfNodesToScore": 30,
             "plugins": {"multiPoint": {"disabled": [{"name": "*"}],
                                        "enabled": [{"name": "NodeName"}, {"name": "PrioritySort"}]},
                         "filter": {"disabled": [{"name": "NodeName"}]}},
             "pluginConfig": [{"name": "NodeName", "args": None}]},
            {"schedulerName": "b"},
        ]), registry=registry)
    assert cfg.parallelism == 4
    assert cfg.percentage_of_nodes_to_score == 50
    assert (cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds) == (2.0, 20.0)
    assert cfg.leader_election == LeaderElectionConfig(False, 60.0, 30.0, 1.5, "my-lock", "sched", "leases")
    assert (cfg.kubeconfig, cfg.qps, cfg.burst) == ("/etc/kube/config", 20.5, 40)
    a, b = cfg.profiles
    assert (a.scheduler_name, a.percentage_of_nodes_to_score) == ("a", 30)
    assert a.plugins["multiPoint"].disabled == ["*"]
    assert a.plugins["multiPoint"].enabled == [("NodeName", None), ("PrioritySort", None)]
    assert a.plugins["filter"].disabled == ["NodeName"]
    assert a.plugin_config == {"NodeName": {}}
    assert b == ProfileConfig(scheduler_name="b")


def test_zero_values_mean_unset_like_upstream() -> None:
    cfg = parse_config(doc(clientConnection={"qps": 0, "burst": 0},
                           leaderElection={"leaseDuration": "0", "resourceName": ""}), registry=registry)
    assert (cfg.qps, cfg.burst) == (50.0, 100)
    assert cfg.leader_election.lease_duration_seconds == 15.0
    assert cfg.leader_election.resource_name == "py-scheduler"


def test_plugin_args_kind_and_api_version_are_stripped() -> None:
    cfg = parse_config(doc(profiles=[{"pluginConfig": [
        {"name": "NodeResourcesFit", "args": {"apiVersion": API_VERSION, "kind": "NodeResourcesFitArgs",
                                              "ignoredResources": ["example.com/foo"]}}]}]), registry=registry)
    assert cfg.profiles[0].plugin_config == {"NodeResourcesFit": {"ignoredResources": ["example.com/foo"]}}


def test_parsed_profile_builds_a_framework_with_its_weights() -> None:
    cfg = parse_config(doc(profiles=[{"schedulerName": "only", "plugins": {"multiPoint": {
        "disabled": [{"name": "*"}],
        "enabled": [{"name": "PrioritySort"}, {"name": "NodeName", "weight": 7}, {"name": "DefaultBinder"}]}}}]),
        registry=registry)
    fws = build_frameworks(cfg, registry=registry)
    assert list(fws) == ["only"]
    fw = fws["only"]
    assert fw.profile_name == "only"
    assert list(fw.plugins) == ["PrioritySort", "NodeName", "DefaultBinder"]
    assert fw.weights["NodeName"] == 7


# --- durations -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("15s", 15.0), ("1m30s", 90.0), ("250ms", 0.25), ("1h", 3600.0), ("1.5s", 1.5), ("0", 0.0),
    ("-2s", -2.0), ("100us", 1e-4), ("2h45m", 9900.0),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "s", "1x", "1.2.3s", "15 s"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)


# --- strictness and validation messages ---------------------------------------------------------------

def test_unknown_plugin_names_its_path() -> None:
    errs = errors_of(doc(profiles=[{"plugins": {"score": {"enabled": [{"name": "NodeName"}, {"name": "Foo"}]}}}]))
    assert errs == ['profiles[0].plugins.score.enabled[1].name: unknown plugin "Foo"']


@pytest.mark.parametrize(("d", "expected"), [
    (doc(bogus=1), 'bogus: unknown field "bogus"'),
    (doc(leaderElection={"leaseDurationX": "1s"}), 'leaderElection.leaseDurationX: unknown field "leaseDurationX"'),
    (doc(clientConnection={"QPS": 1}), 'clientConnection.QPS: unknown field "QPS"'),
    (doc(profiles=[{"schedulerName": "x", "plugin": {}}]), 'profiles[0].plugin: unknown field "plugin"'),
    (doc(profiles=[{"plugins": {"scores": {}}}]), 'profiles[0].plugins.scores: unknown field "scores"'),
    (doc(profiles=[{"plugins": {"score": {"enabled": [{"name": "NodeName", "wieght": 1}]}}}]),
     'profiles[0].plugins.score.enabled[0].wieght: unknown field "wieght"'),
    (doc(profiles=[{"pluginConfig": [{"name": "NodeName", "arg": {}}]}]),
     'profiles[0].pluginConfig[0].arg: unknown field "arg"'),
])
def test_unknown_fields_at_every_level(d: dict[str, Any], expected: str) -> None:
    assert expected in errors_of(d)


@pytest.mark.parametrize(("d", "expected"), [
    ({"kind": KIND}, 'apiVersion: Invalid value: None: must be "kubescheduler.config.k8s.io/v1"'),
    ({"apiVersion": "kubescheduler.config.k8s.io/v1beta3", "kind": KIND},
     'apiVersion: Invalid value: "kubescheduler.config.k8s.io/v1beta3": must be "kubescheduler.config.k8s.io/v1"'),
    ({"apiVersion": API_VERSION, "kind": "Foo"}, 'kind: Invalid value: "Foo": must be "KubeSchedulerConfiguration"'),
    (doc(percentageOfNodesToScore=101), "percentageOfNodesToScore: Invalid value: 101: not in valid range [0-100]"),
    (doc(percentageOfNodesToScore=-1), "percentageOfNodesToScore: Invalid value: -1: not in valid range [0-100]"),
    (doc(percentageOfNodesToScore="50"),
     'percentageOfNodesToScore: Invalid value: "50": must be an integer'),
    (doc(profiles=[{"percentageOfNodesToScore": 200}]),
     "profiles[0].percentageOfNodesToScore: Invalid value: 200: not in valid range [0-100]"),
    (doc(podInitialBackoffSeconds=0), "podInitialBackoffSeconds: Invalid value: 0: must be greater than 0"),
    (doc(podInitialBackoffSeconds=5, podMaxBackoffSeconds=3),
     "podMaxBackoffSeconds: Invalid value: 3: must be greater than or equal to PodInitialBackoffSeconds"),
    (doc(parallelism=0), "parallelism: Invalid value: 0: should be an integer value greater than zero"),
    (doc(leaderElection={"resourceLock": "endpointsleases"}),
     'leaderElection.resourceLock: Invalid value: "endpointsleases": resourceLock value must be "leases"'),
    (doc(leaderElection={"leaseDuration": "10s", "renewDeadline": "10s"}),
     "leaderElection.leaseDuration: Invalid value: 10.0s: must be greater than `RenewDeadline`"),
    (doc(leaderElection={"retryPeriod": "-1s"}),
     "leaderElection.retryPeriod: Invalid value: -1.0s: must be greater than zero"),
    (doc(leaderElection={"leaseDuration": 15}),
     'leaderElection.leaseDuration: Invalid value: 15: must be a duration string such as "15s"'),
    (doc(leaderElection={"leaseDuration": "15"}),
     'leaderElection.leaseDuration: Invalid value: "15": invalid duration "15"'),
    (doc(leaderElection={"leaderElect": "yes"}),
     'leaderElection.leaderElect: Invalid value: "yes": must be true or false'),
    (doc(clientConnection={"burst": -1}), "clientConnection.burst: Invalid value: -1: must be non-negative"),
    (doc(clientConnection={"qps": -5}), "clientConnection.qps: Invalid value: -5: must be non-negative"),
    (doc(profiles=[{"schedulerName": "a"}, {}]), "profiles[1].schedulerName: Required value"),
    (doc(profiles=[{"schedulerName": "a"}, {"schedulerName": "a"}]),
     'profiles[1].schedulerName: Duplicate value: "profiles[0].schedulerName"'),
    (doc(profiles=[{"pluginConfig": [{"name": "NodeName"}, {"name": "NodeName"}]}]),
     'profiles[0].pluginConfig[1]: Duplicate value: "NodeName"'),
    (doc(profiles=[{"pluginConfig": [{"name": "Nope", "args": {}}]}]),
     'profiles[0].pluginConfig[0].name: unknown plugin "Nope"'),
    (doc(profiles=[{"pluginConfig": [{"name": "NodeName", "args": [1]}]}]),
     "profiles[0].pluginConfig[0].args: expected an object, got list"),
    (doc(profiles=[{"pluginConfig": [{"name": "NodeName", "args": {"kind": "FooArgs"}}]}]),
     'profiles[0].pluginConfig[0].args.kind: Invalid value: "FooArgs": has to match plugin args "NodeNameArgs"'),
    (doc(profiles=[{"plugins": {"score": {"enabled": [{"name": "NodeName", "weight": -1}]}}}]),
     "profiles[0].plugins.score.enabled[0].weight: Invalid value: -1: out of range [0, 2147483647]"),
    (doc(profiles=[{"plugins": {"score": {"enabled": [{"weight": 1}]}}}]),
     "profiles[0].plugins.score.enabled[0].name: Required value"),
    (doc(profiles=[{"plugins": {"filter": {"disabled": [{"name": "Bar"}]}}}]),
     'profiles[0].plugins.filter.disabled[0].name: unknown plugin "Bar"'),
    (doc(profiles=[{"schedulerName": "a", "plugins": {"queueSort": {"disabled": [{"name": "*"}]}}},
                   {"schedulerName": "b"}]),
     "profiles[1].plugins.queueSort: must be the same for all profiles"),
    (doc(extenders=[{"urlPrefix": "http://x"}]), "extenders: scheduler extenders are not supported by py-scheduler"),
    (doc(profiles="x"), "profiles: expected a list, got str"),
])
def test_validation_messages(d: dict[str, Any], expected: str) -> None:
    errs = errors_of(d)
    assert expected in errs, errs


def test_all_errors_are_reported_together() -> None:
    with pytest.raises(ConfigError) as ei:
        parse_config(doc(parallelism=0, percentageOfNodesToScore=101, bogus=True), registry=registry)
    assert len(ei.value.errors) == 3
    msg = str(ei.value)
    assert "parallelism" in msg and "percentageOfNodesToScore" in msg and "bogus" in msg


def test_leader_election_not_validated_when_disabled() -> None:
    cfg = parse_config(doc(leaderElection={"leaderElect": False, "leaseDuration": "1s", "renewDeadline": "5s"}),
                       registry=registry)
    assert cfg.leader_election.leader_elect is False


def test_not_an_object() -> None:
    with pytest.raises(ConfigError, match="must be a YAML/JSON object"):
        parse_config(["x"], registry=registry)  # type: ignore[arg-type]


def test_bad_plugin_args_surface_from_build_frameworks() -> None:
    """Args content is the plugin's to validate; build_frameworks prefixes its ConfigError with the name."""
    from py_scheduler.plugins import registry

    class Picky:
        name = "NodeName"

        @classmethod
        def create(cls, args: dict[str, Any], handle: Any) -> Picky:
            if args:
                raise ConfigError(f"unknown field {next(iter(args))!r}")
            return cls()

    cfg = parse_config(doc(profiles=[{"plugins": {"multiPoint": {"disabled": [{"name": "*"}],
                                                                 "enabled": [{"name": "NodeName"}]}},
                                      "pluginConfig": [{"name": "NodeName", "args": {"x": 1}}]}]), registry=registry)
    orig = registry.get
    try:
        registry.get = lambda name: Picky.create if name == "NodeName" else orig(name)  # type: ignore[assignment]
        with pytest.raises(ConfigError, match=r"pluginConfig\[NodeName\]\.args: unknown field 'x'"):
            build_frameworks(cfg, registry=registry)
    finally:
        registry.get = orig  # type: ignore[assignment]


# --- files -----------------------------------------------------------------------------------------------

def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(text)
    return p


def test_load_config_yaml(tmp_path: Path) -> None:
    p = write(tmp_path, f"""
apiVersion: {API_VERSION}
kind: {KIND}
percentageOfNodesToScore: 70
leaderElection:
  leaderElect: true
  leaseDuration: 30s
  renewDeadline: 20s
  retryPeriod: 4s
profiles:
- schedulerName: gpu
""")
    cfg = load_config(p, registry=registry)
    assert cfg.percentage_of_nodes_to_score == 70
    assert cfg.leader_election.lease_duration_seconds == 30.0
    assert cfg.profiles[0].scheduler_name == "gpu"


def test_load_config_duplicate_field(tmp_path: Path) -> None:
    p = write(tmp_path, f"apiVersion: {API_VERSION}\nkind: {KIND}\nparallelism: 2\nparallelism: 3\n")
    with pytest.raises(ConfigError, match=r'line 4: duplicate field "parallelism"'):
        load_config(p, registry=registry)


def test_load_config_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml", registry=registry)
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path, "a: [1, 2\n"), registry=registry)
    with pytest.raises(ConfigError, match="found 0"):
        load_config(write(tmp_path, ""), registry=registry)
    p = write(tmp_path, f"apiVersion: {API_VERSION}\nkind: {KIND}\nparallelism: -1\n")
    with pytest.raises(ConfigError, match=rf"^{p}: parallelism: Invalid value: -1"):
        load_config(p, registry=registry)


def test_deploy_configmap_config_is_valid() -> None:
    """The KubeSchedulerConfiguration shipped in deploy/ parses (GPU plugins included)."""
    import yaml

    cm = yaml.safe_load((REPO / "deploy" / "configmap.yaml").read_text())
    cfg = parse_config(yaml.safe_load(cm["data"]["config.yaml"]), registry=registry)
    assert [p.scheduler_name for p in cfg.profiles] == ["py-scheduler"]
    assert cfg.leader_election.resource_name == "py-scheduler"
    mp = cfg.profiles[0].plugins.get("multiPoint")
    assert mp is not None and {"GPUFilter", "GPUScore"} <= {n for n, _ in mp.enabled}


def test_cli_unknown_plugin_fails_start_up(tmp_path: Path) -> None:
    """``py-scheduler run --config`` with an unknown plugin exits non-zero, naming the field, before
    touching any cluster (the kubeconfig points nowhere)."""
    p = write(tmp_path, f"""
apiVersion: {API_VERSION}
kind: {KIND}
profiles:
- schedulerName: py-scheduler
  plugins:
    score:
      enabled:
      - name: NodeName
      - name: Foo
""")
    kubeconfig = tmp_path / "nowhere.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    proc = subprocess.run(
        [sys.executable, "-m", "py_scheduler.cli", "run", "--config", str(p), "--kubeconfig", str(kubeconfig),
         "--metrics-bind-address", "127.0.0.1:0", "--no-leader-elect"],
        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode != 0
    assert 'profiles[0].plugins.score.enabled[1].name: unknown plugin "Foo"' in proc.stdout + proc.stderr
