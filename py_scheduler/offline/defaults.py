"""What the API server fills in on a Pod it creates, applied to snapshot Pods.

A snapshot file may hold Pods as a user wrote them (``kubectl apply`` input, a Helm render), not as
the API server stored them; the live scheduler only ever sees stored Pods (its informers read them
from the API server), so ``explain`` / ``simulate`` fill in the same fields first. Applying it to a
stored Pod changes nothing.

Upstream, in the order the API server applies them on create:

* ``pkg/apis/core/v1/defaults.go`` (run by ``zz_generated.defaults.go`` ``SetObjectDefaults_Pod``):
  ``SetDefaults_Pod`` -- a container's or init container's limit stands in for a missing request of
  the same resource (every resource: cpu, memory, ``nvidia.com/gpu``, ``nvidia.com/mig-*``...),
  ``enableServiceLinks: true``, a negative ``terminationGracePeriodSeconds`` becomes 1,
  ``hostNetwork`` ports get ``hostPort = containerPort``; ``SetDefaults_PodSpec`` --
  ``schedulerName: default-scheduler``, ``restartPolicy: Always``, ``dnsPolicy: ClusterFirst``,
  ``terminationGracePeriodSeconds: 30``, ``securityContext: {}``, ``serviceAccount`` kept equal to
  ``serviceAccountName``; ``SetDefaults_Container`` -- ``imagePullPolicy`` (``Always`` for a
  ``:latest`` or untagged image, else ``IfNotPresent``), ``terminationMessagePath`` / ``Policy``;
  container ports' ``protocol: TCP``.
* ``pkg/api/pod/util.go`` ``DefaultPodLevelResources`` (``PodLevelResourcesFixDefaulting``, on in
  v1.37, from ``pkg/registry/core/pod/strategy.go`` ``PrepareForCreate``), when ``spec.resources``
  is set: pod-level hugepage limits from the containers' aggregated limits, then pod-level requests
  of cpu / memory from the containers' aggregated requests (``AggregateContainerRequests``) and of
  cpu / memory / hugepages from the pod-level limits. Pod-level *limits* of cpu / memory
  (``defaultPodLevelLimits``) are not filled: no scheduler plugin reads them.
* ``plugin/pkg/admission/defaulttolerationseconds/admission.go``: a Pod that does not already
  tolerate them gets ``node.kubernetes.io/not-ready`` and ``node.kubernetes.io/unreachable``
  ``NoExecute`` tolerations for 300 s (the API server's default flags), so it may land on a node the
  node lifecycle controller has just tainted, as live.
* ``plugin/pkg/admission/priority/admission.go`` (``admitPod`` on create): a Pod without
  ``spec.priority`` gets its ``priorityClassName``'s value, or the ``globalDefault`` class's (the
  lowest-valued one when several are), its name as ``priorityClassName``, and the class's
  ``preemptionPolicy`` (``PreemptLowerPriority`` when the class leaves it unset, as
  ``pkg/apis/scheduling/v1/defaults.go`` defaults it); without any class priority 0 and
  ``PreemptLowerPriority``. A Pod naming a class the snapshot lacks (the API server would refuse
  it) keeps no priority, as before.
* ``plugin/pkg/admission/runtimeclass/admission.go`` (after the above: it comes later in
  ``AllOrderedPlugins``), for a Pod with ``runtimeClassName``: ``setOverhead`` -- ``spec.overhead``
  becomes the class's ``overhead.podFixed``; ``setScheduling`` -- the class's
  ``scheduling.nodeSelector`` is merged into the Pod's and its tolerations with
  ``pkg/util/tolerations`` ``MergeTolerations`` (a toleration another one covers is dropped). It
  refuses the Pod (:func:`default_pod` returns the message, the Pod is left as written) when the
  class does not exist, when the Pod's overhead differs from the class's, on a nodeSelector key
  whose value differs from the class's, and (``validateOverhead``) when a Pod sets an overhead its
  class does not define.

Then, of ``validateResourceRequirements`` (``pkg/apis/core/validation/validation.go``), the checks
of each container's requests against its limits: a Pod whose request exceeds its limit, or (for an
extended resource such as ``nvidia.com/gpu``, which cannot be overcommitted) differs from it or has
no limit, is refused with the API server's ``Pod "web" is invalid: ...`` message, as the RuntimeClass
refusals are.

Not filled, because the API server does not fill them either (the scheduler applies their meaning
itself): a toleration's ``operator`` (empty means ``Equal``) and ``effect``, topology spread constraints'
``nodeAffinityPolicy`` / ``nodeTaintsPolicy``, an init container's ``restartPolicy``. Not filled
either: probe and volume-source defaults and the milli rounding of quantities (no plugin reads the
first two; the scheduler's quantity parsing rounds as the API server does).

Never raises: fields of the wrong JSON type are left as they are (the loader's checks and
PodInfo's parsing report them, naming the field).
"""

