"""Seeded generator of small random clusters for differential parity against upstream.

A scenario is a list of Kubernetes objects (Nodes, bound Pods, 1-5 pending Pods, Namespaces,
Services, ReplicaSets) built from one ``random.Random(seed)``, so ``(seed, index)`` names a
scenario exactly. It deliberately covers every default plugin's awkward inputs: missing vs zero
requests, init and sidecar containers, pod overhead, extended resources, host ports, PreferNoSchedule
/ NoSchedule / NoExecute taints with partial tolerations, nodeSelector, required and preferred node
affinity with matchFields, preferred and required pod (anti-)affinity across namespaces
(namespaceSelector), topology spread constraints with minDomains and node inclusion policies,
matchLabelKeys, images present on some nodes, Services selecting pods (system default spreading),
priorities, and pods that fit nowhere.
"""

from __future__ import annotations

import random
from typing import Any

Obj = dict[str, Any]

ZONES = ["zone-a", "zone-b", "zone-c"]
APPS = ["web", "db", "cache", "batch"]
TIERS = ["frontend", "backend"]
NAMESPACES = ["default", "team-a", "team-b"]
IMAGES = [("registry.example/web:1.0", 300 * 2**20), ("registry.example/db:2.1", 900 * 2**20),
          ("registry.example/cache:7", 50 * 2**20), ("registry.example/ml:latest", 3000 * 2**20),
          ("busybox", 4 * 2**20)]
EXTENDED = "example.com/foo"


