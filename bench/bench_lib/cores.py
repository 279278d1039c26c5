"""Per-core measurement for bench/throughput (issue 32 item 1): CPU pinning, critical-path CPU, the
cores matrix.

The pure parts live here (no bed, no API server), so the unit tests can feed them made-up text:

- **pinning**: CPU lists as ``taskset -c`` and ``/proc/<pid>/status`` ``Cpus_allowed_list`` write
  them (``"0-3,6"``); a process is pinned by starting it under ``taskset -c LIST`` (which execs it:
  the PID is the program's, and every thread it ever makes inherits the mask, which setting the
  affinity after start would miss for threads made before) and, for kube-scheduler, ``env
  GOMAXPROCS=N`` (its process only; the Go runtime reads it at start).
- **critical-path CPU**: py-scheduler runs every scheduling cycle on the thread of its asyncio loop,
  the main thread (``asyncio.run`` in ``py_scheduler.app.process.main``; TID = PID), together with
  everything else that loop does (Binding and Event writes, watch decoding, aiohttp, Python's GC):
  that thread's CPU (``/proc/<pid>/task/<pid>/stat`` utime + stime, before and after the drain)
  is the critical path; the process total is reported beside it. kube-scheduler runs its cycle on
  one goroutine, Filter/Score on ``parallelism`` worker goroutines
  (``workqueue.ParallelizeUntil``), bindings on a goroutine per Pod (``runBindingCycle``) and
  informers, watch decoding and GC elsewhere; a CPU profile from its ``/debug/pprof/profile``
  (profiling is on by default, v1.37.2 ``pkg/scheduler/apis/config/v1/defaults.go``) splits its
  CPU into those parts by stack (:func:`classify_stack`), and its critical path is the serial cycle
  goroutine plus the parallel workers' share divided by the cores it has (:func:`kube_critical`).
- **the matrix**: ``kind:cores`` configurations (``py:1,kube:1,kube:2``) and the ratios the issue
  asks for (:func:`matrix_summary`).

Units: CPU in seconds unless a name says ``_ms``; drain in Pods/s.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

PROC = Path("/proc")


# -- CPU lists -----------------------------------------------------------------------------------------

def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"0-3,6"`` -> ``(0, 1, 2, 3, 6)``, the format of ``taskset -c`` and of ``Cpus_allowed_list``;
    in the order given (``"1,0"`` -> ``(1, 0)``: the cores matrix takes the first N), duplicates dropped.

    Raises:
        ValueError: empty, a negative or non-numeric CPU, or a range whose end is below its start.
    """
    cpus: dict[int, None] = {}  # ordered set
    for part in text.replace(" ", "").split(","):
        if not part:
            raise ValueError(f"empty CPU in list {text!r}")
        lo_s, sep, hi_s = part.partition("-")
        if not lo_s.isdigit() or (sep and not hi_s.isdigit()):
            raise ValueError(f"bad CPU {part!r} in list {text!r} (want e.g. 0-3,6)")
        lo, hi = int(lo_s), int(hi_s) if sep else int(lo_s)
        if hi < lo:
            raise ValueError(f"bad CPU range {part!r} in list {text!r}")
        cpus.update(dict.fromkeys(range(lo, hi + 1)))
    return tuple(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"`` (what ``Cpus_allowed_list`` shows)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def check_available(cpus: Sequence[int], available: Iterable[int], what: str) -> None:
    """Raise ValueError naming ``what`` if ``cpus`` asks for a CPU this process may not run on."""
    missing = sorted(set(cpus) - set(available))
    if missing:
        raise ValueError(f"{what}: CPU(s) {format_cpu_list(missing)} not available "
                         f"(allowed: {format_cpu_list(available)})")


def pin_prefix(cpus: Sequence[int] | None, gomaxprocs: int | None = None) -> list[str]:
    """The argv prefix that starts a program on ``cpus`` (``taskset -c``) with ``GOMAXPROCS`` set for
    it alone (``env``); both exec the program, so the PID stays the program's. Empty for neither."""
    prefix = ["env", f"GOMAXPROCS={gomaxprocs}"] if gomaxprocs else []
    if cpus:
        prefix += ["taskset", "-c", format_cpu_list(cpus)]
    return prefix


@dataclass(frozen=True, slots=True)
class Pinning:
    """Where bench/throughput runs what: ``control`` (etcd, kube-apiserver, kube-controller-manager),
    ``scheduler`` (the scheduler under test), ``bench`` (this process: the Pod creations and the watch
    that times bindings; default the control CPUs), ``kube_gomaxprocs`` (kube-scheduler only).
    ``None``: not pinned (the CPUs this process had at start)."""

    control: tuple[int, ...] | None = None
    scheduler: tuple[int, ...] | None = None
    bench: tuple[int, ...] | None = None
    kube_gomaxprocs: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.control or self.scheduler or self.bench or self.kube_gomaxprocs)

    def bench_cpus(self) -> tuple[int, ...] | None:
        return self.bench or self.control


