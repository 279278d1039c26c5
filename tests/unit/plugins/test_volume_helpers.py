"""Tests of the storage helpers (``component-helpers/storage/volume``, ``csi-translation-lib``) the volume plugins
are built on; the object builders they use live in ``volume_objects``."""

from __future__ import annotations

from decimal import Decimal

import pytest

from py_scheduler.framework.errors import PodParseError
from py_scheduler.plugins.helpers import csi_translation as csi
from py_scheduler.plugins.helpers import storage as st
from tests.unit.plugins.volume_objects import (
    BETA_REGION,
    BETA_ZONE,
    REGION,
    ZONE,
    pod,
    pv,
    pvc,
    storage_class,
    zone_affinity,
)

# tests/unit/app/test_loop_integration.py still reaches the builders through this module.
from tests.unit.plugins.volume_objects import pvc_vol as pvc_vol

# -- storage helper tests -------------------------------------------------------------------------------

def test_claim_class_prefers_beta_annotation() -> None:
    c = pvc("c", sc="ga", ann={st.ANN_BETA_STORAGE_CLASS: "beta"})
    assert st.claim_class(c) == "beta"
    assert st.claim_class(pvc("c", sc="ga")) == "ga"
    assert st.claim_class(pvc("c")) == ""


def test_fully_bound_needs_volume_name_and_annotation() -> None:
    assert st.is_pvc_fully_bound(pvc("c", volume="p", bound=True))
    assert not st.is_pvc_fully_bound(pvc("c", volume="p"))
    assert not st.is_pvc_fully_bound(pvc("c", bound=True))


def test_delay_binding_mode() -> None:
    assert st.is_delay_binding_mode(pvc("c", sc="w"), storage_class("w"))
    assert not st.is_delay_binding_mode(pvc("c", sc="i"), storage_class("i", "Immediate"))
    assert not st.is_delay_binding_mode(pvc("c", sc="x"), None)
    with pytest.raises(st.StorageError, match='VolumeBindingMode not set for StorageClass "n"'):
        st.is_delay_binding_mode(pvc("c", sc="n"), storage_class("n", None))


def test_volume_bound_to_claim_checks_uid_only_when_set() -> None:
    c = pvc("c")
    assert st.is_volume_bound_to_claim(pv("p", claim=("default", "c")), c)
    with_uid = pv("p", claim=("default", "c"))
    with_uid["spec"]["claimRef"]["uid"] = "other"
    assert not st.is_volume_bound_to_claim(with_uid, c)
    assert not st.is_volume_bound_to_claim(pv("p", claim=("other", "c")), c)


def test_bind_volume_to_claim_sets_claim_ref_and_annotation_on_a_copy() -> None:
    v = pv("p")
    bound, dirty = st.get_bind_volume_to_claim(v, pvc("c"))
    assert dirty
    assert bound["spec"]["claimRef"] == {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "c",
                                         "apiVersion": "v1", "uid": "uid-pvc-c", "resourceVersion": "1"}
    assert bound["metadata"]["annotations"][st.ANN_BOUND_BY_CONTROLLER] == "yes"
    assert "claimRef" not in v["spec"] and "annotations" not in v["metadata"]
    again, dirty2 = st.get_bind_volume_to_claim(bound, pvc("c"))
    assert not dirty2 and again["spec"]["claimRef"] == bound["spec"]["claimRef"]


def test_find_matching_volume_smallest_fit_and_prebound_first() -> None:
    c = pvc("c", size="5Gi", sc="w")
    vols = [pv("big", "100Gi", "w"), pv("small", "6Gi", "w"), pv("tiny", "4Gi", "w"), pv("other", "5Gi", "x")]
    assert st.name(st.find_matching_volume(c, vols, {}, {})) == "small"
    assert st.name(st.find_matching_volume(c, vols, {}, {"small": vols[1]})) == "big"
    prebound = pv("pre", "50Gi", "w", claim=("default", "c"))
    assert st.name(st.find_matching_volume(c, [*vols, prebound], {}, {})) == "pre"
    # A pre-bound PV whose node affinity rejects the node means "no match", even with others around.
    far = pv("pre", "50Gi", "w", claim=("default", "c"), affinity=zone_affinity("z9"))
    assert st.find_matching_volume(c, [*vols, far], {ZONE: "z1"}, {}) is None


