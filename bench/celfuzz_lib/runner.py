"""Differential fuzzing of DRA CEL device selectors: upstream's framework (the Go oracle) vs py-scheduler.

Each expression of :mod:`bench.celfuzz_lib.generator` becomes the one selector of a ResourceClaim
request (:func:`objects`: one node, one ResourceSlice with one device carrying every attribute and
capacity the generator names, a DeviceClass, the claim and a pending Pod using it). The scenario runs
through the parity oracle (``tests/e2e/testbed/oracle``, built by
:func:`bench.parity_lib.runner.oracle_binary`) and through py-scheduler's explain path
(:func:`bench.parity_lib.runner.run_py`). What is compared is the outcome only: the feasible nodes
(the selector matched the device or not), or the scheduling Error (a CEL compile or runtime error,
message included). :func:`classify` names the result; ``agree`` is the goal, ``upstream_compile``
(upstream rejects the selector when compiling it) is left out of the agreement figure.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from functools import partial
from multiprocessing import Pool
from pathlib import Path
from types import FrameType
from typing import Any

from bench.celfuzz_lib import generator as gen
from bench.parity_lib.runner import Obj

Outcome = tuple[str, Any]  # (ok | error | fatal | timeout | crash, feasible nodes or message)
Record = dict[str, Any]

# Results that differ: every class but these two (upstream_compile is not counted either way).
NOT_A_DIFFERENCE = ("agree", "upstream_compile")


def objects(expr: str) -> list[Obj]:
    """The scenario for one selector: node n0 with one device g0 (driver :data:`generator.G`, every
    attribute and capacity of the generator), DeviceClass ``gpu`` matching the driver, claim ``c``
    asking for one device of the class with ``expr`` as its selector, pending Pod ``p`` using it."""
    attrs = {name: value for name, (_, value) in gen.ATTRS.items()}
    caps = {**gen.CAPS, **{f"{gen.OTHER}/{k}": v for k, v in gen.OTHER_CAPS.items()}}
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "n0", "labels": {"kubernetes.io/hostname": "n0"}},
         "status": {"allocatable": alloc, "capacity": dict(alloc)}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{gen.G}"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s-n0"},
         "spec": {"driver": gen.G, "pool": {"name": "p0", "generation": 1, "resourceSliceCount": 1},
                  "nodeName": "n0",
                  "devices": [{"name": "g0", "attributes": attrs,
                               "capacity": {k: {"value": v} for k, v in caps.items()}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
         "spec": {"devices": {"requests": [
             {"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
                                       "selectors": [{"cel": {"expression": expr}}]}}]}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p", "namespace": "default", "uid": "uid-p",
                      "creationTimestamp": "2024-01-01T00:00:00Z"},
         "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}],
                  "resourceClaims": [{"name": "x0", "resourceClaimName": "c"}]}},
    ]


def run_oracle(binary: Path, objs: list[Obj], timeout_s: float = 120) -> Outcome:
    """Upstream's outcome for the Pod: ("ok", feasible nodes), ("error", the plugin Error), ("fatal",
    the oracle's stderr tail when it exited non-zero) or ("timeout", None). One Go thread
    (``GOMAXPROCS=1``), as several run side by side."""
    try:
        proc = subprocess.run([str(binary)], input=json.dumps({"objects": objs}), capture_output=True, text=True,
                              timeout=timeout_s, env={**os.environ, "GOMAXPROCS": "1"})
    except subprocess.TimeoutExpired:
        return "timeout", None
    if proc.returncode != 0:
        tail = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith(("I1", "W1")))
        return "fatal", tail[-2000:]
    want = json.loads(proc.stdout.splitlines()[0])
    if want.get("error"):
        return "error", want["error"]
    return "ok", want["feasible"]


class _Alarm(Exception):
    pass


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    raise _Alarm()


def run_py(objs: list[Obj], alarm_s: int | None = None) -> Outcome:
    """py-scheduler's outcome (explain's code path, as bench/parity runs it): ("ok", feasible nodes),
    ("error", the SchedulingError), ("crash", any other exception with its traceback), or ("timeout",
    None) after ``alarm_s`` seconds (SIGALRM; only where nothing else uses it, e.g. not under
    pytest-timeout: None runs without a limit)."""
    from bench.parity_lib.runner import run_py as parity_run_py

    previous = signal.signal(signal.SIGALRM, _on_alarm) if alarm_s else None
    if alarm_s:
        signal.alarm(alarm_s)
    try:
        got = parity_run_py(objs)[0]
        if got.get("error"):
            return "error", got["error"]
        return "ok", sorted(got["feasible"])
    except _Alarm:
        return "timeout", None
    except Exception as exc:  # anything else is a finding
        return "crash", f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()[-1500:]
    finally:
        if alarm_s:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


def classify(oracle: Outcome, py: Outcome) -> str:
    """Name the comparison: ``agree``; ``upstream_compile`` (upstream's CEL compile error: not
    counted); ``crash`` (py raised something else than a SchedulingError); ``py_compile_only`` (py
    refuses to compile what upstream compiles); ``match_result`` (both matched, different nodes);
    ``py_error_upstream_ok`` / ``upstream_error_py_ok`` (one side failed at run time);
    ``error_message`` (both failed, differently); ``fatal_mismatch`` (the oracle exited with an error
    py does not give)."""
    ok, ov = oracle
    pk, pv = py
    if pk == "crash":
        return "crash"
    if pk == "error" and "CEL compile error" in str(pv) and "CEL compile error" not in str(ov):
        return "py_compile_only"
    if ok == "error" and "CEL compile error" in str(ov):
        return "upstream_compile"
    if ok == "fatal":
        if pk == "error" and str(pv).split("plugin: ")[-1] in str(ov):
            return "agree"
        return "fatal_mismatch"
    if ok == pk and ov == pv:
        return "agree"
    if ok == "ok" and pk == "ok":
        return "match_result"
    if ok == "ok" and pk == "error":
        return "py_error_upstream_ok"
    if ok == "error" and pk == "ok":
        return "upstream_error_py_ok"
    if ok == "error" and pk == "error":
        return "error_message"
    return f"other:{ok}/{pk}"


def check(expr: str, binary: Path, alarm_s: int | None = None) -> Record:
    """Run ``expr`` on both sides; the record written per line of the results file."""
    objs = objects(expr)
    t0 = time.monotonic()
    o = run_oracle(binary, objs)
    t1 = time.monotonic()
    p = run_py(objs, alarm_s)
    t2 = time.monotonic()
    return {"expr": expr, "oracle": list(o), "py": list(p), "class": classify(o, p),
            "t_oracle": round(t1 - t0, 3), "t_py": round(t2 - t1, 3)}


def expressions(n: int, seed: int) -> list[str]:
    """The first ``n`` distinct expressions the generator draws from ``random.Random(seed)``."""
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        e = gen.expression(rng)
        if e not in seen:
            seen.add(e)
            out.append(e)
    return out


def run(exprs: list[str], binary: Path, out: Path, workers: int = 2, alarm_s: int = 60,
        quiet: bool = False) -> Counter[str]:
    """Check every expression (``workers`` processes; 1: in this one), writing each record to ``out``
    (JSON Lines, in completion order) as it comes; progress to stderr every 200. Returns the count
    per class."""
    counts: Counter[str] = Counter()
    one = partial(check, binary=binary, alarm_s=alarm_s)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with out.open("w") as f:
        pool = Pool(workers) if workers > 1 else None
        try:
            records: Iterable[Record] = (pool.imap_unordered(one, exprs, chunksize=4) if pool is not None
                                         else map(one, exprs))
            for i, r in enumerate(records, 1):
                f.write(json.dumps(r) + "\n")
                f.flush()
                counts[r["class"]] += 1
                if not quiet and i % 200 == 0:
                    print(f"{i}/{len(exprs)} {time.monotonic() - t0:.0f}s {dict(counts)}", file=sys.stderr,
                          flush=True)
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
    return counts


def load(paths: Iterable[Path]) -> Iterator[Record]:
    """The records of results files written by :func:`run`."""
    for path in paths:
        with path.open() as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def short(value: object) -> str:
    """A CEL error without its plugin / "CEL runtime error:" prefix."""
    return str(value).split("CEL runtime error: ")[-1].split("CEL compile error: ")[-1]


def _norm(value: object) -> str:
    """A message with strings, numbers and key names masked, first line only (to group by)."""
    s = short(value)
    s = re.sub(r"\n.*", "", s)
    s = re.sub(r'"[^"]*"', '"S"', s)
    s = re.sub(r"'[^']*'", "'S'", s)
    s = re.sub(r"`[^`]*`", "`S`", s)
    s = re.sub(r"-?\d+(\.\d+)?", "N", s)
    s = re.sub(r"no such key: \w+", "no such key: K", s)
    return s[:120]


def agreement(counts: Counter[str]) -> tuple[int, int, int]:
    """(selectors upstream compiles, of those agreeing, differing)."""
    compiled = sum(counts.values()) - counts["upstream_compile"]
    return compiled, counts["agree"], compiled - counts["agree"]


def summary(records: Iterable[Record], show_all: bool = False) -> tuple[list[str], Counter[str]]:
    """The lines of the summary: the count per class, then each group of differing records (class,
    both outcomes with messages normalized by :func:`_norm`) with its size and shortest expression,
    then the agreement on the selectors upstream compiles. ``show_all`` lists the
    ``upstream_compile`` groups too. Returns (lines, count per class)."""
    groups: defaultdict[tuple[str, str, str, str, str], list[Record]] = defaultdict(list)
    counts: Counter[str] = Counter()
    for r in records:
        counts[r["class"]] += 1
        if r["class"] == "agree" or (r["class"] == "upstream_compile" and not show_all):
            continue
        key = (r["class"], r["oracle"][0], _norm(r["oracle"][1]), r["py"][0], _norm(r["py"][1]))
        groups[key].append(r)
    lines = [f"total {sum(counts.values())} {dict(counts.most_common())}"]
    for key, rs in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        ex = min(rs, key=lambda r: len(r["expr"]))
        lines += ["", f"[{key[0]}] x{len(rs)}  oracle={key[1]}:{key[2]!r}  py={key[3]}:{key[4]!r}",
                  f"   e.g. {ex['expr']}"]
        if key[0] == "match_result" or key[1] != key[3]:
            lines += [f"   O: {str(ex['oracle'][1])[-250:]}", f"   P: {str(ex['py'][1])[-250:]}"]
    compiled, agree, differ = agreement(counts)
    pct = f" ({100 * agree / compiled:.1f} %)" if compiled else ""
    lines += ["", f"{sum(counts.values())} selectors, {compiled} compiled by upstream: "
                  f"{agree} agree{pct}, {differ} differ"]
    return lines, counts
