"""``py-scheduler fake-gpu-plugin``: a kubelet device plugin that advertises a profile's fake GPUs.

The device-plugin protocol, as the kubelet's device manager drives it
(``pkg/kubelet/cm/devicemanager/plugin/v1beta1`` in k8s.io/kubernetes v1.37.2; NVIDIA's
``k8s-device-plugin`` ``internal/plugin/server.go`` serves the same):

1. serve ``v1beta1.DevicePlugin`` on ``<dir>/<name>.sock``;
2. call ``v1beta1.Registration/Register`` on ``<dir>/kubelet.sock`` with that endpoint, the resource
   name (``nvidia.com/gpu``) and ``get_preferred_allocation_available``;
3. answer ``ListAndWatch`` with every device ``Healthy`` and keep the stream open;
4. answer ``GetPreferredAllocation`` and ``Allocate`` (``profiles.Profile``).

A kubelet restart empties the socket directory; the plugin notices its socket gone (or
``kubelet.sock`` replaced) and serves and registers again, as NVIDIA's plugin does on fsnotify events.
With ``--cdi-dir`` it writes a CDI spec of its devices there and names them in ``Allocate`` (containerd
2.x resolves CDI devices by default), so a container sees both the environment variable and the CDI edit.
With ``--node-name`` it labels its Node with the profile's GFD labels through the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from py_scheduler.app.client.kube import Kube, KubeAPIClient
from py_scheduler.fakegpu import wire
from py_scheduler.fakegpu.profiles import RESOURCE, Profile

log = logging.getLogger("py_scheduler.fakegpu")

CDI_KIND = "fake-gpu.py-scheduler.io/gpu"
"""CDI ``vendor/class`` of the fake devices (a vendor of its own, so a real NVIDIA spec is never touched)."""
CDI_ENV_PREFIX = "FAKE_GPU_CDI_DEVICE_"


def cdi_name(device: str) -> str:
    """A CDI device name for ``device`` (CDI names allow ``[A-Za-z0-9_.-]`` here; ``:`` becomes ``_``)."""
    return device.replace(":", "_")


def cdi_spec(profile: Profile) -> dict[str, Any]:
    """The CDI spec (``cdiVersion`` 0.6.0) of the profile's devices: each adds one environment variable
    ``FAKE_GPU_CDI_DEVICE_<name>=<device ID>`` to a container that gets it."""
    return {"cdiVersion": "0.6.0", "kind": CDI_KIND,
            "devices": [{"name": cdi_name(d), "containerEdits": {"env": [f"{CDI_ENV_PREFIX}{cdi_name(d)}={d}"]}}
                        for d in profile.devices],
            "containerEdits": {}}


class FakeGPUPlugin:
    """The ``v1beta1.DevicePlugin`` service for one profile.

    Args:
        profile: what the node has.
        plugin_dir: the kubelet's device-plugin directory (``/var/lib/kubelet/device-plugins``).
        socket_name: this plugin's socket file in ``plugin_dir``.
        cdi: name CDI devices in ``Allocate`` (their spec must be written, ``write_cdi_spec``).
    """

    def __init__(self, profile: Profile, plugin_dir: Path, socket_name: str = "py-scheduler-fake-gpu.sock",
                 cdi: bool = False) -> None:
        self.profile = profile
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / socket_name
        self.cdi = cdi
        self.allocations = 0
        self._server: grpc.aio.Server | None = None
        self._stop = asyncio.Event()

    # -- the service ---------------------------------------------------------------------------------
    async def get_device_plugin_options(self, request: Any, context: Any) -> Any:
        return wire.DevicePluginOptions(get_preferred_allocation_available=True)

    async def list_and_watch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield wire.ListAndWatchResponse(devices=[wire.Device(ID=d, health=wire.HEALTHY)
                                                 for d in self.profile.devices])
        await self._stop.wait()

    async def get_preferred_allocation(self, request: Any, context: Any) -> Any:
        resp = wire.PreferredAllocationResponse()
        for req in request.container_requests:
            ids = self.profile.preferred(list(req.available_deviceIDs), list(req.must_include_deviceIDs),
                                         int(req.allocation_size))
            resp.container_responses.add(deviceIDs=ids)
        return resp

    async def allocate(self, request: Any, context: Any) -> Any:
        resp = wire.AllocateResponse()
        for req in request.container_requests:
            ids = list(req.devices_ids)
            unknown = [d for d in ids if d not in self.profile.devices]
            if unknown:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown device(s) {unknown}")
            c = resp.container_responses.add()
            c.envs["NVIDIA_VISIBLE_DEVICES"] = self.profile.visible_devices(ids)
            c.envs["PY_SCHEDULER_FAKE_GPU_PROFILE"] = self.profile.name
            if self.cdi:
                for d in ids:
                    c.cdi_devices.add(name=f"{CDI_KIND}={cdi_name(d)}")
        self.allocations += 1
        return resp

    async def pre_start_container(self, request: Any, context: Any) -> Any:
        return wire.PreStartContainerResponse()

    def _handler(self) -> grpc.GenericRpcHandler:
        impl = {"GetDevicePluginOptions": self.get_device_plugin_options, "ListAndWatch": self.list_and_watch,
                "GetPreferredAllocation": self.get_preferred_allocation, "Allocate": self.allocate,
                "PreStartContainer": self.pre_start_container}
        handlers = {}
        for method, (req, resp, streaming) in wire.METHODS["DevicePlugin"].items():
            make = grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
            handlers[method] = make(impl[method], request_deserializer=req.FromString,
                                    response_serializer=resp.SerializeToString)
        return grpc.method_handlers_generic_handler(f"{wire.API_VERSION}.DevicePlugin", handlers)

    # -- life cycle ----------------------------------------------------------------------------------
    async def serve(self) -> None:
        """Listen on ``self.socket`` (replacing a stale file)."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self._stop = asyncio.Event()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((self._handler(),))
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def register(self, timeout: float = 10.0) -> None:
        """Register with the kubelet on ``kubelet.sock``.

        Raises:
            grpc.aio.AioRpcError: the kubelet refused or did not answer within ``timeout`` seconds.
        """
        req_cls, resp_cls, _ = wire.METHODS["Registration"]["Register"]
        async with grpc.aio.insecure_channel(f"unix://{self.plugin_dir / wire.KUBELET_SOCKET}") as ch:
            register = ch.unary_unary(wire.method_path("Registration", "Register"),
                                      request_serializer=req_cls.SerializeToString,
                                      response_deserializer=resp_cls.FromString)
            await register(wire.RegisterRequest(
                version=wire.API_VERSION, endpoint=self.socket.name, resource_name=RESOURCE,
                options=wire.DevicePluginOptions(get_preferred_allocation_available=True)), timeout=timeout)
        log.info("registered %s (%d devices, profile %s) with the kubelet", RESOURCE,
                 len(self.profile.devices), self.profile.name)

    async def stop(self) -> None:
        """End the ListAndWatch streams and stop serving."""
        self._stop.set()
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None

    async def run(self, poll: float = 1.0) -> None:
        """Serve and register; serve and register again whenever the kubelet restarts. Runs until
        cancelled."""
        kubelet_sock = self.plugin_dir / wire.KUBELET_SOCKET
        while True:
            while not kubelet_sock.exists():
                await asyncio.sleep(poll)
            await self.serve()
            inode = kubelet_sock.stat().st_ino
            try:
                await self.register()
            except grpc.aio.AioRpcError as e:
                log.warning("registration failed (%s); retrying", e.details())
                await self.stop()
                await asyncio.sleep(poll)
                continue
            while True:
                await asyncio.sleep(poll)
                try:
                    gone = not self.socket.exists() or kubelet_sock.stat().st_ino != inode
                except FileNotFoundError:
                    gone = True
                if gone:
                    log.info("the kubelet restarted (socket directory changed); registering again")
                    await self.stop()
                    break


