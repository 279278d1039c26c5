#!/usr/bin/env bash
# Turn the kind workers into fake GPU nodes for py-scheduler's GPU plugins.
#
# For each worker it sets what NVIDIA GPU Feature Discovery (GFD) and the device plugin would:
#   labels      nvidia.com/gpu.present, nvidia.com/gpu.product, nvidia.com/gpu.memory (MiB),
#               nvidia.com/gpu.count
#   annotation  gpu-scheduler/nvlink-groups (GPU indices linked by NVLink, groups split by ';')
#   capacity    nvidia.com/gpu, through the status subresource (as the Kubernetes docs'
#               "Advertise Extended Resources for a Node" task does; the kubelet then copies it to
#               allocatable). No real devices: containers requesting GPUs start (the example Pods
#               run pause) but see no GPU.
#
# Usage: deploy/kind/label-gpu-nodes.sh [CLUSTER_NAME]     (default: py-scheduler)
# Needs: kubectl >= 1.24 (for --subresource). Idempotent: re-running overwrites the same values.
set -euo pipefail

cluster="${1:-py-scheduler}"
ctx="kind-${cluster}"
kc=(kubectl --context "${ctx}")

mapfile -t workers < <("${kc[@]}" get nodes -l '!node-role.kubernetes.io/control-plane' \
  -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort)
if [[ ${#workers[@]} -lt 3 ]]; then
  echo "expected 3 worker nodes in context ${ctx}, found ${#workers[@]}: ${workers[*]:-none}" >&2
  exit 1
fi

# name  count  product                  memory(MiB)  nvlink-groups
gpu_node() {
  local node=$1 count=$2 product=$3 mem_mib=$4 groups=$5
  "${kc[@]}" label node "${node}" --overwrite \
    nvidia.com/gpu.present=true \
    "nvidia.com/gpu.product=${product}" \
    "nvidia.com/gpu.memory=${mem_mib}" \
    "nvidia.com/gpu.count=${count}" >/dev/null
  if [[ -n "${groups}" ]]; then
    "${kc[@]}" annotate node "${node}" --overwrite "gpu-scheduler/nvlink-groups=${groups}" >/dev/null
  else
    "${kc[@]}" annotate node "${node}" "gpu-scheduler/nvlink-groups-" >/dev/null 2>&1 || true
  fi
  # JSON patch path: '/' in the resource name is escaped as '~1'.
  "${kc[@]}" patch node "${node}" --subresource=status --type=json -p \
    "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"${count}\"}]" >/dev/null
  echo "${node}: ${count} x ${product} (${mem_mib} MiB each), NVLink groups: ${groups:-none}"
}

gpu_node "${workers[0]}" 8 NVIDIA-A100-SXM4-40GB 40960 "0-3;4-7"
gpu_node "${workers[1]}" 4 NVIDIA-H100-80GB-HBM3 81920 "0-3"
gpu_node "${workers[2]}" 2 Tesla-T4 15360 ""

echo "waiting for the kubelets to report nvidia.com/gpu as allocatable..."
for node in "${workers[@]:0:3}"; do
  for _ in $(seq 1 30); do
    alloc=$("${kc[@]}" get node "${node}" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')
    [[ -n "${alloc}" ]] && break
    sleep 1
  done
  echo "${node}: allocatable nvidia.com/gpu=${alloc:-<not yet>}"
done