def test_find_matching_volume_filters() -> None:
    c = pvc("c", size="1Gi", sc="w", modes=("ReadWriteMany",))
    assert st.find_matching_volume(c, [pv("rwo", "2Gi", "w")], {}, {}) is None
    assert st.find_matching_volume(c, [pv("rwx", "2Gi", "w", modes=("ReadWriteMany",), phase="Bound")], {}, {}) is None
    ok = pv("rwx", "2Gi", "w", modes=("ReadWriteMany",))
    assert st.find_matching_volume(c, [ok], {}, {}) is ok
    block = pv("blk", "2Gi", "w", modes=("ReadWriteMany",), volumeMode="Block")
    assert st.find_matching_volume(c, [block], {}, {}) is None
    vac = pv("vac", "2Gi", "w", modes=("ReadWriteMany",), volumeAttributesClassName="gold")
    assert st.find_matching_volume(c, [vac], {}, {}) is None
    sel = pvc("c", sc="w", selector={"matchLabels": {"tier": "gold"}})
    gold = pv("g", "2Gi", "w", labels={"tier": "gold"})
    assert st.find_matching_volume(sel, [pv("s", "1Gi", "w", labels={"tier": "silver"}), gold], {}, {}) is gold
    bad = pvc("c", sc="w", selector={"matchExpressions": [{"key": "k", "operator": "Bogus"}]})
    with pytest.raises(st.StorageError, match="error creating internal label selector for claim: default/c"):
        st.find_matching_volume(bad, [gold], {}, {})


def test_malformed_quantities() -> None:
    with pytest.raises(PodParseError) as exc:
        st.claim_storage_request(pvc("data", size="lots"))
    assert exc.value.field == "PersistentVolumeClaim default/data spec.resources.requests.storage"
    assert exc.value.value == "lots"
    assert st.pv_capacity(pv("p", size="lots")) is None
    c = pvc("c", size="1Gi", sc="w")
    assert st.find_matching_volume(c, [pv("p", size="lots", sc="w")], {}, {}) is None
    assert st.volume_limit({"capacity": "nope"}) is None
    assert st.volume_limit({"capacity": "10Gi", "maximumVolumeSize": "1Gi"}) == Decimal(2**30)


def test_node_affinity_ignores_match_fields_and_rejects_malformed() -> None:
    by_name = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]
    assert st.check_node_affinity(pv("p", affinity=by_name), {ZONE: "z1"})
    assert not st.check_node_affinity(pv("p", affinity=zone_affinity("z2")), {ZONE: "z1"})
    broken = pv("p")
    broken["spec"]["nodeAffinity"] = {"required": "yes"}
    assert not st.check_node_affinity(broken, {ZONE: "z1"})
    empty = pv("p")
    empty["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": []}}
    assert not st.check_node_affinity(empty, {})


def test_topology_terms() -> None:
    terms = [{"matchLabelExpressions": [{"key": ZONE, "values": ["z1", "z2"]}, {"key": REGION, "values": ["r"]}]}]
    assert st.match_topology_selector_terms(None, {})
    assert st.match_topology_selector_terms(terms, {ZONE: "z2", REGION: "r"})
    assert not st.match_topology_selector_terms(terms, {ZONE: "z2"})
    assert not st.match_topology_selector_terms([{}], {ZONE: "z2"})


def test_label_zones_to_set() -> None:
    assert st.label_zones_to_set("a__b") == {"a", "b"}
    assert st.label_zones_to_set(" a ") == {"a"}
    assert st.label_zones_to_set("a__") is None


