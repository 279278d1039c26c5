"""Recorded decisions on the real test bed: py-scheduler schedules a Pod, the cluster changes, and
``explain`` shows what the scheduler saw then (the record), not a recomputation on today's cluster;
through the API server's Pod proxy to the leader, as a user outside the cluster would reach it.
The HTML page is checked in a real headless browser (Debian's ``chromium``), which also takes the
screenshot of docs/decisions.md (``DECISIONS_SCREENSHOT=path`` keeps it).

The Nodes carry a taint only our Pods tolerate and a label our Pods select, so other tests' Nodes
and Pods sharing the bed cannot change the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client

from tests.e2e.helpers import (
    Testbed,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    unique_name,
    wait_for,
    wait_for_pod_scheduled,
)
from tests.e2e.scheduler_proc import SchedulerProcess, running_scheduler

REPO = Path(__file__).resolve().parents[2]
_SERVING = re.compile(r"serving /metrics\S* .*? on (?P<host>\S+):(?P<port>\d+)")


async def _explain(kubeconfig: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if k != "PY_SCHEDULER_TOKEN"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "py_scheduler.cli", "explain", "--kubeconfig", str(kubeconfig), *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**base, "PYTHONPATH": str(REPO), **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _port(sched: SchedulerProcess) -> int:
    m = _SERVING.search(sched.log())
    assert m, sched.log()[-2000:]
    return int(m.group("port"))


def _host_ip() -> str | None:
    """A non-loopback address of this machine (the API server refuses to proxy to loopback)."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((a for a in out.split() if "." in a and not a.startswith("127.")), None)


SCHEDULER_SA = "py-scheduler"
"""The stand-in leader Pod's ServiceAccount (in the test's namespace): explain sends nothing to a
Lease holder that is not a Running Pod running as the scheduler's ServiceAccount."""


async def _stand_in_leader_pod(api: client.ApiClient, namespace: str, name: str, ip: str, *,
                               running: bool = True) -> None:
    """The bed has no kubelet: a Pod object named as the leader's hostname, running as
    :data:`SCHEDULER_SA`, its ``status.podIP`` this machine's address (and its phase Running unless
    ``running`` is False), is what the API server's Pod proxy needs to reach the scheduler process
    and what explain checks before sending anything to it."""
    core = client.CoreV1Api(api)
    with contextlib.suppress(client.ApiException):  # 409: already there
        await core.create_namespaced_service_account(namespace, {"metadata": {"name": SCHEDULER_SA}})
    await create_pod(api, name, namespace, scheduler_name="nobody-serves-this-scheduler",
                     spec={"serviceAccountName": SCHEDULER_SA})
    status: dict[str, object] = {"podIP": ip, "podIPs": [{"ip": ip}]}
    await core.patch_namespaced_pod_status(name, namespace, {"status": {**status, "phase": "Running"} if running
                                                             else status})


