"""The fake-GPU device plugin: its wire format against upstream's .proto, its profiles as py-scheduler's
GPU plugins read them, its device choices, and the gRPC protocol with a registration endpoint.

The registration endpoint here is a gRPC server on a temporary ``kubelet.sock`` that records what the
plugin registers (this file tests the plugin's side of the protocol; the real kubelet's side is
tests/e2e/realnodes/test_fake_gpus.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest

from py_scheduler.fakegpu import wire
from py_scheduler.fakegpu.plugin import CDI_KIND, FakeGPUPlugin, cdi_spec
from py_scheduler.fakegpu.profiles import ProfileError, get_profile, load_profiles
from py_scheduler.framework.types import NodeInfo
from py_scheduler.plugins.gpu.inventory import parse_node
from py_scheduler.plugins.gpu.model import GPUKeys

KUBELET_MODULE = "k8s.io/kubelet@v0.37.2"


def _upstream_proto() -> str:
    """api.proto of the kubelet's device-plugin API v1beta1 from the Go module cache (downloaded once)."""
    out = subprocess.run(["go", "mod", "download", "-json", KUBELET_MODULE], capture_output=True, text=True,
                         check=True, timeout=300)
    return (Path(json.loads(out.stdout)["Dir"]) / "pkg/apis/deviceplugin/v1beta1/api.proto").read_text()


def test_wire_messages_equal_upstream_proto() -> None:
    text = re.sub(r"/\*.*?\*/", "", _upstream_proto(), flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    upstream: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"message\s+(\w+)\s*\{([^}]*)\}", text):
        upstream[name] = {f: int(n) for f, n in re.findall(r"(\w+)\s*=\s*(\d+)\s*;", body)}
    ours = {name: {f: n for f, n, *_ in fields} for name, fields in wire.MESSAGES.items()}
    assert ours == upstream
    services = dict(re.findall(r"service\s+(\w+)\s*\{(.*?)\n\}", text, flags=re.S))
    for service, methods in wire.METHODS.items():
        assert sorted(re.findall(r"rpc\s+(\w+)", services[service])) == sorted(methods)
        for m, (_, _, streaming) in methods.items():
            assert bool(re.search(rf"rpc\s+{m}\([^)]*\)\s+returns\s+\(stream", services[service])) == streaming


KEYS = GPUKeys()


def _node(profile_name: str) -> NodeInfo:
    p = get_profile(profile_name)
    return NodeInfo({"metadata": {"name": "n", "labels": p.labels(),
                                  "annotations": {k: v for k, v in p.annotations().items() if v}},
                     "status": {"allocatable": {"nvidia.com/gpu": str(len(p.devices)), "cpu": "8"}}})


@pytest.mark.parametrize(("name", "total", "kind", "gb", "groups"), [
    ("a100-80gb-x8", 8, "gpu", 80, ((0, 1, 2, 3), (4, 5, 6, 7))),
    ("h100-x8", 8, "gpu", 80, ((0, 1, 2, 3, 4, 5, 6, 7),)),
    ("l4-x1", 1, "gpu", None, ((0,),)),
    ("t4-shared", 4, "replica", None, None),
    ("a100-mig-single", 7, "mig", None, None),
])
def test_profiles_read_by_the_gpu_plugins_as_meant(name: str, total: int, kind: str, gb: int | None,
                                                   groups: Any) -> None:
    spec = parse_node(_node(name), KEYS)
    assert spec.error is None
    assert spec.total == total
    assert spec.inventory.unit_kind == kind
    if gb is not None:
        assert spec.memory_bytes is not None and round(spec.memory_bytes / 2**30) == gb
    if groups is not None:
        assert spec.groups == groups


def test_every_bundled_profile_parses_without_notes() -> None:
    for name in load_profiles():
        spec = parse_node(_node(name), KEYS)
        assert spec.error is None and not spec.inventory.notes, name


def test_bad_profiles_named() -> None:
    with pytest.raises(ProfileError, match="unknown fake GPU profile 'x'"):
        get_profile("x")
    with pytest.raises(ProfileError, match="'p'"):
        load_profiles("p: {product: A, memoryMiB: 1, gpus: 2, nvlink: '0-5'}")