def write_cdi_spec(profile: Profile, cdi_dir: Path) -> Path:
    """Write the profile's CDI spec to ``cdi_dir`` (atomically); returns its path."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = cdi_dir / "py-scheduler-fake-gpu.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cdi_spec(profile), indent=1))
    os.replace(tmp, path)
    return path


async def label_node(node: str, profile: Profile, kubeconfig: Path | None) -> None:
    """Merge-patch ``node``'s labels and annotations with the profile's (GFD labels, NVLink groups)."""
    kube = await Kube.connect(kubeconfig)
    try:
        await KubeAPIClient(kube).patch(f"/api/v1/nodes/{node}",
                         {"metadata": {"labels": profile.labels(), "annotations": profile.annotations()}})
    finally:
        await kube.close()
    log.info("labelled node %s with profile %s", node, profile.name)


async def profile_from_node(node: str, label: str, kubeconfig: Path | None) -> str:
    """The value of ``label`` on ``node`` (the DaemonSet's way of choosing a profile per node).

    Raises:
        LookupError: the node does not exist or has no such label.
    """
    kube = await Kube.connect(kubeconfig)
    try:
        obj = await KubeAPIClient(kube).get(f"/api/v1/nodes/{node}")
    finally:
        await kube.close()
    value = ((obj or {}).get("metadata") or {}).get("labels", {}).get(label)
    if not value:
        raise LookupError(f"node {node} has no label {label}")
    return str(value)


async def main(profile: Profile, plugin_dir: Path, cdi_dir: Path | None, node: str | None,
               kubeconfig: Path | None) -> None:
    """The command's body: CDI spec, node labels, then serve until cancelled."""
    if cdi_dir is not None:
        write_cdi_spec(profile, cdi_dir)
    if node:
        await label_node(node, profile, kubeconfig)
    await FakeGPUPlugin(profile, plugin_dir, cdi=cdi_dir is not None).run()
