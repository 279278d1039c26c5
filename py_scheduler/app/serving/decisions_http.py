"""The ``/debug/decisions`` endpoints: JSON records, the HTML page (``/ui``) with their score tables, sign-in.

Plain server-rendered HTML and inline CSS, no JavaScript (the page is served with a
``Content-Security-Policy`` that forbids scripts). Every value that comes from an object (Pod and
node names, reasons, messages) goes through :func:`html.escape`. Layout follows ``explain``'s table
(:mod:`py_scheduler.offline.render`): nodes as rows, Score plugins as columns, each cell the
plugin's weighted points (normalized score x weight), the total last, the selected node first and
marked; then the Filter histogram and the FailedScheduling message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from py_scheduler.app.scheduling.decisions import Decision, DecisionLog, rfc3339
from py_scheduler.app.serving.secure import TOKEN_COOKIE, DelegatingAuth, is_cross_site, is_token, token_cookie

__all__ = ["add_routes", "render_decision", "render_login", "render_page"]

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1b1f23;background:#fff}
h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.05em;margin:0 0 .4em}
form{margin:.6em 0 1.2em} input[type=text]{width:22em} .muted{color:#6a737d}
section{border:1px solid #d1d5da;border-radius:6px;padding:.8em 1em;margin:0 0 1em}
.scroll{overflow-x:auto} table{border-collapse:collapse;margin:.4em 0}
th,td{padding:.2em .5em;border-bottom:1px solid #eaecef} td.l{white-space:nowrap}
th{text-align:right;font-weight:600;background:#f6f8fa;font-size:.8em} th.l,td.l{text-align:left} td{text-align:right}
tr.sel td{background:#e6ffed;font-weight:600} .ok{color:#22863a} .bad{color:#cb2431} .err{color:#b08800}
.msg{font-family:ui-monospace,monospace;white-space:pre-wrap;background:#fff5f5;padding:.4em .6em}
"""

_RESULT_CLASS = {"scheduled": "ok", "unschedulable": "bad", "error": "err"}


def _e(v: Any) -> str:
    return escape(str(v), quote=True)


def render_decision(d: Decision) -> str:
    """One record as an HTML ``<section>``."""
    out: list[str] = []
    cls = _RESULT_CLASS.get(d.result, "")
    out.append(f'<section id="{_e(d.uid)}-{d.attempt}"><h2>{_e(d.pod)} '
               f'<span class="{cls}">{_e(d.result)}</span>'
               + (f" → {_e(d.selected)}" if d.selected else "") + "</h2>")
    out.append(f'<div class="muted">{_e(rfc3339(d.time))} · attempt {d.attempt} · profile {_e(d.profile)} · '
               f"uid {_e(d.uid)} · {d.nodes_evaluated} of {d.nodes_total} nodes evaluated, {d.feasible} feasible"
               f" · cycle {d.duration * 1000:.2f} ms</div>")
    extras = []
    gpu = d.gpu_indices()
    if gpu is not None:
        extras.append(f"GPU indices <b>{_e(gpu)}</b>")
    for dev in d.dra_devices():
        extras.append(f"DRA {_e(dev['claim'])}/{_e(dev['request'])}: {_e(dev['driver'])} {_e(dev['pool'])}/"
                      f"{_e(dev['device'])}")
    if d.nominated:
        extras.append(f"preemption nominated {_e(d.nominated)}"
                      + (f" evicting {_e(', '.join(d.victims))}" if d.victims else ""))
    if extras:
        out.append("<div>" + " · ".join(extras) + "</div>")
    if d.nodes:
        out.append("<div class=scroll><table><thead><tr><th class=l>Node</th>")
        for p in d.plugins:
            out.append(f"<th>{_e(p)}<br><span class=muted>×{_e(d.weights.get(p, 0))}</span></th>")
        out.append("<th>Total</th></tr></thead><tbody>")
        order = sorted(range(len(d.nodes)), key=lambda i: (d.nodes[i] != d.selected, -d.totals[i]))
        for i in order:
            node = d.nodes[i]
            sel = node == d.selected
            out.append(f'<tr{" class=sel" if sel else ""}><td class=l>{"✔ " if sel else ""}{_e(node)}</td>')
            for p, sc in zip(d.plugins, d.row(i), strict=True):
                out.append(f"<td>{sc * d.weights.get(p, 0)}</td>")
            out.append(f"<td>{d.totals[i]}</td></tr>")
        out.append("</tbody></table></div>")
        note = f"cells: normalized score × weight; top {len(d.nodes)} of {d.feasible} feasible nodes"
        if d.skipped:
            note += "; PreScore skipped: " + ", ".join(d.skipped)
        out.append(f'<div class="muted">{_e(note)}</div>')
    elif d.selected:
        out.append('<div class="muted">not scored: a single feasible node (or a node hint), as upstream</div>')
    if d.filters:
        out.append("<table><thead><tr><th class=l>Filtered out: reason</th><th>Nodes</th></tr></thead><tbody>")
        for reason, n in d.filters:
            out.append(f"<tr><td class=l>{_e(reason)}</td><td>{n}</td></tr>")
        out.append("</tbody></table>")
    if d.rejected_by:
        out.append(f'<div class="muted">rejected by {_e(", ".join(d.rejected_by))}</div>')
    if d.message:
        out.append(f'<div class="msg">{_e(d.message)}</div>')
    out.append("</section>")
    return "".join(out)


