"""Shared helpers: tolerations, label / node selectors, required / preferred node affinity, normalize.

Cases follow upstream's tests: ``component-helpers/scheduling/corev1/helpers_test.go``,
``nodeaffinity/nodeaffinity_test.go``, ``api/core/v1/toleration_test.go``,
``apimachinery/pkg/labels/selector_test.go`` and ``plugins/helper/normalize_score_test.go``.
"""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.gomath import go_div
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins.helpers import check_no_args
from py_scheduler.plugins.helpers.node_selector import (
    LabelSelector,
    NodeSelector,
    PreferredSchedulingTerms,
    match_label_selector,
    match_node_selector_terms,
    parse_label_selector,
    preferred_node_affinity,
    required_node_affinity,
)
from py_scheduler.plugins.helpers.normalize import default_normalize_score
from py_scheduler.plugins.helpers.tolerations import (
    find_untolerated_taint,
    parse_tolerations,
    taint_to_string,
    tolerates_taint,
    toleration_tolerates_taint,
)


def node(name: str = "node1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta}


def pod(spec: dict[str, Any]) -> PodInfo:
    return PodInfo({"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": spec})


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


# -- tolerations ---------------------------------------------------------------------------------------

TAINT = {"key": "foo", "value": "bar", "effect": "NoSchedule"}


@pytest.mark.parametrize(("toleration", "taint", "want"), [
    ({"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}, TAINT, True),
    ({"key": "foo", "value": "bar", "effect": "NoSchedule"}, TAINT, True),  # empty operator = Equal
    ({"key": "foo", "operator": "Equal", "value": "baz", "effect": "NoSchedule"}, TAINT, False),
    ({"key": "foo", "operator": "Exists", "effect": "NoSchedule"}, TAINT, True),
    ({"key": "foo", "operator": "Exists"}, TAINT, True),  # empty effect matches all effects
    ({"key": "foo", "operator": "Exists", "effect": "NoExecute"}, TAINT, False),
    ({"operator": "Exists"}, TAINT, True),  # empty key + Exists tolerates everything
    ({"key": "other", "operator": "Exists"}, TAINT, False),
    ({"key": "foo", "operator": "Bogus", "value": "bar"}, TAINT, False),  # unknown operator
    # Gt / Lt: the TaintTolerationComparisonOperators gate is off by default in 1.37.
    ({"key": "n", "operator": "Gt", "value": "1"}, {"key": "n", "value": "5", "effect": "NoSchedule"}, False),
    ({"key": "n", "operator": "Lt", "value": "9"}, {"key": "n", "value": "5", "effect": "NoSchedule"}, False),
])
def test_toleration_tolerates_taint(toleration: dict[str, Any], taint: dict[str, Any], want: bool) -> None:
    assert toleration_tolerates_taint(toleration, taint) is want


@pytest.mark.parametrize(("op", "tol_value", "taint_value", "want"), [
    ("Gt", "1", "5", True),
    ("Gt", "5", "5", False),
    ("Lt", "9", "5", True),
    ("Lt", "5", "9", False),
    ("Gt", "-3", "0", True),
    ("Gt", "abc", "5", False),    # non-integer toleration value
    ("Gt", "1", "five", False),   # non-integer taint value
    ("Gt", "01", "5", False),     # leading zero is not a decimal integer (IsDecimalInteger)
    ("Gt", "1", "-0", False),
    ("Gt", "1", "", False),
    ("Lt", "9223372036854775808", "5", False),  # overflows int64
])
def test_comparison_operators_when_gate_on(op: str, tol_value: str, taint_value: str, want: bool) -> None:
    tol = {"key": "n", "operator": op, "value": tol_value}
    taint = {"key": "n", "value": taint_value, "effect": "NoSchedule"}
    assert toleration_tolerates_taint(tol, taint, enable_comparison_operators=True) is want


def test_find_untolerated_taint_filters_effects_and_keeps_node_order() -> None:
    taints = [
        {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
        {"key": "a", "value": "1", "effect": "NoExecute"},
        {"key": "b", "value": "2", "effect": "NoSchedule"},
    ]
    tols = [{"key": "b", "operator": "Exists"}]
    assert find_untolerated_taint(taints, tols, {"NoSchedule", "NoExecute"}) == taints[1]
    assert find_untolerated_taint(taints, tols, {"NoSchedule"}) is None
    assert find_untolerated_taint(taints, tols) == taints[0]
    assert find_untolerated_taint(taints, [{"operator": "Exists"}], {"NoSchedule", "NoExecute"}) is None
    assert tolerates_taint([], taints[0]) is False


def test_taint_to_string() -> None:
    assert taint_to_string({"key": "k", "value": "v", "effect": "NoSchedule"}) == "k=v:NoSchedule"
    assert taint_to_string({"key": "k", "effect": "NoSchedule"}) == "k:NoSchedule"
    assert taint_to_string({"key": "k"}) == "k"


def test_parse_tolerations_normalizes_and_memoizes() -> None:
    p = pod({"tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "value": "v", "tolerationSeconds": 5}]})
    got = parse_tolerations(p)
    assert got == [{"key": "a", "operator": "Exists", "value": "", "effect": ""},
                   {"key": "b", "operator": "", "value": "v", "effect": "", "tolerationSeconds": 5}]
    assert parse_tolerations(p) is got
    assert parse_tolerations(pod({})) == []


@pytest.mark.parametrize(("tolerations", "field"), [
    ("not-a-list", "spec.tolerations"),
    (["x"], "spec.tolerations[0]"),
    ([{"key": "a"}, {"key": "b", "value": 7}], "spec.tolerations[1].value"),
    ([{"key": "a", "tolerationSeconds": "10"}], "spec.tolerations[0].tolerationSeconds"),
])
def test_parse_tolerations_rejects_malformed(tolerations: object, field: str) -> None:
    p = pod({"tolerations": tolerations})
    with pytest.raises(PodParseError) as exc:
        parse_tolerations(p)
    assert exc.value.field == field
    with pytest.raises(PodParseError):  # memoized error is raised again
        parse_tolerations(p)


# -- metav1.LabelSelector --------------------------------------------------------------------------------

def test_label_selector_nil_matches_nothing_empty_matches_everything() -> None:
    assert match_label_selector(None, {"a": "b"}) is False
    assert match_label_selector({}, {"a": "b"}) is True
    assert match_label_selector({"matchLabels": {}, "matchExpressions": []}, {}) is True
    assert parse_label_selector({}).is_everything


@pytest.mark.parametrize(("selector", "labels", "want"), [
    ({"matchLabels": {"app": "web"}}, {"app": "web", "x": "y"}, True),
    ({"matchLabels": {"app": "web"}}, {"app": "db"}, False),
    ({"matchLabels": {"app": "web"}}, {}, False),
    ({"matchExpressions": [expr("env", "In", "prod", "stage")]}, {"env": "stage"}, True),
    ({"matchExpressions": [expr("env", "In", "prod")]}, {}, False),
    ({"matchExpressions": [expr("env", "NotIn", "prod")]}, {}, True),
    ({"matchExpressions": [expr("env", "NotIn", "prod")]}, {"env": "prod"}, False),
    ({"matchExpressions": [expr("env", "Exists")]}, {"env": ""}, True),
    ({"matchExpressions": [expr("env", "DoesNotExist")]}, {"env": ""}, False),
    ({"matchLabels": {"app": "web"}, "matchExpressions": [expr("env", "Exists")]}, {"app": "web"}, False),
])
def test_label_selector_matching(selector: dict[str, Any], labels: dict[str, str], want: bool) -> None:
    assert match_label_selector(selector, labels) is want


@pytest.mark.parametrize(("selector", "message"), [
    ({"matchExpressions": [expr("env", "Gt", "1")]}, '"Gt" is not a valid label selector operator'),
    ({"matchExpressions": [{"key": "env", "operator": "Bogus"}]}, '"Bogus" is not a valid label selector operator'),
    ({"matchExpressions": [expr("env", "In")]}, "values set can't be empty"),
    ({"matchExpressions": [expr("env", "Exists", "x")]}, "values set must be empty"),
    ({"matchExpressions": [expr("bad key", "Exists")]}, "bad key"),
    ({"matchLabels": {"app": "bad value!"}}, "bad value!"),
    ({"matchLabels": "app=web"}, "matchLabels"),
    # Python's ``$`` also matches before a final newline; Go's validation refuses it
    ({"matchLabels": {"app": "web\n"}}, "web\\n"),
    ({"matchExpressions": [expr("app\n", "Exists")]}, "app\\n"),
    ({"matchExpressions": [expr("example.com\n/app", "Exists")]}, "example.com"),
])
def test_label_selector_invalid_raises_value_error(selector: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=None) as exc:
        parse_label_selector(selector)
    assert message in str(exc.value)


def test_label_selector_from_set_is_unvalidated_equality() -> None:
    sel = LabelSelector.from_set({"a": "1", "b": "2"})
    assert sel.matches({"a": "1", "b": "2", "c": "3"})
    assert not sel.matches({"a": "1"})
    assert LabelSelector.from_set({}).matches({})
    assert not LabelSelector.none().matches({})


# -- node selector terms ---------------------------------------------------------------------------------

N1 = node("node1", {"foo": "bar", "num": "5", "text": "abc"})


@pytest.mark.parametrize(("terms", "want"), [
    ([{"matchExpressions": [expr("foo", "In", "bar", "baz")]}], True),
    ([{"matchExpressions": [expr("foo", "NotIn", "bar")]}], False),
    ([{"matchExpressions": [expr("missing", "NotIn", "bar")]}], True),
    ([{"matchExpressions": [expr("foo", "Exists")]}], True),
    ([{"matchExpressions": [expr("foo", "DoesNotExist")]}], False),
    ([{"matchExpressions": [expr("num", "Gt", "4")]}], True),
    ([{"matchExpressions": [expr("num", "Gt", "5")]}], False),
    ([{"matchExpressions": [expr("num", "Lt", "6")]}], True),
    ([{"matchExpressions": [expr("text", "Gt", "1")]}], False),  # label not an integer
    ([{"matchExpressions": [expr("missing", "Lt", "6")]}], False),
    # Requirements ANDed within a term, terms ORed.
    ([{"matchExpressions": [expr("foo", "In", "bar"), expr("num", "In", "6")]}], False),
    ([{"matchExpressions": [expr("num", "In", "6")]}, {"matchExpressions": [expr("foo", "In", "bar")]}], True),
    # Empty term and no terms match nothing.
    ([{}], False),
    ([{"matchExpressions": [], "matchFields": []}], False),
    ([], False),
    # matchFields on metadata.name.
    ([{"matchFields": [expr("metadata.name", "In", "node1")]}], True),
    ([{"matchFields": [expr("metadata.name", "In", "node2")]}], False),
    ([{"matchFields": [expr("metadata.name", "NotIn", "node2")]}], True),
    ([{"matchFields": [expr("metadata.name", "In", "node1")], "matchExpressions": [expr("foo", "In", "x")]}], False),
    # Invalid requirements make their term match nothing; other terms still count.
    ([{"matchExpressions": [expr("foo", "Bogus", "bar")]}], False),
    ([{"matchExpressions": [expr("foo", "In")]}], False),
    ([{"matchExpressions": [expr("num", "Gt", "four")]}], False),
    ([{"matchExpressions": [expr("num", "Gt", "1", "2")]}], False),
    ([{"matchExpressions": [expr("num", "Gt", "-1")]}], False),  # "-1" is not a valid label value
    ([{"matchExpressions": [expr("foo", "Exists", "bar")]}], False),
    ([{"matchExpressions": [expr("foo", "NotIn", "invalid value: ___@#$%^")]}], False),
    ([{"matchFields": [expr("metadata.name", "In", "node1", "node2")]}], False),  # needs exactly one value
    ([{"matchFields": [expr("metadata.name", "Exists")]}], False),
    ([{"matchExpressions": [expr("foo", "Bogus", "bar")]}, {"matchExpressions": [expr("foo", "In", "bar")]}], True),
    (["not-a-term", {"matchExpressions": [expr("foo", "In", "bar")]}], True),
    ([{"matchExpressions": [{"key": "foo", "operator": "In", "values": "bar"}]}], False),
])
def test_match_node_selector_terms(terms: list[Any], want: bool) -> None:
    assert match_node_selector_terms(terms, N1) is want


def test_match_fields_ignored_for_a_node_without_name() -> None:
    nameless = {"metadata": {"labels": {"foo": "bar"}}}
    assert match_node_selector_terms([{"matchFields": [expr("metadata.name", "In", "node9")]}], nameless)
    assert not match_node_selector_terms([{"matchFields": [expr("metadata.name", "In", "x")]}], None)


def test_node_selector_reports_parse_errors_with_field_paths() -> None:
    ns = NodeSelector.from_node_selector({"nodeSelectorTerms": [
        {"matchExpressions": [expr("foo", "Bogus", "x")]},
        {"matchFields": [expr("metadata.name", "In", "a", "b")]},
    ]})
    assert len(ns.errors) == 2
    assert ns.errors[0].startswith('nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: "Bogus"')
    assert ns.errors[1].startswith("nodeSelectorTerms[1].matchFields[0].values: Invalid value")
    assert not ns.match(N1)


# -- required / preferred node affinity --------------------------------------------------------------------

def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def test_required_node_affinity_combines_node_selector_and_terms() -> None:
    both = pod({"nodeSelector": {"foo": "bar"}, "affinity": required({"matchExpressions": [expr("num", "In", "5")]})})
    assert required_node_affinity(both).match(N1)
    sel_fails = pod({"nodeSelector": {"foo": "other"},
                     "affinity": required({"matchExpressions": [expr("num", "In", "5")]})})
    assert not required_node_affinity(sel_fails).match(N1)
    aff_fails = pod({"nodeSelector": {"foo": "bar"},
                     "affinity": required({"matchExpressions": [expr("num", "In", "6")]})})
    assert not required_node_affinity(aff_fails).match(N1)
    assert required_node_affinity(pod({})).match(N1)
    # Empty nodeSelectorTerms select nothing.
    assert not required_node_affinity(pod({"affinity": required()})).match(N1)


def test_required_node_affinity_is_memoized() -> None:
    p = pod({"nodeSelector": {"foo": "bar"}})
    assert required_node_affinity(p) is required_node_affinity(p)


@pytest.mark.parametrize(("spec", "field"), [
    ({"nodeSelector": ["foo"]}, "spec.nodeSelector"),
    ({"nodeSelector": {"foo": 1}}, "spec.nodeSelector.foo"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}},
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
])
def test_required_node_affinity_malformed_raises_pod_parse_error(spec: dict[str, Any], field: str) -> None:
    p = pod(spec)
    with pytest.raises(PodParseError) as exc:
        required_node_affinity(p)
    assert exc.value.field == field
    with pytest.raises(PodParseError):
        required_node_affinity(p)


def test_wrongly_typed_affinity_is_rejected_when_the_pod_is_parsed() -> None:
    # PodInfo itself refuses a non-object affinity, before any plugin sees it.
    with pytest.raises(PodParseError) as exc:
        pod({"affinity": "x"})
    assert exc.value.field == "spec.affinity"


def test_preferred_terms_score_sums_matching_weights_and_skips_zero_weight_and_empty_terms() -> None:
    terms = PreferredSchedulingTerms([
        {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", "bar")]}},
        {"weight": 4, "preference": {"matchExpressions": [expr("num", "Gt", "1")]}},
        {"weight": 8, "preference": {"matchExpressions": [expr("foo", "In", "nope")]}},
        {"weight": 0, "preference": {"matchExpressions": [expr("foo", "Bogus")]}},  # weight 0: not parsed
        {"weight": 16, "preference": {}},  # empty term: dropped
    ])
    assert terms.score(N1) == 6
    assert len(terms.terms) == 3


def test_preferred_terms_parse_error_raises() -> None:
    with pytest.raises(ValueError, match=r'\[0\]\.matchExpressions\[0\]\.key: Invalid value: "invalid key"'):
        PreferredSchedulingTerms([{"weight": 2,
                                   "preference": {"matchExpressions": [expr("invalid key", "In", "bar")]}}])


def test_preferred_node_affinity_none_vs_empty_and_errors() -> None:
    assert preferred_node_affinity(pod({})) is None
    empty = preferred_node_affinity(pod({"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": []}}}))
    assert empty is not None and empty.score(N1) == 0
    bad = pod({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [expr("foo", "Bogus", "x")]}}]}}})
    with pytest.raises(PodParseError) as exc:
        preferred_node_affinity(bad)
    assert exc.value.field == "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    assert "Bogus" in str(exc.value)