from __future__ import annotations

import copy
from decimal import Decimal

from py_scheduler.cache.snapshot import ClusterObjects
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.pod_resources import pod_requests
from py_scheduler.framework.quantity import QuantityError, format_quantity, parse

__all__ = ["default_pod"]


DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS = 30
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"


def _dicts(v: object) -> list[Obj]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _pod_level(name: str) -> bool:
    """``IsSupportedPodLevelResource``: cpu, memory and ``hugepages-*``."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _image_tag(image: str) -> str:
    """The tag of an image reference (``parsers.ParseImageName``: ``latest`` when none; a digest
    reference has no tag)."""
    if "@" in image:
        return ""
    last = image.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else "latest"


def _default_container(c: Obj, host_network: bool, ephemeral: bool) -> None:
    res = c.get("resources")
    if not ephemeral and isinstance(res, dict) and isinstance(res.get("limits"), dict):
        req = res.get("requests")
        if req is None:
            req = res["requests"] = {}
        if isinstance(req, dict):
            for k, v in res["limits"].items():
                req.setdefault(k, copy.deepcopy(v))
    if not c.get("imagePullPolicy") and isinstance(c.get("image", ""), str):
        c["imagePullPolicy"] = "Always" if _image_tag(str(c.get("image") or "")) == "latest" else "IfNotPresent"
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for p in _dicts(c.get("ports")):
        if not p.get("protocol"):
            p["protocol"] = "TCP"
        if host_network and not p.get("hostPort") and p.get("containerPort") is not None:
            p["hostPort"] = p["containerPort"]


def _aggregate(spec: Obj, kind: str) -> dict[str, Decimal]:
    """``AggregateContainerRequests`` / ``AggregateContainerLimits`` of the containers alone."""
    conts = []
    for key in ("containers", "initContainers"):
        items = []
        for c in _dicts(spec.get(key)):
            res = c.get("resources")
            rl = res.get(kind) if isinstance(res, dict) else None
            items.append({**c, "resources": {"requests": rl if isinstance(rl, dict) else {}}})
        conts.append(items)
    try:
        return pod_requests({"spec": {"containers": conts[0], "initContainers": conts[1]}})
    except (PodParseError, AttributeError, TypeError, ValueError):
        return {}


def _default_pod_level(spec: Obj) -> None:
    res = spec.get("resources")
    if not isinstance(res, dict) or not (res.get("requests") or res.get("limits")):
        return
    reqs, lims = res.get("requests") or {}, res.get("limits") or {}
    if not isinstance(reqs, dict) or not isinstance(lims, dict):
        return
    for k, v in _aggregate(spec, "limits").items():
        if k.startswith("hugepages-") and k not in reqs and k not in lims:
            lims[k] = format_quantity(v)
    for k, v in _aggregate(spec, "requests").items():
        if k in ("cpu", "memory") and k not in reqs:
            reqs[k] = format_quantity(v)
    for k, v in lims.items():
        if _pod_level(k) and k not in reqs:
            reqs[k] = copy.deepcopy(v)
    if lims:
        res["limits"] = lims
    if reqs:
        res["requests"] = reqs


NO_EXECUTE_TOLERATION_SECONDS = 300
"""kube-apiserver's ``--default-not-ready-toleration-seconds`` / ``--default-unreachable-toleration-seconds``."""


