"""Markdown tables for bench/RESULTS.md from the ``--json`` lines of bench/throughput and bench/cycle.

One table per workload and mode (issue 21 item 5), each headed by its command, date and machine
(:mod:`bench.bench_lib.machine`), so rerunning the benchmarks at the end of a round and pasting the
output of ``bench/report FILE...`` refreshes RESULTS.md. Targets are issue 21's (benchmark figures,
never timed tests): at 5000 nodes backlog drain py/kube >= 1.0, CPU per Pod <= 0.8x kube-scheduler's,
time to ready <= kube-scheduler's + 1 s; at 15000 nodes RSS <= 1.5x kube-scheduler's and a cycle
growing no faster than linearly with the node count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Obj = dict[str, Any]

ROWS: tuple[tuple[str, str, str], ...] = (
    # (summary key suffix, label, target kind)
    ("pods_per_second", "Pods/s (backlog: drain, first -> last binding; live: first creation -> last binding)",
     "ratio>=1.0"),
    ("start_to_bound_s", "start -> all bound, s (backlog)", ""),
    ("ready_s", "start -> ready (first /readyz 200), s", "kube+1s"),
    ("cpu_ms_per_pod", "CPU per Pod from ready, ms", "ratio<=0.8"),
    ("startup_cpu_s", "start-up CPU (start -> ready), s", ""),
    ("p99_ms", "p99 latency, ms (backlog: ready -> bound; live: creation -> bound)", ""),
    ("rss_mib", "peak RSS (VmHWM), MiB", "ratio<=1.5@15000"),
)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def _met(target: str, py: float, kube: float, nodes: int) -> tuple[str, str]:
    """(target text, "yes" / "no by X" / "") for one row."""
    if not kube:
        return "", ""
    if target == "ratio>=1.0":
        r = py / kube
        return ">= 1.0x", "yes" if r >= 1.0 else f"no, by {(1.0 - r) * 100:.0f}%"
    if target == "ratio<=0.8":
        r = py / kube
        return "<= 0.8x", "yes" if r <= 0.8 else f"no, {r / 0.8:.2f}x over"
    if target == "ratio<=0.5":
        r = py / kube
        return "<= 0.5x", "yes" if r <= 0.5 else f"no, {r / 0.5:.2f}x over"
    if target == "kube+1s":
        return "<= kube + 1 s", "yes" if py <= kube + 1.0 else f"no, by {py - kube - 1.0:.2f} s"
    if target == "ratio<=1.5@15000" and nodes >= 15000:
        r = py / kube
        return "<= 1.5x", "yes" if r <= 1.5 else f"no, {r / 1.5:.2f}x over"
    return "", ""


def _header(rec: Obj, title: str, smoke: bool) -> list[str]:
    m = rec.get("machine") or {}
    tool = rec.get("tool", "throughput")
    load = m.get("loadavg", [])
    load_end = m.get("loadavg_end", [])
    lines = [f"### {title}", ""]
    if smoke:
        lines += ["*Smoke run on a loaded shared machine, NOT a result: it proves the mode and workload run end "
                  "to end; sizes far below the issue's.*", ""]
    lines += [f"`bench/{tool} {' '.join(rec.get('argv', []))}` · {rec.get('date', '?')} · "
              f"{m.get('nproc', '?')} CPU {m.get('cpu', '?')}, {m.get('mem_gib', '?')} GiB, Python "
              f"{m.get('python', '?')}, load {load[:1]}{' -> ' + str(load_end[:1]) if load_end else ''}, "
              f"commit {m.get('commit', '?')}", ""]
    return lines


def throughput_table(rec: Obj, smoke: bool = False) -> str:
    """The table of one bench/throughput invocation (live, backlog or rss)."""
    runs: list[Obj] = rec.get("runs") or []
    s: Obj = rec.get("summary") or {}
    first = runs[0] if runs else {}
    rounds = len({r.get("round", 0) for r in runs})
    nodes = int(first.get("nodes", 0))
    argv = rec.get("argv") or []
    mode = rec.get("mode") or ("rss" if "--rss" in argv else "backlog" if "--backlog" in argv else "live")
    if mode == "rss":
        bound = argv[argv.index("--rss-pods") + 1] if "--rss-pods" in argv[:-1] else "30000"
        title = f"Start-up to ready and peak RSS: {nodes} nodes, {bound} bound Pods, {rounds} round(s)"
        rows = [r for r in ROWS if r[0] in ("ready_s", "startup_cpu_s", "rss_mib")]
    else:
        title = (f"{first.get('workload', '?')}: {mode}, {nodes} nodes, {first.get('init_pods', 0)} init + "
                 f"{first.get('pods', 0)} measured Pods"
                 f"{', ' + str(first.get('extra_pods')) + ' never-bound' if first.get('extra_pods') else ''}, "
                 f"{rounds} round(s)")
        rows = [r for r in ROWS if mode == "backlog" or r[0] != "start_to_bound_s"]
    lines = _header(rec, title, smoke)
    lines += ["| figure | py-scheduler (median) | kube-scheduler (median) | py/kube (per-round range) | target | met |",
              "|---|---:|---:|---:|---|---|"]
    for key, label, target in rows:
        py = s.get(f"py_{key}")
        kube = s.get(f"kube_{key}")
        if py is None and kube is None:
            continue
        ratio = s.get(f"py/kube_{key}")
        rng = s.get(f"py/kube_{key}_range", "")
        tgt, met = _met(target, float(py or 0.0), float(kube or 0.0), nodes)
        lines.append(f"| {label} | {_fmt(py)} | {_fmt(kube)} | {_fmt(ratio) if ratio is not None else ''}"
                     f"{' (' + rng + ')' if rng else ''} | {tgt} | {met} |")
    timed_out = [f"{r['scheduler']} r{r.get('round', 0)}" for r in runs if r.get("timed_out")]
    if timed_out:
        lines += ["", f"Timed out: {', '.join(timed_out)}."]
    return "\n".join(lines) + "\n"


MATRIX_RATIOS: tuple[tuple[str, str, str], ...] = (
    # (summary key, label, target kind): issue 32's per-core comparison
    ("per_core_drain", "per-core drain, py@1 / kube@1", "ratio>=1.0"),
    ("per_core_cpu", "CPU per Pod, py@1 / kube@1", "ratio<=0.8"),
    ("critical_vs_kube_total", "critical-path CPU per Pod py@1 / total CPU per Pod kube@1", "ratio<=0.5"),
    ("critical_ratio", "critical-path CPU per Pod, py@1 / kube@1", ""),
)


def cores_table(rec: Obj, smoke: bool = False) -> str:
    """One ``bench/throughput --cores-matrix`` record (issue 32): per configuration the median drain,
    CPU per Pod and critical-path CPU per Pod, then the per-core ratios and each scheduler's scaling
    with its CPUs."""
    s: Obj = rec.get("summary") or {}
    runs: list[Obj] = rec.get("runs") or []
    first = runs[0] if runs else {}
    pin = rec.get("pinning") or {}
    title = (f"{rec.get('workload', '?')}: cores matrix, {first.get('nodes', 0)} nodes, {first.get('pods', 0)} "
             f"measured Pods, {len({r.get('round', 0) for r in runs})} round(s); control plane on CPUs "
             f"{pin.get('control', '?')}, scheduler pool {pin.get('scheduler', '?')}")
    lines = _header(rec, title, smoke)
    lines += ["| configuration | drain Pods/s | CPU ms/Pod | critical-path CPU ms/Pod |", "|---|---:|---:|---:|"]
    for lab in rec.get("configs") or sorted({str(r.get("label")) for r in runs}):
        if f"{lab}_pods_per_second" in s:
            lines.append(f"| {lab} | {_fmt(s[f'{lab}_pods_per_second'])} | {_fmt(s[f'{lab}_cpu_ms_per_pod'])} | "
                         f"{_fmt(s[f'{lab}_critical_ms_per_pod']) if s[f'{lab}_critical_ms_per_pod'] else 'n/a'} |")
    lines += ["", "| ratio | value | target | met |", "|---|---:|---|---|"]
    for key, text, target in MATRIX_RATIOS:
        if key in s:
            tgt, met = _met(target, float(s[key]), 1.0, 0)
            lines.append(f"| {text} | {_fmt(s[key])} | {tgt} | {met} |")
    for key in sorted(k for k in s if "_scaling_" in k):
        kind, _, rest = key.partition("_scaling_")
        n, _, one = rest.partition("_")
        lines.append(f"| {kind} drain with {n} CPUs / with {one} | {_fmt(s[key])} |  |  |")
    timed_out = [f"{r.get('label')} r{r.get('round', 0)}" for r in runs if r.get("timed_out")]
    if timed_out:
        lines += ["", f"Timed out: {', '.join(timed_out)}."]
    return "\n".join(lines) + "\n"


def cycle_table(recs: Sequence[Obj], smoke: bool = False) -> str:
    """One workload's bench/cycle lines (several node counts) as a cost curve: per size the cycle
    time, its CPU, RSS and how the CPU grew against the node count since the previous size (a
    growth factor <= 1.0 is linear or better)."""
    recs = sorted(recs, key=lambda r: int(r["nodes"]))
    lines = _header(recs[-1], f"{recs[0]['workload']}: one scheduling cycle in process (bench/cycle)", smoke)
    lines += ["| nodes | init Pods | median ms | p99 ms | CPU median ms | RSS MiB | build s "
              "| CPU growth / node growth |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    prev: Obj | None = None
    for r in recs:
        init = (r.get("runs") or [{}])[0].get("init_pods", "")
        growth = ""
        if prev is not None and prev["cpu_median_ms"] > 0:
            growth = f"{(r['cpu_median_ms'] / prev['cpu_median_ms']) / (r['nodes'] / prev['nodes']):.2f}"
        lines.append(f"| {r['nodes']} | {init} | {r['median_ms']:.2f} | {r['p99_ms']:.2f} | {r['cpu_median_ms']:.2f} | "
                     f"{r.get('rss_mib', 0):.0f} | {r.get('build_s', 0):.1f} | {growth} |")
        prev = r
    return "\n".join(lines) + "\n"


def render(records: Iterable[Obj], smoke: bool = False) -> str:
    """All tables: bench/throughput records one by one, bench/cycle records grouped by workload."""
    out: list[str] = []
    cycles: dict[str, list[Obj]] = {}
    key: Callable[[Obj], str] = lambda r: str(r.get("workload"))  # noqa: E731
    for rec in records:
        if rec.get("tool") == "cycle" or "median_ms" in rec:
            cycles.setdefault(key(rec), []).append(rec)
        elif rec.get("mode") == "cores-matrix":
            out.append(cores_table(rec, smoke))
        else:
            out.append(throughput_table(rec, smoke))
    out.extend(cycle_table(v, smoke) for v in cycles.values())
    return "\n".join(out)