async def test_explain_shows_the_recorded_decision_after_the_cluster_changed(
        testbed: Testbed, api_client: client.ApiClient) -> None:
    tag = unique_name("dec")
    big, small, tiny, pod, huge = f"{tag}-big", f"{tag}-small", f"{tag}-tiny", f"{tag}-a", f"{tag}-huge"
    ns = tag
    core = client.CoreV1Api(api_client)
    taint = {"key": "e2e-decisions", "value": tag, "effect": "NoSchedule"}
    spec = {"nodeSelector": {"e2e-decisions": tag},
            "tolerations": [{"key": "e2e-decisions", "operator": "Equal", "value": tag, "effect": "NoSchedule"}]}
    hostname = socket.gethostname()
    ip = _host_ip()
    await core.create_namespace({"metadata": {"name": ns}})
    try:
        await create_node(api_client, big, {"cpu": "8", "memory": "16Gi", "pods": "110"},
                          labels={"e2e-decisions": tag}, taints=[taint])
        await create_node(api_client, small, {"cpu": "4", "memory": "16Gi", "pods": "110"},
                          labels={"e2e-decisions": tag}, taints=[taint])
        await create_node(api_client, tiny, {"cpu": "500m", "memory": "16Gi", "pods": "110"},
                          labels={"e2e-decisions": tag}, taints=[taint])
        async with running_scheduler(testbed, "decisions", lease_namespace=ns,
                                     extra_args=["--metrics-bind-address", "0.0.0.0:0", "--plain-http"]) as sched:
            port = _port(sched)
            await create_pod(api_client, pod, requests={"cpu": "1", "memory": "1Gi"}, scheduler_name="py-scheduler",
                             spec=spec)
            bound = await wait_for_pod_scheduled(api_client, pod)
            assert bound.spec.node_name == big  # LeastAllocated: more room left on the big node
            logged = sched.final_scores(f"default/{pod}")  # the scheduler's own --v 10 totals

            # the cluster changes: the chosen node is cordoned; a recomputation can no longer pick it
            await core.patch_node(big, {"spec": {"unschedulable": True}})
            url = f"http://127.0.0.1:{port}"

            # recorded: the leader's record, read directly ...
            code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{pod}", "-o", "json",
                                            "--decisions-url", url)
            assert code == 0, err
            assert "recomputing" not in err, err
            rec = json.loads(out)
            assert rec["recorded"] is True and rec["result"] == "scheduled" and rec["selected"] == big
            assert rec["uid"] == bound.metadata.uid and rec["attempt"] == 1
            assert rec["totals"] == {n: t for n, t in logged.items() if n in rec["totals"]}
            assert {big, small} <= set(rec["totals"]) and rec["totals"][big] > rec["totals"][small]
            assert rec["scores"]["NodeResourcesFit"][big] > rec["scores"]["NodeResourcesFit"][small]
            assert rec["filtered_histogram"].get("Insufficient cpu", 0) >= 1, rec  # the tiny node
            assert "NodeResourcesFit" in rec["rejected_by"]
            assert rec["weights"]["NodeResourcesFit"] == 1

            # recomputing (asked for): today's answer differs and says nothing of a record
            code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{pod}", "-o", "json", "--recompute")
            assert code == 0, err
            assert json.loads(out)["selected"] == small and "recorded" not in json.loads(out)

            # no record: a wrong Lease says why, then recomputes
            code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{pod}", "-o", "json",
                                            "--lease", f"{ns}/no-such-lease")
            assert code == 0, err
            assert json.loads(out)["selected"] == small
            assert "note: no recorded decision for" in err and "no-such-lease" in err and "recomputing" in err

            # a Pod that fits nowhere is recorded too, with its FailedScheduling message
            await create_pod(api_client, huge, requests={"cpu": "64"}, scheduler_name="py-scheduler", spec=spec)

            async def huge_recorded() -> dict[str, object] | None:
                async with aiohttp.ClientSession() as s, s.get(f"{url}/debug/decisions",
                                                               params={"pod": f"default/{huge}"}) as r:
                    return (await r.json())["decisions"][0] if r.status == 200 else None

            failed = await wait_for(huge_recorded, timeout=30, what=f"a record of {huge}")
            assert failed["result"] == "unschedulable" and failed["selected"] is None
            assert str(failed["message"]).startswith("0/3 nodes are available: ")
            async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
                metrics = await r.text()
            kept = re.search(r"^py_scheduler_decision_records (\S+)$", metrics, re.MULTILINE)
            assert kept and float(kept.group(1)) >= 2, metrics[-2000:]
            assert "py_scheduler_decision_records_dropped_total 0.0" in metrics
            assert "py_scheduler_decision_records_oldest_age_seconds" in metrics

            # the HTML page in a real browser
            await _check_page_in_chromium(url, pod, big)

            # ... and through the API server's Pod proxy to the Lease holder (what a user does)
            if ip is None or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", hostname):
                pytest.skip(f"no proxyable address ({ip}) or hostname {hostname!r} is no Pod name")
            await _stand_in_leader_pod(api_client, ns, hostname, ip)
            code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{pod}", "-o", "json",
                                            "--lease", f"{ns}/{sched.lease_name}", "--scheduler-port", str(port),
                                            "--scheduler-scheme", "http", "--scheduler-service-account",
                                            f"{ns}/{SCHEDULER_SA}")
            assert code == 0, err
            assert "recomputing" not in err, err
            assert json.loads(out) == rec
            code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{pod}",
                                            "--lease", f"{ns}/{sched.lease_name}", "--scheduler-port", str(port),
                                            "--scheduler-scheme", "http",
                                            env={"PY_SCHEDULER_SERVICE_ACCOUNT": f"{ns}/{SCHEDULER_SA}"})
            assert code == 0, err
            assert f"Recorded decision default/{pod}  attempt 1" in out and f"scheduled → {big}" in out
            assert f"from the leader {ns}/{hostname} through" in out
            line = next(row for row in out.splitlines() if "✔ selected" in row)
            assert big in line
    finally:
        for name in (pod, huge):
            await delete_pod(api_client, name)
        for name in (big, small, tiny):
            await delete_node(api_client, name)
        await core.delete_namespace(ns)


