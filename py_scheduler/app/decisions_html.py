"""The HTML page of ``/debug/decisions/ui``: recent decision records with their score tables.

Plain server-rendered HTML and inline CSS, no JavaScript (the page is served with a
``Content-Security-Policy`` that forbids scripts). Every value that comes from an object (Pod and
node names, reasons, messages) goes through :func:`html.escape`. Layout follows ``explain``'s table
(:mod:`py_scheduler.offline.render`): nodes as rows, Score plugins as columns, each cell the
plugin's weighted points (normalized score x weight), the total last, the selected node first and
marked; then the Filter histogram and the FailedScheduling message.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from py_scheduler.app.decisions import Decision, rfc3339

__all__ = ["render_decision", "render_login", "render_page"]

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
    a sign-out link when the browser signed in (``signed_in``: the request carried the token cookie)."""
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
        + (' · <a href="logout" id=logout>sign out</a>' if signed_in else "") + "</form>",
    ]
    if not decisions:
        parts.append(f"<p>No record{' of ' + _e(pod) if pod else ''} in the ring.</p>")
    parts.extend(render_decision(d) for d in decisions)
    parts.append("</body></html>")
    return "\n".join(parts)