def render_login(message: str, *, pod: str | None = None, limit: str | None = None) -> str:
    """The sign-in page answered by ``/debug/decisions/ui`` to a browser without (valid) credentials:
    why (``message``), then a POST form (``action="login"``, relative, so it works under the API
    server's proxy prefix) asking for a bearer token, e.g. ``kubectl create token decisions-reader
    -n kube-system --duration 1h``; ``pod`` and ``limit`` are carried to the page shown after."""
    hidden = "".join(f'<input type=hidden name={k} value="{_e(v)}">' for k, v in (("pod", pod), ("limit", limit)) if v)
    return "\n".join([
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>py-scheduler · sign in</title><style>{_CSS}</style></head><body>",
        "<h1>py-scheduler decisions: sign in</h1>",
        f'<p class="bad" id=why>{_e(message)}</p>',
        "<p>Paste a bearer token of a user allowed to <code>get</code> the non-resource URL "
        "<code>/debug/decisions/ui</code>, e.g. <code>kubectl create token decisions-reader -n kube-system "
        "--duration 1h</code>. It is checked with the API server (TokenReview, SubjectAccessReview) and kept "
        "in a cookie of this browser session only (HttpOnly, Secure, SameSite=Strict).</p>",
        '<form method=post action="login"><label>Token <input type=password name=token autocomplete=off '
        f'required style="width:40em"></label>{hidden} <button type=submit>Sign in</button></form>',
        "</body></html>"])


def render_page(decisions: Sequence[Decision], ring: dict[str, Any], *, pod: str | None, limit: int,
                signed_in: bool = False) -> str:
    """The whole page: a GET form (Pod filter, limit), the ring's bounds, then the records newest first;
    a sign-out button (a POST form) when the browser signed in (``signed_in``: the request carried the
    token cookie)."""
    head = (f"Decisions of {pod}" if pod else "Recent scheduling decisions")
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>py-scheduler · {_e(head)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(head)}</h1>",
        f'<div class="muted">ring: {ring["kept"]} of {ring["capacity"]} records kept, {ring["dropped"]} dropped'
        + (f", oldest {_e(ring['oldest'])}" if ring.get("oldest") else "") + "</div>",
        '<form method=get action="ui"><label>Pod <input type=text name=pod placeholder="namespace/name" '
        f'value="{_e(pod or "")}"></label> <label>limit <input type=number name=limit min=1 value="{limit}" '
        'style="width:5em"></label> <button type=submit>Show</button> '
        f'<a href="?{_e(urlencode({"limit": limit}))}">all Pods</a>'
        + "</form>",
    ]
    if signed_in:  # a POST: a link (a GET) could be fetched by any page
        parts.append('<form method=post action="logout"><button type=submit id=logout>Sign out</button></form>')
    if not decisions:
        parts.append(f"<p>No record{' of ' + _e(pod) if pod else ''} in the ring.</p>")
    parts.extend(render_decision(d) for d in decisions)
    parts.append("</body></html>")
    return "\n".join(parts)


DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
NOT_LEADER = "this replica is not leading: it schedules nothing; ask the leader (the Lease's holderIdentity)"


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit", "")
    try:
        n = int(raw) if raw else DEFAULT_LIMIT
    except ValueError:
        raise web.HTTPBadRequest(text=f"limit must be an integer, not {raw!r}\n") from None
    return max(1, min(n, MAX_LIMIT))


def _select(log: DecisionLog, request: web.Request) -> tuple[str | None, list[Decision]]:
    pod = request.query.get("pod") or None
    uid = request.query.get("uid") or None
    limit = _limit(request)
    if pod is not None:
        if pod.count("/") > 1 or pod.startswith("/") or pod.endswith("/"):
            raise web.HTTPBadRequest(text=f"pod must be NAMESPACE/NAME, not {pod!r}\n")
        return pod, log.find(pod, uid)[:limit]
    return None, log.latest(limit)


