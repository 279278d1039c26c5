"""Realistic GPU Nodes, built from the label sets real clusters publish (issue 17).

Sources of the label names and value shapes:
    - NVIDIA GPU Feature Discovery: ``NVIDIA/k8s-device-plugin`` ``docs/gpu-feature-discovery/README.md``
      ("Generated Labels", "MIG 'single' strategy", "MIG 'mixed' strategy"); ``gpu.memory`` in MiB,
      ``-SHARED`` product suffix and ``gpu.replicas`` under time-slicing.
    - GKE: ``cloud.google.com/gke-accelerator`` (``nvidia-l4``, ``nvidia-a100-80gb``),
      ``gke-accelerator-count``, ``gke-gpu-partition-size`` (``1g.5gb``), ``gke-gpu-sharing-strategy``,
      ``gke-max-shared-clients-per-gpu`` (cloud.google.com/kubernetes-engine/docs/how-to/gpus).
    - EKS / Karpenter: ``karpenter.k8s.aws/instance-gpu-name`` (``a100``), ``-gpu-count``,
      ``-gpu-memory`` (MiB) (karpenter.sh well-known labels); ``k8s.amazonaws.com/accelerator``
      (eksctl / cluster-autoscaler convention, ``nvidia-tesla-t4``).
    - AKS: ``kubernetes.azure.com/accelerator: nvidia`` (learn.microsoft.com/azure/aks/use-labels).
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def node(name: str, labels: dict[str, str], alloc: dict[str, str], annotations: dict[str, str] | None = None,
         cpu: str = "96", memory: str = "1024Gi") -> Obj:
    """A Node with ``labels`` and extended-resource allocatable ``alloc`` (plus cpu / memory / pods)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **alloc}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels},
                         "annotations": dict(annotations or {})},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable)}}


def gfd(product: str, count: int, memory_mib: int, family: str = "ampere") -> dict[str, str]:
    """The GFD labels of a GPU Operator node (no MIG, no sharing)."""
    return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(count), "nvidia.com/gpu.memory": str(memory_mib),
            "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/mig.capable": "false", "nvidia.com/gpu.family": family}


def a100_mig_single(name: str) -> Obj:
    """One A100-80GB PCIe split into seven 1g.10gb instances, MIG strategy single: GFD overrides
    product, count and memory with the slices' values; the device plugin advertises 7 nvidia.com/gpu."""
    labels = gfd("NVIDIA-A100-80GB-PCIe-MIG-1g.10gb", 7, 9728)
    labels.update({"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single",
                   "nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
                   "nvidia.com/gpu.slices.gi": "1", "nvidia.com/gpu.slices.ci": "1"})
    return node(name, labels, {"nvidia.com/gpu": "7"})


def a100_mig_mixed(name: str) -> Obj:
    """One A100-SXM4-40GB, MIG strategy mixed (2x 1g.5gb, 1x 2g.10gb, 1x 3g.20gb): no nvidia.com/gpu at
    all, per-profile resources and labels; GFD still labels the card (count 1, 40 GB)."""
    labels = gfd("NVIDIA-A100-SXM4-40GB", 1, 40960)
    labels.update({"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
                   "nvidia.com/mig-1g.5gb.count": "2", "nvidia.com/mig-1g.5gb.memory": "4864",
                   "nvidia.com/mig-2g.10gb.count": "1", "nvidia.com/mig-2g.10gb.memory": "9984",
                   "nvidia.com/mig-3g.20gb.count": "1", "nvidia.com/mig-3g.20gb.memory": "20096"})
    return node(name, labels, {"nvidia.com/mig-1g.5gb": "2", "nvidia.com/mig-2g.10gb": "1",
                               "nvidia.com/mig-3g.20gb": "1"})


def a100_time_sliced(name: str, extra: dict[str, str] | None = None) -> Obj:
    """Two A100-SXM4-40GB time-sliced into 4 replicas each: 8 nvidia.com/gpu, product ``-SHARED``
    (plus ``extra`` labels)."""
    labels = gfd("NVIDIA-A100-SXM4-40GB-SHARED", 2, 40960)
    labels.update({"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing", **(extra or {})})
    return node(name, labels, {"nvidia.com/gpu": "8"})


