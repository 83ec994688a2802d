{{/* The binaries the image holds (the image's entrypoint is the NRI plugin). */}}
{{- define "cpuplan.nriBinary" -}}/opt/cpuplan/cpuplan-nri{{- end }}
{{- define "cpuplan.cliBinary" -}}/opt/cpuplan/cpuplan{{- end }}

{{/* The release's base name: the release name, capped for label values. */}}
{{- define "cpuplan.fullname" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- end }}

{{- define "cpuplan.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "cpuplan.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cpuplan.labels" -}}
{{ include "cpuplan.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cpuplan
{{- end }}

{{- define "cpuplan.component" -}}
{{- if .Values.removeFromNodes }}node-cleanup{{ else if eq .Values.route "nri" }}nri-plugin{{ else }}hook-installer{{ end }}
{{- end }}

{{/* The one container of a pod whose work is its init container's: it only holds the pod. */}}
{{- define "cpuplan.keepAlive" -}}
- name: keep-alive
  image: {{ .Values.hook.keepAliveImage }}
  imagePullPolicy: IfNotPresent
  resources:
    requests:
      cpu: 1m
      memory: 4Mi
    limits:
      memory: 16Mi
{{- end }}

{{/*
The instances: one per pool, or one for the whole release. Each is a dict with name (the
DaemonSet's and ConfigMap's), pool ("" for the release's), config (merged; its log always
stderr: kubelet keeps the container's log), nodeSelector, affinity and tolerations. Printed as
JSON for fromJson. Two pools of one name would be two DaemonSets of one name: refused.
*/}}
{{- define "cpuplan.instances" -}}
{{- $out := list }}
{{- $base := include "cpuplan.fullname" . }}
{{- if .Values.pools }}
{{- $seen := dict }}
{{- range .Values.pools }}
{{- if hasKey $seen .name }}
{{- fail (printf "pools: the name %q is given twice: each pool is its own DaemonSet and ConfigMap %s-%s, so each needs its own name" .name $base .name) }}
{{- end }}
{{- $_ := set $seen .name true }}
{{- $config := mergeOverwrite (deepCopy $.Values.config) (deepCopy (.config | default dict)) }}
{{- $_ := set $config "log" "stderr" }}
{{- $out = append $out (dict "name" (printf "%s-%s" $base .name) "pool" .name "config" $config "nodeSelector" (.nodeSelector | default $.Values.nodeSelector) "affinity" (.affinity | default $.Values.affinity) "tolerations" (.tolerations | default $.Values.tolerations)) }}
{{- end }}
{{- else }}
{{- $config := deepCopy .Values.config }}
{{- $_ := set $config "log" "stderr" }}
{{- $out = append $out (dict "name" $base "pool" "" "config" $config "nodeSelector" .Values.nodeSelector "affinity" .Values.affinity "tolerations" .Values.tolerations) }}
{{- end }}
{{- toJson (dict "items" $out) }}
{{- end }}

{{/* Whether the release runs the NRI plugin (the nri route, not removing): "true" or "". */}}
{{- define "cpuplan.plugin" -}}
{{- if and (eq .Values.route "nri") (not .Values.removeFromNodes) }}true{{ end }}
{{- end }}

{{/*
The checks no schema can say: one monitor at most; removeFromNodes only where install wrote
something on the nodes.
*/}}
{{- define "cpuplan.checks" -}}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled }}
{{- fail "metrics.serviceMonitor.enabled and metrics.podMonitor.enabled: choose one; both would scrape every series twice" }}
{{- end }}
{{- if and .Values.removeFromNodes (eq .Values.route "nri") (not .Values.nri.enableInContainerd) }}
{{- fail "removeFromNodes: the nri route without nri.enableInContainerd writes nothing on the nodes that outlives its pods; helm uninstall removes it all" }}
{{- end }}
{{- end }}

{{/* The node affinity: the operator's, else (gpuNodesOnly) nodes labelled as having an NVIDIA GPU. */}}
{{- define "cpuplan.affinity" -}}
{{- $root := index . 0 }}
{{- $affinity := deepCopy (index . 1 | default dict) }}
{{- if and $root.Values.gpuNodesOnly (not (hasKey $affinity "nodeAffinity")) }}
{{- $terms := list }}
{{- range list "feature.node.kubernetes.io/pci-10de.present" "nvidia.com/gpu.present" }}
{{- $terms = append $terms (dict "matchExpressions" (list (dict "key" . "operator" "In" "values" (list "true")))) }}
{{- end }}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" $terms)) }}
{{- end }}
{{- if $affinity }}
{{- toYaml $affinity }}
{{- end }}
{{- end }}

