"""The soak: steady churn against two ``py-scheduler run`` replicas for N minutes, measured every minute.

Churn (all at once, seeded by ``seed``; :func:`run_soak`):

- **Pods**: one created every ``pod_interval`` seconds (250-500m CPU / 64-256Mi; one in ten asks for 1-2
  GPUs of the GPU Node, half of those with a per-GPU memory annotation); once ``live_pods`` exist, each
  creation is paired with the deletion of a random older Pod;
- **Nodes**: every ``node_interval`` seconds a CPU Node (4 CPU / 8Gi) is added, or, above
  ``min_nodes``, one is deleted together with its Pods (PodGC's job on a real cluster: the bed has no
  PodGC for Pods of a deleted Node);
- **NotReady**: every ``flap_interval`` seconds a Node turns ``Ready=False`` with the
  ``node.kubernetes.io/not-ready:NoSchedule`` taint (what the node lifecycle controller adds), and is
  back ``Ready`` with the taint removed ``flap_interval / 2`` seconds later;
- **leader kills**: every ``kill_every`` seconds (the first after 3/4 of it) the leader is
  SIGKILLed and a fresh replica started, so two always compete (0: never); the failover time (kill
  -> a replica logs that it leads) is kept.

Every ``sample_every`` seconds (and at the end) one row (:class:`Sample`): for each live replica its
``/debug/cache`` figures - RSS, asyncio tasks, open file descriptors, queue lengths - and the
cache-vs-API differential check (``tests/e2e/faults/cachediff.py``: differences that persist 5 s;
must be 0); the invariants of the fault suite (``tests/e2e/faults/invariants.py``: no overcommit of
any resource or GPU, bound once by events and logs, no crash, no Pod bound to a Node already known
deleted; Pods older than ``pending_grace`` seconds pending without a reason); must be 0.

At the end (:class:`SoakResult`): the RSS slope (least squares, MiB per minute) of each replica
over the samples of the last half of the run, the largest of them reported (replicas are
restarted by the kills: with ``kill_every`` of a few minutes a replica lives two periods).

Used by ``tests/e2e/faults/test_soak.py`` (a seeded 3-minute variant in CI) and ``bench/soak``
(``--minutes N``; docs/faults.md has a run's figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.faults import cachediff, invariants
from tests.e2e.faults.scenarios import FaultEnv
from tests.e2e.helpers import unique_name, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess

NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
_SERVING = re.compile(r"serving /metrics\S* .*? on (?P<host>\S+):(?P<port>\d+)")
MiB = 1024 * 1024


@dataclass
class Sample:
    """One row of the soak's report.

    Attributes:
        t: seconds since the start.
        replicas: per live replica (its log name): ``rss_mib``, ``tasks``, ``fds``, ``queue``
            (lengths), ``leader``, ``diff`` (persistent cache-vs-API differences), ``diff_rounds``,
            ``diff_seconds``; with ``tracemalloc_frames``, ``memory``: the replica's
            ``/debug/memory`` document (``py_scheduler/app/serving/memdebug.py``).
        violations: the invariant violations found now (texts).
        pods / nodes: live Pods of the soak / Nodes of its group.
        bound: of those Pods, how many are bound.
    """

    t: float
    replicas: dict[str, dict[str, Any]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    pods: int = 0
    nodes: int = 0
    bound: int = 0

    def line(self) -> str:
        reps = "; ".join(
            f"{name}{'*' if r['leader'] else ''} rss {r['rss_mib']:.1f} MiB tasks {r['tasks']} fds {r['fds']} "
            f"queue {r['queue'].get('active', 0)}/{r['queue'].get('backoff', 0)}/{r['queue'].get('unschedulable', 0)}"
            f" diff {r['diff']} ({'clean' if r['diff_clean'] else 'no quiet round'}, {r['diff_rounds']} rounds)"
            f"{_memory_line(r.get('memory'))}"
            for name, r in sorted(self.replicas.items()))
        return (f"t={self.t:6.0f}s pods {self.pods} (bound {self.bound}) nodes {self.nodes} | {reps} | "
                f"violations {len(self.violations)}")


def _memory_line(doc: dict[str, Any] | None) -> str:
    """`` gc 302/27/3 traced 1.2 MiB`` from a ``/debug/memory`` document ("" without one)."""
    if not doc:
        return ""
    out = f" gc {'/'.join(map(str, (doc.get('gc') or {}).get('collections') or ()))}"
    tm = doc.get("tracemalloc")
    if tm:
        out += f" traced {tm['traced_bytes'] / MiB:.1f} MiB"
    after = doc.get("after_gc")
    if after:
        rss = (after.get("process") or {}).get("rss_bytes") or 0
        traced = (after.get("tracemalloc") or {}).get("traced_bytes") or 0
        out += (f" | after gc.collect(): {after.get('collected_now')} freed, rss {rss / MiB:.1f}"
                f" traced {traced / MiB:.1f}")
    return out


@dataclass
class SoakResult:
    """The whole run: samples, churn counts, failovers, slopes."""

    minutes: float
    seed: int
    samples: list[Sample] = field(default_factory=list)
    churn: dict[str, int] = field(default_factory=dict)
    failovers: list[float] = field(default_factory=list)
    rss_slope_mib_per_min: dict[str, float] = field(default_factory=dict)
    bounds_full: dict[str, dict[str, float]] = field(default_factory=dict)
    """With ``fill_bounds``: per replica, per bounded structure, the first sample's time (s) at which
    it had reached its cap (its peak at the cap, or emptied at it)."""
    bounds_over: list[str] = field(default_factory=list)
    """With ``fill_bounds``: every reading of a structure above its cap (must stay empty)."""

    @property
    def violations(self) -> list[str]:
        return [v for s in self.samples for v in s.violations]

    @property
    def diffs(self) -> int:
        return sum(r["diff"] for s in self.samples for r in s.replicas.values())

    @property
    def max_slope(self) -> float | None:
        return max(self.rss_slope_mib_per_min.values(), default=None)

    def to_json(self) -> dict[str, Any]:
        return {"minutes": self.minutes, "seed": self.seed, "churn": self.churn,
                "failover_seconds": [round(f, 2) for f in self.failovers],
                "rss_slope_mib_per_min": {k: round(v, 3) for k, v in self.rss_slope_mib_per_min.items()},
                "max_rss_slope_mib_per_min": self.max_slope, "cache_diffs": self.diffs,
                "invariant_violations": len(self.violations), "violations": self.violations[:50],
                "bounds_full": self.bounds_full, "bounds_over": self.bounds_over[:50],
                "samples": [asdict(s) for s in self.samples]}


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, value)`` points, per minute; 0.0 for fewer than 2 points."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx * 60.0


def serving_port(p: SchedulerProcess) -> int | None:
    """The replica's metrics/health port (from its start-up line), None before it serves."""
    m = _SERVING.search(p.log())
    return int(m.group("port")) if m else None