class Gen:
    """One scenario builder over a private RNG."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng
        self.uid = 0

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

    def requests(self) -> Obj | None:
        if self.chance(0.2):
            return None  # missing requests: non-zero defaults (100m / 200Mi) apply in scoring
        req: Obj = {}
        if self.chance(0.85):
            req["cpu"] = self.cpu()
        if self.chance(0.8):
            req["memory"] = self.mem()
        if self.chance(0.1):
            req["ephemeral-storage"] = self.r.choice(["1Gi", "5Gi"])
        if self.chance(0.08):
            req[EXTENDED] = str(self.r.randint(1, 3))
        return req

    def container(self, name: str) -> Obj:
        c: Obj = {"name": name, "image": self.r.choice(IMAGES)[0]}
        req = self.requests()
        if req is not None:
            c["resources"] = {"requests": req}
            if EXTENDED in req:
                c["resources"]["limits"] = {EXTENDED: req[EXTENDED]}
        return c

    # -- nodes ------------------------------------------------------------------------------
    def node(self, i: int) -> Obj:
        name = f"node-{i:02d}"
        labels = {"kubernetes.io/hostname": name}
        if self.chance(0.9):
            labels["topology.kubernetes.io/zone"] = self.r.choice(ZONES)
        if self.chance(0.4):
            labels["disk"] = self.r.choice(["ssd", "hdd"])
        if self.chance(0.3):
            labels["pool"] = self.r.choice(["general", "memory", "compute"])
        if self.chance(0.2):
            labels["cores"] = str(self.r.choice([8, 16, 32, 64]))
        cpu = self.r.choice(["2", "4", "8", "16", "32"])
        mem = self.r.choice(["4Gi", "8Gi", "16Gi", "32Gi", "64Gi"])
        alloc: Obj = {"cpu": cpu, "memory": mem, "pods": str(self.r.choice([3, 10, 32, 110])),
                      "ephemeral-storage": "100Gi"}
        if self.chance(0.25):
            alloc[EXTENDED] = str(self.r.randint(1, 8))
        taints = []
        if self.chance(0.25):
            taints.append({"key": "dedicated", "value": self.r.choice(["a", "b"]),
                           "effect": self.r.choice(["NoSchedule", "PreferNoSchedule", "NoExecute"])})
        if self.chance(0.2):
            taints.append({"key": "spot", "effect": "PreferNoSchedule"})
        images = [{"names": [img], "sizeBytes": size} for img, size in IMAGES if self.chance(0.3)]
        spec: Obj = {}
        if taints:
            spec["taints"] = taints
        if self.chance(0.04):
            spec["unschedulable"] = True
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "spec": spec, "status": {"allocatable": alloc, "capacity": dict(alloc), "images": images}}

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

    def pod_spec(self, pending: bool, node_names: list[str]) -> Obj:
        spec: Obj = {"containers": [self.container(f"c{j}") for j in range(self.r.randint(1, 3))]}
        if self.chance(0.15):
            spec["initContainers"] = [self.container("init0")]
            if self.chance(0.5):
                side = self.container("sidecar")
                side["restartPolicy"] = "Always"
                spec["initContainers"].append(side)
        if self.chance(0.05):
            spec["overhead"] = {"cpu": "100m", "memory": "64Mi"}
        if self.chance(0.06):
            spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": self.r.choice([8080, 9090]),
                                               "protocol": "TCP"}]
        if self.chance(0.3):
            spec["priority"] = self.r.choice([0, 100, 1000])
        if not pending:
            return spec
        if self.chance(0.4):
            tols = []
            if self.chance(0.6):
                tols.append({"key": "dedicated", "operator": "Equal", "value": self.r.choice(["a", "b"]),
                             "effect": self.r.choice(["NoSchedule", "PreferNoSchedule", ""])})
            if self.chance(0.4):
                tols.append({"key": "spot", "operator": "Exists"})
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
                        t["matchExpressions"] = [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                                  "values": self.r.sample(ZONES, 2)}]
                    elif kind < 0.7:
                        t["matchExpressions"] = [{"key": "cores", "operator": self.r.choice(["Gt", "Lt"]),
                                                  "values": [str(self.r.choice([10, 20, 40]))]}]
                    elif kind < 0.85:
                        t["matchExpressions"] = [{"key": "pool", "operator": self.r.choice(["Exists", "DoesNotExist"])}]
                    else:
                        t["matchFields"] = [{"key": "metadata.name", "operator": "In",
                                             "values": self.r.sample(node_names, min(3, len(node_names)))}]
                    terms.append(t)
                na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
            if self.chance(0.7):
                na["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": self.r.randint(1, 100), "preference": {"matchExpressions": [
                        {"key": self.r.choice(["disk", "pool", "topology.kubernetes.io/zone"]), "operator": "In",
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
                          "topologyKey": self.r.choice(["topology.kubernetes.io/zone", "kubernetes.io/hostname"]),
                          "whenUnsatisfiable": self.r.choice(["DoNotSchedule", "ScheduleAnyway"]),
                          "labelSelector": self.selector()}
                if c["whenUnsatisfiable"] == "DoNotSchedule" and self.chance(0.3):
                    c["minDomains"] = self.r.randint(1, 4)
                if self.chance(0.2):
                    c["nodeAffinityPolicy"] = self.r.choice(["Honor", "Ignore"])
                if self.chance(0.2):
                    c["nodeTaintsPolicy"] = self.r.choice(["Honor", "Ignore"])
                if self.chance(0.15):
                    c["matchLabelKeys"] = ["version"]
                tscs.append(c)
            # Only one constraint per (topologyKey, whenUnsatisfiable) is valid.
            seen: set[tuple[str, str]] = set()
            spec["topologySpreadConstraints"] = [
                c for c in tscs if (k := (c["topologyKey"], c["whenUnsatisfiable"])) not in seen and not seen.add(k)]
        return spec

    def pod_affinity_term(self) -> Obj:
        t: Obj = {"labelSelector": self.selector(),
                  "topologyKey": self.r.choice(["topology.kubernetes.io/zone", "kubernetes.io/hostname"])}
        roll = self.r.random()
        if roll < 0.2:
            t["namespaces"] = self.r.sample(NAMESPACES, 2)
        elif roll < 0.35:
            t["namespaceSelector"] = {"matchLabels": {"team": "yes"}}
        elif roll < 0.4:
            t["namespaceSelector"] = {}
        return t

    def pod(self, name: str, ns: str, node: str | None, node_names: list[str]) -> Obj:
        meta: Obj = {"name": name, "namespace": ns, "uid": self.next_uid(), "labels": self.labels(),
                     "creationTimestamp": f"2026-01-01T00:{self.uid // 60 % 60:02d}:{self.uid % 60:02d}Z"}
        spec = self.pod_spec(node is None, node_names)
        spec["schedulerName"] = "default-scheduler"
        if node is not None:
            spec["nodeName"] = node
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                    "status": {"phase": "Running" if node else "Pending"}}
        return pod


def scenario(seed: int, index: int) -> list[Obj]:
    """Scenario ``index`` of the stream seeded by ``seed``: a list of Kubernetes objects."""
    g = Gen(random.Random(f"{seed}:{index}"))
    r = g.r
    n_nodes = r.randint(2, 30)
    nodes = [g.node(i) for i in range(n_nodes)]
    names = [n["metadata"]["name"] for n in nodes]
    objs: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, **({"team": "yes"} if ns != "default"
                                                                                    else {})}}}
        for ns in NAMESPACES]
    objs += nodes
    n_bound = r.choice([0, r.randint(0, 20), r.randint(0, 200)])
    for i in range(n_bound):
        objs.append(g.pod(f"bound-{i:03d}", r.choice(NAMESPACES), r.choice(names), names))
    if g.chance(0.4):
        app = r.choice(APPS)
        objs.append({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": f"svc-{app}", "namespace": "default"},
                     "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}})
    if g.chance(0.2):
        app = r.choice(APPS)
        objs.append({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                     "metadata": {"name": f"rs-{app}", "namespace": "default"},
                     "spec": {"selector": {"matchLabels": {"app": app}},
                              "template": {"metadata": {"labels": {"app": app}},
                                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    for i in range(r.randint(1, 5)):
        p = g.pod(f"pending-{i}", r.choice(NAMESPACES), None, names)
        if g.chance(0.05):  # something that fits nowhere
            p["spec"]["containers"][0].setdefault("resources", {})["requests"] = {"cpu": "1000"}
        objs.append(p)
    return objs
