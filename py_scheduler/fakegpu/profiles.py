"""Fake GPU node profiles: the devices a node advertises, its GFD labels, and the device choices.

Not an upstream plugin: what NVIDIA's ``k8s-device-plugin`` and GPU Feature Discovery would publish
and answer for a node of the profile's GPUs, so that a cluster without GPUs (kind on a laptop, the
project's test bed) runs GPU Pods through a real kubelet's device manager. Sources:

- device IDs: the plugin's ``--device-id-strategy=index`` (whole cards ``"3"``, MIG slices
  ``"<card>:<slice>"``), time-slicing replicas as ``"<id>::<replica>"`` (its ``AnnotatedID``);
- labels: ``docs/gpu-feature-discovery/README.md`` (``nvidia.com/gpu.product`` with ``-SHARED`` under
  time-slicing and ``-MIG-<profile>`` under MIG single, where ``gpu.count``/``gpu.memory`` describe the
  slices; ``nvidia.com/gpu.replicas``, ``nvidia.com/gpu.sharing-strategy``, ``nvidia.com/mig.strategy``);
- ``GetPreferredAllocation``: whole cards NVLink-aligned first (the plugin's best-effort policy from
  ``go-gpuallocator`` prefers the set with the best links); replicas spread over the cards with the
  most unused replicas (its ``distributedAlloc``), so shares of one card are handed out last;
- ``Allocate``: ``NVIDIA_VISIBLE_DEVICES`` lists the underlying card (or slice) IDs, deduplicated,
  as the plugin's ``envvar`` device-list strategy does.

Profiles live in ``profiles.yaml`` beside this module (units in its header).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from py_scheduler.plugins.gpu.model import parse_groups

RESOURCE = "nvidia.com/gpu"
NVLINK_ANNOTATION = "gpu-scheduler/nvlink-groups"
"""py-scheduler's NVLink topology annotation (``docs/gpu.md``), read by GPUFilter / GPUScore."""
PROFILE_LABEL = "gpu.py-scheduler.io/fake-profile"
"""The Node label that names a node's profile for the DaemonSet (``deploy/kind/fake-gpus/``)."""


class ProfileError(ValueError):
    """An unknown profile name or a malformed profile entry."""


@dataclass(frozen=True)
class MigSlices:
    """MIG "single" strategy: every card cut into ``per_gpu`` slices of ``profile`` (``1g.10gb``)."""

    profile: str
    per_gpu: int
    memory_mib: int


