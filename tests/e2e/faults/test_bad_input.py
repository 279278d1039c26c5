"""Bad input never crashes the scheduler.

* **Live**: hypothesis-generated Pods (odd and huge quantities, empty and unicode strings, malformed
  affinity, contradictory and garbage GPU annotations, init containers and sidecars) are sent through
  the API to a running py-scheduler. What the API rejects is skipped (counted); every Pod it accepts
  must end bound or with ``PodScheduled=False`` and a reason, with all the suite's invariants holding
  and no Traceback in the scheduler's log.
* **Offline**: malformed snapshot files to ``explain`` / ``simulate``: either a result (exit 0) or
  exactly one ``error: ...`` line on stderr with exit 2 - never a traceback, never another code.
  A fixed corpus runs through the real command line (subprocesses); hypothesis mutations of a valid
  snapshot run in-process through the same typer app.

Example counts come from ``FAULTS_PROFILE`` (``ci``: 40 Pods / 60 snapshots, ``full``: 300 / 400);
generation is derandomized, so a run is reproducible.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client.rest import ApiException
from typer.testing import CliRunner

from tests.e2e.faults.scenarios import GROUP_LABEL, PROFILE, STATS, FaultEnv, scale_for
from tests.e2e.helpers import PAUSE_IMAGE, unique_name

SCALE = scale_for(os.environ.get("FAULTS_PROFILE", "ci"))
REPO = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------------------
# Strategies
# ------------------------------------------------------------------------------------------------

VALID_ODD_QUANTITIES = ["0", "1", "100m", "0.5", ".5", "5.", "1e3", "1E3", "1e-3", "1Ki", "1Ei", "8Ei", "1n", "1u",
                        "9223372036854775807", "99999999999999999999", "1e18", "0.000001", "12345678901234567890Gi",
                        "+1", "250m", "64Mi", "2Gi", "1.5Gi", "3"]
INVALID_QUANTITIES = ["-1", "", "abc", "1.5.5", "1 Gi", "0x10", "NaN", "1e999", "٣", "１"]
GARBAGE = ["", " ", "-1", "0", "abc", "1e999", "NaN", "inf", "99999999999999999999", "A100,", ",,", "H100,A100",
           "true", "TRUE", "yes", "40.5", " 40 ", "0-3;4-7", "7-0", "☃", "a" * 300, "1,1", "0,99", "A100", "2"]
GPU_ANNOTATIONS = ["gpu-scheduler/gpu-model", "gpu-scheduler/gpu-memory-gb", "gpu-scheduler/nvlink-required",
                   "gpu-scheduler/gpu-count", "gpu-scheduler/gpu-indices"]
LABEL_VALUES = ["web", "", "a.b-c_d", "x" * 63, "1", "z1", "ssd"]
odd_text = st.one_of(st.sampled_from(GARBAGE), st.text(max_size=20))
valid_qty = st.one_of(st.sampled_from(VALID_ODD_QUANTITIES), st.integers(0, 2**62).map(str))
label_value = st.sampled_from(LABEL_VALUES)


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    """API-valid but odd requests (huge, tiny, exponents, binary suffixes) and whole GPUs in limits."""
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["requests"] = draw(st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage"]), valid_qty,
                                               max_size=3))
    if draw(st.booleans()):
        out["limits"] = {"nvidia.com/gpu": draw(st.sampled_from(["0", "1", "2", "3", "8", "9", "100"]))}
    return out


@st.composite
def node_selector_term(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    key = draw(st.sampled_from(["zone", "kubernetes.io/hostname", "disk", "nvidia.com/gpu.memory"]))
    expr: dict[str, Any] = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = draw(st.lists(label_value, min_size=1, max_size=3))
    elif op in ("Gt", "Lt"):
        expr["values"] = [str(draw(st.integers(-5, 10**6)))]
    return {"matchExpressions": [expr]}


@st.composite
def affinity(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": draw(st.lists(node_selector_term(), min_size=1, max_size=2))}}
        if draw(st.booleans()):
            out["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": draw(st.integers(1, 100)), "preference": draw(node_selector_term())}]
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["podAffinity", "podAntiAffinity"]))
        term = {"labelSelector": {"matchLabels": {"app": draw(label_value)}},
                "topologyKey": draw(st.sampled_from(["kubernetes.io/hostname", "zone", "nowhere"]))}
        out[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    return out


# One deliberate API-invalid field, applied to a third of the Pods: the API must refuse those.
CORRUPTIONS: list[tuple[str, Any]] = [
    ("invalid quantity", lambda p, v: p["spec"]["containers"][0].setdefault("resources", {}).setdefault(
        "requests", {}).update(cpu=v)),
    ("unicode label value", lambda p, v: p["labels"].update(app="☃" + str(v))),
    ("bad affinity operator", lambda p, v: p["spec"].update(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": [str(v)]}]}]}}})),
    ("empty topologyKey", lambda p, v: p["spec"].update(affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}, "topologyKey": ""}]}})),
    ("maxSkew 0", lambda p, v: p["spec"].update(topologySpreadConstraints=[{
        "maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}])),
    ("gpu request without limit", lambda p, v: p["spec"]["containers"][0].update(
        resources={"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}})),
]


@st.composite
def pod_spec_parts(draw: st.DrawFn) -> dict[str, Any]:
    """The parts of one Pod a test turns into a body (name and group selector added later)."""
    containers = [{"name": f"c{i}", "image": PAUSE_IMAGE, "resources": draw(resources())}
                  for i in range(draw(st.integers(1, 3)))]
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": PAUSE_IMAGE, "resources": draw(resources()),
                                   **({"restartPolicy": "Always"} if draw(st.booleans()) else {})}]
    if draw(st.booleans()):
        spec["affinity"] = draw(affinity())
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": draw(st.sampled_from(["dedicated", "gpu", ""])), "operator": "Exists",
                                "effect": draw(st.sampled_from(["NoSchedule", "", "NoExecute"]))}]
    if draw(st.booleans()):
        spec["topologySpreadConstraints"] = [{
            "maxSkew": draw(st.integers(1, 3)),
            "topologyKey": draw(st.sampled_from(["zone", "kubernetes.io/hostname"])),
            "whenUnsatisfiable": draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"])),
            "labelSelector": {"matchLabels": {"app": draw(label_value)}}}]
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(st.sampled_from(["zone", "disk"]), label_value, max_size=2))
    # GPU annotations: anything goes for the API (garbage, unicode, contradicting the limits)
    annotations = draw(st.dictionaries(st.sampled_from(GPU_ANNOTATIONS), odd_text, max_size=4))
    labels = draw(st.dictionaries(st.sampled_from(["app", "tier"]), label_value, max_size=2))
    parts = {"spec": spec, "annotations": annotations, "labels": labels, "corrupted": ""}
    if draw(st.integers(0, 3)) == 3:
        what, corrupt = draw(st.sampled_from(CORRUPTIONS))
        corrupt(parts, draw(st.sampled_from(INVALID_QUANTITIES)))
        parts["corrupted"] = what
    return parts


def generate_pods(n: int) -> list[dict[str, Any]]:
    """``n`` generated Pod parts (derandomized: the same list on every run)."""
    out: list[dict[str, Any]] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(pod_spec_parts())
    def collect(parts: dict[str, Any]) -> None:
        out.append(parts)

    collect()
    return out[:n]


# ------------------------------------------------------------------------------------------------
# Live: generated Pods through the API
# ------------------------------------------------------------------------------------------------

async def test_generated_pods_through_the_api(env: FaultEnv) -> None:
    for _ in range(3):
        await env.node()
    await env.node(gpu=True)
    await env.node({"cpu": "2", "memory": "4Gi", "pods": "3", "example.com/widget": "2"},
                   labels={"zone": "z1", "disk": "ssd"})
    # the API accepts a 400-digit CPU count: scoring must not overflow (it once failed every Pod)
    await env.node({"cpu": "9" * 400, "memory": "4Gi", "pods": "110"}, labels={"zone": "z2"})
    sched = env.replica("flt-bad")
    await sched.wait_leading()
    parts = generate_pods(SCALE.hypothesis_pods)
    unexpected: list[str] = []

    async def submit(p: dict[str, Any]) -> str:
        name = unique_name("flt-bad")
        spec = copy.deepcopy(p["spec"])
        sel = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
        spec["nodeSelector"] = {**sel, GROUP_LABEL: env.group}
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "annotations": p["annotations"],
                             "labels": p["labels"]},
                "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 0, **spec}}
        try:
            await env.create(body)
        except ApiException as e:
            env.pods.discard(name)
            if e.status in (400, 422):
                if not p["corrupted"]:
                    unexpected.append(str(e.body)[:300])
                return "rejected by the API"
            raise
        except ValueError:  # the client refuses to serialise (e.g. a NUL byte): never reached the API
            env.pods.discard(name)
            return "rejected by the client"
        return "accepted"

    results = []
    for i in range(0, len(parts), 50):
        results += await asyncio.gather(*(submit(p) for p in parts[i:i + 50]))
    for r in results:
        STATS.bad_input[f"generated pods {r}"] += 1
    assert results.count("accepted") >= len(parts) // 2, unexpected  # most generated Pods reach the scheduler
    report = await env.check()
    STATS.bad_input["generated pods bound"] += report.bound
    assert sched.alive()


# ------------------------------------------------------------------------------------------------
# Offline: malformed snapshots to explain / simulate
# ------------------------------------------------------------------------------------------------

def base_snapshot() -> dict[str, Any]:
    """A small valid cluster: two Nodes (one with GPUs), a bound Pod and three pending ones."""
    def node(name: str, **extra: Any) -> dict[str, Any]:
        alloc = {"cpu": "4", "memory": "8Gi", "pods": "110", **extra.pop("alloc", {})}
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **extra.pop("labels", {})},
                             "annotations": extra.pop("annotations", {})},
                "status": {"allocatable": alloc, "capacity": alloc}}

    def pod(name: str, node_name: str = "", **extra: Any) -> dict[str, Any]:
        res = extra.pop("resources", {"requests": {"cpu": "500m", "memory": "128Mi"}})
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i", "resources": res}], **extra.pop("spec", {})}
        if node_name:
            spec["nodeName"] = node_name
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
                             "annotations": extra.pop("annotations", {})}, "spec": spec}

    return {"apiVersion": "v1", "kind": "List", "items": [
        node("n1", labels={"zone": "a"}),
        node("g1", alloc={"nvidia.com/gpu": "8"},
             labels={"zone": "b", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960"},
             annotations={"gpu-scheduler/nvlink-groups": "0-3;4-7"}),
        pod("bound", "n1"),
        pod("web", spec={"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
        pod("train", resources={"limits": {"nvidia.com/gpu": "2"}},
            annotations={"gpu-scheduler/gpu-model": "A100", "gpu-scheduler/nvlink-required": "true"}),
        pod("spread", spec={"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                           "whenUnsatisfiable": "DoNotSchedule",
                                                           "labelSelector": {"matchLabels": {"app": "web"}}}]}),
    ]}


GARBAGE_VALUES: list[Any] = [None, "", "abc", -1, 0, 2**80, 1e308, float("inf"), True, [], {}, ["x"], {"a": 1},
                             "☃", "1e999", "-5", "9" * 40, "\ud7ff"]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_snapshot(draw: st.DrawFn) -> str:
    """A snapshot file's text: the base cluster with 1-4 values replaced, keys deleted or wrapped,
    serialised as YAML or JSON; or plain broken text."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["", "\x00\x01\x02", "{", "items: [", "- a\n b: :", "kind: List\nitems: 5",
                                     "[1, 2, 3]", "null", "42", "apiVersion: v1\nkind: Gadget\n", "---\n---\n",
                                     "kind: Pod\nmetadata: {name: p}\nspec: {containers: 7}"]))
    doc = base_snapshot()
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["replace", "replace", "delete", "wrap"]))
        if op == "delete":
            del parent[path[-1]]
        elif op == "wrap":
            parent[path[-1]] = [parent[path[-1]]]
        else:
            parent[path[-1]] = draw(st.sampled_from(GARBAGE_VALUES))
    if draw(st.booleans()):
        return json.dumps(doc, allow_nan=True)
    return yaml.safe_dump(doc, allow_unicode=True)


