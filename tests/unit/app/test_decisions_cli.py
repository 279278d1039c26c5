"""``explain``'s side of recorded decisions: reading ``/debug/decisions`` from a real aiohttp server
(``py_scheduler.offline.recorded``) and printing a record (``render.print_recorded``)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from py_scheduler.app.scheduling.decisions import DecisionLog
from py_scheduler.app.serving.decisions_http import add_routes
from py_scheduler.offline.recorded import _direct, fetch_recorded, leader_pod_name
from py_scheduler.offline.render import make_console, print_recorded
from tests.unit.app.test_decisions import _harness


async def _recorded_log() -> DecisionLog:
    h, log = _harness(top_k=2)
    for i in range(4):
        h.node(f"n{i}", cpu=str(2 + i))
    h.pod("a")
    await h.cycle()
    h.pod("huge", cpu="64")
    await h.cycle()
    return log


async def test_direct_lookup_reads_the_newest_record_of_the_pod_and_uid() -> None:
    log = await _recorded_log()
    app = web.Application()
    add_routes(app, log, lambda: True)
    server = TestServer(app)
    await server.start_server()
    try:
        url = str(server.make_url(""))
        found = await _direct(url, "default/a", "uid-a")
        assert found.record is not None and found.record["pod"] == "default/a" and found.count == 1
        assert found.record["recorded"] is True and found.record["selected"] in found.record["totals"]
        other_uid = await _direct(url, "default/a", "uid-of-a-recreated-pod")
        assert other_uid.record is None and "no record" in other_uid.reason
        missing = await _direct(url, "default/nobody", "u")
        assert missing.record is None and "no record" in missing.reason
    finally:
        await server.close()


async def test_direct_lookup_failures_are_reasons_not_exceptions() -> None:
    app = web.Application()
    add_routes(app, DecisionLog(), lambda: False)  # a standby
    server = TestServer(app)
    await server.start_server()
    try:
        standby = await _direct(str(server.make_url("")), "default/a", "u")
        assert standby.record is None and "HTTP 503" in standby.reason and "not leading" in standby.reason
    finally:
        await server.close()
    gone = await _direct("http://127.0.0.1:9", "default/a", "u")  # discard port: connection refused
    assert gone.record is None and gone.reason.startswith("cannot read http://127.0.0.1:9/debug/decisions")


async def test_print_recorded_shows_scores_histogram_and_message() -> None:
    log = await _recorded_log()
    ok, failed = (log.find(p)[0].to_json() for p in ("default/a", "default/huge"))
    buf = io.StringIO()
    console = make_console(buf)
    print_recorded(console, ok, "leader kube-system/sched-0")
    print_recorded(console, failed)
    out = buf.getvalue()
    assert "Recorded decision default/a  attempt 1" in out and f"scheduled → {ok['selected']}" in out
    assert "NodeResourcesFit" in out and "✔ selected" in out and "top 2 of 4 feasible nodes" in out
    assert "from the leader kube-system/sched-0" in out
    assert "Filtered out: 4 Insufficient cpu (by NodeResourcesFit)" in out
    assert "FailedScheduling: 0/4 nodes are available: 4 Insufficient cpu." in out


def test_proxy_lookup_without_a_usable_kubeconfig_is_a_reason(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    found = fetch_recorded(bad, "default/a", "u")
    assert found.record is None and found.reason.startswith(f"kubeconfig {bad}: cannot load")
    assert fetch_recorded(None, "default/a", "u").reason.startswith("no kubeconfig and no --decisions-url")


def test_explain_with_a_malformed_kubeconfig_is_one_line_not_a_traceback(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from py_scheduler.offline.explain import explain_main

    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    assert explain_main(None, bad, "default/a", None, "table") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: kubeconfig {bad}: cannot load:") and len(err.strip().splitlines()) == 1


def test_explain_missing_kubeconfig_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kubeconfig that does not exist: one line saying so (not kubernetes_asyncio's "Config not found"
    log line followed by "Expected key current-context")."""
    from py_scheduler.offline.explain import explain_main

    missing = tmp_path / "nope"
    assert explain_main(None, missing, "default/a", None, "table") == 2
    assert capsys.readouterr().err == f"error: kubeconfig {missing}: no such file\n"


