"""``resolve_env_once``: the proxy environment is read once at connect, never per request."""

from __future__ import annotations

from pathlib import Path

import pytest

from py_scheduler.app.client.kube import Kube
from tests.unit.app.fakes import kubeconfig_file


async def _connect(tmp_path: Path, extra: str = "") -> Kube:
    return await Kube.connect(kubeconfig_file(tmp_path, cluster_extra=extra))


async def test_session_stops_reading_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    kube = await _connect(tmp_path)
    try:
        assert kube.api.rest_client.pool_manager.trust_env is False
        assert not kube.api.rest_client.proxy
    finally:
        await kube.close()


async def test_env_proxy_resolved_once_with_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:s3cret@proxy.example.test:3128")
    monkeypatch.setenv("https_proxy", "http://alice:s3cret@proxy.example.test:3128")
    kube = await _connect(tmp_path)
    try:
        assert kube.api.rest_client.pool_manager.trust_env is False
        assert kube.api.rest_client.proxy == "http://alice:s3cret@proxy.example.test:3128"
    finally:
        await kube.close()


async def test_no_proxy_excludes_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.test:3128")
    monkeypatch.setenv("https_proxy", "http://proxy.example.test:3128")
    monkeypatch.setenv("NO_PROXY", "api.example.test")
    monkeypatch.setenv("no_proxy", "api.example.test")
    kube = await _connect(tmp_path)
    try:
        assert not kube.api.rest_client.proxy
    finally:
        await kube.close()


async def test_kubeconfig_proxy_url_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy.example.test:3128")
    monkeypatch.setenv("https_proxy", "http://env-proxy.example.test:3128")
    kube = await _connect(tmp_path, ', proxy-url: "http://kc-proxy.example.test:8080"')
    try:
        assert kube.api.rest_client.proxy == "http://kc-proxy.example.test:8080"
    finally:
        await kube.close()


async def test_derived_clients_have_their_own_pool_and_limiter(tmp_path: Path) -> None:
    """Leader election / events / auth reviews: same server and token, another aiohttp session
    (connection pool) and token bucket, their own user agent; closed with the parent."""
    kube = await _connect(tmp_path)
    le = kube.derive("leader-election")
    assert kube.event_client is not None
    for other in (le, kube.event_client):
        assert other.api is not kube.api
        assert other.api.rest_client.pool_manager is not kube.api.rest_client.pool_manager
        assert other.limiter is not kube.limiter and other.limiter.qps == kube.limiter.qps
        cfg, mine = other.api.configuration, kube.api.configuration
        assert cfg.host == mine.host and await cfg.get_api_key_with_prefix("BearerToken") == "Bearer abc"
        assert other.api.rest_client.pool_manager.trust_env is False
    assert le.api.user_agent == "py-scheduler/leader-election"
    assert kube.api.user_agent == "py-scheduler/scheduler"
    await kube.close()
    assert le.api.rest_client.pool_manager.closed and kube.event_client.api.rest_client.pool_manager.closed


async def test_derived_client_follows_a_rotated_in_cluster_token(tmp_path: Path) -> None:
    """In a Pod the ServiceAccount token file is rotated: a derived client (the leader election's)
    re-reads it like the main one (the refresh hook is shared by the Configuration copies)."""
    import datetime as dt

    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

    from py_scheduler.app.serving.secure import self_signed_cert

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("first")
    ca.write_bytes(self_signed_cert("ca.example.test")[0])
    loader = InClusterConfigLoader(str(token), str(ca), environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1",
                                                                 "KUBERNETES_SERVICE_PORT": "443"})
    cfg = k8s_client.Configuration()
    loader.load_and_set(cfg)
    kube = Kube(k8s_client.ApiClient(configuration=cfg))
    le = kube.derive("leader-election")

    async def token_sent(k: Kube) -> str:  # every request reads the key so, running the refresh hook
        return str(await k.api.configuration.get_api_key_with_prefix("BearerToken")).removeprefix("Bearer ")

    try:
        assert await token_sent(le) == "first"
        token.write_text("second")
        loader.token_expires_at = dt.datetime.now() - dt.timedelta(seconds=1)
        assert await token_sent(le) == "second"
        assert await token_sent(kube) == "second"
    finally:
        await kube.close()
