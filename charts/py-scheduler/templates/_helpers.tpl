{{/*
Names. The release `py-scheduler` (the documented one) gives the names deploy/ uses.
*/}}
{{- define "py-scheduler.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "py-scheduler.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
Labels on every object: the two deploy/kustomization.yaml adds (kept identical to deploy/, so no
helm.sh/chart or managed-by label: `helm template` and `kubectl kustomize deploy/` render the same objects).
*/}}
{{- define "py-scheduler.labels" -}}
app.kubernetes.io/name: {{ include "py-scheduler.name" . }}
app.kubernetes.io/part-of: py-scheduler
{{- end }}

{{/* What the Deployment, Service and PodDisruptionBudget select. */}}
{{- define "py-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "py-scheduler.name" . }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "py-scheduler.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "py-scheduler.fullname" .) }}
{{- end }}

{{- define "py-scheduler.leaseNamespace" -}}
{{- .Values.leaderElection.resourceNamespace | default .Release.Namespace }}
{{- end }}

{{/*
The profiles: config.profiles verbatim when set, else one profile named config.schedulerName with the GPU
plugins (gpu.enabled) and config.extraPluginConfig, followed by config.extraProfiles.
*/}}
{{- define "py-scheduler.profiles" -}}
{{- if .Values.config.profiles }}
{{- toYaml .Values.config.profiles }}
{{- else }}
{{- $profile := dict "schedulerName" .Values.config.schedulerName }}
{{- $pluginConfig := list }}
{{- if .Values.gpu.enabled }}
{{- $g := .Values.gpu }}
{{- $_ := set $profile "plugins" (dict "multiPoint" (dict "enabled" (list (dict "name" "GPUFilter") (dict "name" "GPUScore" "weight" $g.scoreWeight)))) }}
{{- $pluginConfig = append $pluginConfig (dict "name" "GPUFilter" "args" (dict "prefix" $g.prefix "resourceName" $g.resourceName)) }}
{{- $pluginConfig = append $pluginConfig (dict "name" "GPUScore" "args" (dict "prefix" $g.prefix "resourceName" $g.resourceName "modelWeight" $g.modelWeight "memoryWeight" $g.memoryWeight "queueWeight" $g.queueWeight)) }}
{{- end }}
{{- $pluginConfig = concat $pluginConfig .Values.config.extraPluginConfig }}
{{- if $pluginConfig }}
{{- $_ := set $profile "pluginConfig" $pluginConfig }}
{{- end }}
{{- toYaml (concat (list $profile) .Values.config.extraProfiles) }}
{{- end }}
{{- end }}

{{/* The KubeSchedulerConfiguration py-scheduler reads (--config); its sha256 rolls the Pods on a change. */}}
{{- define "py-scheduler.config" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ .Values.leaderElection.enabled }}
  leaseDuration: {{ .Values.leaderElection.leaseDuration }}
  renewDeadline: {{ .Values.leaderElection.renewDeadline }}
  retryPeriod: {{ .Values.leaderElection.retryPeriod }}
  resourceLock: leases
  resourceName: {{ .Values.leaderElection.resourceName }}
  resourceNamespace: {{ include "py-scheduler.leaseNamespace" . }}
clientConnection:
  {{- toYaml .Values.config.clientConnection | nindent 2 }}
percentageOfNodesToScore: {{ .Values.config.percentageOfNodesToScore }}
podInitialBackoffSeconds: {{ .Values.config.podInitialBackoffSeconds }}
podMaxBackoffSeconds: {{ .Values.config.podMaxBackoffSeconds }}
profiles:
  {{- include "py-scheduler.profiles" . | nindent 2 }}
{{- end }}