def _default_tolerations(spec: Obj) -> None:
    tolerations = spec.get("tolerations")
    if tolerations is not None and not isinstance(tolerations, list):
        return
    have = _dicts(tolerations)
    added = []
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") in (key, "", None) and t.get("effect") in ("NoExecute", "", None) for t in have):
            added.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                          "tolerationSeconds": NO_EXECUTE_TOLERATION_SECONDS})
    if added:
        spec["tolerations"] = [*(tolerations or []), *added]


def _priority(spec: Obj, objects: ClusterObjects) -> None:
    if spec.get("priority") is not None:
        return
    name = spec.get("priorityClassName")
    pc: Obj | None
    if isinstance(name, str) and name:
        pc = objects.get("PriorityClass", name)
        if pc is None:
            return
    else:
        defaults = [p for p in objects.list("PriorityClass")
                    if p.get("globalDefault") is True and isinstance(p.get("value"), int)]
        pc = min(defaults, key=lambda p: int(p["value"])) if defaults else None
    value = pc.get("value", 0) if pc is not None else 0
    if not isinstance(value, int) or isinstance(value, bool):
        return
    spec["priority"] = value
    if pc is not None:
        spec["priorityClassName"] = (pc.get("metadata") or {}).get("name") or name
    if not spec.get("preemptionPolicy"):
        spec["preemptionPolicy"] = (pc or {}).get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY


def _quantities(v: object) -> dict[str, Decimal] | None:
    try:
        return {str(k): parse(x) for k, x in v.items()} if isinstance(v, dict) else None
    except QuantityError:
        return None


def _toleration(t: Obj) -> tuple[str, str, str, str, object]:
    """A toleration as Go's struct compares (absent fields are their zero values)."""
    return (str(t.get("key") or ""), str(t.get("operator") or ""), str(t.get("value") or ""),
            str(t.get("effect") or ""), t.get("tolerationSeconds"))


def _is_superset(ss: Obj, t: Obj) -> bool:
    """``pkg/util/tolerations`` ``isSuperset``: ``ss`` tolerates everything ``t`` tolerates."""
    sk, so, sv, se, ssec = _toleration(ss)
    tk, to, tv, te, tsec = _toleration(t)
    if (sk, so, sv, se, ssec) == (tk, to, tv, te, tsec):
        return True
    if tk != sk and (sk != "" or so != "Exists"):
        return False
    if te != se and se != "":
        return False
    if se == "NoExecute" and isinstance(ssec, int) and (not isinstance(tsec, int) or tsec > ssec):
        return False
    if so in ("Equal", ""):
        return to == "Equal" and tv == sv
    return so == "Exists"


def _merge_tolerations(first: list[Obj], second: list[Obj]) -> list[Obj]:
    """``pkg/util/tolerations`` ``MergeTolerations``: both lists, less every toleration another one
    covers (of equal ones the first is kept)."""
    every = [*first, *second]
    merged: list[Obj] = []
    for i, t in enumerate(every):
        if any(_is_superset(m, t) for m in merged):
            continue
        if any(_toleration(t) != _toleration(t2) and _is_superset(t2, t) for t2 in every[i + 1:]):
            continue
        merged.append(t)
    return merged


def _runtime_class(pod: Obj, spec: Obj, objects: ClusterObjects) -> str | None:
    """The RuntimeClass admission plugin's ``Admit`` then ``Validate`` (module docstring): applies
    its changes to ``spec`` and returns None, or returns the API server's refusal and changes nothing."""
    name = spec.get("runtimeClassName")
    forbidden = f'pods "{(pod.get("metadata") or {}).get("name") or ""}" is forbidden: '
    rc: Obj | None = None
    if isinstance(name, str) and name:
        rc = objects.get("RuntimeClass", name)
        if rc is None:
            return f'{forbidden}pod rejected: RuntimeClass "{name}" not found'
    overhead = spec.get("overhead")
    new: Obj = {}
    if rc is not None and rc.get("overhead") is not None:
        fixed = (rc.get("overhead") or {}).get("podFixed")
        if overhead and _quantities(overhead) != _quantities(fixed or {}):
            return f"{forbidden}pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        new["overhead"] = copy.deepcopy(fixed) or None
    elif overhead is not None:
        return f"{forbidden}pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    scheduling = rc.get("scheduling") if rc is not None else None
    if isinstance(scheduling, dict):
        selector = spec.get("nodeSelector")
        rc_selector = scheduling.get("nodeSelector")
        if not isinstance(selector, dict):
            new["nodeSelector"] = copy.deepcopy(rc_selector) if isinstance(rc_selector, dict) else selector
        else:
            selector = dict(selector)
            for k, v in (rc_selector or {}).items():
                if k in selector and selector[k] != v:
                    return (f"{forbidden}conflict: runtimeClass.scheduling.nodeSelector[{k}] = {v}; "
                            f"pod.spec.nodeSelector[{k}] = {selector[k]}")
                selector[k] = v
            new["nodeSelector"] = selector
        new["tolerations"] = _merge_tolerations(_dicts(spec.get("tolerations")),
                                                copy.deepcopy(_dicts(scheduling.get("tolerations")))) or None
    for k, v in new.items():
        if v is None:
            spec.pop(k, None)
        else:
            spec[k] = v
    return None


