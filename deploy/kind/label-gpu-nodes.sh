#!/usr/bin/env bash
# Turn the kind workers into fake GPU nodes for py-scheduler's GPU plugins.
#
# Each worker is labelled with a fake GPU profile (py_scheduler/fakegpu/profiles.yaml) and
# deploy/kind/fake-gpus/ is applied: on every labelled node a DaemonSet Pod runs
# `py-scheduler fake-gpu-plugin`, a kubelet device plugin that
#   - advertises the profile's nvidia.com/gpu devices to the kubelet (allocatable, as NVIDIA's plugin),
#   - labels the Node as NVIDIA GPU Feature Discovery would (nvidia.com/gpu.product, .memory (MiB),
#     .count, .replicas, mig.strategy) plus py-scheduler's gpu-scheduler/nvlink-groups annotation,
#   - hands devices to containers: NVIDIA_VISIBLE_DEVICES and a CDI device (no real GPU behind them).
#
# Usage: deploy/kind/label-gpu-nodes.sh [CLUSTER_NAME]     (default: py-scheduler)
# Needs: the py-scheduler image in the cluster (`kind load docker-image py-scheduler:0.1.0`).
# Idempotent: re-running relabels and re-applies the same objects.
# KUBECTL_CONTEXT overrides the context (default kind-CLUSTER_NAME).
set -euo pipefail

cluster="${1:-py-scheduler}"
ctx="${KUBECTL_CONTEXT:-kind-${cluster}}"
kc=(kubectl --context "${ctx}")
here="$(cd "$(dirname "$0")" && pwd)"

mapfile -t workers < <("${kc[@]}" get nodes -l '!node-role.kubernetes.io/control-plane' \
  -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort)
if [[ ${#workers[@]} -lt 1 ]]; then
  echo "no worker nodes in context ${ctx}" >&2
  exit 1
fi
profiles=(a100-40gb-x8 h100-x4 t4-x2)   # 8x A100-40GB (NVLink 0-3;4-7), 4x H100 (NVLink 0-3), 2x T4
n=$(( ${#workers[@]} < 3 ? ${#workers[@]} : 3 ))
if (( n < 3 )); then
  echo "note: ${n} worker(s), so only the first ${n} profile(s) of: ${profiles[*]}" >&2
fi
# The GFD labels a plugin wrote earlier (another profile, an earlier run) are removed first, so the
# wait below sees what the plugins started now write, not what an old one left.
gfd=(nvidia.com/gpu.product- nvidia.com/gpu.memory- nvidia.com/gpu.count- nvidia.com/gpu.replicas-)
for (( i = 0; i < n; i++ )); do
  "${kc[@]}" label node "${workers[$i]}" --overwrite "gpu.py-scheduler.io/fake-profile=${profiles[$i]}" >/dev/null
  "${kc[@]}" label node "${workers[$i]}" "${gfd[@]}" >/dev/null 2>&1 || true
  echo "${workers[$i]}: fake GPU profile ${profiles[$i]}"
done
ds=(-n kube-system daemonset/py-scheduler-fake-gpu)
existed=false
"${kc[@]}" get "${ds[@]}" >/dev/null 2>&1 && existed=true
"${kc[@]}" apply -k "${here}/fake-gpus/"
# A plugin reads its node's profile when it starts: running ones restart to read the labels set above.
if [[ ${existed} == true ]]; then
  "${kc[@]}" rollout restart "${ds[@]}" >/dev/null
fi
"${kc[@]}" rollout status "${ds[@]}" --timeout=180s >/dev/null \
  || { echo "the fake-GPU DaemonSet did not roll out in 180 s" >&2; exit 1; }

echo "waiting for the device plugins to make nvidia.com/gpu allocatable..."
for node in "${workers[@]:0:n}"; do
  # the plugin labels its node before it registers with the kubelet; then the kubelet reports
  # count x replicas devices (time-slicing: one device per replica)
  "${kc[@]}" wait node "${node}" --for=jsonpath='{.metadata.labels.nvidia\.com/gpu\.replicas}' --timeout=120s >/dev/null \
    || { echo "${node}: no GPU labels from its device plugin after 120 s" >&2; exit 1; }
  count=$("${kc[@]}" get node "${node}" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.count}')
  replicas=$("${kc[@]}" get node "${node}" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.replicas}')
  want=$(( count * replicas ))
  "${kc[@]}" wait node "${node}" --for=jsonpath="{.status.allocatable.nvidia\.com/gpu}=${want}" --timeout=120s \
    >/dev/null || { echo "${node}: nvidia.com/gpu not allocatable (${want}) after 120 s" >&2; exit 1; }
  echo "${node}: allocatable nvidia.com/gpu=$("${kc[@]}" get node "${node}" \
    -o jsonpath='{.status.allocatable.nvidia\.com/gpu}'), product $("${kc[@]}" get node "${node}" \
    -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.product}')"
done