def test_preferred_allocation_is_nvlink_aligned() -> None:
    p = get_profile("a100-80gb-x8")
    every = list(p.devices)
    assert p.preferred(every, [], 4) == ["0", "1", "2", "3"]
    # group 0 keeps 2 free: a 4-GPU request goes to group 1, a 2-GPU request fills group 0 (best fit)
    avail = ["2", "3", "4", "5", "6", "7"]
    assert p.preferred(avail, [], 4) == ["4", "5", "6", "7"]
    assert p.preferred(avail, [], 2) == ["2", "3"]
    assert p.preferred(avail, ["5"], 2) == ["5", "4"]
    # no group fits 6: the fullest group first
    assert sorted(p.preferred(avail, [], 6)) == sorted(avail)
    assert p.preferred(["1", "4", "5", "6"], [], 2) == ["4", "5"]


def test_replicas_spread_over_cards_and_visible_devices_name_cards() -> None:
    p = get_profile("t4-shared")
    assert p.devices == ("0::0", "0::1", "0::2", "0::3")
    assert p.visible_devices(["0::1", "0::3"]) == "0"
    two = get_profile("t4-x2")
    assert two.visible_devices(["1", "0"]) == "0,1"


# -- the protocol --------------------------------------------------------------------------------------
class Kubelet:
    """A registration endpoint on ``<dir>/kubelet.sock`` recording RegisterRequests."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.requests: list[Any] = []
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        async def register(request: Any, context: Any) -> Any:
            self.requests.append(request)
            return wire.Empty()

        req, resp, _ = wire.METHODS["Registration"]["Register"]
        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(register, request_deserializer=req.FromString,
                                                            response_serializer=resp.SerializeToString)})
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix://{self.dir / wire.KUBELET_SOCKET}")
        await self.server.start()

    async def restart(self) -> None:
        """What a kubelet restart does to the directory: every socket removed, a new kubelet.sock."""
        assert self.server is not None
        await self.server.stop(None)
        for f in self.dir.iterdir():
            f.unlink()
        await self.start()


async def _until(cond: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.02)


def _stub(sock: Path, method: str) -> Any:
    req, resp, streaming = wire.METHODS["DevicePlugin"][method]
    ch = grpc.aio.insecure_channel(f"unix://{sock}")
    make = ch.unary_stream if streaming else ch.unary_unary
    return ch, make(wire.method_path("DevicePlugin", method), request_serializer=req.SerializeToString,
                    response_deserializer=resp.FromString)


async def test_registers_serves_and_registers_again_after_a_kubelet_restart(tmp_path: Path) -> None:
    kubelet = Kubelet(tmp_path)
    await kubelet.start()
    plugin = FakeGPUPlugin(get_profile("a100-80gb-x8"), tmp_path, cdi=True)
    task = asyncio.create_task(plugin.run(poll=0.05))
    try:
        await _until(lambda: len(kubelet.requests) == 1)
        reg = kubelet.requests[0]
        assert (reg.version, reg.endpoint, reg.resource_name) == ("v1beta1", plugin.socket.name, "nvidia.com/gpu")
        assert reg.options.get_preferred_allocation_available

        ch, law = _stub(plugin.socket, "ListAndWatch")
        async with ch:
            stream = law(wire.Empty())
            first = await stream.read()
            assert [(d.ID, d.health) for d in first.devices] == [(str(i), "Healthy") for i in range(8)]
            stream.cancel()
        ch, pref = _stub(plugin.socket, "GetPreferredAllocation")
        async with ch:
            r = await pref(wire.PreferredAllocationRequest(container_requests=[
                {"available_deviceIDs": ["1", "4", "5", "6"], "allocation_size": 2}]))
            assert list(r.container_responses[0].deviceIDs) == ["4", "5"]
        ch, alloc = _stub(plugin.socket, "Allocate")
        async with ch:
            r = await alloc(wire.AllocateRequest(container_requests=[{"devices_ids": ["5", "4"]}]))
            c = r.container_responses[0]
            assert c.envs["NVIDIA_VISIBLE_DEVICES"] == "4,5"
            assert [d.name for d in c.cdi_devices] == [f"{CDI_KIND}=5", f"{CDI_KIND}=4"]
            with pytest.raises(grpc.aio.AioRpcError, match="unknown device"):
                await alloc(wire.AllocateRequest(container_requests=[{"devices_ids": ["9"]}]))

        await kubelet.restart()
        await _until(lambda: len(kubelet.requests) == 2)
        await _until(plugin.socket.exists)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await plugin.stop()
        if kubelet.server is not None:
            await kubelet.server.stop(None)


def test_cdi_spec_names_every_device() -> None:
    spec = cdi_spec(get_profile("t4-shared"))
    assert spec["kind"] == CDI_KIND
    assert [d["name"] for d in spec["devices"]] == ["0__0", "0__1", "0__2", "0__3"]
    assert spec["devices"][1]["containerEdits"]["env"] == ["FAKE_GPU_CDI_DEVICE_0__1=0::1"]