def test_leader_that_is_not_a_pod_points_at_decisions_url() -> None:
    """`py-scheduler run --kubeconfig ...` on a workstation holds the Lease under its hostname, which
    names no Pod: the proxy's 404 now says to give --decisions-url instead of only quoting the Status."""
    from py_scheduler.offline.recorded import _refusal

    body = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"vm\\" not '
            'found","reason":"NotFound","details":{"name":"vm","kind":"pods"},"code":404}')
    msg = _refusal("leader kube-system/vm", 404, body, None)
    assert msg.startswith("the leader kube-system/vm answered HTTP 404: ")
    assert msg.endswith("give --decisions-url https://HOST:PORT)")
    assert "--decisions-url" not in _refusal("leader", 404, "404 page not found", None)


def test_leader_pod_name() -> None:
    assert leader_pod_name("py-scheduler-7d9f-abcde_0b6c1e2a-9d7e-4f5a-8a5b-0c1d2e3f4a5b") == "py-scheduler-7d9f-abcde"
    with pytest.raises(ValueError):
        leader_pod_name("")


def test_refusals_say_what_to_do() -> None:
    from py_scheduler.offline.recorded import NEEDS_TOKEN, _refusal

    anon = '{"message":"forbidden: User \\"system:anonymous\\" cannot get path \\"/debug/decisions\\""}'
    assert _refusal("leader", 403, anon, None) == NEEDS_TOKEN  # a client-certificate kubeconfig: no token
    assert _refusal("leader", 401, "Unauthorized", None) == NEEDS_TOKEN
    assert "did not accept the bearer token" in _refusal("leader", 401, "Unauthorized", "t0k3n")
    denied = _refusal("leader", 403, anon.replace("system:anonymous", "alice"), "t0k3n")
    assert "needs get on the non-resource URLs" in denied and "t0k3n" not in denied
    # the API server's own refusal (no pods/proxy right) is passed on as it is
    apis = _refusal("leader", 403, 'pods "x" is forbidden: User "alice" cannot get resource "pods/proxy"', "t0k3n")
    assert apis.startswith("the leader answered HTTP 403: pods") and "decisions-reader" not in apis


@pytest.mark.parametrize("value", ["py-scheduler", "kube-system/", "/py-scheduler", "a/b/c"])
def test_explain_scheduler_service_account_must_be_namespace_slash_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    from typer.testing import CliRunner

    from py_scheduler.cli import app

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    res = CliRunner().invoke(app, ["explain", "--kubeconfig", str(kubeconfig), "--pod", "default/a"],
                             env={"PY_SCHEDULER_SERVICE_ACCOUNT": value})
    assert res.exit_code == 2
    assert f"--scheduler-service-account must be NAMESPACE/NAME, not {value!r}" in res.output + capsys.readouterr().err


async def test_direct_lookup_sends_the_kubeconfigs_token_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--decisions-url https://…``: the kubeconfig's own bearer token goes out only with
    ``--kubeconfig-token`` (it is often the user's whole identity). The test server speaks plain
    HTTP: the client's HTTPS URL is rewritten at the socket's door (a token is sent over HTTPS only)."""
    from py_scheduler.offline import recorded

    seen: list[str | None] = []

    async def decisions(req: web.Request) -> web.Response:
        seen.append(req.headers.get("Authorization"))
        return web.json_response({"decisions": []}, status=404)

    app = web.Application()
    app.router.add_get("/debug/decisions", decisions)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: 'https://x'}}]\n"
        "users: [{name: u, user: {token: admin-secret}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    real_get = recorded.aiohttp.ClientSession.get

    def get(self: Any, url: str, **kw: Any) -> Any:
        return real_get(self, url.replace("https://", "http://"), **{**kw, "ssl": None})

    monkeypatch.setattr(recorded.aiohttp.ClientSession, "get", get)
    async with TestServer(app) as server:
        url = str(server.make_url("")).rstrip("/").replace("http://", "https://")
        await _direct(url, "default/a", "u", kubeconfig)
        await _direct(url, "default/a", "u", kubeconfig, kubeconfig_token=True)
    assert seen == [None, "Bearer admin-secret"]
