"""In-tree volume to CSI translation, as far as the v1.37 scheduler uses it.

Upstream: ``staging/src/k8s.io/csi-translation-lib/translate.go`` (``IsPVMigratable``,
``IsInlineMigratable``, ``GetInTreePluginNameFromSpec``, ``GetCSINameFromInTreeName``,
``TranslateInTreePVToCSI``, ``TranslateInTreeInlineVolumeToCSI``) and ``plugins/*.go`` (per-plugin
volume handles; ``in_tree_volume.go``: ``translateTopologyFromInTreeToCSI``, ``replaceTopology``,
``addTopology``, ``getTopologyLabel``), plus the scheduler's own "is migration on" switches
(``nodevolumelimits/utils.go`` ``isCSIMigrationOn`` and ``volumebinding/binder.go``
``isCSIMigrationOnForPlugin``): migration is on for AWS EBS, GCE PD, Azure Disk, Cinder and Portworx;
Azure File and vSphere volumes are *migratable* (so NodeVolumeLimits' PreFilter does not skip them)
but never translated by the scheduler.

Only what the scheduler reads is produced: the CSI driver name and volume handle (NodeVolumeLimits
counts attachments by ``driver/handle``) and the translated PV node affinity (VolumeBinding checks it
when the node's CSINode lists the plugin in ``storage.alpha.kubernetes.io/migrated-plugins``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from py_scheduler.framework.objects import Obj

__all__ = [
    "MIGRATION_ON",
    "InTreePlugin",
    "TranslationError",
    "csi_name_from_in_tree",
    "in_tree_plugin_for_pv",
    "in_tree_plugin_for_volume",
    "is_migratable_plugin_name",
    "translate_inline_volume",
    "translate_pv_to_csi",
]

LABEL_ZONE_GA = "topology.kubernetes.io/zone"
LABEL_REGION_GA = "topology.kubernetes.io/region"
LABEL_ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION_BETA = "failure-domain.beta.kubernetes.io/region"


class TranslationError(ValueError):
    """A volume the translation library rejects (an error upstream, code Error where returned)."""


@dataclass(frozen=True, slots=True)
class InTreePlugin:
    """One in-tree plugin: its volume source key in the PV / Pod volume, its plugin name, the CSI
    driver that supersedes it and the CSI zone topology key (empty when it translates none)."""

    source: str
    plugin_name: str
    driver: str
    topology_key: str = ""


GCE_PD = InTreePlugin("gcePersistentDisk", "kubernetes.io/gce-pd", "pd.csi.storage.gke.io", "topology.gke.io/zone")
AWS_EBS = InTreePlugin("awsElasticBlockStore", "kubernetes.io/aws-ebs", "ebs.csi.aws.com",
                       "topology.ebs.csi.aws.com/zone")
CINDER = InTreePlugin("cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org",
                      "topology.cinder.csi.openstack.org/zone")
AZURE_DISK = InTreePlugin("azureDisk", "kubernetes.io/azure-disk", "disk.csi.azure.com")
AZURE_FILE = InTreePlugin("azureFile", "kubernetes.io/azure-file", "file.csi.azure.com")
VSPHERE = InTreePlugin("vsphereVolume", "kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com")
PORTWORX = InTreePlugin("portworxVolume", "kubernetes.io/portworx-volume", "pxd.portworx.com")

PLUGINS: tuple[InTreePlugin, ...] = (GCE_PD, AWS_EBS, CINDER, AZURE_DISK, AZURE_FILE, VSPHERE, PORTWORX)
MIGRATION_ON: frozenset[str] = frozenset(p.plugin_name for p in (AWS_EBS, PORTWORX, GCE_PD, AZURE_DISK, CINDER))
"""In-tree plugin names whose CSI migration the v1.37 scheduler treats as on."""


def _dict(v: object) -> Obj:
    return v if isinstance(v, dict) else {}


def in_tree_plugin_for_pv(pv: Mapping[str, Any]) -> InTreePlugin | None:
    """``IsPVMigratable`` / ``GetInTreePluginNameFromSpec(pv, nil)``: the plugin whose source the PV uses."""
    pv_spec = _dict(pv.get("spec"))
    for p in PLUGINS:
        if pv_spec.get(p.source) is not None:
            return p
    return None


def in_tree_plugin_for_volume(volume: Mapping[str, Any]) -> InTreePlugin | None:
    """``IsInlineMigratable`` / ``GetInTreePluginNameFromSpec(nil, vol)`` for a Pod inline volume."""
    for p in PLUGINS:
        if volume.get(p.source) is not None:
            return p
    return None


def is_migratable_plugin_name(plugin_name: str) -> bool:
    """``IsMigratableIntreePluginByName``."""
    return any(p.plugin_name == plugin_name for p in PLUGINS)


def csi_name_from_in_tree(plugin_name: str) -> str:
    """``GetCSINameFromInTreeName``.

    Raises:
        TranslationError: no CSI driver supersedes ``plugin_name``.
    """
    for p in PLUGINS:
        if p.plugin_name == plugin_name:
            return p.driver
    raise TranslationError(f"could not find CSI Driver name for plugin {plugin_name}")


_AWS_VOLUME = re.compile(r"^vol-[^/]*\Z")


def _ebs_volume_id(kubernetes_id: str) -> str:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://<zone>/<vol-id>``, ``aws:///<vol-id>`` or a bare id."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    aws_id = urlsplit(kubernetes_id).path.strip("/")
    if not _AWS_VOLUME.match(aws_id):
        raise TranslationError(f"failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume "
                               f"({kubernetes_id})")
    return aws_id


def _gce_region_from_zones(zones: list[str]) -> str:
    """``gceGetRegionFromZones``: zones ``{locale}-{region}-{zone}`` of exactly one region."""
    regions: set[str] = set()
    for z in zones:
        parts = z.split("-")
        if len(parts) != 3:
            raise TranslationError(
                f"failed to get region from zones: zone in unexpected format, expected: "
                f"{{locale}}-{{region}}-{{zone}}, got: {z}")
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:
        raise TranslationError(f"failed to get region from zones: multiple or no regions gotten from zones, "
                               f"got: {sorted(regions)}")
    return next(iter(regions))


def _str(v: object) -> str:
    return v if isinstance(v, str) else ""


def _azure_disk_handle(src: Mapping[str, Any]) -> str:
    kind = src.get("kind")
    if kind is not None and str(kind).lower() != "managed":
        raise TranslationError(f"kind({kind}) is not supported in csi migration")
    return _str(src.get("diskURI"))


# -- topology --------------------------------------------------------------------------------------

def _terms(pv: Obj) -> list[Obj]:
    na = _dict(_dict(pv.get("spec")).get("nodeAffinity"))
    req = _dict(na.get("required"))
    terms = req.get("nodeSelectorTerms")
    return [t for t in terms if isinstance(t, dict)] if isinstance(terms, list) else []


def _exprs(term: Obj) -> list[Obj]:
    exprs = term.get("matchExpressions")
    return [e for e in exprs if isinstance(e, dict)] if isinstance(exprs, list) else []


def _topology_key_exists(pv: Obj, key: str) -> bool:
    return any(e.get("key") == key for t in _terms(pv) for e in _exprs(t))


def _topology_label(pv: Obj) -> tuple[str, str]:
    """``getTopologyLabel``: GA or beta zone / region labels, from node affinity first, then PV labels."""
    lbls = _dict(_dict(pv.get("metadata")).get("labels"))
    if _topology_key_exists(pv, LABEL_ZONE_GA):
        return LABEL_ZONE_GA, LABEL_REGION_GA
    if _topology_key_exists(pv, LABEL_ZONE_BETA):
        return LABEL_ZONE_BETA, LABEL_REGION_BETA
    if LABEL_ZONE_GA in lbls:
        return LABEL_ZONE_GA, LABEL_REGION_GA
    if LABEL_ZONE_BETA in lbls:
        return LABEL_ZONE_BETA, LABEL_REGION_BETA
    return LABEL_ZONE_GA, LABEL_REGION_GA


def _topology_values(pv: Obj, key: str) -> list[str]:
    vals: set[str] = set()
    for t in _terms(pv):
        for e in _exprs(t):
            if e.get("key") == key:
                vals.update(v for v in e.get("values") or [] if isinstance(v, str))
    return sorted(vals)


def _replace_topology(pv: Obj, old: str, new: str) -> None:
    for t in _terms(pv):
        for e in _exprs(t):
            if e.get("key") == old:
                e["key"] = new


def _add_topology(pv: Obj, key: str, zones: list[str]) -> None:
    """``addTopology``: append ``key In zones`` to every term (creating one term when there is none);
    nothing when no zone is left after trimming (upstream's error is ignored by its caller)."""
    clean = sorted({z.strip() for z in zones if z.strip()})
    if not clean:
        return
    pv_spec = pv.setdefault("spec", {})
    na = pv_spec.get("nodeAffinity")
    if not isinstance(na, dict):
        na = pv_spec["nodeAffinity"] = {}
    req = na.get("required")
    if not isinstance(req, dict):
        req = na["required"] = {}
    terms = req.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        terms = req["nodeSelectorTerms"] = [{}]
    for t in terms:
        if isinstance(t, dict):
            exprs = t.get("matchExpressions")
            if not isinstance(exprs, list):
                exprs = t["matchExpressions"] = []
            exprs.append({"key": key, "operator": "In", "values": list(clean)})


def _translate_topology(pv: Obj, csi_key: str) -> None:
    """``translateTopologyFromInTreeToCSI``: zone requirements move to the CSI key (or the zone label
    becomes one), beta region requirements move to the GA region label."""
    zone_label, region_label = _topology_label(pv)
    if _topology_values(pv, zone_label):
        _replace_topology(pv, zone_label, csi_key)
    else:
        lbls = _dict(_dict(pv.get("metadata")).get("labels"))
        value = lbls.get(zone_label)
        if isinstance(value, str):
            _add_topology(pv, csi_key, value.split("__"))
    if region_label == LABEL_REGION_BETA and _topology_values(pv, region_label):
        _replace_topology(pv, region_label, LABEL_REGION_GA)


def translate_pv_to_csi(pv: Mapping[str, Any]) -> Obj:
    """``TranslateInTreePVToCSI`` for the plugins whose migration is on: a deep copy with ``spec.csi``
    (``driver``, ``volumeHandle``) in place of the in-tree source and the node affinity translated.

    Raises:
        TranslationError: not an in-tree PV of a migrated plugin, or a source the library rejects
        (malformed EBS volume id, GCE PD zones of several regions, Azure Disk kind other than Managed).
    """
    plugin = in_tree_plugin_for_pv(pv)
    if plugin is None or plugin.plugin_name not in MIGRATION_ON:
        raise TranslationError(f"could not find in-tree plugin translation logic for "
                               f"{_dict(pv.get('metadata')).get('name')!r}")
    out: Obj = copy.deepcopy(dict(pv))
    pv_spec = out.setdefault("spec", {})
    src = _dict(pv_spec.get(plugin.source))
    if plugin is AWS_EBS:
        handle = _ebs_volume_id(_str(src.get("volumeID")))
    elif plugin is GCE_PD:
        lbls = _dict(_dict(out.get("metadata")).get("labels"))
        zones_label = _str(lbls.get(LABEL_ZONE_BETA)) or _str(lbls.get(LABEL_ZONE_GA))
        zones = zones_label.split("__")
        pd = _str(src.get("pdName"))
        if len(zones) == 1 and zones[0]:
            handle = f"projects/UNSPECIFIED/zones/{zones[0]}/disks/{pd}"
        elif len(zones) > 1:
            handle = f"projects/UNSPECIFIED/regions/{_gce_region_from_zones(zones)}/disks/{pd}"
        else:
            handle = f"projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{pd}"
    elif plugin is AZURE_DISK:
        handle = _azure_disk_handle(src)
    else:  # Cinder, Portworx
        handle = _str(src.get("volumeID"))
    if plugin.topology_key:
        _translate_topology(out, plugin.topology_key)
    pv_spec = out["spec"]
    pv_spec.pop(plugin.source, None)
    pv_spec["csi"] = {"driver": plugin.driver, "volumeHandle": handle}
    return out


def translate_inline_volume(volume: Mapping[str, Any]) -> tuple[str, str]:
    """``TranslateInTreeInlineVolumeToCSI`` reduced to (CSI driver, volume handle) for the plugins
    whose migration is on.

    Raises:
        TranslationError: not an inline volume of a migrated plugin, or one the library rejects.
    """
    plugin = in_tree_plugin_for_volume(volume)
    if plugin is None or plugin.plugin_name not in MIGRATION_ON:
        raise TranslationError(f"could not find in-tree plugin translation logic for {volume.get('name')!r}")
    src = _dict(volume.get(plugin.source))
    if plugin is AWS_EBS:
        handle = _ebs_volume_id(_str(src.get("volumeID")))
    elif plugin is GCE_PD:
        handle = f"projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{_str(src.get('pdName'))}"
    elif plugin is AZURE_DISK:
        handle = _azure_disk_handle(src)
    else:
        handle = _str(src.get("volumeID"))
    return plugin.driver, handle
