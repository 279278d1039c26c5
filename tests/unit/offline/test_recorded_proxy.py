"""Whom ``explain --kubeconfig --pod`` sends a bearer token to, through a fake API server (aiohttp) that
serves the Lease, the Lease holder's Pod and the Pod proxy path (``py_scheduler.offline.recorded``).

The Pod proxy does not verify its backend: a Pod that is not a py-scheduler replica (another
namespace, another ServiceAccount, not Running) gets no request at all, so no token; the
kubeconfig's own token is sent only with ``kubeconfig_token``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from py_scheduler.offline.recorded import NEEDS_TOKEN, TOKEN_HEADER, _via_proxy

ADMIN = "admin-kubeconfig-secret"
LEASE_NS, LEADER = "kube-system", "py-scheduler-6f7-abcde"


class FakeAPI:
    """The Lease ``kube-system/py-scheduler`` held by ``LEADER``, that Pod (``pod_spec`` / ``phase``),
    and its proxy, which records the headers it got and answers like a secure scheduler."""

    def __init__(self, service_account: str = "py-scheduler", phase: str = "Running",
                 pod_ns: str = LEASE_NS) -> None:
        self.service_account, self.phase, self.pod_ns = service_account, phase, pod_ns
        self.proxied: list[dict[str, str]] = []
        self.app = web.Application()
        self.app.router.add_get("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}", self.lease)
        self.app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", self.pod)
        self.app.router.add_get("/api/v1/namespaces/{ns}/pods/{target}/proxy/debug/decisions", self.proxy)

    async def lease(self, req: web.Request) -> web.Response:
        return web.json_response({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                  "metadata": {"name": req.match_info["name"], "namespace": req.match_info["ns"]},
                                  "spec": {"holderIdentity": f"{LEADER}_0b6c1e2a"}})

    async def pod(self, req: web.Request) -> web.Response:
        if req.match_info["ns"] != self.pod_ns or req.match_info["name"] != LEADER:
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
        return web.json_response({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": LEADER, "namespace": self.pod_ns},
                                  "spec": {"serviceAccountName": self.service_account,
                                           "containers": [{"name": "c", "image": "x"}]},
                                  "status": {"phase": self.phase}})

    async def proxy(self, req: web.Request) -> web.Response:
        self.proxied.append(dict(req.headers))
        if req.headers.get(TOKEN_HEADER) != "Bearer reader-token":
            return web.json_response({"message": 'User "system:anonymous" cannot get path "/debug/decisions"'},
                                     status=401)
        return web.json_response({"decisions": [{"pod": "default/a", "selected": "n1"}]})


async def _lookup(api: FakeAPI, tmp_path: Path, **kwargs: Any) -> tuple[Any, list[dict[str, str]]]:
    async with TestServer(api.app) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": str(server.make_url("")).rstrip("/")}}],
            "users": [{"name": "u", "user": {"token": ADMIN}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
        found = await _via_proxy(kubeconfig, "default/a", "uid-a", f"{LEASE_NS}/py-scheduler", 10259, "https",
                                 **kwargs)
    return found, api.proxied


async def test_a_replica_gets_the_given_token_and_never_the_kubeconfigs(tmp_path: Path) -> None:
    found, proxied = await _lookup(FakeAPI(), tmp_path, token="reader-token")
    assert found.record == {"pod": "default/a", "selected": "n1"}, found.reason
    assert len(proxied) == 1 and proxied[0][TOKEN_HEADER] == "Bearer reader-token"


async def test_the_kubeconfigs_token_is_sent_only_when_asked(tmp_path: Path) -> None:
    found, proxied = await _lookup(FakeAPI(), tmp_path)
    assert found.record is None and found.reason == NEEDS_TOKEN and "--kubeconfig-token" in found.reason
    assert len(proxied) == 1 and TOKEN_HEADER not in proxied[0]
    found, proxied = await _lookup(FakeAPI(), tmp_path, kubeconfig_token=True)
    assert proxied[-1][TOKEN_HEADER] == f"Bearer {ADMIN}"
    assert ADMIN not in found.reason  # refused (not the reader's token): the reason never holds it


async def test_a_lease_holder_that_is_no_replica_gets_nothing(tmp_path: Path) -> None:
    for api, why in ((FakeAPI(service_account="default"),
                      "runs as ServiceAccount kube-system/default, not the scheduler's (kube-system/py-scheduler)"),
                     (FakeAPI(phase="Pending"), "it is Pending, not Running")):
        found, proxied = await _lookup(api, tmp_path, token="reader-token", kubeconfig_token=True)
        assert proxied == [], "a request (and a token) went to a Pod that is no replica"
        assert found.record is None and why in found.reason, found.reason
        assert found.reason.startswith(f"the Lease holder {LEASE_NS}/{LEADER} is not a py-scheduler replica")
        assert "nothing was sent to it" in found.reason and "\n" not in found.reason
    # the Lease names a Pod in another namespace than the scheduler's ServiceAccount
    found, proxied = await _lookup(FakeAPI(), tmp_path, token="reader-token", service_account="sched/py-scheduler")
    assert proxied == [] and "in namespace kube-system, not the scheduler's (sched)" in found.reason
    # a Pod that does not exist: nothing sent either
    found, proxied = await _lookup(FakeAPI(pod_ns="elsewhere"), tmp_path, token="reader-token")
    assert proxied == [] and "cannot read the Lease holder's Pod" in found.reason and "--decisions-url" in found.reason