def openshift_t4_shared(name: str) -> Obj:
    """An OpenShift node with one Tesla T4 time-sliced into 4 (GPU Operator ``-SHARED`` product)."""
    labels = gfd("Tesla-T4-SHARED", 1, 15360, family="turing")
    labels.update({"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
                   "node-role.kubernetes.io/worker": ""})
    return node(name, labels, {"nvidia.com/gpu": "4"})


def openshift_v100(name: str) -> Obj:
    """An OpenShift node with 4 Tesla V100 16 GB (plain, no sharing)."""
    labels = gfd("Tesla-V100-PCIE-16GB", 4, 16384, family="volta")
    labels["node-role.kubernetes.io/worker"] = ""
    return node(name, labels, {"nvidia.com/gpu": "4"})


def stale_a100(name: str) -> Obj:
    """GFD labels describing 8 A100 on a node whose device plugin is gone (no nvidia.com/gpu)."""
    return node(name, gfd("NVIDIA-A100-SXM4-40GB", 8, 40960), {})


def gke_l4(name: str) -> Obj:
    """GKE g2-standard node with one L4: GKE labels only (no GFD)."""
    return node(name, {"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-accelerator-count": "1",
                       "cloud.google.com/gke-gpu-driver-version": "default",
                       "node.kubernetes.io/instance-type": "g2-standard-8"}, {"nvidia.com/gpu": "1"})


def gke_a100_80(name: str) -> Obj:
    """GKE a2-ultragpu node with 8 A100 80 GB."""
    return node(name, {"cloud.google.com/gke-accelerator": "nvidia-a100-80gb",
                       "cloud.google.com/gke-accelerator-count": "8"}, {"nvidia.com/gpu": "8"})


def gke_a100_mig(name: str) -> Obj:
    """GKE a2-highgpu-1g node with its A100 partitioned into 1g.5gb (GKE's MIG: single strategy)."""
    return node(name, {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                       "cloud.google.com/gke-accelerator-count": "1",
                       "cloud.google.com/gke-gpu-partition-size": "1g.5gb"}, {"nvidia.com/gpu": "7"})


def gke_l4_time_sharing(name: str) -> Obj:
    """GKE node with one L4 shared by 2 clients (GPU time-sharing)."""
    return node(name, {"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-accelerator-count": "1",
                       "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                       "cloud.google.com/gke-max-shared-clients-per-gpu": "2"}, {"nvidia.com/gpu": "2"})


def karpenter_a100(name: str) -> Obj:
    """EKS p4d.24xlarge provisioned by Karpenter: 8 A100 40 GB."""
    return node(name, {"karpenter.k8s.aws/instance-gpu-name": "a100", "karpenter.k8s.aws/instance-gpu-count": "8",
                       "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                       "karpenter.k8s.aws/instance-gpu-memory": "40960",
                       "node.kubernetes.io/instance-type": "p4d.24xlarge"}, {"nvidia.com/gpu": "8"})


def eks_t4(name: str) -> Obj:
    """EKS managed node group labelled by eksctl's convention: one T4."""
    return node(name, {"k8s.amazonaws.com/accelerator": "nvidia-tesla-t4",
                       "node.kubernetes.io/instance-type": "g4dn.xlarge"}, {"nvidia.com/gpu": "1"})


def aks_nc(name: str) -> Obj:
    """AKS Standard_NC6s_v3 node: the accelerator label names the vendor only."""
    return node(name, {"kubernetes.azure.com/accelerator": "nvidia", "kubernetes.azure.com/agentpool": "gpunp",
                       "node.kubernetes.io/instance-type": "Standard_NC6s_v3"}, {"nvidia.com/gpu": "1"})


def pod(name: str, resources: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        node_name: str | None = None, cpu: str = "1") -> Obj:
    """A Pod with one container asking ``resources`` (requests = limits) plus ``cpu``."""
    res = dict(resources or {})
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": dict(annotations or {})}
    spec: Obj = {"schedulerName": "py-scheduler", "containers": [
        {"name": "main", "image": "cuda", "resources": {"requests": {"cpu": cpu, **res}, "limits": res}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
