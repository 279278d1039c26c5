"""``run_scheduler`` start-up failures exit with 1 and a clear log line, without touching a cluster."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from py_scheduler.app.process.main import build_profiles, run_scheduler
from py_scheduler.framework.config import ConfigError, ProfileConfig, SchedulerConfig


def test_bad_config_file_exits_1(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nbogus: 1\n")
    caplog.set_level(logging.ERROR)
    rc = run_scheduler(kubeconfig=tmp_path / "none", config=cfg, leader_elect=None, lease_name=None,
                       lease_namespace=None, metrics_bind_address="", verbosity=2)
    assert rc == 1


def test_missing_kubeconfig_exits_1(tmp_path: Path) -> None:
    rc = run_scheduler(kubeconfig=tmp_path / "does-not-exist", config=None, leader_elect=False, lease_name=None,
                       lease_namespace=None, metrics_bind_address="", verbosity=2)
    assert rc == 1


def test_duplicate_profiles_rejected() -> None:
    cfg = SchedulerConfig(profiles=[ProfileConfig(), ProfileConfig()])
    with pytest.raises(ConfigError, match="duplicate schedulerName"):
        build_profiles(cfg)


def test_profiles_built_per_scheduler_name() -> None:
    cfg = SchedulerConfig(profiles=[ProfileConfig(), ProfileConfig(scheduler_name="other")])
    fws = build_profiles(cfg)
    assert sorted(fws) == ["other", "py-scheduler"]
    assert fws["other"].profile_name == "other"


def test_missing_kubeconfig_says_so(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A kubeconfig path that does not exist is named as missing, before any client library reads it
    (kubernetes_asyncio would log "Config not found" and then complain about a missing current-context)."""
    missing = tmp_path / "does-not-exist"
    rc = run_scheduler(kubeconfig=missing, config=None, leader_elect=False, lease_name=None,
                       lease_namespace=None, metrics_bind_address="", verbosity=2)
    assert rc == 1
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith(f"] cannot load the client configuration ({missing}): no such file")


def test_bad_metrics_bind_address_exits_1_before_login(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A malformed --metrics-bind-address stops start-up before the kubeconfig is even read (it used to
    log in first, then fail, then log kopf's "Connector is closed" retries while shutting down)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("not: [a kubeconfig")
    rc = run_scheduler(kubeconfig=kubeconfig, config=None, leader_elect=False, lease_name=None,
                       lease_namespace=None, metrics_bind_address="garbage", verbosity=2)
    assert rc == 1
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith("] invalid --metrics-bind-address: bind address 'garbage': want host:port")