def add_routes(app: web.Application, log: DecisionLog, is_leader: Callable[[], bool],
               auth: DelegatingAuth | None = None) -> None:
    """Register ``/debug/decisions`` (JSON) and ``/debug/decisions/ui`` (HTML) on ``app``.

    Query: ``pod=NAMESPACE/NAME`` (that Pod's records, newest first), ``uid`` (only that
    incarnation), ``limit`` (default 20, at most 1000). JSON: ``{"pod", "decisions": [...],
    "ring": {...}}``; 404 when ``pod`` has no record, 400 for a bad query, 503 on a replica that is
    not leading. Protection: whatever protects the server (``app/serving/health.py``): ``auth``'s delegated
    authentication and authorization (secure serving), or nothing but the bind address
    (``--plain-http``); see docs/decisions.md.

    With ``auth``, a browser without credentials gets a sign-in page at ``/debug/decisions/ui``
    (401; 403 when the token's user lacks the right) instead of a bare status; ``POST
    /debug/decisions/login`` (form field ``token``) reviews the token as the middleware would for
    ``get /debug/decisions/ui`` and, when allowed, sets the token cookie
    (:func:`py_scheduler.app.serving.secure.token_cookie`: ``Max-Age`` the token's remaining lifetime) and
    redirects (303, relative) to the page; ``POST /debug/decisions/logout`` clears the cookie. A
    cross-site POST to either (:func:`py_scheduler.app.serving.secure.is_cross_site`: another site's page
    signing the browser in with the attacker's token, or out) answers 403 and changes nothing.
    """

    async def decisions_json(request: web.Request) -> web.Response:
        if not is_leader():
            return web.json_response({"error": NOT_LEADER}, status=503)
        pod, found = _select(log, request)
        body = {"pod": pod, "decisions": [d.to_json() for d in found], "ring": log.stats()}
        return web.json_response(body, status=404 if pod is not None and not found else 200)

    async def decisions_ui(request: web.Request) -> web.Response:
        if not is_leader():
            return web.Response(status=503, text=NOT_LEADER + "\n")
        pod, found = _select(log, request)
        html = render_page(found, log.stats(), pod=pod, limit=_limit(request),
                           signed_in=auth is not None and TOKEN_COOKIE in request.cookies)
        return _html(html)

    app.router.add_get("/debug/decisions", decisions_json)
    app.router.add_get("/debug/decisions/ui", decisions_ui)
    if auth is None:
        return
    def login_page(request: web.Request, status: int, message: str) -> web.Response:
        q = request.query
        return _html(render_login(message, pod=q.get("pod"), limit=q.get("limit")), status)

    async def login(request: web.Request) -> web.Response:
        if request.method != "POST":
            return _html(render_login("sign in with a bearer token"))
        if is_cross_site(request):
            return _html(render_login("refused: a sign-in sent by another site's page"), 403)
        form = await request.post()
        token = str(form.get("token") or "").strip()
        pod, limit = str(form.get("pod") or ""), str(form.get("limit") or "")
        if not is_token(token):
            return _html(render_login("that is not a bearer token", pod=pod, limit=limit), 401)
        code, _, message = await auth.check(token, "get", "/debug/decisions/ui", request.remote or "")
        if code != 200:
            resp = _html(render_login(message, pod=pod, limit=limit), code)
            if code == 429:
                resp.headers["Retry-After"] = "1"
            return resp
        query = urlencode([(k, v) for k, v in (("pod", pod), ("limit", limit)) if v])
        resp = web.Response(status=303, headers={"Location": "ui" + (f"?{query}" if query else "")})
        resp.headers.add("Set-Cookie", token_cookie(token))
        return resp

    async def logout(request: web.Request) -> web.Response:
        if is_cross_site(request):
            return _html(render_login("refused: a sign-out sent by another site's page"), 403)
        resp = _html(render_login("signed out"))
        resp.headers.add("Set-Cookie", token_cookie(None))
        return resp

    auth.login_pages["/debug/decisions/ui"] = login_page
    auth.login_handlers.update(("/debug/decisions/login", "/debug/decisions/logout"))
    app.router.add_route("GET", "/debug/decisions/login", login)
    app.router.add_route("POST", "/debug/decisions/login", login)
    app.router.add_post("/debug/decisions/logout", logout)


def _html(text: str, status: int = 200) -> web.Response:
    """An HTML answer with the page's headers: no script may run, no type sniffing, never cached."""
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8",
                        headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                                 "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})