def parse_pinning(control: str | None, scheduler: str | None, bench: str | None, gomaxprocs: int | None,
                  available: Iterable[int]) -> Pinning:
    """The command line's ``--pin-control`` / ``--pin-scheduler`` / ``--pin-bench`` /
    ``--kube-gomaxprocs``, checked against the CPUs this process may use.

    Raises:
        ValueError: a malformed list, an unavailable CPU or a ``GOMAXPROCS`` below 1.
    """
    avail = tuple(available)
    sets: list[tuple[int, ...] | None] = []
    for text, what in ((control, "--pin-control"), (scheduler, "--pin-scheduler"), (bench, "--pin-bench")):
        if text is None:
            sets.append(None)
            continue
        cpus = parse_cpu_list(text)
        check_available(cpus, avail, what)
        sets.append(cpus)
    if gomaxprocs is not None and gomaxprocs < 1:
        raise ValueError(f"--kube-gomaxprocs must be >= 1, got {gomaxprocs}")
    return Pinning(sets[0], sets[1], sets[2], gomaxprocs)


def matrix_pinning(pin: Pinning, available: Sequence[int]) -> Pinning:
    """The cores matrix's pinning: what was given, else the control plane on the first available CPU
    and the scheduler pool on the rest (empty when there is no rest: the caller refuses)."""
    control = pin.control or tuple(sorted(available))[:1]
    scheduler = pin.scheduler or tuple(c for c in sorted(available) if c not in control)
    return Pinning(control, scheduler, pin.bench, pin.kube_gomaxprocs)


# -- /proc reading ------------------------------------------------------------------------------------

def stat_cpu_seconds(stat: str, clk_tck: int) -> float:
    """utime + stime of one ``/proc/<pid>/stat`` or ``/proc/<pid>/task/<tid>/stat`` line, seconds.
    The command name (field 2) may hold spaces and parentheses, so fields are counted after its last
    ``)``: state is field 3, utime 14, stime 15 (proc(5)).

    Raises:
        ValueError: not a stat line.
    """
    _, sep, rest = stat.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 13:
        raise ValueError(f"not a /proc stat line: {stat[:80]!r}")
    return (int(fields[11]) + int(fields[12])) / clk_tck


_T = TypeVar("_T")


def _per_thread(pid: int, proc: Path, read: Callable[[Path], _T]) -> dict[int, _T]:
    """``{tid: read(/proc/pid/task/tid)}`` for every live thread of ``pid`` (empty if the process is gone;
    a thread that ends between the listing and the read is left out)."""
    out: dict[int, _T] = {}
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out[int(task.name)] = read(task)
        except (OSError, ValueError):
            continue
    return out


def thread_cpu_seconds(pid: int, proc: Path = PROC) -> dict[int, float]:
    """``{tid: CPU seconds}`` of every live thread of ``pid``; empty if the process is gone."""
    clk = os.sysconf("SC_CLK_TCK")
    return _per_thread(pid, proc, lambda task: stat_cpu_seconds((task / "stat").read_text(), clk))


def status_field(status: str, key: str) -> str:
    """The value of ``key`` (e.g. ``Cpus_allowed_list``) in a ``/proc/<pid>/status`` text; "" if absent."""
    for line in status.splitlines():
        name, sep, value = line.partition(":")
        if sep and name == key:
            return value.strip()
    return ""