def test_ephemeral_claim_ownership() -> None:
    p = pod("web", [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}])
    refs = st.pod_volume_refs(p)
    assert [(r.claim, r.ephemeral) for r in refs] == [("web-scratch", True)]
    claim = pvc("web-scratch")
    assert st.volume_is_for_pod(p, claim) == (
        "PVC default/web-scratch was not created for pod default/web (pod is not owner)")
    claim["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "web", "uid": "uid-web", "controller": True}]
    assert st.volume_is_for_pod(p, claim) is None


# -- CSI translation ----------------------------------------------------------------------------------

def test_inline_translation_handles() -> None:
    assert csi.translate_inline_volume({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}}) == (
        "ebs.csi.aws.com", "vol-1")
    assert csi.translate_inline_volume({"gcePersistentDisk": {"pdName": "d"}}) == (
        "pd.csi.storage.gke.io", "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/d")
    assert csi.translate_inline_volume({"cinder": {"volumeID": "v"}}) == ("cinder.csi.openstack.org", "v")
    with pytest.raises(csi.TranslationError, match="Invalid format for AWS volume"):
        csi.translate_inline_volume({"awsElasticBlockStore": {"volumeID": "aws://z/bad"}})
    with pytest.raises(csi.TranslationError, match="not supported in csi migration"):
        csi.translate_inline_volume({"azureDisk": {"diskURI": "u", "kind": "Shared"}})
    with pytest.raises(csi.TranslationError):
        csi.translate_inline_volume({"azureFile": {"shareName": "s"}})  # migratable, migration not on


def test_pv_translation_moves_zone_topology_to_the_csi_key() -> None:
    src = pv("p", source={"gcePersistentDisk": {"pdName": "d"}}, labels={BETA_ZONE: "us-central1-a__us-central1-b"},
             affinity=[{"matchExpressions": [{"key": BETA_REGION, "operator": "In", "values": ["us-central1"]}]}])
    out = csi.translate_pv_to_csi(src)
    assert out["spec"]["csi"] == {"driver": "pd.csi.storage.gke.io",
                                  "volumeHandle": "projects/UNSPECIFIED/regions/us-central1/disks/d"}
    assert "gcePersistentDisk" not in out["spec"] and "gcePersistentDisk" in src["spec"]
    exprs = out["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert exprs == [{"key": REGION, "operator": "In", "values": ["us-central1"]},
                     {"key": "topology.gke.io/zone", "operator": "In", "values": ["us-central1-a", "us-central1-b"]}]
    ebs = csi.translate_pv_to_csi(pv("e", source={"awsElasticBlockStore": {"volumeID": "vol-2"}},
                                     affinity=zone_affinity("z1")))
    assert ebs["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["z1"]}]


def test_claim_matcher_order_rules() -> None:
    c = pvc("c", size="1Gi", sc="w")
    first, second = pv("a", "2Gi", "w"), pv("b", "2Gi", "w")
    m = st.ClaimMatcher(c, [first, second])
    assert m.match({}, {}) is first  # equal sizes: the first in list order
    assert m.match({}, {"a": first}) is second
    late_prebound = pv("z", "9Gi", "w", claim=("default", "c"))
    assert st.ClaimMatcher(c, [first, late_prebound]).match({}, {}) is late_prebound
    zonal = pv("s", "1Gi", "w", affinity=zone_affinity("z1"))
    m = st.ClaimMatcher(c, [first, zonal])
    assert m.match({ZONE: "z1"}, {}) is zonal and m.match({ZONE: "z2"}, {}) is first


def test_compiled_affinity_is_shared_by_copies_and_recompiled_for_new_objects() -> None:
    v = pv("p", affinity=zone_affinity("z1"))
    copy_ = {**v, "spec": dict(v["spec"])}  # an assumed copy shares the nodeAffinity object
    assert st.compiled_node_affinity(v) is st.compiled_node_affinity(copy_)
    changed = pv("p", affinity=zone_affinity("z2"))
    assert st.check_node_affinity(changed, {ZONE: "z2"}) and not st.check_node_affinity(v, {ZONE: "z2"})
