"""Seeded generator of small random clusters for differential parity against upstream.

A scenario is a list of Kubernetes objects built from one ``random.Random(f"{seed}:{index}")``, so
``(seed, index)`` names a scenario exactly: 2-30 Nodes, 0-200 bound Pods, 1-5 pending Pods and the
objects the default plugins read. Every object is one the API server would accept (names unique,
limits equal requests for extended resources, pod-level requests never below the containers',
one spread constraint per (topologyKey, whenUnsatisfiable), ...).

Each scenario switches on a random subset of feature families, so that any one scenario stays
small but the stream covers every default plugin's inputs, including the awkward ones:

* resources (NodeResourcesFit, BalancedAllocation): missing vs zero requests, init and sidecar
  containers, pod overhead, pod-level ``spec.resources``, in-place resize state of bound Pods
  (container ``allocatedResources`` / ``resources``, pod-level ``status.allocatedResources`` /
  ``status.resources``, ``PodResizePending`` Infeasible / Deferred), extended resources
  (``example.com/foo``, ``nvidia.com/gpu`` without GPU annotations), Pods that fit nowhere;
* node selection: nodeSelector, required / preferred node affinity with matchFields, taints
  (NoSchedule / PreferNoSchedule / NoExecute) with partial tolerations, unschedulable nodes,
  ``status.declaredFeatures`` vs Pods needing ``RestartAllContainersOnContainerExits``, host ports
  with ``hostIP`` and protocols, images present on some nodes;
* Pod placement: preferred and required Pod (anti-)affinity across namespaces (``namespaces``,
  ``namespaceSelector``), topology spread with minDomains, nodeAffinityPolicy / nodeTaintsPolicy,
  matchLabelKeys, system default spreading over Services, ReplicaSets, StatefulSets and
  ReplicationControllers;
* volumes (VolumeBinding, VolumeZone, VolumeRestrictions, NodeVolumeLimits): StorageClasses
  (Immediate, WaitForFirstConsumer with allowedTopologies, no-provisioner), bound / unbound / missing
  PVCs, PVs with zone labels and node affinity, ReadWriteOncePod, CSINodes with attach limits and
  migrated in-tree plugins, a CSIDriver with storageCapacity and CSIStorageCapacities,
  VolumeAttachments, inline GCE PD / AWS EBS disks, generic ephemeral volumes not created yet;
* DRA (DynamicResources): per-node ResourceSlices with attributes and capacities, DeviceClasses
  with CEL selectors (one backing an extended resource), ResourceClaims with exactly / firstAvailable
  / All requests and constraints, claims already allocated and reserved for bound Pods, shared claims;
* preemption (DefaultPreemption): priorities, ``preemptionPolicy: Never``, PDBs with selectors and
  ``disruptionsAllowed``, bound Pods with ``startTime`` from a few values (candidates and victims
  tie), terminating Pods (``deletionTimestamp``, mostly with a scheduler ``DisruptionTarget``
  condition), Pods in phase Succeeded / Failed, pending Pods with ``status.nominatedNodeName``
  (often a node with a terminating Pod, sometimes a node that does not exist).

Avoided on purpose: unclaimed PVs of equal size (upstream binds whichever its assume cache lists
first, a map order), so that a scenario has one upstream answer.

Pods never carry py-scheduler's GPU annotations (the oracle has no GPU plugins). Bound Pods that
use PVCs get priority 5000, above every pending Pod, so they are never preemption victims (the
oracle cannot drop a victim's claims from the snapshot's PVC reference counts).
"""

from __future__ import annotations

import random
from typing import Any

Obj = dict[str, Any]

ZONES = ["zone-a", "zone-b", "zone-c"]
REGION_OF = {"zone-a": "region-1", "zone-b": "region-1", "zone-c": "region-2"}
APPS = ["web", "db", "cache", "batch"]
TIERS = ["frontend", "backend"]
NAMESPACES = ["default", "team-a", "team-b"]
IMAGES = [("registry.example/web:1.0", 300 * 2**20), ("registry.example/db:2.1", 900 * 2**20),
          ("registry.example/cache:7", 50 * 2**20), ("registry.example/ml:latest", 3000 * 2**20),
          ("busybox", 4 * 2**20)]
EXTENDED = "example.com/foo"
GPU = "nvidia.com/gpu"
DRA_EXTENDED = "example.com/dra-gpu"
ZONE_KEY = "topology.kubernetes.io/zone"
REGION_KEY = "topology.kubernetes.io/region"
BETA_ZONE_KEY = "failure-domain.beta.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"
CSI = "csi.example.com"
EBS_CSI = "ebs.csi.aws.com"
DRA_DRIVER = "gpu.example.com"
MODELS = ["a100", "h100", "l4"]
DECLARED_FEATURES = sorted(["RestartAllContainersOnContainerExits", "InPlacePodLevelResourcesVerticalScaling",
                            "ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers",
                            "UserNamespacesHostNetworkSupport", "VolumeBindMountOptions"])
PVC_POD_PRIORITY = 5000