# -- normalize -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("reverse", "scores", "want"), [
    (False, [10, 20, 30, 40], [25, 50, 75, 100]),
    (True, [10, 20, 30, 40], [75, 50, 25, 0]),
    (False, [1000, 10, 20, 30], [100, 1, 2, 3]),
    (True, [1000, 10, 20, 30], [0, 99, 98, 97]),
    (False, [1, 1, 1, 1], [100, 100, 100, 100]),
    (False, [1, 1, 1, 0], [100, 100, 100, 0]),
    (True, [0, 1, 0, 1], [100, 0, 100, 0]),
    (False, [0, 0, 0], [0, 0, 0]),
    (True, [0, 0, 0], [100, 100, 100]),
    (False, [1, 3], [33, 100]),
    (True, [1, 3], [67, 0]),
])
def test_default_normalize_score(reverse: bool, scores: list[int], want: list[int]) -> None:
    d = {f"n{i}": s for i, s in enumerate(scores)}
    default_normalize_score(100, reverse, d)
    assert list(d.values()) == want


def test_go_div_truncates_toward_zero() -> None:
    assert go_div(7, 2) == 3
    assert go_div(-7, 2) == -3
    assert go_div(7, -2) == -3


def test_check_no_args() -> None:
    from py_scheduler.framework.errors import ConfigError

    check_no_args("X", {})
    check_no_args("X", {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "XArgs"})
    with pytest.raises(ConfigError, match="unknown field"):
        check_no_args("X", {"foo": 1})