def cpus_allowed(pid: int, proc: Path = PROC) -> dict[int, str]:
    """``{tid: Cpus_allowed_list}`` of every thread of ``pid`` (the pinning as the kernel applies it)."""
    return _per_thread(pid, proc, lambda task: status_field((task / "status").read_text(), "Cpus_allowed_list"))


def environ_value(pid: int, key: str, proc: Path = PROC) -> str | None:
    """``key``'s value in ``/proc/<pid>/environ`` (None if unset or unreadable)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for entry in raw.split(b"\0"):
        k, sep, v = entry.partition(b"=")
        if sep and k.decode(errors="replace") == key:
            return v.decode(errors="replace")
    return None


def describe_pinning(name: str, pid: int, proc: Path = PROC) -> str:
    """One log line: ``name``'s Cpus_allowed_list over its threads (and GOMAXPROCS when set)."""
    lists = cpus_allowed(pid, proc)
    distinct = sorted(set(lists.values()))
    gmp = environ_value(pid, "GOMAXPROCS", proc)
    return (f"[pin] {name} pid {pid}: Cpus_allowed_list={' / '.join(distinct) or '?'} "
            f"({len(lists)} thread(s)){f', GOMAXPROCS={gmp}' if gmp else ''}")


# -- kube-scheduler's CPU profile -------------------------------------------------------------------

_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_SAMPLE = re.compile(r"^\s*(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)\s+(\S.*)$")
SEPARATOR = "-----------+"


def parse_pprof_traces(text: str) -> list[tuple[float, list[str]]]:
    """``go tool pprof -traces`` output -> ``[(CPU seconds, [leaf function, ..., root])]``.

    Each sample block follows a ``-----------+---`` line: its first line is the value and the leaf
    frame, the next (indented) lines its callers; ``(inline)`` marks are dropped. The header (File,
    Type, Duration...) and label lines are skipped.
    """
    out: list[tuple[float, list[str]]] = []
    cur: tuple[float, list[str]] | None = None
    for line in text.splitlines():
        if line.startswith(SEPARATOR):
            if cur is not None:
                out.append(cur)
            cur = None
            continue
        m = _SAMPLE.match(line)
        if m and cur is None:
            cur = (float(m.group(1)) * _UNIT[m.group(2)], [m.group(3).replace(" (inline)", "").strip()])
        elif cur is not None and line.strip() and ":" not in line.strip().split(".", 1)[0]:
            cur[1].append(line.strip().replace(" (inline)", ""))
    if cur is not None:
        out.append(cur)
    return out


PROFILE_PARTS = ("cycle", "parallel", "binding", "gc", "other")
"""What :func:`classify_stack` returns: ``cycle`` the scheduling-cycle goroutine's own work
(``scheduleOnePod`` / ``schedulingCycle``, serial), ``parallel`` Filter/Score on the
``workqueue.ParallelizeUntil`` workers, ``binding`` the per-Pod binding goroutines
(``runBindingCycle``: PreBind, the Binding write, Events), ``gc`` the Go collector's background
workers, ``other`` informers, watch decoding, HTTP, Events' broadcaster."""


def classify_stack(frames: Sequence[str]) -> str:
    """Which part of kube-scheduler v1.37.2 one sampled stack (leaf first) belongs to; a goroutine's
    stack holds only its own frames, so the root tells which goroutine sampled (``schedule_one.go``:
    ``go sched.runBindingCycle(...)``; ``framework/parallelize``: ``workqueue.ParallelizeUntil``)."""
    joined = "\n".join(frames)
    if "runBindingCycle" in joined or "bindingCycle" in joined:
        return "binding"
    if "ParallelizeUntil.func" in joined:
        return "parallel"
    if "ScheduleOne" in joined or "scheduleOnePod" in joined or "schedulingCycle" in joined:
        return "cycle"
    if "runtime.gcBgMarkWorker" in joined or "runtime.bgsweep" in joined or "runtime.bgscavenge" in joined:
        return "gc"
    return "other"


def profile_shares(samples: Iterable[tuple[float, Sequence[str]]]) -> dict[str, float]:
    """Share (0..1) of the sampled CPU in each of :data:`PROFILE_PARTS`; all 0 when nothing sampled."""
    total = {p: 0.0 for p in PROFILE_PARTS}
    for seconds, frames in samples:
        total[classify_stack(frames)] += seconds
    s = sum(total.values())
    return {p: (v / s if s else 0.0) for p, v in total.items()}


