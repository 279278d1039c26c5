"""Rich tables for ``py-scheduler explain`` and ``py-scheduler simulate``.

Explain: one table per Pod, nodes as rows and Score plugins as columns. A cell holds the plugin's
*weighted* points (normalized score 0-100 times the plugin's weight, the number kube-scheduler adds
up; ``--v=10`` logs the same values), the ``Total`` column their sum (``prioritizeNodes``). The
selected node comes first and is marked; nodes a Filter (or PreFilter) rejected follow with the
plugin and its reasons, in upstream wording. When nothing fits, the FailedScheduling message
(``FitError.Error()``) is printed under the table.

Simulate: a placement table (Pod, node, total score or the FailedScheduling message) and a
per-node summary of CPU (cores), memory (GiB) and GPUs (``nvidia.com/gpu``) requested before and
after, against allocatable.

DRA allocations (both commands, :func:`allocation_table`): one row per allocated device of each
placed Pod's ResourceClaims, the fields of the claim's ``status.allocation.devices.results[]``
(resource.k8s.io/v1 ``DeviceRequestAllocationResult``): request (``req/subrequest`` when a
prioritized-list alternative was chosen), driver, pool, device, and consumed capacity, share ID and
admin access when set.

All text that comes from objects (names, reasons) is passed as :class:`Text`, never as markup, so
reasons such as ``[a b]`` print verbatim, and with control characters shown as ``\\x1b`` (a Pod
named ``"\\x1b]0;pwned\\x07\\x1b[2J"`` in a snapshot retitled and cleared the reader's terminal).

Upstream: the numbers are those of ``pkg/scheduler/schedule_one.go`` (``prioritizeNodes``) and
``framework/types.go`` (``FitError``); the layout is ours.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text as _RichText

from py_scheduler.framework.algorithm import ScheduleResult
from py_scheduler.framework.errors import printable
from py_scheduler.framework.types import NodeInfo

__all__ = ["GPU_RESOURCE", "NodeUsage", "Text", "allocation_table", "explain_table", "make_console",
           "node_summary_table", "node_usage", "placement_table", "print_explain", "print_recorded", "printable",
           "recorded_result"]

class Text(_RichText):
    """:class:`rich.text.Text` whose text, as built and as appended (``str`` only), is :func:`printable`.
    Built without ``spans``: their offsets would not follow the escapes."""

    def __init__(self, text: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(printable(text), *args, **kwargs)

    def append(self, text: str | _RichText, style: Any = None) -> Text:
        super().append(printable(text) if isinstance(text, str) else text, style)
        return self


GPU_RESOURCE = "nvidia.com/gpu"
SELECTED_MARK = "✔ selected"
NON_TTY_WIDTH = 1000
"""Console width when output is not a terminal (pipes, files, tests): wide enough that neither the
tables (every Score plugin is a column) nor FailedScheduling messages wrap, so output stays
grep-able. Tables are only as wide as their content."""


def make_console(file: IO[str] | None = None, stderr: bool = False) -> Console:
    """A Console on stdout (or stderr) that does not wrap tables when the output is not a TTY."""
    out = file if file is not None else (sys.stderr if stderr else sys.stdout)
    is_tty = bool(getattr(out, "isatty", lambda: False)())
    if is_tty:
        return Console(file=out, highlight=False)
    return Console(file=out, width=NON_TTY_WIDTH, highlight=False, no_color=True, force_terminal=False)


def _plugin_header(name: str, weight: int) -> Text:
    return Text(f"{name}\n×{weight}", justify="right")


def explain_table(res: ScheduleResult) -> Table:
    """The per-node table of one :class:`ScheduleResult` (see the module docstring)."""
    title = Text(f"Pod {res.pod}", style="bold")
    title.append(f"  (profile {res.profile})", style="dim")
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("Node", no_wrap=True)
    plugins = [p for p in res.weights if p in res.scores]
    for p in plugins:
        table.add_column(_plugin_header(p, res.weights[p]), justify="right")
    table.add_column("Total", justify="right", style="bold")
    table.add_column("Result")

    feasible = sorted(res.feasible, key=lambda n: (n != res.selected, -res.totals.get(n, 0), n))
    for node in feasible:
        cells: list[Text] = [Text(node, style="bold green" if node == res.selected else "")]
        for p in plugins:
            sc = res.scores[p].get(node)
            cells.append(Text("–" if sc is None else str(sc * res.weights[p])))
        total = res.totals.get(node)
        cells.append(Text("–" if total is None else str(total)))
        cells.append(Text(SELECTED_MARK, style="bold green") if node == res.selected else Text("feasible"))
        table.add_row(*cells)

    statuses = res.diagnosis.node_to_status if res.diagnosis is not None else {}
    for node in sorted(res.filtered):
        st = statuses.get(node)
        reason = ", ".join(res.filtered[node]) or "rejected"
        text = Text("✘ ", style="red")
        if st is not None and st.plugin:
            text.append(f"{st.plugin}: ", style="bold")
        text.append(reason)
        table.add_row(Text(node, style="dim"), *[Text("") for _ in plugins], Text("–"), text)

    notes = []
    if res.skipped:
        notes.append("PreScore skipped: " + ", ".join(res.skipped))
    n_all = len(res.feasible) + len(res.filtered)
    if res.nodes_evaluated and res.nodes_evaluated < n_all:
        notes.append(f"{res.nodes_evaluated} of {n_all} nodes evaluated (percentageOfNodesToScore)")
    if plugins:
        notes.append("cells: normalized score × weight")
    if notes:
        table.caption = Text("; ".join(notes))
        table.caption_justify = "left"
    return table


def print_explain(console: Console, res: ScheduleResult) -> None:
    """Print one Pod's explain table and, when it does not fit, its FailedScheduling message."""
    if not res.feasible and not res.filtered:
        head = Text(f"Pod {res.pod}", style="bold")
        head.append(f"  (profile {res.profile})", style="dim")
        console.print(head)
    else:
        console.print(explain_table(res))
    if res.selected is None:
        msg = Text("FailedScheduling: ", style="bold red")
        msg.append(res.message or "no node selected")
        console.print(msg, soft_wrap=True)
        if res.post_filter is not None and res.post_filter.nominated_node_name:
            pf = res.post_filter
            note = Text(f"preemption would nominate node {pf.nominated_node_name}")
            if pf.victims:
                note.append(" by evicting " + ", ".join(v.key for v in pf.victims))
            note.append(" (simulated only: nothing is evicted)")
            console.print(note, soft_wrap=True)
    console.print()