@pytest.mark.parametrize("module,cls", [("node_ports", "NodePorts"), ("node_volume_limits", "NodeVolumeLimits"),
                                        ("node_declared_features", "NodeDeclaredFeatures"),
                                        ("volume_restrictions", "VolumeRestrictions"), ("volume_zone", "VolumeZone")])
def test_no_args_plugins_share_create(module: str, cls: str) -> None:
    """The plugins built on NoArgs name themselves when given args and build without them."""
    import importlib

    from py_scheduler.framework.errors import ConfigError

    plugin = getattr(importlib.import_module(f"py_scheduler.plugins.{module}"), cls)
    with pytest.raises(ConfigError, match=f"{plugin.name} takes no args"):
        plugin.create({"foo": 1}, None)
    assert type(plugin.create({"kind": "X"}, None)) is plugin


def test_label_selector_null_values_are_empty_strings_as_the_api_decodes_them() -> None:
    """A YAML ``app:`` with nothing after it (null) decodes as "" in Go, in matchLabels and in values."""
    assert match_label_selector({"matchLabels": {"app": None}}, {"app": ""}) is True
    assert match_label_selector({"matchLabels": {"app": None}}, {"app": "web"}) is False
    assert match_label_selector({"matchExpressions": [{"key": "app", "operator": "In", "values": [None, "web"]}]},
                                {"app": ""}) is True
