"""Bounded authentication work on the real test bed (issue 31): TokenReviews and SubjectAccessReviews go
to the bed's API server. A flood of junk tokens cannot hold a legitimate scrape, the reviews it costs
stay bounded (the scheduler's own ``apiserver_delegated_authn_request_total``), tokens must be minted
for ``--authentication-audiences`` (``kubectl create token NAME --audience AUD``), and
``--anonymous-auth=false`` refuses requests without one."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter

import aiohttp
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, unique_name, wait_for
from tests.e2e.scheduler_proc import running_scheduler

_SERVING = re.compile(r"serving /metrics\S* .*? on (?P<host>\S+):(?P<port>\d+)")
_AUTHN = re.compile(r'^apiserver_delegated_authn_request_total\{code="(?P<code>[^"]+)"\} (?P<n>\S+)$', re.M)


async def _token(core: client.CoreV1Api, sa: str, ns: str, audiences: list[str] | None = None) -> str:
    """``kubectl create token SA -n NS [--audience A]``."""
    spec: dict[str, object] = {"expirationSeconds": 3600}
    if audiences:
        spec["audiences"] = audiences
    tr = await core.create_namespaced_service_account_token(sa, ns, {"spec": spec})
    return str(tr.status.token)


async def _get(url: str, token: str | None, *, source: str | None = None,
               session: aiohttp.ClientSession | None = None) -> tuple[int, str, float]:
    """``(status, body, seconds)`` of one GET (a fresh connection from ``source`` unless ``session``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    t0 = time.monotonic()
    own = session is None
    s = session or aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0) if source else None),
                                         timeout=aiohttp.ClientTimeout(total=60))
    try:
        async with s.get(url, ssl=False, headers=headers) as r:
            body = await r.text()
            if r.status == 429:
                assert r.headers["Retry-After"] == "1"
            return r.status, body, time.monotonic() - t0
    finally:
        if own:
            await s.close()


async def test_junk_token_flood_costs_bounded_reviews_and_a_scrape_still_answers_in_a_second(
        testbed: Testbed, api_client: client.ApiClient) -> None:
    tag = unique_name("authn")
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    await core.create_namespace({"metadata": {"name": tag}})
    try:
        await rbac.create_cluster_role({"metadata": {"name": tag},
                                        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]})
        await rbac.create_cluster_role_binding({
            "metadata": {"name": tag},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": tag},
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": tag}]})
        await core.create_namespaced_service_account(tag, {"metadata": {"name": "scraper"}})
        audience = f"py-scheduler-{tag}"
        api_token = await _token(core, "scraper", tag)  # for the API server only
        scraper = await _token(core, "scraper", tag, [audience])  # kubectl create token --audience
        fresh = await _token(core, "scraper", tag, [audience])
        async with running_scheduler(testbed, tag, lease_namespace=tag, extra_args=[
                "--authentication-audiences", audience, "--anonymous-auth=false"]) as sched:
            m = _SERVING.search(sched.log())
            assert m, sched.log()[-2000:]
            url = f"https://127.0.0.1:{m.group('port')}/metrics"

            async def reviews() -> int:
                """TokenReviews sent so far (a 429 is counted but sent nothing). Reading them with the
                scraper's token may cost one more when its 10 s cache entry expired: deltas allow it."""
                status, body, _ = await _get(url, scraper)
                assert status == 200, body[:500]
                return sum(int(float(x["n"])) for x in _AUTHN.finditer(body) if x["code"] != "429")

            # audiences and anonymous requests
            assert (await _get(url, None))[0] == 401  # --anonymous-auth=false
            assert (await _get(url, api_token))[0] == 401  # a token the API server accepts, but not for us
            assert (await _get(url, scraper))[0] == 200
            assert (await _get(url.replace("/metrics", "/livez"), None))[:2] == (200, "ok")  # probes stay open

            # 300 concurrent requests with one junk token: one review
            before = await reviews()
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100),
                                             timeout=aiohttp.ClientTimeout(total=120)) as s:
                same = await asyncio.gather(*(_get(url, "junk-token-same", session=s) for _ in range(300)))
            assert {st for st, _, _ in same} == {401}
            assert 1 <= await reviews() - before <= 2  # not 300

            # 500 distinct junk tokens from one address, and meanwhile a scrape from another with a token
            # never seen (its review has to be made during the flood)
            before = await reviews()
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100),
                                             timeout=aiohttp.ClientTimeout(total=120)) as s:
                flood = [asyncio.create_task(_get(url, f"junk-{tag}-{i}", session=s)) for i in range(500)]
                await wait_for(lambda: sum(t.done() for t in flood) >= 50, timeout=60, interval=0.01,
                               what="the flood under way")
                status, body, took = await _get(url, fresh, source="127.0.0.2")
                under_way = sum(not t.done() for t in flood)
                answers = Counter(st for st, _, _ in await asyncio.gather(*flood))
            assert status == 200 and "# HELP" in body, body[:300]
            assert took < 1.0, f"a scrape took {took:.2f} s during the flood ({under_way} junk requests under way)"
            assert set(answers) <= {401, 429} and answers[429] > 0, answers
            sent = await reviews() - before
            # each junk request answered 401 cost exactly one review, a 429 none; plus the fresh token's
            assert answers[401] + 1 <= sent <= answers[401] + 2, (sent, answers)
            assert sent < 500
            log = sched.log()
            assert scraper not in log and fresh not in log and "junk-" not in log
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(client.ApiException):
                await delete(tag)
        await core.delete_namespace(tag)