def default_pod(pod: Obj, objects: ClusterObjects) -> str | None:
    """Fill in, in place, what the API server fills in on create (module docstring).

    Returns None, or the message with which the API server's RuntimeClass admission
    (``pods "web" is forbidden: pod rejected: RuntimeClass "kata" not found``; then the RuntimeClass
    fields are left as written, the defaults before it filled in) or its validation of requests against
    limits would refuse to create the Pod.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return None
    host_network = spec.get("hostNetwork") is True
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in _dicts(spec.get(key)):
            ephemeral = key == "ephemeralContainers"
            _default_container(c, host_network and not ephemeral, ephemeral)
    _default_pod_level(spec)
    grace = spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0:
        spec["terminationGracePeriodSeconds"] = 1
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS)
    spec.setdefault("enableServiceLinks", True)
    if not spec.get("serviceAccountName") and spec.get("serviceAccount"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    for k, v in (("dnsPolicy", "ClusterFirst"), ("restartPolicy", "Always"),
                 ("schedulerName", DEFAULT_SCHEDULER_NAME)):
        if not spec.get(k):
            spec[k] = v
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    _default_tolerations(spec)
    _priority(spec, objects)
    return _runtime_class(pod, spec, objects) or _invalid_requests(pod, spec)


def _overcommit_allowed(name: str) -> bool:
    """``helper.IsOvercommitAllowed``: a native resource (no domain, or ``kubernetes.io/``) that is not
    ``hugepages-*``. ``nvidia.com/gpu`` and the other extended resources are not."""
    return ("/" not in name or "kubernetes.io/" in name) and not name.startswith("hugepages-")


def _invalid_requests(pod: Obj, spec: Obj) -> str | None:
    """``validateResourceRequirements``' request-vs-limit checks (pkg/apis/core/validation/validation.go)
    over containers and init containers, after defaulting filled missing requests from limits: a
    request above its limit, an extended resource whose request differs from its limit or has none.
    Returns the API server's refusal (``Pod "web" is invalid: spec.containers[0].resources.requests:
    Invalid value: "2": must be less than or equal to cpu limit of 1``; several in ``[...]``), else None.
    Unparsable quantities are left to PodInfo's parsing, which names them."""
    errors: list[str] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(_dicts(spec.get(key))):
            res = c.get("resources")
            path = f"spec.{key}[{i}].resources"
            requests, limits = (res.get("requests"), res.get("limits")) if isinstance(res, dict) else (None, None)
            if not isinstance(requests, dict):
                continue
            limits = limits if isinstance(limits, dict) else {}
            for name, raw in requests.items():
                try:
                    req = parse(raw)
                    lim = parse(limits[name]) if name in limits else None
                except QuantityError:
                    continue
                exact = not _overcommit_allowed(str(name))
                if lim is None:
                    if exact:
                        errors.append(f"{path}.limits: Required value: Limit must be set for non overcommitable "
                                      f"resources")
                elif exact and req != lim:
                    errors.append(f'{path}.requests: Invalid value: "{raw}": must be equal to {name} limit of '
                                  f"{limits[name]}")
                elif req > lim:
                    errors.append(f'{path}.requests: Invalid value: "{raw}": must be less than or equal to '
                                  f"{name} limit of {limits[name]}")
    if not errors:
        return None
    name = (pod.get("metadata") or {}).get("name") or ""
    return f'Pod "{name}" is invalid: ' + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