def recorded_result(rec: dict[str, Any]) -> ScheduleResult:
    """A :class:`ScheduleResult` holding a recorded decision (``/debug/decisions`` JSON) for
    :func:`explain_table`: the kept nodes (top K and the selected one) as the feasible rows; the
    Filter histogram is printed apart (a record keeps counts per reason, not per node)."""
    res = ScheduleResult(pod=str(rec.get("pod", "")), profile=str(rec.get("profile", "")))
    res.selected = rec.get("selected")
    res.nodes_evaluated = int(rec.get("nodes_evaluated") or 0)
    res.feasible = [str(n) for n in rec.get("ranked") or []]
    res.weights = {str(k): int(v) for k, v in (rec.get("weights") or {}).items()}
    res.skipped = [str(p) for p in rec.get("skipped") or []]
    res.scores = {str(p): {str(n): int(v) for n, v in per.items()} for p, per in (rec.get("scores") or {}).items()}
    res.totals = {str(n): int(v) for n, v in (rec.get("totals") or {}).items()}
    res.message = rec.get("message")
    return res


def print_recorded(console: Console, rec: dict[str, Any], source: str = "") -> None:
    """Print a recorded decision: a header (when, which attempt, outcome), the score table of the
    kept nodes, the Filter histogram, GPU indices / DRA devices, the FailedScheduling message."""
    head = Text("Recorded decision ", style="bold")
    head.append(f"{rec.get('pod')}  attempt {rec.get('attempt')} at {rec.get('time')}  ", style="bold")
    result = str(rec.get("result"))
    head.append(result, style="green" if result == "scheduled" else "red")
    if rec.get("selected"):
        head.append(f" → {rec.get('selected')}", style="bold green")
    console.print(head, soft_wrap=True)
    meta = (f"uid {rec.get('uid')}, profile {rec.get('profile')}, {rec.get('nodes_evaluated')} of "
            f"{rec.get('nodes_total')} nodes evaluated, {rec.get('feasible_count')} feasible")
    if source:
        meta += f"; from the {source}"
    console.print(Text(meta, style="dim"), soft_wrap=True)
    res = recorded_result(rec)
    if res.feasible:
        table = explain_table(res)
        table.title = None
        n_feasible = int(rec.get("feasible_count") or 0)
        if n_feasible > len(res.feasible):
            table.caption = Text(f"top {len(res.feasible)} of {n_feasible} feasible nodes; "
                                 + (str(table.caption) if table.caption else "cells: normalized score × weight"))
        console.print(table)
    elif rec.get("selected"):
        console.print(Text("not scored: a single feasible node (or a node hint), as upstream", style="dim"))
    hist = rec.get("filtered_histogram") or {}
    if hist:
        line = Text("Filtered out: ", style="bold")
        line.append(", ".join(f"{n} {r}" for r, n in hist.items()))
        if rec.get("rejected_by"):
            line.append(f" (by {', '.join(map(str, rec['rejected_by']))})", style="dim")
        console.print(line, soft_wrap=True)
    if rec.get("gpu_indices"):
        console.print(Text(f"GPU indices: {rec['gpu_indices']}"))
    for dev in rec.get("dra_devices") or []:
        console.print(Text(f"DRA device: claim {dev.get('claim')} request {dev.get('request')}: "
                           f"{dev.get('driver')} {dev.get('pool')}/{dev.get('device')}"))
    if rec.get("nominated_node"):
        console.print(Text(f"preemption nominated {rec['nominated_node']}"
                           + (f" evicting {', '.join(rec.get('victims') or [])}" if rec.get("victims") else "")))
    if rec.get("message"):
        msg = Text("FailedScheduling: " if result == "unschedulable" else "Error: ", style="bold red")
        msg.append(str(rec["message"]))
        console.print(msg, soft_wrap=True)
    console.print()


