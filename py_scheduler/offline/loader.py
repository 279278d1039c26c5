"""Snapshot files -> cluster objects -> :class:`~py_scheduler.cache.snapshot.Snapshot`.

A snapshot file is what ``kubectl get nodes,pods,... -A -o yaml`` prints (a ``v1/List``), a typed
list (``NodeList``, whose items carry no ``kind``), a multi-document YAML stream, a single JSON
object or a JSON List. Lists may nest. Every object is checked once here, so the scheduling code
that runs on it later never meets a malformed Node or bound Pod:

* a Node needs ``metadata.name`` and valid ``status.allocatable`` quantities;
* a Pod needs ``metadata.name``; a *bound* Pod (``spec.nodeName``) needs valid requests, because it
  counts against its node. A *pending* Pod with a bad quantity is kept: explain / simulate report it
  with its :class:`~py_scheduler.framework.errors.PodParseError` message, as the live scheduler would;
* other kinds the scheduler reads (Services, PVCs, ResourceSlices, ...: the table
  :data:`py_scheduler.cache.kinds.KINDS` the live informers watch) need ``metadata.name`` and go into
  :class:`~py_scheduler.cache.snapshot.ClusterObjects`;
* RuntimeClasses (:data:`ADMISSION_KINDS`: read by an admission plugin, not by the scheduler) need
  ``metadata.name`` and valid ``overhead.podFixed`` quantities and go into ClusterObjects too;
* every other kind (Deployments, Secrets, Roles, custom resources, ...) is skipped
  and counted in :attr:`ClusterData.skipped`; :func:`note_skipped` prints one line saying what was
  skipped, so a ``kubectl get all,... -o yaml`` dump of any cluster loads.

Offline stand-ins for what the API server would have filled in: a Pod without ``metadata.uid``
gets a stable one derived from its namespace/name (plugins key state by UID), then every field the
API server's defaulting and its Priority admission plugin fill in on create
(:mod:`py_scheduler.offline.defaults`: limits standing in for missing requests, pod-level requests,
``schedulerName``, ``priority`` and ``preemptionPolicy`` from the PriorityClass, ``overhead`` and the
``nodeSelector`` / tolerations of the RuntimeClass, ...), so a Pod written by hand is scheduled as
the stored Pod would be. A pending Pod the RuntimeClass admission plugin would refuse (its class is
not in the snapshot, its nodeSelector conflicts with the class's, ...) is kept and listed in
:attr:`ClusterData.rejected`: explain / simulate report it unplaced with the API server's message.
A bound Pod is never refused (it runs, so the API server admitted it; its class may have changed
since or be missing from the dump).

Every problem raises :class:`SnapshotError` whose message is one line naming the file and the
object (``Pod default/web-1``) or the document index.

Upstream: the object shapes are the API's (``k8s.io/api``); the node / pod bookkeeping is
``pkg/scheduler/backend/cache/snapshot.go`` via :meth:`Snapshot.from_objects`.
"""

from __future__ import annotations

import codecs
import datetime as dt
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import yaml

from py_scheduler.cache.kinds import KINDS, NAMESPACED_KINDS
from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.errors import PodParseError, printable, short_repr
from py_scheduler.framework.labels import parse_label_selector
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.pod_resources import parse_resource_list
from py_scheduler.framework.types import NodeInfo, PodInfo
from py_scheduler.offline import dra_versions
from py_scheduler.offline.defaults import default_pod

__all__ = [
    "ADMISSION_KINDS",
    "KNOWN_KINDS",
    "ClusterData",
    "SnapshotError",
    "bundled_example_path",
    "load_documents",
    "load_snapshot_file",
    "note_gated",
    "note_pod_groups_ignored",
    "note_skipped",
    "object_ref",
    "parse_objects",
    "pending_pods",
]


KNOWN_KINDS: frozenset[str] = frozenset(k.kind for k in KINDS)
"""Kinds the scheduler reads (the informers' table); each goes to the node list, the pod list or
ClusterObjects. Any other kind is skipped (:attr:`ClusterData.skipped`)."""

ADMISSION_KINDS: frozenset[str] = frozenset({"RuntimeClass"})
"""Kinds no plugin reads but an admission plugin the snapshot's Pods go through does
(:func:`py_scheduler.offline.defaults.default_pod`); loaded into ClusterObjects as well."""