def snapshot_args(command: str, path: Path) -> list[str]:
    """``explain --snapshot FILE`` / ``simulate FILE``."""
    return ["explain", "--snapshot", str(path)] if command == "explain" else ["simulate", str(path)]


def _assert_clean(code: int, stdout: str, stderr: str, what: str) -> None:
    assert "Traceback" not in stderr and "Traceback" not in stdout, f"{what}: traceback\n{stderr[-3000:]}"
    assert code in (0, 2), f"{what}: exit {code}\n{stderr[-3000:]}"
    if code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: not one error line: {stderr!r}"


@settings(max_examples=SCALE.hypothesis_snapshots, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(text=mutated_snapshot(), command=st.sampled_from(["explain", "simulate"]),
       output=st.sampled_from(["table", "json"]))
def test_mutated_snapshots_give_a_result_or_one_error_line(tmp_path_factory: pytest.TempPathFactory, text: str,
                                                           command: str, output: str) -> None:
    from py_scheduler.cli import app

    path = tmp_path_factory.mktemp("snap") / "cluster.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    result = CliRunner().invoke(app, [*snapshot_args(command, path), "-o", output])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{command} raised {result.exception!r} on:\n{text[:2000]}") from result.exception
    _assert_clean(result.exit_code, result.stdout, result.stderr, f"{command} -o {output} on:\n{text[:1500]}")
    STATS.bad_input[f"snapshots exit {result.exit_code}"] += 1