def kube_critical(total_cpu: float, shares: Mapping[str, float], cores: int) -> float:
    """kube-scheduler's critical-path CPU: the serial cycle goroutine's part of ``total_cpu`` plus the
    Filter/Score workers' part spread over ``cores`` (they run at once; the cycle waits for the last).
    Binding, informers, decoding and GC run beside the cycle when a core is free, so they are off it.
    0.0 without a profile (``shares`` all 0)."""
    return total_cpu * (shares.get("cycle", 0.0) + shares.get("parallel", 0.0) / max(1, cores))


# -- the cores matrix -------------------------------------------------------------------------------

def parse_configs(text: str) -> list[tuple[str, int]]:
    """``"py:1,kube:1,kube:2"`` -> ``[("py", 1), ("kube", 1), ("kube", 2)]``.

    Raises:
        ValueError: an unknown scheduler, a missing or non-positive core count, or a duplicate.
    """
    out: list[tuple[str, int]] = []
    for part in text.split(","):
        kind, sep, n = part.strip().partition(":")
        if kind not in ("py", "kube") or not sep or not n.isdigit() or int(n) < 1:
            raise ValueError(f"bad configuration {part!r} (want py:N or kube:N, N >= 1)")
        if (kind, int(n)) in out:
            raise ValueError(f"configuration {part!r} given twice")
        out.append((kind, int(n)))
    return out


def label(kind: str, cores: int) -> str:
    """``py@1``: the scheduler and how many CPUs it was pinned to (0: not pinned)."""
    return f"{kind}@{cores}" if cores else kind


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def matrix_summary(runs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """From :meth:`RunResult.summary` dicts (with ``label``): per label the median over rounds of
    ``pods_per_second`` (the drain), ``cpu_ms_per_pod`` and ``critical_ms_per_pod``, as
    ``<label>_<figure>``; then the issue's ratios where both sides ran:

    - ``per_core_drain`` = py@1 / kube@1 drain, ``per_core_cpu`` = py@1 / kube@1 CPU per Pod;
    - ``critical_vs_kube_total`` = py@1 critical-path CPU per Pod / kube@1 total CPU per Pod (item 2's
      target is <= 0.5 on SchedulingBasic), ``critical_ratio`` = py@1 / kube@1 critical-path CPU;
    - ``<kind>_scaling_<n>_1`` = <kind>@n / <kind>@1 drain for every n > 1 that ran.
    """
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in runs:
        if not r.get("timed_out"):
            by.setdefault(str(r["label"]), []).append(r)
    out: dict[str, Any] = {}
    med: dict[tuple[str, str], float] = {}
    for lab, rs in sorted(by.items()):
        for fig in ("pods_per_second", "cpu_ms_per_pod", "critical_ms_per_pod"):
            vals = [float(r.get(fig) or 0.0) for r in rs]
            med[lab, fig] = statistics.median(vals)
            out[f"{lab}_{fig}"] = round(med[lab, fig], 3)
    py1 = {f: med.get(("py@1", f)) for f in ("pods_per_second", "cpu_ms_per_pod", "critical_ms_per_pod")}
    kube1 = {f: med.get(("kube@1", f)) for f in ("pods_per_second", "cpu_ms_per_pod", "critical_ms_per_pod")}
    for key, val in (("per_core_drain", _ratio(py1["pods_per_second"], kube1["pods_per_second"])),
                     ("per_core_cpu", _ratio(py1["cpu_ms_per_pod"], kube1["cpu_ms_per_pod"])),
                     ("critical_vs_kube_total", _ratio(py1["critical_ms_per_pod"], kube1["cpu_ms_per_pod"])),
                     ("critical_ratio", _ratio(py1["critical_ms_per_pod"], kube1["critical_ms_per_pod"]))):
        if val is not None:
            out[key] = val
    for lab in by:
        kind, _, n = lab.partition("@")
        if n.isdigit() and int(n) > 1 and (f"{kind}@1", "pods_per_second") in med:
            val = _ratio(med[lab, "pods_per_second"], med[f"{kind}@1", "pods_per_second"])
            if val is not None:
                out[f"{kind}_scaling_{n}_1"] = val
    return out