class Gen:
    """One scenario builder over a private RNG; ``on`` holds the feature families switched on."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng
        self.uid = 0
        self.on: set[str] = set()
        self.objs: list[Obj] = []
        self.nodes: list[Obj] = []
        self.claim_seq = 0
        self.pv_seq = 0
        self.disk_seq = 0

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def next_uid(self) -> str:
        self.uid += 1
        return f"uid-{self.uid:05d}"

    # -- quantities -------------------------------------------------------------------------
    def cpu(self) -> str:
        return self.r.choice(["0", "50m", "100m", "250m", "500m", "1", "1500m", "2", "3.5"])

    def mem(self) -> str:
        return self.r.choice(["0", "64Mi", "128Mi", "200Mi", "256Mi", "512Mi", "1Gi", "1.5Gi", "3Gi"])

    def requests(self, cpu_mem: bool = True) -> Obj | None:
        if self.chance(0.2):
            return None  # missing requests: non-zero defaults (100m / 200Mi) apply in scoring
        req: Obj = {}
        if cpu_mem and self.chance(0.85):
            req["cpu"] = self.cpu()
        if cpu_mem and self.chance(0.8):
            req["memory"] = self.mem()
        if self.chance(0.1):
            req["ephemeral-storage"] = self.r.choice(["1Gi", "5Gi"])
        if self.chance(0.08):
            req[EXTENDED] = str(self.r.randint(1, 3))
        if "gpu" in self.on and self.chance(0.2):
            req[GPU] = str(self.r.randint(1, 2))
        if "dra" in self.on and self.chance(0.05):
            req[DRA_EXTENDED] = "1"
        return req

    def container(self, name: str, cpu_mem: bool = True) -> Obj:
        c: Obj = {"name": name, "image": self.r.choice(IMAGES)[0]}
        req = self.requests(cpu_mem)
        if req is not None:
            c["resources"] = {"requests": req}
            ext = {k: v for k, v in req.items() if k in (EXTENDED, GPU, DRA_EXTENDED)}
            if ext:
                c["resources"]["limits"] = ext
        return c

    # -- nodes ------------------------------------------------------------------------------
    def node(self, i: int) -> Obj:
        name = f"node-{i:02d}"
        labels = {HOST_KEY: name}
        if self.chance(0.9):
            zone = self.r.choice(ZONES)
            labels[ZONE_KEY] = zone
            if "volumes" in self.on:
                labels[REGION_KEY] = REGION_OF[zone]
                if self.chance(0.3):
                    labels[BETA_ZONE_KEY] = zone
        if self.chance(0.4):
            labels["disk"] = self.r.choice(["ssd", "hdd"])
        if self.chance(0.3):
            labels["pool"] = self.r.choice(["general", "memory", "compute"])
        if self.chance(0.2):
            labels["cores"] = str(self.r.choice([8, 16, 32, 64]))
        cpu = self.r.choice(["2", "4", "8", "16", "32"])
        mem = self.r.choice(["4Gi", "8Gi", "16Gi", "32Gi", "64Gi"])
        alloc: Obj = {"cpu": cpu, "memory": mem, "pods": str(self.r.choice([3, 10, 32, 110])),
                      "ephemeral-storage": self.r.choice(["4Gi", "20Gi", "100Gi"])}
        if self.chance(0.25):
            alloc[EXTENDED] = str(self.r.randint(1, 8))
        if "gpu" in self.on and self.chance(0.4):
            alloc[GPU] = str(self.r.choice([1, 2, 4, 8]))
        taints = []
        if self.chance(0.25):
            taints.append({"key": "dedicated", "value": self.r.choice(["a", "b"]),
                           "effect": self.r.choice(["NoSchedule", "PreferNoSchedule", "NoExecute"])})
        if self.chance(0.2):
            taints.append({"key": "spot", "effect": "PreferNoSchedule"})
        images = [{"names": [img], "sizeBytes": size} for img, size in IMAGES if self.chance(0.3)]
        spec: Obj = {}
        if self.chance(0.05):
            spec["unschedulable"] = True
            if self.chance(0.7):  # as the node lifecycle controller adds it
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        if taints:
            spec["taints"] = taints
        status: Obj = {"allocatable": alloc, "capacity": dict(alloc), "images": images}
        if "features" in self.on and self.chance(0.5):
            status["declaredFeatures"] = sorted(self.r.sample(DECLARED_FEATURES, self.r.randint(1, 4)))
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "spec": spec, "status": status}

    # -- pods -------------------------------------------------------------------------------
    def labels(self) -> Obj:
        lab = {"app": self.r.choice(APPS)}
        if self.chance(0.5):
            lab["tier"] = self.r.choice(TIERS)
        if self.chance(0.3):
            lab["version"] = self.r.choice(["v1", "v2"])
        return lab

    def selector(self) -> Obj:
        if self.chance(0.7):
            return {"matchLabels": {"app": self.r.choice(APPS)}}
        return {"matchExpressions": [{"key": "app", "operator": self.r.choice(["In", "NotIn"]),
                                      "values": self.r.sample(APPS, 2)}]}

    def ports(self) -> list[Obj]:
        """One or two host ports; ``hostIP`` and protocol vary, never twice the same in a Pod."""
        out: list[Obj] = []
        seen: set[tuple[int, str]] = set()
        for _ in range(self.r.choice([1, 1, 2])):
            port: Obj = {"containerPort": self.r.choice([80, 53, 443]), "hostPort": self.r.choice([8080, 9090, 53]),
                         "protocol": self.r.choice(["TCP", "TCP", "UDP", "SCTP"])}
            if (port["hostPort"], port["protocol"]) in seen:
                continue
            seen.add((port["hostPort"], port["protocol"]))
            if self.chance(0.4):
                port["hostIP"] = self.r.choice(["127.0.0.1", "10.0.0.1", "0.0.0.0"])
            out.append(port)
        return out

    def pod_spec(self, pending: bool, node_names: list[str]) -> Obj:
        pod_level = "resources" in self.on and self.chance(0.12)
        n_containers = self.r.randint(1, 3)
        spec: Obj = {"containers": [self.container(f"c{j}", cpu_mem=not pod_level) for j in range(n_containers)]}
        if self.chance(0.15):
            spec["initContainers"] = [self.container("init0", cpu_mem=not pod_level)]
            if self.chance(0.5):
                side = self.container("sidecar", cpu_mem=not pod_level)
                side["restartPolicy"] = "Always"
                spec["initContainers"].append(side)
        if pod_level:
            # Pod-level requests (cpu / memory); the containers ask for none of them, so the
            # pod-level values are never below the containers' aggregate (API validation).
            req: Obj = {}
            if self.chance(0.8):
                req["cpu"] = self.r.choice(["100m", "500m", "1", "2"])
            if self.chance(0.8):
                req["memory"] = self.r.choice(["128Mi", "512Mi", "1Gi", "2Gi"])
            spec["resources"] = {"requests": req, "limits": dict(req)} if req else {"limits": {"cpu": "4"}}
        if self.chance(0.05):
            spec["overhead"] = {"cpu": "100m", "memory": "64Mi"}
        if self.chance(0.08):
            spec["containers"][0]["ports"] = self.ports()
        if "features" in self.on and self.chance(0.3):
            c = spec["containers"][-1]
            c["restartPolicy"] = "Never"
            c["restartPolicyRules"] = [{"action": "RestartAllContainers",
                                        "exitCodes": {"operator": "In", "values": [42]}}]
        if self.chance(0.4 if "preemption" in self.on else 0.3):
            spec["priority"] = self.r.choice([0, 100, 1000] if not pending else [0, 100, 1000, 2000])
        if not pending:
            if self.chance(0.1):
                spec["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute",
                                        "tolerationSeconds": 300}]
            return spec
        if "preemption" in self.on and self.chance(0.15):
            spec["preemptionPolicy"] = "Never"
        if self.chance(0.4):
            tols: list[Obj] = []
            if self.chance(0.6):
                tols.append({"key": "dedicated", "operator": "Equal", "value": self.r.choice(["a", "b"]),
                             "effect": self.r.choice(["NoSchedule", "PreferNoSchedule", "", "NoExecute"])})
            if self.chance(0.4):
                tols.append({"key": "spot", "operator": "Exists"})
            if self.chance(0.1):
                tols.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
            if self.chance(0.1):
                tols.append({"operator": "Exists"})
            spec["tolerations"] = tols
        if self.chance(0.15):
            spec["nodeSelector"] = {"disk": self.r.choice(["ssd", "hdd"])}
        aff: Obj = {}
        if self.chance(0.35):
            na: Obj = {}
            if self.chance(0.5):
                terms = []
                for _ in range(self.r.randint(1, 2)):
                    t: Obj = {}
                    kind = self.r.random()
                    if kind < 0.5:
                        t["matchExpressions"] = [{"key": ZONE_KEY, "operator": "In", "values": self.r.sample(ZONES, 2)}]
                    elif kind < 0.7:
                        t["matchExpressions"] = [{"key": "cores", "operator": self.r.choice(["Gt", "Lt"]),
                                                  "values": [str(self.r.choice([10, 20, 40]))]}]
                    elif kind < 0.85:
                        t["matchExpressions"] = [{"key": "pool", "operator": self.r.choice(["Exists", "DoesNotExist"])}]
                    else:
                        t["matchFields"] = [{"key": "metadata.name", "operator": self.r.choice(["In", "NotIn"]),
                                             "values": self.r.sample(node_names, min(3, len(node_names)))}]
                    terms.append(t)
                na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
            if self.chance(0.7):
                na["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": self.r.randint(1, 100), "preference": {"matchExpressions": [
                        {"key": self.r.choice(["disk", "pool", ZONE_KEY]), "operator": "In",
                         "values": [self.r.choice(["ssd", "hdd", "general", "memory", *ZONES])]}]}}
                    for _ in range(self.r.randint(1, 2))]
            aff["nodeAffinity"] = na
        for kind in ("podAffinity", "podAntiAffinity"):
            if self.chance(0.25):
                pa: Obj = {}
                if self.chance(0.4):
                    pa["requiredDuringSchedulingIgnoredDuringExecution"] = [self.pod_affinity_term()]
                if self.chance(0.7):
                    pa["preferredDuringSchedulingIgnoredDuringExecution"] = [
                        {"weight": self.r.randint(1, 100), "podAffinityTerm": self.pod_affinity_term()}
                        for _ in range(self.r.randint(1, 2))]
                if pa:
                    aff[kind] = pa
        if aff:
            spec["affinity"] = aff
        if self.chance(0.3):
            tscs = []
            for _ in range(self.r.randint(1, 2)):
                c: Obj = {"maxSkew": self.r.randint(1, 3),
                          "topologyKey": self.r.choice([ZONE_KEY, HOST_KEY]),
                          "whenUnsatisfiable": self.r.choice(["DoNotSchedule", "ScheduleAnyway"]),
                          "labelSelector": self.selector()}
                if c["whenUnsatisfiable"] == "DoNotSchedule" and self.chance(0.3):
                    c["minDomains"] = self.r.randint(1, 4)
                if self.chance(0.25):
                    c["nodeAffinityPolicy"] = self.r.choice(["Honor", "Ignore"])
                if self.chance(0.25):
                    c["nodeTaintsPolicy"] = self.r.choice(["Honor", "Ignore"])
                if self.chance(0.2):
                    c["matchLabelKeys"] = self.r.choice([["version"], ["tier"], ["version", "tier"]])
                tscs.append(c)
            # Only one constraint per (topologyKey, whenUnsatisfiable) is valid.
            seen: set[tuple[str, str]] = set()
            spec["topologySpreadConstraints"] = [
                c for c in tscs if (k := (c["topologyKey"], c["whenUnsatisfiable"])) not in seen and not seen.add(k)]
        return spec

    def pod_affinity_term(self) -> Obj:
        t: Obj = {"labelSelector": self.selector(), "topologyKey": self.r.choice([ZONE_KEY, HOST_KEY])}
        roll = self.r.random()
        if roll < 0.2:
            t["namespaces"] = self.r.sample(NAMESPACES, 2)
        elif roll < 0.35:
            t["namespaceSelector"] = {"matchLabels": {"team": "yes"}}
        elif roll < 0.4:
            t["namespaceSelector"] = {}
        if self.chance(0.1):
            t["matchLabelKeys"] = ["version"]
        return t

    def pod(self, name: str, ns: str, node: str | None, node_names: list[str]) -> Obj:
        meta: Obj = {"name": name, "namespace": ns, "uid": self.next_uid(), "labels": self.labels(),
                     "creationTimestamp": f"2026-01-01T00:{self.uid // 60 % 60:02d}:{self.uid % 60:02d}Z"}
        spec = self.pod_spec(node is None, node_names)
        spec["schedulerName"] = "default-scheduler"
        status: Obj = {"phase": "Pending"}
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
        if node is not None:
            spec["nodeName"] = node
            status["phase"] = "Running"
            # Start times from a few values: preemption prefers victims that started last, and
            # equal ones leave candidates tied (upstream then picks at random).
            status["startTime"] = f"2025-06-01T0{self.r.randint(0, 4)}:00:00Z"
            if "preemption" in self.on and self.chance(0.06):
                meta["deletionTimestamp"] = "2026-01-01T01:00:00Z"
                meta["deletionGracePeriodSeconds"] = 30
                meta["finalizers"] = ["example.com/hold"]
                if self.chance(0.7):  # evicted by an earlier preemption (PodTerminatingByPreemption)
                    status["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                             "reason": "PreemptionByScheduler",
                                             "message": "default-scheduler: preempting to accommodate a higher "
                                                        "priority pod"}]
            if self.chance(0.04):
                status["phase"] = self.r.choice(["Succeeded", "Failed"])
            if "resources" in self.on and self.chance(0.25):
                self.resize_status(pod)
        return pod

    def resize_status(self, pod: Obj) -> None:
        """In-place resize state as the kubelet reports it: per container ``allocatedResources``
        (the spec's requests with cpu / memory possibly resized, larger or smaller) and
        ``resources.requests`` (the cpu / memory the runtime applied), pod-level
        ``allocatedResources`` / ``resources`` (always with pod-level requests, sometimes without),
        sometimes a ``PodResizePending`` condition (Infeasible or Deferred)."""
        status = pod["status"]
        spec = pod["spec"]

        def resized(base: Obj) -> Obj:
            out = dict(base)
            for key, values in (("cpu", ["100m", "250m", "500m", "1", "2"]),
                                ("memory", ["64Mi", "256Mi", "512Mi", "1Gi", "2Gi"])):
                if self.chance(0.5):
                    out[key] = self.r.choice(values)
            return out

        for key, skey in (("containers", "containerStatuses"), ("initContainers", "initContainerStatuses")):
            sts = []
            for c in spec.get(key) or []:
                if key == "initContainers" and c.get("restartPolicy") != "Always":
                    continue
                cs: Obj = {"name": c["name"], "image": c["image"], "ready": True, "restartCount": 0,
                           "imageID": "", "started": True}
                reqs = (c.get("resources") or {}).get("requests") or {}
                roll = self.r.random()
                if roll < 0.8:
                    cs["allocatedResources"] = resized(reqs)
                if roll > 0.3:
                    applied = {k: v for k, v in resized(reqs).items() if k in ("cpu", "memory")}
                    if applied:
                        cs["resources"] = {"requests": applied}
                sts.append(cs)
            if sts:
                status[skey] = sts
        if self.chance(0.8 if "resources" in spec else 0.2):
            base = (spec.get("resources") or {}).get("requests") or {"cpu": "500m", "memory": "512Mi"}
            status["allocatedResources"] = resized(base)
            status["resources"] = {"requests": resized(base)}
        if self.chance(0.3):
            status.setdefault("conditions", []).append({"type": "PodResizePending", "status": "True",
                                                        "reason": self.r.choice(["Infeasible", "Deferred"])})


# -- volumes ---------------------------------------------------------------------------------------
def _node_zone(node: Obj) -> str | None:
    zone = node["metadata"]["labels"].get(ZONE_KEY)
    return zone if isinstance(zone, str) else None


class Volumes:
    """StorageClasses, PVs, PVCs, CSI objects of one scenario, and volumes for Pods."""

    def __init__(self, g: Gen) -> None:
        self.g = g
        r = g.r
        self.objs: list[Obj] = []
        topo = None
        if g.chance(0.4):
            topo = [{"matchLabelExpressions": [{"key": ZONE_KEY, "values": r.sample(ZONES, r.randint(1, 2))}]}]
        self.objs.append(_storage_class("fast", "WaitForFirstConsumer", CSI, topo))
        self.objs.append(_storage_class("standard", "Immediate", CSI))
        self.objs.append(_storage_class("local", "WaitForFirstConsumer", "kubernetes.io/no-provisioner"))
        self.objs.append(_storage_class("ebs", "WaitForFirstConsumer", "kubernetes.io/aws-ebs"))
        self.capacity_tracked = g.chance(0.5)
        self.objs.append({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": CSI},
                          "spec": {"attachRequired": True, "storageCapacity": self.capacity_tracked}})
        if self.capacity_tracked:
            for i, zone in enumerate(ZONES):
                if g.chance(0.8):
                    cap: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                                "metadata": {"name": f"cap-{i}", "namespace": "kube-system"},
                                "storageClassName": "fast", "capacity": r.choice(["0", "5Gi", "20Gi", "100Gi"]),
                                "nodeTopology": {"matchLabels": {ZONE_KEY: zone}}}
                    if g.chance(0.3):
                        cap["maximumVolumeSize"] = r.choice(["2Gi", "10Gi"])
                    self.objs.append(cap)
        for n in g.nodes:
            if g.chance(0.85):
                name = n["metadata"]["name"]
                drivers: list[Obj] = [{"name": CSI, "nodeID": name, "topologyKeys": [ZONE_KEY]}]
                if g.chance(0.7):
                    drivers[0]["allocatable"] = {"count": r.randint(1, 6)}
                meta: Obj = {"name": name}
                if g.chance(0.5):
                    drivers.append({"name": EBS_CSI, "nodeID": name, "allocatable": {"count": r.randint(1, 4)}})
                    meta["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins":
                                           "kubernetes.io/aws-ebs,kubernetes.io/gce-pd"}
                self.objs.append({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta,
                                  "spec": {"drivers": drivers}})
        # Static PVs waiting for claims: local ones pinned to a node, zonal CSI ones.
        for _ in range(r.randint(0, 6)):
            n = r.choice(g.nodes)
            if g.chance(0.5):
                self.pv("local", r.choice(["1Gi", "5Gi", "20Gi"]),
                        affinity=[{"matchExpressions": [{"key": HOST_KEY, "operator": "In",
                                                          "values": [n["metadata"]["name"]]}]}],
                        source={"local": {"path": "/mnt/disk"}})
            else:
                zone = r.choice(ZONES)
                self.pv("fast", r.choice(["1Gi", "5Gi", "20Gi"]), zone=zone)
        self.pending_claims: list[Obj] = []

    def pv(self, sc: str, size: str, *, zone: str | None = None, affinity: list[Obj] | None = None,
           source: Obj | None = None, claim: Obj | None = None, modes: list[str] | None = None) -> Obj:
        """A PV; with ``zone`` it carries zone / region labels and (mostly) a matching node
        affinity. Some zonal PVs have labels only (as PVs from before node affinity, which only
        VolumeZone checks), in GA or beta keys, some with a multi-zone ``a__b`` value."""
        g = self.g
        g.pv_seq += 1
        name = f"pv-{g.pv_seq:03d}"
        if claim is None:
            # Unique sizes: among equally small matching PVs upstream binds whichever its assume
            # cache lists first (a map: the oracle run 10 times on seed 5 #381 chose either of two
            # 20Gi PVs), and that choice shapes every later Pod using the claim.
            size = f"{int(size.removesuffix('Gi')) * 1024 + g.pv_seq}Mi"
        labels: Obj = {}
        if zone is not None:
            labels = {ZONE_KEY: zone, REGION_KEY: REGION_OF[zone]}
            if affinity is None and g.chance(0.3):
                if g.chance(0.3):
                    labels[ZONE_KEY] = "__".join(sorted({zone, g.r.choice(ZONES)}))
                if g.chance(0.3):
                    labels = {BETA_ZONE_KEY: labels[ZONE_KEY]}
            else:
                affinity = affinity or [{"matchExpressions": [{"key": ZONE_KEY, "operator": "In",
                                                               "values": [zone]}]}]
        spec: Obj = {"capacity": {"storage": size}, "accessModes": modes or ["ReadWriteOnce"],
                     "storageClassName": sc, "persistentVolumeReclaimPolicy": "Delete"}
        spec.update(source or {"csi": {"driver": CSI, "volumeHandle": f"handle-{name}"}})
        if affinity:
            spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": affinity}}
        phase = "Available"
        if claim is not None:
            spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                "namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"],
                                "uid": claim["metadata"]["uid"]}
            phase = "Bound"
        obj = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": labels},
               "spec": spec, "status": {"phase": phase}}
        self.objs.append(obj)
        return obj

    def pvc(self, ns: str, sc: str, size: str, modes: list[str], volume: str | None = None) -> Obj:
        g = self.g
        g.claim_seq += 1
        meta: Obj = {"name": f"claim-{g.claim_seq:03d}", "namespace": ns, "uid": g.next_uid()}
        spec: Obj = {"accessModes": modes, "resources": {"requests": {"storage": size}}, "storageClassName": sc,
                     "volumeMode": "Filesystem"}
        status: Obj = {"phase": "Pending"}
        if volume is not None:
            spec["volumeName"] = volume
            meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
            status = {"phase": "Bound", "accessModes": modes, "capacity": {"storage": size}}
        obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec, "status": status}
        self.objs.append(obj)
        return obj

    def bound_volumes(self, pod: Obj, node: Obj) -> None:
        """Volumes for a bound Pod, consistent with its node: a bound PVC on a PV reachable from the
        node (zone or hostname), sometimes ReadWriteOncePod, and inline in-tree disks."""
        g, r = self.g, self.g.r
        vols: list[Obj] = []
        ns = pod["metadata"]["namespace"]
        for k in range(r.choice([1, 1, 2])):
            modes = ["ReadWriteOncePod"] if g.chance(0.25) else ["ReadWriteOnce"]
            zone = _node_zone(node)
            claim = self.pvc(ns, "fast", "1Gi", modes)
            if zone is not None and g.chance(0.7):
                pv = self.pv("fast", "1Gi", zone=zone, claim=claim, modes=modes)
            else:
                pv = self.pv("fast", "1Gi", claim=claim, modes=modes, affinity=[{"matchExpressions": [
                    {"key": HOST_KEY, "operator": "In", "values": [node["metadata"]["name"]]}]}])
            claim["spec"]["volumeName"] = pv["metadata"]["name"]
            claim["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
            claim["status"] = {"phase": "Bound", "accessModes": modes, "capacity": {"storage": "1Gi"}}
            vols.append({"name": f"data{k}", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}})
            self.pending_claims.append(claim)
        if g.chance(0.5):
            vols.append(self.disk("disk0"))
        if g.chance(0.1):
            g.disk_seq += 1
            ebs_pv = self.pv("ebs", "1Gi", source={"awsElasticBlockStore": {"volumeID": f"vol-{g.disk_seq:04d}"}})
            claim = self.pvc(ns, "ebs", "1Gi", ["ReadWriteOnce"], volume=ebs_pv["metadata"]["name"])
            ebs_pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns,
                                          "name": claim["metadata"]["name"], "uid": claim["metadata"]["uid"]}
            ebs_pv["status"]["phase"] = "Bound"
            vols.append({"name": "ebs", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}})
        pod["spec"]["volumes"] = vols
        pod["spec"]["priority"] = PVC_POD_PRIORITY
        if g.chance(0.3):
            self.objs.append({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                              "metadata": {"name": f"va-{pod['metadata']['uid']}"},
                              "spec": {"attacher": CSI, "nodeName": node["metadata"]["name"],
                                       "source": {"persistentVolumeName": self.pv(
                                           "fast", "1Gi", zone=_node_zone(node))["metadata"]["name"]}},
                              "status": {"attached": True}})

    def disk(self, name: str) -> Obj:
        """An inline GCE PD or AWS EBS volume from a small pool, so Pods conflict on some nodes."""
        g, r = self.g, self.g.r
        if g.chance(0.5):
            src: Obj = {"gcePersistentDisk": {"pdName": f"pd-{r.randint(1, 3)}", "fsType": "ext4"}}
            if g.chance(0.4):
                src["gcePersistentDisk"]["readOnly"] = True
        else:
            src = {"awsElasticBlockStore": {"volumeID": f"vol-inline-{r.randint(1, 3)}", "fsType": "ext4"}}
        return {"name": name, **src}

    def pending_volumes(self, pod: Obj) -> None:
        """Volumes for a pending Pod: existing claims (bound, possibly ReadWriteOncePod and in use),
        new unbound claims (WaitForFirstConsumer, Immediate, no-provisioner), a missing claim, inline
        disks, a generic ephemeral volume whose claim is not created yet."""
        g, r = self.g, self.g.r
        ns = pod["metadata"]["namespace"]
        vols: list[Obj] = []
        for k in range(r.choice([1, 1, 2])):
            roll = r.random()
            same_ns = [c for c in self.pending_claims if c["metadata"]["namespace"] == ns]
            if roll < 0.25 and same_ns:
                claim = r.choice(same_ns)
            elif roll < 0.55:
                claim = self.pvc(ns, r.choice(["fast", "fast", "local"]), r.choice(["1Gi", "4Gi", "10Gi", "50Gi"]),
                                 ["ReadWriteOncePod"] if g.chance(0.2) else ["ReadWriteOnce"])
                self.pending_claims.append(claim)
            elif roll < 0.65:
                claim = self.pvc(ns, "standard", "1Gi", ["ReadWriteOnce"])
            elif roll < 0.7:
                vols.append({"name": f"v{k}", "persistentVolumeClaim": {"claimName": "does-not-exist"}})
                continue
            elif roll < 0.9:
                vols.append(self.disk(f"v{k}"))
                continue
            else:
                vols.append({"name": f"v{k}", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                    "resources": {"requests": {"storage": "1Gi"}}}}}})
                continue
            vols.append({"name": f"v{k}", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}})
        pod["spec"]["volumes"] = vols


def _storage_class(name: str, mode: str, provisioner: str, topologies: list[Obj] | None = None) -> Obj:
    o: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
              "provisioner": provisioner, "volumeBindingMode": mode, "reclaimPolicy": "Delete"}
    if topologies:
        o["allowedTopologies"] = topologies
    return o


# -- DRA -------------------------------------------------------------------------------------------
class Dra:
    """DeviceClasses, per-node ResourceSlices, and ResourceClaims for bound and pending Pods."""

    def __init__(self, g: Gen) -> None:
        self.g = g
        r = g.r
        self.objs: list[Obj] = [
            _device_class("gpu", [f'device.driver == "{DRA_DRIVER}"']),
            _device_class("big-gpu", [f'device.driver == "{DRA_DRIVER}"',
                                      f'device.capacity["{DRA_DRIVER}"].memory.compareTo(quantity("48Gi")) >= 0']),
            _device_class("dra-gpu", [f'device.driver == "{DRA_DRIVER}"'], ext=DRA_EXTENDED),
        ]
        self.devices: dict[str, list[str]] = {}  # node -> device names
        for n in g.nodes:
            if not g.chance(0.6):
                continue
            name = n["metadata"]["name"]
            devs = []
            for j in range(r.randint(1, 4)):
                devs.append({"name": f"gpu-{j}",
                             "attributes": {"model": {"string": r.choice(MODELS)}, "index": {"int": j},
                                            "numa": {"int": r.randint(0, 1)}},
                             "capacity": {"memory": {"value": r.choice(["24Gi", "40Gi", "80Gi"])}}})
            for d in devs:
                d["attributes"]["profile"] = {"string": "whole"}
            self.devices[name] = [d["name"] for d in devs]
            self.objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                              "metadata": {"name": f"{name}-{DRA_DRIVER}"},
                              "spec": {"driver": DRA_DRIVER, "nodeName": name,
                                       "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                                       "devices": devs}})
        self.taken: set[tuple[str, str]] = set()
        self.shareable: list[Obj] = []
        # v1.37's default DRA features (partitionable devices, consumable capacity, admin access,
        # binding conditions) draw from their own RNG, derived from the scenario's without consuming
        # it, so every other draw of a scenario (nodes, Pods, the other families) stays as it was.
        self.f = random.Random(repr(r.getstate()[1][:8]))
        self.features: list[Obj] = []
        self._feature_pools()

    def _feature_pools(self) -> None:
        """MIG-partitionable GPUs (a counter-set slice plus a device slice in one pool, partitions
        consuming the GPU's memory and multiprocessor counters) and GPUs shared by capacity
        (``allowMultipleAllocations``, a capacity request policy), some partitions / shares
        already allocated; devices with binding conditions."""
        f = self.f
        policies: list[Obj | None] = [None, {"default": "10Gi", "validRange": {"min": "5Gi", "step": "5Gi"}},
                                      {"validValues": ["10Gi", "20Gi", "40Gi", "80Gi"]},
                                      {"default": "20Gi", "validRange": {"min": "10Gi", "max": "40Gi"}}]
        for n in self.g.nodes:
            name = n["metadata"]["name"]
            kind = f.choice(["none", "none", "mig", "shared", "binding"])
            pool = f"{kind}-{name}"
            meta = {"driver": DRA_DRIVER, "nodeName": name}
            if kind == "mig":
                sets, devs = [], []
                for k in range(f.randint(1, 2)):
                    cs = f"{pool}-g{k}"
                    sets.append({"name": cs, "counters": {"memory": {"value": "80Gi"},
                                                          "multiprocessors": {"value": "98"}}})
                    parts = [("whole", 1, "80Gi", "98"), ("1g", 7, "10Gi", "14"), ("3g", 2, "40Gi", "42")]
                    for prof, count, mem, mp in parts:
                        for i in range(count):
                            devs.append({"name": f"g{k}-{prof}-{i}",
                                         "attributes": {"model": {"string": "a100"}, "profile": {"string": prof},
                                                        "index": {"int": k}, "numa": {"int": k % 2}},
                                         "capacity": {"memory": {"value": mem}},
                                         "consumesCounters": [{"counterSet": cs, "counters": {
                                             "memory": {"value": mem}, "multiprocessors": {"value": mp}}}]})
                spec = {"pool": {"name": pool, "generation": 1, "resourceSliceCount": 2}}
                self.objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                  "metadata": {"name": f"{pool}-counters"},
                                  "spec": {**meta, **spec, "sharedCounters": sets}})
                self.objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                  "metadata": {"name": f"{pool}-devices"}, "spec": {**meta, **spec, "devices": devs}})
                for d in devs:
                    if f.random() < 0.1:
                        self._allocated_feature_claim(pool, d["name"])
            elif kind == "shared":
                devs = []
                for k in range(f.randint(1, 2)):
                    cap: Obj = {"value": "80Gi"}
                    policy = f.choice(policies)
                    if policy is not None:
                        cap["requestPolicy"] = policy
                    devs.append({"name": f"s{k}", "allowMultipleAllocations": True,
                                 "attributes": {"model": {"string": "h100"}, "profile": {"string": "shared"},
                                                "index": {"int": k}, "numa": {"int": 0}},
                                 "capacity": {"memory": cap}})
                self.objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                  "metadata": {"name": pool},
                                  "spec": {**meta, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                                           "devices": devs}})
                for d in devs:
                    for _ in range(f.randint(0, 2)):
                        self._allocated_feature_claim(pool, d["name"], share=f.choice(["10Gi", "20Gi", "40Gi", None]))
            elif kind == "binding":
                devs = [{"name": f"b{k}", "attributes": {"model": {"string": "l4"}, "profile": {"string": "whole"},
                                                         "index": {"int": k}, "numa": {"int": 0}},
                         "capacity": {"memory": {"value": "24Gi"}}, "bindingConditions": ["attached"],
                         "bindingFailureConditions": ["failed"], **({"bindsToNode": True} if f.random() < 0.5 else {})}
                        for k in range(f.randint(1, 2))]
                self.objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                  "metadata": {"name": pool},
                                  "spec": {**meta, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                                           "devices": devs}})

    def _allocated_feature_claim(self, pool: str, device: str, share: str | bool | None = False) -> None:
        """A claim already allocated a partition (``share`` False) or a share of a device (its
        consumed memory, or None for none recorded); sometimes with admin access (not counted)."""
        f = self.f
        self.g.claim_seq += 1
        res: Obj = {"request": "r0", "driver": DRA_DRIVER, "pool": pool, "device": device}
        if share is not False:
            res["shareID"] = f"00000000-0000-4000-8000-{self.g.claim_seq:012d}"
            if share is not None:
                res["consumedCapacity"] = {"memory": share}
        if f.random() < 0.1:
            res["adminAccess"] = True
        self.objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                          "metadata": {"name": f"rc-f{self.g.claim_seq:03d}", "namespace": "default",
                                       "uid": self.g.next_uid()},
                          "spec": {"devices": {"requests": [{"name": "r0", "exactly": {
                              "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}},
                          "status": {"allocation": {"devices": {"results": [res]}},
                                     "reservedFor": [{"resource": "pods", "name": "elsewhere",
                                                      "uid": "uid-elsewhere"}]}})

    def request(self) -> Obj:
        g, r = self.g, self.g.r
        cls = r.choice(["gpu", "gpu", "big-gpu"])
        e: Obj = {"deviceClassName": cls}
        if g.chance(0.08):
            e["allocationMode"] = "All"
        else:
            e["allocationMode"] = "ExactCount"
            e["count"] = r.choice([1, 1, 1, 2])
        if g.chance(0.35):
            e["selectors"] = [{"cel": {"expression": f'device.attributes["{DRA_DRIVER}"].model == '
                                                     f'"{r.choice(MODELS)}"'}}]
        f = self.f
        extra = f.random()
        if extra < 0.15:  # a MIG profile
            e.setdefault("selectors", []).append({"cel": {"expression": f'device.attributes["{DRA_DRIVER}"].profile == '
                                                                        f'"{f.choice(["1g", "1g", "3g"])}"'}})
        elif extra < 0.3:  # a share of a GPU by memory
            e["capacity"] = {"requests": {"memory": f.choice(["5Gi", "7Gi", "10Gi", "30Gi", "50Gi"])}}
        elif extra < 0.35:
            e["adminAccess"] = True
        return e

    def claim(self, ns: str, allocated_on: str | None = None, pod: Obj | None = None) -> Obj:
        g, r = self.g, self.g.r
        g.claim_seq += 1
        name = f"rc-{g.claim_seq:03d}"
        reqs: list[Obj] = []
        if allocated_on is not None:
            reqs = [{"name": "r0", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]
        else:
            for i in range(r.choice([1, 1, 2])):
                if g.chance(0.3):
                    reqs.append({"name": f"r{i}", "firstAvailable": [
                        {"name": f"s{j}", **self.request()} for j in range(r.randint(2, 3))]})
                else:
                    reqs.append({"name": f"r{i}", "exactly": self.request()})
        spec: Obj = {"devices": {"requests": reqs}}
        if allocated_on is None and len(reqs) == 2 and g.chance(0.4):
            spec["devices"]["constraints"] = [{r.choice(["matchAttribute", "distinctAttribute"]):
                                               f"{DRA_DRIVER}/{r.choice(['model', 'numa'])}"}]
        obj: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": ns, "uid": g.next_uid()}, "spec": spec}
        if allocated_on is not None and pod is not None:
            free = [d for d in self.devices.get(allocated_on, []) if (allocated_on, d) not in self.taken]
            if not free:
                return obj
            dev = r.choice(free)
            self.taken.add((allocated_on, dev))
            obj["status"] = {
                "allocation": {"devices": {"results": [{"request": "r0", "driver": DRA_DRIVER, "pool": allocated_on,
                                                        "device": dev}]},
                               "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                   {"key": "metadata.name", "operator": "In", "values": [allocated_on]}]}]}},
                "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}]}
            self.shareable.append(obj)
        self.objs.append(obj)
        return obj

    def bound_claims(self, pod: Obj) -> None:
        node = pod["spec"]["nodeName"]
        if node not in self.devices:
            return
        c = self.claim(pod["metadata"]["namespace"], allocated_on=node, pod=pod)
        if "status" in c:
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": c["metadata"]["name"]}]
            pod["status"]["resourceClaimStatuses"] = []

    def pending_claims(self, pod: Obj) -> None:
        g, r = self.g, self.g.r
        ns = pod["metadata"]["namespace"]
        refs = []
        for i in range(r.choice([1, 1, 2])):
            same_ns = [c for c in self.shareable if c["metadata"]["namespace"] == ns]
            if same_ns and g.chance(0.15):
                c = r.choice(same_ns)  # shared with a bound Pod: only its node will do
            else:
                c = self.claim(ns)
                if g.chance(0.2):
                    self.shareable.append(c)  # a later pending Pod may share it too
            refs.append({"name": f"claim{i}", "resourceClaimName": c["metadata"]["name"]})
        pod["spec"]["resourceClaims"] = refs


def _device_class(name: str, selectors: list[str], ext: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if ext:
        spec["extendedResourceName"] = ext
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


# -- scenario --------------------------------------------------------------------------------------
FAMILIES = ("resources", "features", "volumes", "dra", "preemption", "gpu", "controllers")


def scenario(seed: int, index: int) -> list[Obj]:
    """Scenario ``index`` of the stream seeded by ``seed``: a list of Kubernetes objects."""
    g = Gen(random.Random(f"{seed}:{index}"))
    r = g.r
    g.on = {f for f in FAMILIES if r.random() < {"volumes": 0.3, "dra": 0.2, "gpu": 0.15}.get(f, 0.35)}
    n_nodes = r.randint(2, 30)
    g.nodes = nodes = [g.node(i) for i in range(n_nodes)]
    names = [n["metadata"]["name"] for n in nodes]
    objs: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, **({"team": "yes"} if ns != "default"
                                                                                    else {})}}}
        for ns in NAMESPACES]
    objs += nodes
    vols = Volumes(g) if "volumes" in g.on else None
    dra = Dra(g) if "dra" in g.on else None
    n_bound = r.choice([0, r.randint(0, 20), r.randint(0, 200)])
    bound: list[Obj] = []
    for i in range(n_bound):
        node = r.choice(nodes)
        p = g.pod(f"bound-{i:03d}", r.choice(NAMESPACES), node["metadata"]["name"], names)
        if vols is not None and g.chance(0.15):
            vols.bound_volumes(p, node)
        if dra is not None and g.chance(0.2):
            dra.bound_claims(p)
        bound.append(p)
    objs += bound
    if g.chance(0.4):
        app = r.choice(APPS)
        objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{app}", "namespace": "default"},
                     "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}})
    if g.chance(0.2):
        objs.append(_controller("ReplicaSet", r.choice(APPS), r.choice(NAMESPACES)))
    if "controllers" in g.on:
        if g.chance(0.6):
            objs.append(_controller("StatefulSet", r.choice(APPS), r.choice(NAMESPACES)))
        if g.chance(0.5):
            objs.append(_controller("ReplicationController", r.choice(APPS), r.choice(NAMESPACES)))
    if "preemption" in g.on:
        for i in range(r.randint(0, 2)):
            app = r.choice(APPS)
            ns = r.choice(NAMESPACES)
            allowed = r.choice([0, 0, 1, 2])
            matching = sum(1 for p in bound
                           if p["metadata"]["namespace"] == ns and p["metadata"]["labels"]["app"] == app)
            objs.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                         "metadata": {"name": f"pdb-{i}", "namespace": ns},
                         "spec": {"minAvailable": max(matching - allowed, 0),
                                  "selector": {"matchLabels": {"app": app}}},
                         "status": {"disruptionsAllowed": allowed, "currentHealthy": matching,
                                    "desiredHealthy": max(matching - allowed, 0), "expectedPods": matching,
                                    "observedGeneration": 1}})
    pending: list[Obj] = []
    for i in range(r.randint(1, 5)):
        p = g.pod(f"pending-{i}", r.choice(NAMESPACES), None, names)
        if g.chance(0.05):  # something that fits nowhere
            p["spec"]["containers"][0].setdefault("resources", {})["requests"] = {"cpu": "1000"}
        elif "preemption" in g.on and g.chance(0.3):  # big and important: preemption candidates
            p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": r.choice(["2", "6", "12"]),
                                                                    "memory": r.choice(["1Gi", "8Gi"])}}
            p["spec"]["priority"] = r.choice([1000, 2000])
        if "preemption" in g.on and g.chance(0.2):
            # Often a node with a terminating Pod (PodEligibleToPreemptOthers refuses to preempt
            # again while a lower-priority victim is still terminating there).
            terminating = sorted({b["spec"]["nodeName"] for b in bound if b["metadata"].get("deletionTimestamp")})
            p["status"]["nominatedNodeName"] = (r.choice(terminating) if terminating and g.chance(0.5)
                                                else r.choice(names) if g.chance(0.9) else "node-gone")
        if vols is not None and g.chance(0.5):
            vols.pending_volumes(p)
        if dra is not None and g.chance(0.5):
            dra.pending_claims(p)
        pending.append(p)
    objs += pending
    if vols is not None:
        objs += vols.objs
    if dra is not None:
        objs += dra.objs
    return objs


def _controller(kind: str, app: str, ns: str) -> Obj:
    api = "v1" if kind == "ReplicationController" else "apps/v1"
    selector: Obj = {"app": app} if kind == "ReplicationController" else {"matchLabels": {"app": app}}
    spec: Obj = {"replicas": 3, "selector": selector,
                 "template": {"metadata": {"labels": {"app": app}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    if kind == "StatefulSet":
        spec["serviceName"] = f"svc-{app}"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": f"{kind.lower()}-{app}", "namespace": ns},
            "spec": spec}


# -- gangs (GenericWorkload) -------------------------------------------------------------------------
def gang_scenario(seed: int, index: int) -> list[Obj]:
    """Scenario ``index`` of :func:`scenario`'s stream plus 1-3 gangs (feature gate GenericWorkload):
    a ``scheduling.k8s.io/v1beta1`` PodGroup each (gang ``minCount`` 1..size, sometimes a ``basic``
    policy), and 2-6 pending members naming it in ``spec.schedulingGroup``; members ask CPU and
    memory, often GPUs on GPU nodes, sometimes more than any node has (mixed fits). The base
    scenario comes first, unchanged, so its stream is not disturbed; the gangs draw from their own RNG.

    Compared per Pod (the oracle's ``schedule`` is one cycle per Pod): Filter, Score, Reserve and the
    FailedScheduling message of every member must agree with GangScheduling in both profiles.
    """
    objs = scenario(seed, index)
    r = random.Random(f"gang:{seed}:{index}")
    if r.random() < 0.5:  # GPU nodes of the gangs' own (the base scenario has GPUs in 15% of cases)
        for i in range(r.randint(1, 4)):
            name = f"gpu-node-{i}"
            alloc = {"cpu": r.choice(["16", "32"]), "memory": r.choice(["64Gi", "128Gi"]), "pods": "110",
                     GPU: str(r.choice([2, 4, 8]))}
            objs.append({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": name, "uid": f"gpu-node-uid-{i}", "labels": {HOST_KEY: name}},
                         "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc)}})
    nodes = [o for o in objs if o["kind"] == "Node"]
    has_gpu = any(GPU in ((n.get("status") or {}).get("allocatable") or {}) for n in nodes)
    uid = 0
    for g in range(r.randint(1, 3)):
        ns = r.choice(NAMESPACES)
        name = f"gang-{g}"
        size = r.randint(2, 6)
        policy: Obj = {"basic": {}} if r.random() < 0.15 else {"gang": {"minCount": r.randint(1, size)}}
        objs.append({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                     "metadata": {"name": name, "namespace": ns, "uid": f"pg-{g}"},
                     "spec": {"schedulingPolicy": policy}})
        req: Obj = {"cpu": r.choice(["500m", "1", "2", "4"]), "memory": r.choice(["512Mi", "2Gi", "8Gi"])}
        if r.random() < 0.1:
            req["cpu"] = "500"  # fits nowhere
        limits: Obj = {}
        if has_gpu and r.random() < 0.6:
            limits[GPU] = req[GPU] = str(r.choice([1, 1, 2, 4]))
        for m in range(size):
            uid += 1
            c: Obj = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": dict(req)}}
            if limits:
                c["resources"]["limits"] = dict(limits)
            objs.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-m{m}", "namespace": ns, "uid": f"gang-uid-{uid:04d}",
                             "labels": {"app": "gang", "gang": name},
                             "creationTimestamp": f"2026-01-02T00:{g:02d}:{m:02d}Z"},
                "spec": {"schedulerName": "default-scheduler", "schedulingGroup": {"podGroupName": name},
                         "containers": [c]},
                "status": {"phase": "Pending"}})
    return objs