async def test_explain_says_it_recomputes_for_a_pod_another_scheduler_bound(
        testbed: Testbed, api_client: client.ApiClient) -> None:
    tag = unique_name("dec-other")
    node, pod = f"{tag}-n", f"{tag}-p"
    try:
        await create_node(api_client, node)
        await create_pod(api_client, pod, spec={"nodeName": node})  # bound at creation, default-scheduler
        code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{pod}", "-o", "json")
        assert code == 0, err
        assert "was scheduled by 'default-scheduler', not by py-scheduler" in err and "recomputing" in err
        assert "recorded" not in json.loads(out)
    finally:
        await delete_pod(api_client, pod)
        await delete_node(api_client, node)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


async def _check_page_in_chromium(url: str, pod: str, node: str) -> None:
    """Load ``/debug/decisions/ui?pod=...`` in headless Chromium: the rendered DOM holds the score
    table with the selected node marked; a screenshot of the page of all recent decisions is taken
    (and kept with DECISIONS_SCREENSHOT=path)."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    page = f"{url}/debug/decisions/ui?pod=default/{pod}"
    async with aiohttp.ClientSession() as s, s.get(page) as r:
        assert r.status == 200 and r.headers["Content-Security-Policy"].startswith("default-src 'none'")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]
    dom = await _run([browser, *flags, "--dump-dom", page])
    assert f"default/{pod}" in dom and "NodeResourcesFit" in dom
    assert re.search(rf"<tr class=\"sel\"><td class=\"l\">✔ {re.escape(node)}</td>", dom), dom[:3000]
    shot = Path(os.environ.get("DECISIONS_SCREENSHOT") or Path(os.environ.get("TMPDIR", "/tmp")) / f"{pod}.png")
    await _run([browser, *flags, "--window-size=1400,1000", f"--screenshot={shot}", f"{url}/debug/decisions/ui"])
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


async def _run(argv: list[str]) -> str:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


# -- secure serving (the default) through the API server's Pod proxy ---------------------------------------

async def _reader_tokens(api: client.ApiClient, ns: str, tag: str) -> tuple[str, str]:
    """Tokens of two ServiceAccounts of ``ns``: ``reader``, bound to deploy/examples/decisions-reader.yaml's
    ClusterRole (its rules, under a name of this test), and ``nobody``, bound to nothing."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    shipped = next(d for d in yaml.safe_load_all((REPO / "deploy" / "examples" / "decisions-reader.yaml").read_text())
                   if d["kind"] == "ClusterRole")
    await rbac.create_cluster_role({"metadata": {"name": f"{tag}-reader"}, "rules": shipped["rules"]})
    await rbac.create_cluster_role_binding({
        "metadata": {"name": f"{tag}-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{tag}-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]})
    tokens = []
    for sa in ("reader", "nobody"):
        await core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
        tr = await core.create_namespaced_service_account_token(
            sa, ns, {"spec": {"expirationSeconds": 3600}})
        tokens.append(str(tr.status.token))
    return tokens[0], tokens[1]


async def test_secure_leader_reached_through_the_pod_proxy_by_explain_and_a_browser(
        testbed: Testbed, api_client: client.ApiClient, tmp_path: Path) -> None:
    """Secure serving on (the default): the API server's Pod proxy forwards no identity, so explain
    sends the token in X-Py-Scheduler-Authorization (--token / PY_SCHEDULER_TOKEN with the bed's
    client-certificate kubeconfig) and a browser signs in on the page (a cookie), through `kubectl
    proxy` as a user would."""
    hostname, ip = socket.gethostname(), _host_ip()
    if ip is None or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", hostname):
        pytest.skip(f"no proxyable address ({ip}) or hostname {hostname!r} is no Pod name")
    tag = unique_name("dec-sec")
    ns, node, pod = tag, f"{tag}-n", f"{tag}-p"
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    taint = {"key": "e2e-decisions", "value": tag, "effect": "NoSchedule"}
    spec = {"nodeSelector": {"e2e-decisions": tag},
            "tolerations": [{"key": "e2e-decisions", "operator": "Equal", "value": tag, "effect": "NoSchedule"}]}
    await core.create_namespace({"metadata": {"name": ns}})
    kubectl_proxy: asyncio.subprocess.Process | None = None
    try:
        await create_node(api_client, node, labels={"e2e-decisions": tag}, taints=[taint])
        reader, nobody = await _reader_tokens(api_client, ns, tag)
        async with running_scheduler(testbed, "decisions-secure", lease_namespace=ns,
                                     extra_args=["--metrics-bind-address", "0.0.0.0:0"]) as sched:
            port = _port(sched)
            await create_pod(api_client, pod, requests={"cpu": "100m"}, scheduler_name="py-scheduler", spec=spec)
            assert (await wait_for_pod_scheduled(api_client, pod)).spec.node_name == node
            await _stand_in_leader_pod(api_client, ns, hostname, ip, running=False)
            where = ["--pod", f"default/{pod}", "-o", "json", "--lease", f"{ns}/{sched.lease_name}",
                     "--scheduler-port", str(port), "--scheduler-service-account", f"{ns}/{SCHEDULER_SA}"]

            # the Lease holder is no Running replica: nothing is sent to it, the reader's token least of all
            code, out, err = await _explain(testbed.kubeconfig, *where, "--token", reader)
            assert code == 0, err
            assert (f"the Lease holder {ns}/{hostname} is not a py-scheduler replica (it is Pending, not Running): "
                    "nothing was sent to it") in err, err
            assert "recomputing" in err and "recorded" not in json.loads(out)
            # ... nor to a Pod running as another ServiceAccount (the default one: deploy/'s namespace differs)
            code, out, err = await _explain(testbed.kubeconfig, *where[:-2], "--token", reader)
            assert f"is not a py-scheduler replica (it is in namespace {ns}, not the scheduler's (kube-system))" in err
            await core.patch_namespaced_pod_status(hostname, ns, {"status": {"phase": "Running"}})

            # the bed's kubeconfig authenticates with a client certificate: no token to send
            code, out, err = await _explain(testbed.kubeconfig, *where)
            assert code == 0, err
            assert "reviews the caller's bearer token, but none was given: give --token" in err, err
            assert "recomputing" in err and "recorded" not in json.loads(out)
            # a token whose user may not read records
            code, out, err = await _explain(testbed.kubeconfig, *where, env={"PY_SCHEDULER_TOKEN": nobody})
            assert code == 0, err
            assert "answered HTTP 403" in err and "needs get on the non-resource URLs /debug/decisions*" in err, err
            assert "recorded" not in json.loads(out)
            # the reader's token, through the proxy in X-Py-Scheduler-Authorization: the record
            code, out, err = await _explain(testbed.kubeconfig, *where, "--token", reader)
            assert code == 0, err
            assert "recomputing" not in err, err
            rec = json.loads(out)
            assert rec["recorded"] is True and rec["selected"] == node and rec["uid"]
            log = sched.log()
            assert reader not in log and nobody not in log and reader.rsplit(".", 1)[-1] not in log

            # a browser through `kubectl proxy` (the real kubectl when present)
            kubectl = shutil.which("kubectl")
            browser = _chromium()
            if kubectl is None or browser is None:
                pytest.skip("kubectl or chromium is not installed")
            kubectl_proxy = await asyncio.create_subprocess_exec(
                kubectl, "--kubeconfig", str(testbed.kubeconfig), "proxy", "--port", "0",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            assert kubectl_proxy.stdout is not None
            first = (await asyncio.wait_for(kubectl_proxy.stdout.readline(), timeout=30)).decode()
            m = re.search(r"Starting to serve on 127\.0\.0\.1:(\d+)", first)
            assert m, first
            base = (f"http://127.0.0.1:{m.group(1)}/api/v1/namespaces/{ns}/pods/https:{hostname}:{port}"
                    "/proxy/debug/decisions")
            await _sign_in_and_out_in_chromium(browser, base, f"default/{pod}", node, reader, tmp_path)
            log = sched.log()  # the token never logged, neither from the header nor from the form or cookie
            assert reader not in log and reader.rsplit(".", 1)[-1] not in log
    finally:
        if kubectl_proxy is not None and kubectl_proxy.returncode is None:
            kubectl_proxy.terminate()
            await kubectl_proxy.wait()
        await delete_pod(api_client, pod)
        await delete_node(api_client, node)
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(client.ApiException):
                await delete(f"{tag}-reader")
        await core.delete_namespace(ns)


class _DevTools:
    """A headless Chromium driven over the DevTools protocol (aiohttp's WebSocket client), as a user:
    it navigates, types into the focused field and presses Enter; no script of ours runs in the page
    (the page's CSP forbids scripts; DOM reads go through the protocol's DOM domain)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, session: str) -> None:
        self.ws, self.session, self.n = ws, session, 0
        self.events: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self.replies: dict[int, asyncio.Future[dict[str, object]]] = {}
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, ws: aiohttp.ClientWebSocketResponse) -> _DevTools:
        tools = cls(ws, "")
        target = await tools.call("Target.createTarget", url="about:blank")
        attached = await tools.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)
        tools.session = str(attached["sessionId"])
        await tools.call("Page.enable")
        return tools

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.replies:
                self.replies.pop(data["id"]).set_result(data)
            elif "method" in data:
                await self.events.put(data)

    async def call(self, method: str, **params: object) -> dict[str, object]:
        self.n += 1
        fut: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        self.replies[self.n] = fut
        msg: dict[str, object] = {"id": self.n, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        await self.ws.send_json(msg)
        reply = await asyncio.wait_for(fut, timeout=30)
        assert "error" not in reply, (method, reply)
        result = reply.get("result")
        assert isinstance(result, dict)
        return result

    async def loaded(self) -> None:
        while True:
            ev = await asyncio.wait_for(self.events.get(), timeout=30)
            if ev.get("method") == "Page.loadEventFired":
                return

    async def goto(self, url: str) -> None:
        await self.call("Page.navigate", url=url)
        await self.loaded()

    async def html(self) -> str:
        root = await self.call("DOM.getDocument")
        node = root["root"]
        assert isinstance(node, dict)
        return str((await self.call("DOM.getOuterHTML", nodeId=node["nodeId"]))["outerHTML"])

    async def type_and_enter(self, selector: str, text: str) -> None:
        root = await self.call("DOM.getDocument")
        node = root["root"]
        assert isinstance(node, dict)
        found = await self.call("DOM.querySelector", nodeId=node["nodeId"], selector=selector)
        await self.call("DOM.focus", nodeId=found["nodeId"])
        await self.call("Input.insertText", text=text)
        for kind in ("keyDown", "keyUp"):
            await self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                            windowsVirtualKeyCode=13, text="\r")
        await self.loaded()

    async def press_enter_on(self, selector: str) -> None:
        """Focus ``selector`` (a button) and press Enter: the browser submits its form."""
        root = await self.call("DOM.getDocument")
        node = root["root"]
        assert isinstance(node, dict)
        found = await self.call("DOM.querySelector", nodeId=node["nodeId"], selector=selector)
        assert found["nodeId"], f"no {selector} in the page"
        await self.call("DOM.focus", nodeId=found["nodeId"])
        for kind in ("keyDown", "keyUp"):
            await self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                            windowsVirtualKeyCode=13, text="\r")
        await self.loaded()

    async def cookies(self, url: str) -> list[dict[str, object]]:
        got = (await self.call("Network.getCookies", urls=[url]))["cookies"]
        assert isinstance(got, list)
        return got


async def _sign_in_and_out_in_chromium(browser: str, base: str, pod: str, node: str, token: str,
                                       tmp_path: Path) -> None:
    """``base``/ui without credentials is the sign-in page; typing the token and pressing Enter sets the
    cookie (HttpOnly, Secure, SameSite=Strict, scoped to the proxy prefix, expiring with the token: an
    hour at most here) and shows the records; the sign-out button (a POST) clears it."""
    proc = await asyncio.create_subprocess_exec(
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--remote-debugging-port=0", f"--user-data-dir={tmp_path / 'chromium'}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        ws_url = ""
        while not ws_url:
            line = (await asyncio.wait_for(proc.stderr.readline(), timeout=60)).decode()
            assert line, "chromium exited before listening"
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                ws_url = m.group(1)
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, max_msg_size=0) as ws:
            tools = await _DevTools.open(ws)
            ui = f"{base}/ui?pod={pod}"
            await tools.goto(ui)
            page = await tools.html()
            assert '<form method="post" action="login">' in page and "sign in with a bearer token" in page, page[:2000]
            assert not await tools.cookies(ui)
            await tools.type_and_enter("input[name=token]", token)
            page = await tools.html()
            assert f"Decisions of {pod}" in page and f"scheduled</span> → {node}</h2>" in page, page[-3000:]
            [cookie] = await tools.cookies(ui)
            path = base.split("127.0.0.1", 1)[1].split("/", 1)[1]
            assert cookie["name"] == "py-scheduler-token" and cookie["httpOnly"] and cookie["secure"]
            assert cookie["sameSite"] == "Strict" and cookie["path"] == f"/{path}", cookie
            expires = cookie["expires"]
            assert not cookie["session"] and isinstance(expires, float | int) and expires <= time.time() + 3600
            assert 'id="logout"' in page
            await tools.goto(f"{base}/logout")  # a GET is no sign-out (any page could make the browser fetch it)
            assert len(await tools.cookies(ui)) == 1
            await tools.goto(ui)
            await tools.press_enter_on("#logout")
            assert "signed out" in await tools.html()
            assert not await tools.cookies(ui)
            await tools.goto(ui)
            assert "sign in with a bearer token" in await tools.html()
            tools.reader.cancel()
    finally:
        proc.terminate()
        await proc.wait()

