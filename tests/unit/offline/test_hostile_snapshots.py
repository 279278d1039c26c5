"""Hostile snapshot files found by a new-user trial: YAML alias bombs, a huge value in a message,
negative Node resources, and ``explain --kubeconfig`` pointed at a server that is not an API server.
Each must end in one :class:`SnapshotError` line (exit 2 from the CLI), in bounded time and memory."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from offline_objects import node, pod, write_list
from typer.testing import CliRunner

from py_scheduler.cli import app
from py_scheduler.offline.live import load_live
from py_scheduler.offline.loader import ALIAS_SLACK, SnapshotError, load_snapshot_file


def _bomb(where: str, levels: int = 9) -> str:
    """A "billion laughs" snapshot: 9 anchors of 9 aliases each (9**9 leaves) used at ``where``."""
    lines = ["x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, levels)]
    last = f"*x{levels - 1}"
    use = {
        "label": f"- {{apiVersion: v1, kind: Node, metadata: {{name: n1, labels: {{a: {last}}}}}}}",
        "cpu": ("- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {nodeName: n1, "
                f"containers: [{{name: c, resources: {{requests: {{cpu: {last}}}}}}}]}}}}"),
        "taints": f"- {{apiVersion: v1, kind: Node, metadata: {{name: n2}}, spec: {{taints: {last}}}}}",
        "items": f"- {{apiVersion: v1, kind: List, items: {last}}}",
    }[where]
    return ("apiVersion: v1\nkind: List\nmetadata:\n  anchors:\n" + "".join(f"    {line}\n" for line in lines)
            + "items:\n" + use + "\n")


@pytest.mark.timeout(60)  # without the bound this ran out of memory or time
@pytest.mark.parametrize("where", ["label", "cpu", "taints", "items"])
def test_an_alias_bomb_is_refused_in_one_line(tmp_path: Path, where: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(where))
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: invalid YAML: anchors and aliases") and "\n" not in msg and len(msg) < 300, msg
    out = CliRunner().invoke(app, ["simulate", str(path)])
    assert out.exit_code == 2 and "Traceback" not in out.output and "anchors and aliases" in out.output


def test_a_self_containing_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems: &a [*a]\n")
    with pytest.raises(SnapshotError, match="contains itself through an alias"):
        load_snapshot_file(path)


def test_modest_aliases_load_as_separate_objects(tmp_path: Path) -> None:
    """What ``yaml.safe_dump`` writes for objects that share a dict (a script's snapshot): accepted,
    and each Pod gets its own copy (defaults filled in place must not leak from one to the other)."""
    shared_spec = pod("x", cpu="1")["spec"]
    objs = [node("n1", cpu="8"), pod("a"), pod("b")]
    objs[1]["spec"] = objs[2]["spec"] = shared_spec
    path = write_list(tmp_path / "shared.yaml", objs)
    assert "&id001" in path.read_text()  # PyYAML wrote an anchor and an alias
    data = load_snapshot_file(path)
    a, b = data.pods
    assert a["spec"] == b["spec"] and a["spec"] is not b["spec"]
    assert a["metadata"]["uid"] != b["metadata"]["uid"]


def test_the_alias_bound_is_relative_to_the_distinct_objects(tmp_path: Path) -> None:
    """Aliases adding up to ALIAS_SLACK maps beyond twice the distinct ones load; past it, refused."""
    leaf = {"k": "v"}
    ok = {"apiVersion": "v1", "kind": "List", "items": [], "metadata": {"x": [leaf] * (ALIAS_SLACK // 2)}}
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(ok))
    load_snapshot_file(path)
    ok["metadata"] = {"x": [leaf] * (ALIAS_SLACK + 10)}
    path.write_text(yaml.safe_dump(ok))
    with pytest.raises(SnapshotError, match="anchors and aliases"):
        load_snapshot_file(path)


def test_a_huge_value_is_quoted_shortly(tmp_path: Path) -> None:
    """A bound Pod's 5 MB cpu string: the message names the Pod and the field and stays a line."""
    path = write_list(tmp_path / "s.yaml", [node("n1"), pod("web", cpu="9" * 5_000_000 + "x", node_name="n1")])
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(path)
    msg = str(err.value)
    assert "Pod default/web" in msg and "spec.containers[0].resources.requests.cpu" in msg and len(msg) < 500, msg


@pytest.mark.parametrize(("part", "resource", "value"), [("allocatable", "cpu", "-4"),
                                                         ("allocatable", "memory", "-5Gi"),
                                                         ("allocatable", "pods", "-1"),
                                                         ("capacity", "nvidia.com/gpu", "-2")])
def test_negative_node_resources_are_refused_as_the_api_server_refuses_them(tmp_path: Path, part: str,
                                                                            resource: str, value: str) -> None:
    n = node("n1")
    n["status"].setdefault(part, {})[resource] = value
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(write_list(tmp_path / "s.yaml", [n]))
    assert (f"Node n1: invalid value '{value}' for status.{part}.{resource}: must be greater than or equal to 0"
            in str(err.value)), err.value


@pytest.fixture
def not_an_api_server(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig pointing at a local HTTP server that answers 404 to everything."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    port: list[int] = []

    async def serve() -> web.AppRunner:
        app = web.Application()
        async def not_found(_: web.Request) -> web.Response:
            return web.Response(status=404, text="404 page not found")

        app.router.add_route("*", "/{tail:.*}", not_found)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port.append(runner.addresses[0][1])
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = loop.run_until_complete(serve())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port[0]}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    yield kubeconfig
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_explain_against_a_server_that_is_not_an_api_server_says_so(not_an_api_server: Path) -> None:
    """Every 404 used to read as "API group not served", so the answer was "no pending Pods"."""
    with pytest.raises(SnapshotError, match=r"listing \w+s: HTTP 404 from .*is this a Kubernetes API server\?"):
        load_live(not_an_api_server)
    out = CliRunner().invoke(app, ["explain", "--kubeconfig", str(not_an_api_server)])
    assert out.exit_code == 2 and "is this a Kubernetes API server?" in out.output, out.output


@pytest.mark.parametrize("names", [[["nested"]], [{"a": 1}], "img:1", 7])
def test_a_malformed_image_list_is_ignored_not_a_crash(tmp_path: Path, names: object) -> None:
    """``status.images[].names`` is a []string in the API; a hand-edited snapshot with a nested list
    used to stop ``simulate`` with "unhashable type: 'list'". Entries that are not strings are skipped
    (ImageLocality scores what it can read), and the Pod still lands."""
    n = node("n1", cpu="8")
    n["status"]["images"] = [{"names": names, "sizeBytes": 1}, {"names": ["img:2"], "sizeBytes": 300_000_000}]
    path = write_list(tmp_path / "s.yaml", [n, pod("web", cpu="1")])
    out = CliRunner().invoke(app, ["simulate", str(path), "-o", "json"])
    assert out.exit_code == 0 and "Traceback" not in out.output and "n1" in out.output, out.output