@dataclass(frozen=True)
class Profile:
    """One node's GPUs.

    Attributes:
        name: the profile's key in ``profiles.yaml``.
        product: GFD product of a whole card (``NVIDIA-A100-SXM4-80GB``).
        memory_mib: a whole card's memory (MiB).
        gpus: physical cards.
        nvlink: NVLink groups of card indices (empty: none).
        replicas: time-slicing replicas per card (1: not shared).
        mig: MIG single slices, or None.
    """

    name: str
    product: str
    memory_mib: int
    gpus: int
    nvlink: tuple[tuple[int, ...], ...] = ()
    replicas: int = 1
    mig: MigSlices | None = None
    devices: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        ids: list[str] = []
        for card in range(self.gpus):
            if self.mig is not None:
                ids.extend(f"{card}:{s}" for s in range(self.mig.per_gpu))
            elif self.replicas > 1:
                ids.extend(f"{card}::{r}" for r in range(self.replicas))
            else:
                ids.append(str(card))
        object.__setattr__(self, "devices", tuple(ids))

    def labels(self) -> dict[str, str]:
        """The GFD labels (plus the profile label) the node gets; values are strings."""
        product, memory, count = self.product, self.memory_mib, self.gpus
        out = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.replicas": str(self.replicas),
               "nvidia.com/gpu.sharing-strategy": "time-slicing" if self.replicas > 1 else "none",
               "nvidia.com/mig.strategy": "single" if self.mig is not None else "none",
               PROFILE_LABEL: self.name}
        if self.mig is not None:
            product = f"{product}-MIG-{self.mig.profile}"
            memory, count = self.mig.memory_mib, self.gpus * self.mig.per_gpu
        elif self.replicas > 1:
            product = f"{product}-SHARED"
        out.update({"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(memory),
                    "nvidia.com/gpu.count": str(count)})
        return out

    def annotations(self) -> dict[str, str | None]:
        """py-scheduler's NVLink annotation (None removes a stale one)."""
        text = ";".join(",".join(str(i) for i in g) for g in self.nvlink)
        return {NVLINK_ANNOTATION: text or None}

    def card_of(self, device: str) -> str:
        """The ID ``NVIDIA_VISIBLE_DEVICES`` names for ``device``: a replica's card, else the device."""
        return device.split("::", 1)[0]

    def group_of(self, device: str) -> int:
        """The NVLink group (position in ``nvlink``) of ``device``'s card; -1 when in none."""
        card = int(device.split(":", 1)[0])
        for i, g in enumerate(self.nvlink):
            if card in g:
                return i
        return -1

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        """The devices ``GetPreferredAllocation`` answers: ``size`` IDs out of ``available`` that contain
        ``must_include``; NVLink-aligned for whole cards, spread over cards for replicas.

        Whole cards: the NVLink group that holds every ``must_include`` card and enough available ones,
        the one with the fewest available cards first (best fit, keeping larger groups whole), lowest
        indices first; without such a group, cards are filled group by group, fullest group first.
        """
        chosen = [d for d in must_include if d in available][:size]
        rest = [d for d in available if d not in chosen]
        if len(chosen) >= size:
            return chosen
        need = size - len(chosen)
        if self.replicas > 1:
            used = {c: 0 for c in map(self.card_of, self.devices)}
            for d in self.devices:
                if d not in available:
                    used[self.card_of(d)] += 1
            for d in chosen:
                used[self.card_of(d)] += 1
            picked: list[str] = []
            for _ in range(need):
                free = [d for d in rest if d not in picked]
                if not free:
                    break
                best = min(free, key=lambda d: (used[self.card_of(d)], _key(d)))
                used[self.card_of(best)] += 1
                picked.append(best)
            return chosen + picked
        if self.nvlink and self.mig is None:
            groups_needed = {self.group_of(d) for d in chosen}
            fits = []
            for gi in range(len(self.nvlink)):
                if groups_needed <= {gi}:
                    free = [d for d in rest if self.group_of(d) == gi]
                    if len(free) >= need:
                        fits.append((len(free), gi, free))
            if fits:
                _, _, free = min(fits)
                return chosen + sorted(free, key=_key)[:need]
            by_group: dict[int, list[str]] = {}
            for d in rest:
                by_group.setdefault(self.group_of(d), []).append(d)
            order = sorted(by_group.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            flat = [d for _, ds in order for d in sorted(ds, key=_key)]
            return chosen + flat[:need]
        return chosen + sorted(rest, key=_key)[:need]

    def visible_devices(self, devices: list[str]) -> str:
        """``NVIDIA_VISIBLE_DEVICES`` for an allocation: the cards (or slices) behind ``devices``,
        deduplicated, in ID order."""
        return ",".join(sorted({self.card_of(d) for d in devices}, key=_key))


def _key(device: str) -> tuple[int, ...]:
    return tuple(int(p) for p in device.replace("::", ":").split(":"))


def load_profiles(text: str | None = None) -> dict[str, Profile]:
    """Parse ``profiles.yaml`` (or ``text`` in its format) into profiles by name.

    Raises:
        ProfileError: a malformed entry (names the profile and the field).
    """
    raw: Any = yaml.safe_load(text if text is not None else
                              resources.files(__package__).joinpath("profiles.yaml").read_text())
    if not isinstance(raw, dict):
        raise ProfileError("profiles: not a mapping of profile name -> profile")
    out: dict[str, Profile] = {}
    for name, spec in raw.items():
        try:
            mig = spec.get("mig")
            groups = parse_groups(spec["nvlink"], "nvlink") if spec.get("nvlink") else []
            out[name] = Profile(
                name=str(name), product=str(spec["product"]), memory_mib=int(spec["memoryMiB"]),
                gpus=int(spec["gpus"]), nvlink=tuple(tuple(g) for g in groups),
                replicas=int(spec.get("replicas", 1)),
                mig=MigSlices(str(mig["profile"]), int(mig["perGPU"]), int(mig["memoryMiB"])) if mig else None)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ProfileError(f"profile {name!r}: {e}") from e
        p = out[name]
        if p.gpus < 1 or p.replicas < 1 or any(i >= p.gpus for g in p.nvlink for i in g):
            raise ProfileError(f"profile {name!r}: gpus and replicas must be >= 1, NVLink indices < gpus")
    return out


def get_profile(name: str, text: str | None = None) -> Profile:
    """The profile called ``name``.

    Raises:
        ProfileError: no such profile (the message lists the known ones).
    """
    profiles = load_profiles(text)
    if name not in profiles:
        raise ProfileError(f"unknown fake GPU profile {name!r}; known: {', '.join(sorted(profiles))}")
    return profiles[name]