FIXED_CORPUS = {
    "empty.yaml": "",
    "binary.yaml": "\x00\xff\xfe garbage",
    "truncated.yaml": "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata: {name: n1\n",
    "not-a-mapping.yaml": "- 1\n- 2\n",
    "unknown-kind.yaml": "apiVersion: v1\nkind: Gadget\nmetadata: {name: g}\n",
    "bad-quantity.yaml": "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 4 cores, memory: 8Gi}}\n",
    "huge-number.yaml": ("kind: List\nitems:\n- kind: Node\n  metadata: {name: n1}\n"
                         "  status: {allocatable: {cpu: '" + "9" * 400 + "', memory: 8Gi, pods: '110'}}\n"
                         "- {kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: '4', memory: 8Gi}}}\n"
                         "- kind: Pod\n  metadata: {name: p, namespace: d}\n"
                         "  spec: {containers: [{name: c, resources: {requests: {cpu: '1', memory: 1Gi}}}]}\n"),
    "wrong-types.json": json.dumps({"kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
                                   "spec": {"nodeName": "n1", "containers": {"c": 1}}}),
    "deep.json": "[" * 5000 + "]" * 5000,
    "deep-lists.json": "[" * 900 + "]" * 900,
    "deep.yaml": "a:\n" + "".join("  " * i + "- \n" for i in range(1, 400)),
    "no-name.yaml": "kind: Node\nmetadata: {}\n",
    "alias-bomb.yaml": ("kind: List\nmetadata:\n  x0: &x0 [a, a, a, a, a, a, a, a, a]\n"
                        + "".join(f"  x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n" for i in range(1, 9))
                        + "items:\n- {kind: Node, metadata: {name: n1, labels: {a: *x8}}}\n"),
    "negative-allocatable.yaml": "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '-4', memory: -5Gi}}\n",
    "duplicate.yaml": "kind: List\nitems:\n- {kind: Node, metadata: {name: n1}}\n"
                      "- {kind: Node, metadata: {name: n1}}\n",
    "bad-gpu.yaml": ("kind: List\nitems:\n- kind: Node\n  metadata: {name: g, labels: {nvidia.com/gpu.memory: lots}}\n"
                     "  status: {allocatable: {cpu: '8', memory: 8Gi, pods: '110', nvidia.com/gpu: '8'}}\n"
                     "- kind: Pod\n  metadata: {name: p, namespace: d, annotations: {gpu-scheduler/gpu-memory-gb: x}}\n"
                     "  spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: '1'}}}]}\n"),
}


async def test_fixed_corpus_through_the_command_line(tmp_path: Path) -> None:
    """The real ``python -m py_scheduler.cli`` on each file, explain and simulate (in parallel)."""

    async def run(name: str, command: str) -> None:
        path = tmp_path / name
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "py_scheduler.cli", *snapshot_args(command, path), cwd=REPO,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode is not None
        _assert_clean(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                      f"{command} {name}")
        STATS.bad_input[f"corpus files exit {proc.returncode}"] += 1

    for name, body in FIXED_CORPUS.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    jobs = [(n, c) for n in FIXED_CORPUS for c in ("explain", "simulate")]
    for i in range(0, len(jobs), 4):  # 2 cores: a few interpreters at a time
        await asyncio.gather(*(run(n, c) for n, c in jobs[i:i + 4]))