@dataclass(slots=True)
class NodeUsage:
    """Requested vs allocatable of one node: milli-CPU, bytes of memory, GPU count."""

    name: str
    cpu_alloc: int
    cpu_used: int
    mem_alloc: int
    mem_used: int
    gpu_alloc: int
    gpu_used: int
    pods: int

    def to_json(self) -> dict[str, int | str]:
        return {"milli_cpu_allocatable": self.cpu_alloc, "milli_cpu_requested": self.cpu_used,
                "memory_allocatable": self.mem_alloc, "memory_requested": self.mem_used,
                "gpu_allocatable": self.gpu_alloc, "gpu_requested": self.gpu_used, "pods": self.pods}


def node_usage(ni: NodeInfo) -> NodeUsage:
    """The :class:`NodeUsage` of a NodeInfo (its ``requested`` against ``allocatable``)."""
    return NodeUsage(ni.name, ni.allocatable.milli_cpu, ni.requested.milli_cpu, ni.allocatable.memory,
                     ni.requested.memory, ni.allocatable.scalar.get(GPU_RESOURCE, 0),
                     ni.requested.scalar.get(GPU_RESOURCE, 0), len(ni.pods))


def _cores(milli: int) -> str:
    try:
        return f"{milli / 1000:g}"
    except OverflowError:  # a huge (but valid) quantity: no float holds it
        return f"{Decimal(milli) / 1000:.3e}"