class Soak:
    """One soak run on ``env`` (its Nodes, Pods and replicas; the caller closes ``env``). ``token``
    may ``get`` ``/debug/cache`` (:func:`tests.e2e.faults.cachediff.debug_reader_token`); the
    intervals are the module docstring's, ``diff_timeout`` bounds one replica's differential check
    when churn never lets a round come out clean (differences persisting 5 s are still caught).
    ``replica_args``: more ``py-scheduler run`` arguments for every replica (e.g.
    ``--decisions-capacity 0``); ``memory`` adds each replica's ``/debug/memory`` (RSS, the
    collector's counters) to every sample, and so does ``tracemalloc_frames`` > 0, with allocation
    tracing (that many frames) turned on at its first sample at or after ``memory_mark`` seconds and
    the top ``memory_top`` allocation sites by growth since."""

    def __init__(self, env: FaultEnv, *, minutes: float, seed: int, token: str, kill_every: float = 120.0,
                 sample_every: float = 60.0, pod_interval: float = 0.5, live_pods: int = 40,
                 node_interval: float = 20.0, min_nodes: int = 3, max_nodes: int = 6, flap_interval: float = 15.0,
                 pending_grace: float = 60.0, diff_timeout: float = 15.0, log: Callable[[str], None] = print,
                 replica_args: Sequence[str] = (), tracemalloc_frames: int = 0, memory_mark: float = 180.0,
                 memory_top: int = 30, memory: bool = False, fill_bounds: bool = False,
                 fill_interval: float = 2.0, fill_live: int = 10, bounds_every: float = 30.0) -> None:
        self.env = env
        self.minutes = minutes
        self.rng = random.Random(seed)
        self.token = token
        self.kill_every = kill_every
        self.sample_every = sample_every
        self.pod_interval = pod_interval
        self.live_pods = live_pods
        self.node_interval = node_interval
        self.min_nodes, self.max_nodes = min_nodes, max_nodes
        self.flap_interval = flap_interval
        self.pending_grace = pending_grace
        self.diff_timeout = diff_timeout
        self.log = log
        self.tracemalloc_frames = tracemalloc_frames
        self.memory = memory or tracemalloc_frames > 0
        # /debug/memory's actions (trace, mark, gc) are served only with --profiling, by POST
        self.replica_args = [*replica_args, *(["--profiling"] if self.memory else [])]
        self.memory_mark, self.memory_top = memory_mark, memory_top
        self._marked: set[str] = set()
        self.result = SoakResult(minutes, seed)
        self.churn = self.result.churn
        self.created: dict[str, float] = {}  # live Pod name -> creation time (monotonic)
        self.cpu_nodes: list[str] = []
        self.gpu_node = ""
        self.t0 = 0.0
        self.rss: dict[str, list[tuple[float, float]]] = {}
        self.fill_bounds, self.fill_interval, self.fill_live = fill_bounds, fill_interval, fill_live
        self.bounds_every = bounds_every
        self.bounds_files: dict[str, Path] = {}  # replica (log stem) -> its soak_caps report
        self.junk_tokens = 0

    def _count(self, what: str) -> None:
        self.churn[what] = self.churn.get(what, 0) + 1

    def _elapsed(self) -> float:
        return time.monotonic() - self.t0

    # -- churn ----------------------------------------------------------------------------------------
    async def _pods(self, until: float) -> None:
        while time.monotonic() < until:
            name = unique_name("soak-pod")
            if self.rng.random() < 0.1:
                ann = {invariants.MEM_ANNOTATION: "40"} if self.rng.random() < 0.5 else {}
                body = self.env.pod_body(name, cpu="100m", memory="64Mi", gpus=self.rng.choice((1, 2)),
                                         annotations=ann)
            else:
                body = self.env.pod_body(name, cpu=f"{self.rng.choice((250, 300, 400, 500))}m",
                                         memory=f"{self.rng.choice((64, 128, 256))}Mi")
            with contextlib.suppress(ApiException):
                await self.env.create(body)
                self.created[name] = time.monotonic()
                self._count("pods created")
            if len(self.created) > self.live_pods:
                victim = self.rng.choice(sorted(self.created))
                await self._delete_pod(victim)
            await asyncio.sleep(self.pod_interval)  # the churn's pace

    async def _delete_pod(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            await self.env.delete_pod(name)
            self._count("pods deleted")
        self.created.pop(name, None)

    async def _nodes(self, until: float) -> None:
        core = self.env.core
        while time.monotonic() < until:
            await asyncio.sleep(self.node_interval * (0.5 + self.rng.random()))  # the churn's pace
            if len(self.cpu_nodes) < self.max_nodes and (len(self.cpu_nodes) <= self.min_nodes
                                                         or self.rng.random() < 0.5):
                self.cpu_nodes.append(await self.env.node())
                self._count("nodes added")
                continue
            victim = self.rng.choice(self.cpu_nodes)
            self.cpu_nodes.remove(victim)
            await self.env.delete_node(victim)
            self._count("nodes removed")
            # PodGC's part: the Pods bound to the deleted Node go too
            pods = await core.list_namespaced_pod("default", field_selector=f"spec.nodeName={victim}")
            for p in pods.items:
                if p.metadata.name in self.created:
                    await self._delete_pod(p.metadata.name)

    async def _flaps(self, until: float) -> None:
        core = self.env.core
        while time.monotonic() < until:
            await asyncio.sleep(self.flap_interval * (0.5 + self.rng.random()))  # the churn's pace
            name = self.rng.choice([*self.cpu_nodes, self.gpu_node])
            try:
                await self._set_ready(core, name, False)
                self._count("nodes NotReady")
                await asyncio.sleep(self.flap_interval / 2)  # how long it stays NotReady
                await self._set_ready(core, name, True)
            except ApiException as e:
                if e.status != 404:  # deleted meanwhile by the node churn
                    raise

    @staticmethod
    async def _set_ready(core: client.CoreV1Api, name: str, ready: bool) -> None:
        node = await core.read_node(name)
        taints = [t.to_dict() for t in (node.spec.taints or []) if t.key != NOT_READY_TAINT["key"]]
        taints = [{k: v for k, v in t.items() if v is not None} for t in taints]
        if not ready:
            taints.append(dict(NOT_READY_TAINT))
        await core.patch_node(name, {"spec": {"taints": taints}})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        await core.patch_node_status(name, {"status": {"conditions": [{
            "type": "Ready", "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady", "message": "soak",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})

    async def _kills(self, until: float) -> None:
        if self.kill_every <= 0:
            return
        wait = self.kill_every * 0.75  # out of step with the minute's samples: they find both replicas up
        while time.monotonic() + wait < until:
            await asyncio.sleep(wait)  # the fault's period
            wait = self.kill_every
            leader = await self.env.leader()
            self.env.kill(leader)
            killed_at = time.monotonic()
            self._count("leader SIGKILLs")
            self._replica()

            def took_over() -> bool:
                return any("became the leader" in r.log() for r in self.env.replicas if r.alive())

            await wait_for(took_over, timeout=60, interval=0.05, what="a standby taking over")
            self.result.failovers.append(time.monotonic() - killed_at)

    def _replica(self) -> SchedulerProcess:
        if not self.fill_bounds:
            return self.env.replica("soak", extra_args=self.replica_args)
        report = Path(self.env.testbed.dir) / "logs" / f"{unique_name('soak-bounds')}.json"
        p = self.env.replica("soak", extra_args=self.replica_args, launcher=(
            "-m", "bench.bench_lib.soak_caps", "--report", str(report), "--every", f"{self.bounds_every:g}", "--"))
        self.bounds_files[p.log_path.stem] = report
        return p

    async def _junk_tokens(self, until: float) -> None:
        """Fills the replicas' TokenReview caches (negative answers are cached too): two requests a
        second with a fresh made-up bearer token each, to every live replica's serving port (401)."""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as http:
            while time.monotonic() < until:
                for r in list(self.env.replicas):
                    port = serving_port(r)
                    if not r.alive() or port is None:
                        continue
                    self.junk_tokens += 1
                    headers = {"Authorization": f"Bearer junk-{self.junk_tokens}-{self.rng.getrandbits(64):x}"}
                    with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                        async with http.get(f"https://127.0.0.1:{port}/debug/cache", headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=10)) as resp:
                            await resp.read()
                            self._count(f"junk-token requests answered {resp.status}")
                await asyncio.sleep(0.5)  # the churn's pace

    def _bounds(self, name: str, t: float) -> dict[str, Any] | None:
        """The replica's last soak_caps report (None before its first), noting which structures have
        reached their caps by ``t`` and any reading above a cap."""
        path = self.bounds_files.get(name)
        if path is None or not path.exists():
            return None
        try:
            bounds: dict[str, Any] = json.loads(path.read_text())["bounds"]
        except (OSError, ValueError, KeyError):
            return None
        full = self.result.bounds_full.setdefault(name, {})
        for what, b in bounds.items():
            if b["size"] > b["cap"] + 1:  # +1: a reading between an insert and its eviction
                self.result.bounds_over.append(f"t={t:.0f}s {name}: {what} {b['size']} > cap {b['cap']}")
            if (b["peak"] >= b["cap"] or b["resets"] > 0) and what not in full:
                full[what] = t
        return bounds

    # -- measuring ------------------------------------------------------------------------------------
    async def _memory(self, port: int, name: str, t: float, final: bool = False) -> dict[str, Any]:
        """The replica's ``/debug/memory``: gc counters; tracing turned on and marked at its first
        sample at or after ``memory_mark`` seconds, then the top allocation sites by growth since.
        The ``final`` sample also groups them by traceback (``by_traceback``, with more than one
        frame traced; tens of seconds at 8 frames) and asks again after a full collection
        (``after_gc``: what was garbage in reference cycles the collector had not reached yet)."""
        mark = self.tracemalloc_frames > 0 and name not in self._marked and t >= self.memory_mark

        async def get(query: str) -> dict[str, Any]:
            url = f"https://127.0.0.1:{port}/debug/memory?top={self.memory_top}&{query}"
            action = any(f"{a}=" in query for a in ("trace", "mark", "gc"))
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s, \
                    s.request("POST" if action else "GET", url, ssl=False,
                              headers={"Authorization": f"Bearer {self.token}"}) as r:
                if r.status != 200:
                    raise AssertionError(f"/debug/memory answered {r.status}: {(await r.text())[:300]}")
                body: dict[str, Any] = await r.json()
                return body

        doc = await get("group=lineno" + (f"&trace={self.tracemalloc_frames}&mark=1" if mark else ""))
        if mark:
            self._marked.add(name)
        if final and (doc.get("tracemalloc") or {}).get("frames", 1) > 1:  # slow: the last sample only
            doc["by_traceback"] = (await get("group=traceback")).get("tracemalloc")
        if final:
            doc["after_gc"] = await get("group=lineno&gc=1")
        return doc

    async def sample(self, final: bool = False) -> Sample:
        """One row: each live replica's dump and differential check, then the invariants (``final``:
        the last row)."""
        s = Sample(t=self._elapsed())
        for r in list(self.env.replicas):
            port = serving_port(r)
            if not r.alive() or port is None or "informer caches synced" not in r.log():
                continue
            name = r.log_path.stem

            async def fetch(port: int = port) -> dict[str, Any]:
                return await cachediff.fetch_dump(port, self.token)

            try:
                res = await cachediff.check_until_quiet(fetch, self.env.api, timeout=self.diff_timeout)
            except (OSError, AssertionError) as e:  # killed meanwhile (connection refused) is fine
                if r.alive():
                    s.violations.append(f"{name}: /debug/cache unreadable: {e}")
                continue
            proc, dump = res.dump.get("process") or {}, res.dump
            s.replicas[name] = {"rss_mib": (proc.get("rss_bytes") or 0) / MiB, "tasks": proc.get("asyncio_tasks"),
                                "fds": proc.get("open_fds"), "queue": dump.get("queue") or {},
                                "leader": bool(dump.get("leader")), "diff": len(res.persistent),
                                "diff_clean": res.clean, "diff_rounds": res.rounds,
                                "diff_seconds": round(res.seconds, 2)}
            self.rss.setdefault(name, []).append((s.t, s.replicas[name]["rss_mib"]))
            if self.fill_bounds:
                s.replicas[name]["bounds"] = self._bounds(name, s.t)
            if self.memory:
                with contextlib.suppress(OSError, AssertionError, asyncio.TimeoutError):  # killed meanwhile
                    s.replicas[name]["memory"] = await self._memory(port, name, s.t, final)
            s.violations += [f"{name}: cache differs from the API: {d}" for d in sorted(res.persistent)[:20]]
        report = invariants.Report()
        nodes, pods, events = await invariants.cluster_state(self.env.api)
        logs = {p.log_path.stem: p.log() for p in self.env.replicas}
        invariants.check_capacity(nodes, pods, report)
        invariants.check_bound_once(pods, events, logs, report)
        invariants.check_processes(self.env.replicas, self.env.killed, report)
        invariants.check_deleted_nodes(pods, nodes, logs, self.env.all_nodes, report)
        now = time.monotonic()
        old = {n for n, at in self.created.items() if now - at > self.pending_grace}
        for name in invariants.pending_without_reason(pods, events, old):
            report.add(f"pod {name} pending {self.pending_grace:g} s without a reason")
        s.violations += report.violations
        ours = [p for p in pods if (p.get("metadata") or {}).get("name") in self.created]
        s.pods, s.bound = len(ours), sum(1 for p in ours if (p.get("spec") or {}).get("nodeName"))
        s.nodes = len(self.cpu_nodes) + 1
        return s

    async def _sampler(self, until: float) -> None:
        """A row every ``sample_every`` seconds on a fixed grid from the start (a row's checks take a
        second or more: sleeping a full period after each let a 60-minute run make 59 rows) and one at
        ``until``."""
        k = 0
        while True:
            k += 1
            due = min(self.t0 + k * self.sample_every, until)
            await asyncio.sleep(max(0.0, due - time.monotonic()))  # the report's period
            s = await self.sample(final=time.monotonic() >= until)
            self.result.samples.append(s)
            self.log(s.line())
            for v in s.violations[:10]:
                self.log(f"  VIOLATION: {v[:300]}")
            if time.monotonic() >= until:
                return

    # -- the run --------------------------------------------------------------------------------------
    async def run(self) -> SoakResult:
        """Set up (3 CPU Nodes, 1 GPU Node, two replicas), churn for ``minutes``, sample, and compute
        the slopes. Raises what a churn task raises (an API failure the churn does not expect)."""
        for _ in range(self.min_nodes):
            self.cpu_nodes.append(await self.env.node())
        self.gpu_node = await self.env.node(gpu=True)
        fill = None
        if self.fill_bounds:
            from bench.bench_lib.soak_fill import FillChurn
            fill = FillChurn(self.env, random.Random(self.rng.random()), self._count, self.log,
                             interval=self.fill_interval, live=self.fill_live)
            await fill.setup()
        first = self._replica()
        await first.wait_leading()
        self._replica()
        self.t0 = time.monotonic()
        until = self.t0 + self.minutes * 60
        kinds: list[Callable[[float], Any]] = [self._pods, self._nodes, self._flaps, self._kills]
        if fill is not None:
            kinds += [fill.run, self._junk_tokens]
        churn = [asyncio.create_task(c(until)) for c in kinds]
        sampler = asyncio.create_task(self._sampler(until))
        try:
            while not sampler.done():  # the churn runs until the sampler's last row; a churn failure stops it
                await asyncio.wait({sampler, *churn}, return_when=asyncio.FIRST_COMPLETED)
                for t in churn:
                    if t.done() and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                churn = [t for t in churn if not t.done()]
            sampler.result()
        finally:
            for t in (*churn, sampler):
                t.cancel()
            await asyncio.gather(*churn, sampler, return_exceptions=True)
            if fill is not None:
                await fill.cleanup()
        half = self.minutes * 60 / 2
        for name, pts in self.rss.items():
            last = [p for p in pts if p[0] >= half]
            if len(last) >= 2:
                self.result.rss_slope_mib_per_min[name] = slope_per_minute(last)
        return self.result