OFFLINE_UID_NAMESPACE = uuid.UUID("5c0e6a3e-7f1c-4d1e-9d57-6f0a9c1e2b33")

_BaseLoader: Any = yaml.SafeLoader
if hasattr(yaml, "CSafeLoader"):
    class _CParsedLoader(yaml.composer.Composer, yaml.CSafeLoader):
        """libyaml's scanner and parser with PyYAML's own composer: libyaml composes nodes by C
        recursion, one C frame per level, and a 60 KB file of ``[[[[...`` or ``- - - ...`` (about 25 000
        levels) overflowed the C stack (a segmentation fault); the Python composer raises
        RecursionError instead, which :func:`load_documents` reports."""

        def __init__(self, stream: str) -> None:
            yaml.CSafeLoader.__init__(self, stream)
            yaml.composer.Composer.__init__(self)

    _BaseLoader = _CParsedLoader


def _go_quote(text: str) -> str:
    """``text`` in double quotes, as Go's ``%#v`` writes a string (backslash and quote escaped; control
    characters written visibly by :func:`printable`)."""
    return '"' + printable(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class _SnapshotLoader(_BaseLoader):  # type: ignore[misc]
    """Safe YAML loader (libyaml's parser when available) that keeps timestamps as strings, as the
    API's JSON has them (``creationTimestamp: 2025-01-15T10:00:00Z`` unquoted stays a string), and
    refuses a key given twice in one mapping, as the API server's strict decoding of a YAML body does
    (sigs.k8s.io/yaml ``YAMLToJSONStrict``: ``line 6: key "labels" already set in map``). PyYAML, like
    kubectl's own lenient decoder, keeps the last value, so a hand-edited second ``labels:`` dropped
    the first without a word. Checked as each mapping is composed, before merges (``<<: *anchor``)
    are flattened: keys a merge brings in may be overridden."""

    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:
        node: yaml.MappingNode = super().compose_mapping_node(anchor)
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.composer.ComposerError(
                        "while composing a mapping", node.start_mark,
                        f"key {_go_quote(key_node.value)} already set in map",
                        key_node.start_mark)
                seen.add(key_node.value)
        return node


_SnapshotLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class SnapshotError(Exception):
    """A snapshot that cannot be loaded; ``str()`` is one line naming the file and the object."""


@dataclass(slots=True)
class ClusterData:
    """The objects of one snapshot.

    Attributes:
        source: where they came from (file path or ``kubeconfig <path>``), for messages.
        nodes: Node objects in file order.
        pods: Pod objects in file order (bound and pending).
        objects: every other kind, keyed as :class:`ClusterObjects` does.
        order: Pod key (``namespace/name``) -> position in the file (queue tie-break).
        skipped: kind -> number of objects of kinds the scheduler does not read (not loaded).
        rejected: pending Pod key -> the message with which the API server would have refused to
            create it (RuntimeClass admission); such a Pod is never placed.
    """

    source: str
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    objects: ClusterObjects = field(default_factory=ClusterObjects)
    order: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)

    def snapshot(self) -> Snapshot:
        """A fresh :class:`Snapshot` of these objects (bound Pods counted on their nodes).

        Raises:
            SnapshotError: a Node or bound Pod with a malformed quantity (normally caught earlier by
            :func:`parse_objects`).
        """
        try:
            return Snapshot.from_objects(self.nodes, self.pods, self.objects)
        except PodParseError as exc:
            raise SnapshotError(f"{self.source}: {exc}") from exc
        except (AttributeError, TypeError, ValueError) as exc:  # not caught by parse_objects: a bug
            raise SnapshotError(f"{self.source}: malformed object: {exc}") from exc

    def find_pod(self, key: str) -> Obj | None:
        """The Pod ``namespace/name`` (a bare name means namespace ``default``), or None."""
        if "/" not in key:
            key = f"default/{key}"
        for p in self.pods:
            if pod_key(p) == key:
                return p
        return None


def bundled_example_path() -> Path:
    """Path of the example GPU cluster shipped in the package (``py_scheduler/offline/examples``)."""
    return Path(str(resources.files("py_scheduler.offline").joinpath("examples/cluster.yaml")))


def object_ref(kind: str, obj: Obj) -> str:
    """``Kind namespace/name`` (namespaced) or ``Kind name``; ``?`` for a missing name."""
    raw = obj.get("metadata")
    meta: Obj = raw if isinstance(raw, dict) else {}
    name = meta.get("name") or "?"
    if kind == "Pod" or kind in NAMESPACED_KINDS:
        return f"{kind} {meta.get('namespace') or 'default'}/{name}"
    return f"{kind} {name}"


def pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def load_documents(path: Path) -> list[Any]:
    """Read a YAML (possibly multi-document) or JSON file into its top-level documents.

    Empty documents (``---`` separators, comments only) are dropped.

    Raises:
        SnapshotError: the file is missing / unreadable or is neither valid JSON nor valid YAML.
    """
    try:  # UTF-16 with a BOM is what Windows PowerShell's `kubectl get ... > file` writes
        raw = path.read_bytes()
        text = raw.decode("utf-16" if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8")
    except FileNotFoundError as exc:
        raise SnapshotError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise SnapshotError(f"{path}: is a directory, expected a YAML or JSON file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: cannot read: {exc}") from exc
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError:
            pass  # YAML flow style also starts with { or [: let the YAML parser decide
        except RecursionError as exc:
            raise SnapshotError(f"{path}: invalid JSON: nested too deeply") from exc
        except ValueError as exc:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
            raise SnapshotError(f"{path}: invalid JSON: {str(exc).split(';')[0]}") from exc
    try:
        docs = list(yaml.load_all(text, Loader=_SnapshotLoader))
    except RecursionError as exc:
        raise SnapshotError(f"{path}: invalid YAML: nested too deeply") from exc
    except ValueError as exc:  # the same limit, in PyYAML's int constructor
        raise SnapshotError(f"{path}: invalid YAML: {str(exc).split(';')[0]}") from exc
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SnapshotError(f"{path}: invalid YAML{where}: {problem}") from exc
    return [d for d in _unalias(docs, path) if d is not None]


ALIAS_SLACK = 100_000
"""Maps and lists that YAML aliases may add beyond twice the distinct ones (see :func:`_unalias`)."""


def _unalias(docs: list[Any], path: Path | str) -> list[Any]:
    """``docs`` with every map or list that YAML anchors and aliases (``&a`` / ``*a``) made shared
    copied, so each place holds its own object as the API's JSON would (the loader fills defaults in
    place); a file whose aliases expand past ``2 x distinct + ALIAS_SLACK`` objects (the "billion
    laughs": a 1 KB file standing for billions) or that holds itself is refused, as go-yaml refuses
    excessive aliasing, before any walk, copy or message could run unbounded. Input without aliases
    (every API server dump) is returned as it is after one visit of each map and list.

    Raises:
        SnapshotError: naming the file and the expansion.
    """
    sizes: dict[int, int] = {}  # id -> maps and lists in its expansion
    active: set[int] = set()
    shared = False

    def size(node: dict[Any, Any] | list[Any]) -> int:
        nonlocal shared
        key = id(node)
        if key in sizes:
            shared = True
            return sizes[key]
        if key in active:
            raise SnapshotError(f"{path}: invalid YAML: an object contains itself through an alias (*name)")
        active.add(key)
        total = 1
        for child in (node.values() if isinstance(node, dict) else node):
            if isinstance(child, dict | list):
                total += size(child)
        active.discard(key)
        sizes[key] = total
        return total

    try:
        expanded = sum(size(d) for d in docs if isinstance(d, dict | list))
    except RecursionError as exc:
        raise SnapshotError(f"{path}: invalid YAML: nested too deeply") from exc
    if not shared:
        return docs
    if expanded > 2 * len(sizes) + ALIAS_SLACK:
        raise SnapshotError(f"{path}: invalid YAML: anchors and aliases (&name / *name) make {len(sizes)} maps and "
                            f"lists stand for {expanded}; refused (at most twice as many plus {ALIAS_SLACK})")
    try:
        return [_copy(d) for d in docs]
    except RecursionError as exc:
        raise SnapshotError(f"{path}: invalid YAML: nested too deeply") from exc


def _copy(node: Any) -> Any:
    """A copy of a loaded YAML value in which no map or list is shared."""
    if isinstance(node, dict):
        return {k: _copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_copy(v) for v in node]
    return node


def _flatten(docs: list[Any], source: str) -> Iterator[tuple[str, str, Obj]]:
    """Yield (kind, location, object) for every object, expanding Lists (nested too).

    ``location`` names the document (``document 2``, ``document 1 item 5``) for objects whose
    name is missing. Items of a typed list (``NodeList``) get the list's element kind.
    """

    def walk(obj: Any, where: str, inherited_kind: str) -> Iterator[tuple[str, str, Obj]]:
        if isinstance(obj, list):  # a bare JSON array of objects
            for i, item in enumerate(obj, 1):
                yield from walk(item, f"{where} item {i}", inherited_kind)
            return
        if not isinstance(obj, dict):
            raise SnapshotError(f"{source}: {where}: expected a Kubernetes object (a mapping), got "
                                f"{type(obj).__name__}")
        kind = obj.get("kind") or inherited_kind
        if not isinstance(kind, str) or not kind:
            raise SnapshotError(f"{source}: {where}: object has no kind")
        if kind.endswith("List") and "items" in obj:
            items = obj.get("items")
            if items is None:
                return
            if not isinstance(items, list):
                raise SnapshotError(f"{source}: {where}: {kind}.items is not a list")
            elem = kind[: -len("List")] if kind != "List" else ""
            for i, item in enumerate(items, 1):
                if elem and isinstance(item, dict) and obj.get("apiVersion") and not item.get("apiVersion"):
                    item["apiVersion"] = obj["apiVersion"]  # a typed list's items are in the list's version
                yield from walk(item, f"{where} item {i}", elem)
            return
        yield kind, where, obj

    for n, doc in enumerate(docs, 1):
        yield from walk(doc, f"document {n}", "")


def _name_of(kind: str, where: str, obj: Obj, source: str) -> str:
    meta = obj.get("metadata")
    if meta is None:
        raise SnapshotError(f"{source}: {kind} at {where}: missing metadata")
    if not isinstance(meta, dict):
        raise SnapshotError(f"{source}: {kind} at {where}: metadata is not a map")
    name = meta.get("name")
    if name is None or name == "":
        raise SnapshotError(f"{source}: {kind} at {where}: missing metadata.name")
    if not isinstance(name, str):  # e.g. an unquoted `name: 5` in YAML
        raise SnapshotError(f"{source}: {kind} at {where}: invalid value {short_repr(name)} for metadata.name: "
                            "not a string")
    ns = meta.get("namespace")
    if ns is not None and not isinstance(ns, str):
        raise SnapshotError(f"{source}: {object_ref(kind, obj)}: metadata.namespace is not a string")
    for sub in ("labels", "annotations"):
        val = meta.get(sub)
        if val is not None and not isinstance(val, dict):
            raise SnapshotError(f"{source}: {object_ref(kind, obj)}: metadata.{sub} is not a map")
    for sub in ("spec", "status"):
        val = obj.get(sub)
        if val is not None and not isinstance(val, dict):
            raise SnapshotError(f"{source}: {object_ref(kind, obj)}: {sub} is not a map")
    return name


_WEIGHTED = (("nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
             ("podAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
             ("podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"))


def _api_refusal(kind: str, obj: Obj) -> str | None:
    """What the API server could not even decode, or its validation refuses, naming the field: a label
    or annotation value that is not a string (an unquoted ``gpu: true`` in YAML; a selector never
    matches it); a Pod's ``spec.priority`` that is not an integer (a quoted ``"1000"``, which counted
    as priority 0); a preferred affinity term's weight outside 1-100 (``ValidatePreferredSchedulingTerms``,
    ``validateWeightedPodAffinityTerms`` in pkg/apis/core/validation/validation.go; a negative one
    failed the cycle with "returns an invalid score"); a pod (anti-)affinity term's ``labelSelector`` or
    ``namespaceSelector`` that does not parse (``ValidatePodAffinityTermSelector``: an operator
    ``Weird``; upstream's ``NewPodInfo`` drops a bound Pod's terms when one fails, so its anti-affinity
    silently stopped counting). None when there is none."""
    meta = obj.get("metadata") or {}
    for sub in ("labels", "annotations"):
        for k, v in (meta.get(sub) or {}).items():
            if v is not None and not isinstance(v, str):  # null decodes as "" (an empty `key:` in YAML)
                hint = " (quote it in YAML)" if isinstance(v, bool | int | float) else ""
                return f"invalid value {short_repr(v)} for metadata.{sub}[{k!r}]: not a string{hint}"
    if kind != "Pod":
        return None
    spec = obj.get("spec") or {}
    prio = spec.get("priority")
    if prio is not None and (not isinstance(prio, int) or isinstance(prio, bool)):
        return f"invalid value {short_repr(prio)} for spec.priority: expected an integer"
    aff = spec.get("affinity")
    if not isinstance(aff, dict):
        return None
    for sec_name, list_name in _WEIGHTED:
        sec = aff.get(sec_name)
        terms = sec.get(list_name) if isinstance(sec, dict) else None
        for i, term in enumerate(terms if isinstance(terms, list) else ()):
            w = term.get("weight") if isinstance(term, dict) else None
            if isinstance(w, int) and not isinstance(w, bool) and not 1 <= w <= 100:
                return (f"invalid value {w} for spec.affinity.{sec_name}.{list_name}[{i}].weight: "
                        "must be in the range 1-100")
    for where, selector in _pod_affinity_selectors(aff):
        try:
            parse_label_selector(selector)
        except ValueError as exc:
            return f"invalid spec.affinity.{where}: {printable(str(exc))}"
    return None


def _pod_affinity_selectors(aff: Obj) -> Iterator[tuple[str, Any]]:
    """(path under ``spec.affinity``, selector) of every pod (anti-)affinity term's ``labelSelector``
    and ``namespaceSelector`` that is given, required terms and preferred ``podAffinityTerm`` s."""
    for sec_name in ("podAffinity", "podAntiAffinity"):
        sec = aff.get(sec_name)
        for list_name, inner in (("requiredDuringSchedulingIgnoredDuringExecution", ""),
                                 ("preferredDuringSchedulingIgnoredDuringExecution", "podAffinityTerm")):
            terms = sec.get(list_name) if isinstance(sec, dict) else None
            for i, term in enumerate(terms if isinstance(terms, list) else ()):
                term = term.get(inner) if inner and isinstance(term, dict) else term
                for sel in ("labelSelector", "namespaceSelector"):
                    if isinstance(term, dict) and term.get(sel) is not None:
                        yield f"{sec_name}.{list_name}[{i}]{'.' + inner if inner else ''}.{sel}", term[sel]


def _list_of_maps(value: object) -> bool:
    """Whether ``value`` is a list whose items are all maps (what the API's ``[]Struct`` decode to)."""
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _check_taints(node: Obj) -> None:
    """A Node's ``spec.taints`` as the API server validates it: a list of maps, each with one of the
    three effects. The plugins read taints as given, so a hand-edited snapshot with ``taints: oops``
    or a taint map not in a list used to place Pods as if the node had no taint at all.

    Raises:
        PodParseError: naming ``spec.taints`` (or ``spec.taints[i].effect``) and the value.
    """
    taints = (node.get("spec") or {}).get("taints")
    if taints is None:
        return
    if not _list_of_maps(taints):
        raise PodParseError("spec.taints", taints, "expected a list of taints")
    for i, t in enumerate(taints):
        if t.get("effect") not in TAINT_EFFECTS:
            raise PodParseError(f"spec.taints[{i}].effect", t.get("effect"),
                                f"expected one of {', '.join(TAINT_EFFECTS)}")


def _check_node_images(node: Obj) -> None:
    """``status.images`` a list of maps, as the API's type (ImageLocality and the image summaries walk it).

    Raises:
        PodParseError: naming ``status.images`` and the value.
    """
    images = (node.get("status") or {}).get("images")
    if images is not None and not _list_of_maps(images):
        raise PodParseError("status.images", images, "expected a list of images")


def _check_node_resources(node: Obj) -> None:
    """``status.capacity`` and ``status.allocatable`` as the API server validates a Node: every
    quantity non-negative (``ValidateNodeResources`` / ``ValidateNonnegativeQuantity``,
    pkg/apis/core/validation/validation.go); a hand-edited ``cpu: -4`` otherwise shows as negative
    room in every table.

    Raises:
        PodParseError: naming ``status.<capacity|allocatable>.<resource>`` and the value.
    """
    status = node.get("status") or {}
    for part in ("capacity", "allocatable"):
        where = f"status.{part}"
        for name, value in parse_resource_list(status.get(part), where).items():
            if value < 0:
                raise PodParseError(f"{where}.{name}", status[part][name], "must be greater than or equal to 0")


_SELECTORS = ("selectors:list", "selectors[].cel:map", "selectors[].cel.expression:str")
_CLAIM_SPEC = ("devices:map", "devices.requests:list", "devices.constraints:list", "devices.config:list",
               *(f"devices.requests[].exactly.{f}" for f in (*_SELECTORS, "tolerations:list", "count:count")),
               "devices.requests[].firstAvailable:list",
               *(f"devices.requests[].firstAvailable[].{f}" for f in (*_SELECTORS, "tolerations:list", "count:count")))
DRA_SHAPES: dict[str, tuple[str, ...]] = {
    "ResourceSlice": ("spec:map", "spec.devices:list", "spec.sharedCounters:list", "spec.devices[].attributes:maps",
                      "spec.devices[].capacity:maps", "spec.devices[].consumesCounters:list",
                      "spec.devices[].taints:list"),
    "DeviceClass": ("spec:map", *(f"spec.{f}" for f in _SELECTORS), "spec.config:list"),
    "ResourceClaim": ("spec:map", *(f"spec.{f}" for f in _CLAIM_SPEC)),
    "ResourceClaimTemplate": ("spec:map", "spec.spec:map", *(f"spec.spec.{f}" for f in _CLAIM_SPEC)),
}
"""Per DRA kind, ``path:shape`` of what the DynamicResources plugin walks, of the v1 API's types
(``staging/src/k8s.io/api/resource/v1/types.go``): ``map``; ``list`` (of maps); ``maps`` (a map of
maps: attributes, capacity); ``str`` (present means a string: a ``null`` CEL expression is no
selector); ``count`` (a non-negative integer: 0 is what ``allocationMode: All`` requires, and the
API server defaults it to 1 otherwise). ``[]`` walks each item of a list."""


_SHAPE_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "map": (lambda v: isinstance(v, dict), "a map"),
    "list": (_list_of_maps, "a list of maps"),
    "maps": (lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()), "a map of maps"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a non-negative integer"),
}
_DRA_RULES: dict[str, list[tuple[list[str], str]]] = {
    kind: [(rule.partition(":")[0].split("."), rule.partition(":")[2]) for rule in rules]
    for kind, rules in DRA_SHAPES.items()}


def _check_dra(kind: str, obj: Obj) -> None:
    """A DRA object's fields in :data:`DRA_SHAPES` have their API types. A hand-edited ``attributes: 5``
    on one ResourceSlice failed every claim that looked at that device with a bare Python exception.

    Raises:
        PodParseError: naming the first field that is not, with its index path (``spec.devices[0].attributes``).
    """
    for parts, shape in _DRA_RULES.get(kind, ()):
        check, what = _SHAPE_CHECKS[shape]
        for where, parent, key in _walk(obj, parts, ""):
            value = parent.get(key)
            if (value is None and shape != "str") or key not in parent:
                continue
            if not check(value):
                raise PodParseError(where, value, f"expected {what}")


def _walk(node: Obj, parts: list[str], where: str) -> Iterator[tuple[str, Obj, str]]:
    """(field path, parent map, key) of each place ``parts`` reaches in ``node`` (``x[]`` walks a list)."""
    head, rest = parts[0], parts[1:]
    many = head.endswith("[]")
    key = head[:-2] if many else head
    here = f"{where}.{key}" if where else key
    if not rest:
        yield here, node, key
        return
    value = node.get(key)
    if many:
        for i, item in enumerate(value if isinstance(value, list) else ()):
            if isinstance(item, dict):
                yield from _walk(item, rest, f"{here}[{i}]")
    elif isinstance(value, dict):
        yield from _walk(value, rest, here)


def _check_runtime_class(rc: Obj) -> None:
    """What of a RuntimeClass the admission code reads, of the API's types: ``overhead.podFixed``
    quantities, ``scheduling.nodeSelector`` (strings) and ``scheduling.tolerations`` (maps).

    Raises:
        PodParseError: naming the field and the value.
    """
    overhead = rc.get("overhead")
    if overhead is not None and not isinstance(overhead, dict):
        raise PodParseError("overhead", overhead, "expected a map")
    parse_resource_list((overhead or {}).get("podFixed"), "overhead.podFixed")
    sched = rc.get("scheduling")
    if sched is None:
        return
    if not isinstance(sched, dict):
        raise PodParseError("scheduling", sched, "expected a map")
    sel = sched.get("nodeSelector")
    if sel is not None and not (isinstance(sel, dict) and all(isinstance(v, str) for v in sel.values())):
        raise PodParseError("scheduling.nodeSelector", sel, "expected a map of strings")
    tol = sched.get("tolerations")
    if tol is not None and not _list_of_maps(tol):
        raise PodParseError("scheduling.tolerations", tol, "expected a list of tolerations")


def parse_objects(docs: list[Any], source: str, *, admitted: bool = False) -> ClusterData:
    """Sort the documents' objects by kind and validate Nodes and bound Pods.

    Objects of kinds the scheduler does not read are counted in ``skipped`` and not checked.
    ``admitted``: the Pods were read from an API server (``explain --kubeconfig``), so its admission
    has run on them: none is refused (RuntimeClasses are not listed there).

    Raises:
        SnapshotError: object without a kind or a name, duplicate Node / Pod, malformed allocatable
        on a Node, malformed requests on a bound Pod.
    """
    data = ClusterData(source)
    node_names: set[str] = set()
    pod_keys: set[str] = set()
    for kind, where, obj in _flatten(docs, source):
        if kind not in KNOWN_KINDS and kind not in ADMISSION_KINDS:
            data.skipped[kind] = data.skipped.get(kind, 0) + 1
            continue
        name = _name_of(kind, where, obj, source)
        bad = _api_refusal(kind, obj)
        if bad is not None and (kind != "Pod" or (obj.get("spec") or {}).get("nodeName")):
            raise SnapshotError(f"{source}: {object_ref(kind, obj)}: {bad}")
        if kind in ADMISSION_KINDS:
            try:
                _check_runtime_class(obj)
            except PodParseError as exc:
                raise SnapshotError(f"{source}: {object_ref(kind, obj)}: {exc}") from exc
            data.objects.upsert(kind, obj)
        elif kind == "Node":
            if name in node_names:
                raise SnapshotError(f"{source}: {object_ref(kind, obj)}: duplicate Node")
            try:
                NodeInfo(obj)
                _check_node_resources(obj)
                _check_taints(obj)
                _check_node_images(obj)
            except PodParseError as exc:
                raise SnapshotError(f"{source}: {object_ref(kind, obj)}: {exc}") from exc
            except (AttributeError, TypeError, ValueError) as exc:
                raise SnapshotError(f"{source}: {object_ref(kind, obj)}: malformed Node: {exc}") from exc
            node_names.add(name)
            data.nodes.append(obj)
        elif kind == "Pod":
            key = pod_key(obj)
            if key in pod_keys:
                raise SnapshotError(f"{source}: {object_ref(kind, obj)}: duplicate Pod")
            pod_keys.add(key)
            data.order[key] = len(data.pods)
            data.pods.append(obj)
            if bad is not None:  # a pending Pod: the API server would not have created it; the rest run
                data.rejected[key] = bad
        else:
            try:
                obj = dra_versions.to_v1(kind, obj)  # resource.k8s.io v1beta1 / v1beta2 -> v1
                _check_dra(kind, obj)
            except (dra_versions.DRAVersionError, PodParseError) as exc:
                raise SnapshotError(f"{source}: {object_ref(kind, obj)}: {exc}") from exc
            data.objects.upsert(kind, obj)
    for pod in data.pods:
        refused = _fill_pod_defaults(pod, data.objects)
        spec = pod.get("spec") or {}
        if refused is not None and not admitted and not spec.get("nodeName") and pod_key(pod) not in data.rejected:
            if refused.endswith(" not found"):
                refused += " (the snapshot holds no such RuntimeClass: kubectl get runtimeclasses -o yaml)"
            data.rejected[pod_key(pod)] = refused
        if spec.get("nodeName") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            try:
                NodeInfo().add_pod(PodInfo(pod))  # what Snapshot.from_objects will do with it
            except PodParseError as exc:
                raise SnapshotError(f"{source}: {object_ref('Pod', pod)} (bound to {spec['nodeName']}): "
                                    f"{exc}") from exc
            except (AttributeError, TypeError, ValueError) as exc:  # a field of the wrong JSON type
                raise SnapshotError(f"{source}: {object_ref('Pod', pod)} (bound to {spec['nodeName']}): "
                                    f"malformed Pod: {exc}") from exc
    return data


def _fill_pod_defaults(pod: Obj, objects: ClusterObjects) -> str | None:
    """What the API server would have set: a UID, then its defaulting and the Priority and
    RuntimeClass admission plugins' fields (:func:`py_scheduler.offline.defaults.default_pod`);
    returns the admission refusal, if any."""
    meta = pod.setdefault("metadata", {})
    if not meta.get("uid"):
        meta["uid"] = str(uuid.uuid5(OFFLINE_UID_NAMESPACE, pod_key(pod)))
    if not isinstance(pod.get("spec"), dict):
        pod["spec"] = {}
    return default_pod(pod, objects)


def note_skipped(data: ClusterData, file: TextIO | None = None) -> None:
    """Print one line on ``file`` (stderr by default) naming what :func:`parse_objects` skipped,
    e.g. ``note: dump.yaml: skipped 3 objects of kinds the scheduler does not read: Role (1),
    Secret (2)``; nothing when nothing was skipped."""
    if not data.skipped:
        return
    total = sum(data.skipped.values())
    kinds = ", ".join(f"{k} ({n})" for k, n in sorted(data.skipped.items()))
    print(printable(f"note: {data.source}: skipped {total} object{'s' if total != 1 else ''} of kinds the scheduler "
                    f"does not read: {kinds}"), file=file if file is not None else sys.stderr)


def load_snapshot_file(path: Path) -> ClusterData:
    """Load and validate a snapshot file.

    Raises:
        SnapshotError: see :func:`load_documents` and :func:`parse_objects`.
    """
    return parse_objects(load_documents(path), str(path))


def creation_timestamp(pod: Obj) -> float:
    """``metadata.creationTimestamp`` as seconds since the epoch; ``inf`` when absent or invalid
    (such Pods queue after dated ones, in file order)."""
    raw = (pod.get("metadata") or {}).get("creationTimestamp")
    if isinstance(raw, dt.datetime):  # YAML parses unquoted timestamps itself
        ts = raw if raw.tzinfo else raw.replace(tzinfo=dt.UTC)
        return ts.timestamp()
    if not isinstance(raw, str) or not raw:
        return float("inf")
    try:
        ts = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return ts.timestamp()


def note_gated(data: ClusterData, file: TextIO | None = None) -> None:
    """Print one line on ``file`` (stderr by default) naming the unbound Pods that
    :func:`pending_pods` leaves out because they wait for ``spec.schedulingGates`` (upstream's
    SchedulingGates PreEnqueue keeps them out of the queue), e.g. ``note: dump.yaml: 2 Pods wait for
    scheduling gates and are not placed: ml/a, ml/b``; nothing when there are none. Without it a
    gated Pod silently vanishes from ``simulate``'s and ``explain``'s output."""
    gated = [pod_key(p) for p in data.pods
             if (p.get("spec") or {}).get("schedulingGates") and not (p.get("spec") or {}).get("nodeName")
             and (p.get("status") or {}).get("phase") in (None, "", "Pending")
             and not (p.get("metadata") or {}).get("deletionTimestamp")]
    if gated:
        n = len(gated)
        print(printable(f"note: {data.source}: {n} Pod{'s wait' if n != 1 else ' waits'} for scheduling gates "
                        f"and {'are' if n != 1 else 'is'} not placed: {', '.join(gated)}"),
              file=file if file is not None else sys.stderr)


def pending_pods(data: ClusterData) -> list[Obj]:
    """Pods a scheduler would try: no ``spec.nodeName``, phase Pending (or unset), not being
    deleted, no scheduling gates. File order; the caller sorts them in queue order."""
    out = []
    for p in data.pods:
        spec = p.get("spec") or {}
        status = p.get("status") or {}
        if spec.get("nodeName") or status.get("phase") not in (None, "", "Pending"):
            continue
        if (p.get("metadata") or {}).get("deletionTimestamp") or spec.get("schedulingGates"):
            continue
        out.append(p)
    return out


def note_pod_groups_ignored(data: ClusterData, generic_workload: bool, file: TextIO | None = None) -> None:
    """Print one line on ``file`` (stderr by default) when the snapshot holds PodGroups but the
    GenericWorkload gate is off: kube-scheduler then schedules their members one by one, and so do
    ``simulate`` and ``explain``, which without the note reads as if the gangs had been honoured,
    e.g. ``note: dump.yaml: 2 PodGroups are ignored (GenericWorkload is off; --feature-gates
    GenericWorkload=true schedules their members as gangs)``."""
    n = len(data.objects.list("PodGroup"))
    if n and not generic_workload:
        print(f"note: {data.source}: {n} PodGroup{'s are' if n != 1 else ' is'} ignored (GenericWorkload is off; "
              "--feature-gates GenericWorkload=true schedules their members as gangs)",
              file=file if file is not None else sys.stderr)