def _gib(b: int) -> str:
    try:
        return f"{b / 2**30:.1f}"
    except OverflowError:
        return f"{Decimal(b) / 2**30:.3e}"


def allocation_table(rows: list[tuple[str, list[dict[str, Any]]]]) -> Table | None:
    """Rows of (pod key, its claim allocations ``[{"claim", "allocation"}]``); None when no Pod has
    an allocated device (the module docstring gives the columns)."""
    table = Table(title=Text("DRA allocations", style="bold"), title_justify="left")
    for col in ("Pod", "Claim", "Request", "Driver", "Pool", "Device"):
        table.add_column(col, no_wrap=True)
    table.add_column("Details")
    n = 0
    for pod, allocations in rows:
        for entry in allocations:
            devices = (entry.get("allocation") or {}).get("devices") or {}
            for r in devices.get("results") or []:
                if not isinstance(r, dict):
                    continue
                details = []
                if r.get("shareID"):
                    details.append(f"shareID={r['shareID']}")
                for cap, amount in sorted((r.get("consumedCapacity") or {}).items()):
                    details.append(f"consumed {cap}={amount}")
                if r.get("adminAccess"):
                    details.append("adminAccess")
                table.add_row(Text(pod), Text(str(entry.get("claim", ""))),
                              *(Text(str(r.get(k, ""))) for k in ("request", "driver", "pool", "device")),
                              Text(", ".join(details)))
                n += 1
    return table if n else None


def placement_table(rows: list[tuple[str, str | None, int | None, str | None]]) -> Table:
    """Rows of (pod key, node or None, total score or None, message when not placed)."""
    table = Table(title=Text("Placements", style="bold"), title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("Pod", no_wrap=True)
    table.add_column("Node", no_wrap=True)
    table.add_column("Score", justify="right")
    table.add_column("Result")
    for i, (pod, node, score, message) in enumerate(rows, 1):
        if node is not None:
            table.add_row(str(i), Text(pod), Text(node, style="green"), "–" if score is None else str(score),
                          Text("scheduled", style="green"))
        else:
            table.add_row(str(i), Text(pod), Text("–", style="red"), "–", Text(message or "not scheduled"))
    return table


def node_summary_table(before: list[NodeUsage], after: list[NodeUsage]) -> Table:
    """Per node: CPU cores, memory GiB, GPUs requested before → after / allocatable, and Pods."""
    table = Table(title=Text("Nodes (requested before → after / allocatable)", style="bold"),
                  title_justify="left")
    table.add_column("Node", no_wrap=True)
    table.add_column("CPU (cores)", justify="right")
    table.add_column("Memory (GiB)", justify="right")
    table.add_column("GPUs", justify="right")
    table.add_column("Pods", justify="right")
    prev = {u.name: u for u in before}
    for u in after:
        b = prev.get(u.name, u)

        def cell(old: str, new: str, alloc: str, changed: bool) -> Text:
            return Text(f"{old} → {new} / {alloc}", style="bold" if changed else "")

        gpus = (cell(str(b.gpu_used), str(u.gpu_used), str(u.gpu_alloc), b.gpu_used != u.gpu_used)
                if u.gpu_alloc or u.gpu_used or b.gpu_used else Text("–"))
        table.add_row(Text(u.name),
                      cell(_cores(b.cpu_used), _cores(u.cpu_used), _cores(u.cpu_alloc), b.cpu_used != u.cpu_used),
                      cell(_gib(b.mem_used), _gib(u.mem_used), _gib(u.mem_alloc), b.mem_used != u.mem_used),
                      gpus, Text(f"{b.pods} → {u.pods}", style="bold" if b.pods != u.pods else ""))
    return table
