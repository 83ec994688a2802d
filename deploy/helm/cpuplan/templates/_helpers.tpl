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
{{- if eq .Values.route "nri" }}nri-plugin{{ else }}hook-installer{{ end }}
{{- end }}

{{/*
The instances: one per pool, or one for the whole release. Each is a dict with name (the
DaemonSet's and ConfigMap's), pool ("" for the release's), config (merged), nodeSelector,
affinity and tolerations. Printed as JSON for fromJson.
*/}}
{{/* A config with the metrics listener on all addresses at metrics.port where metrics.enabled (the
config key "metrics" the plugin reads), printed as JSON. */}}
{{- define "cpuplan.withMetrics" -}}
{{- $config := .config }}
{{- if .Values.metrics.enabled }}
{{- $_ := set $config "metrics" (dict "address" (printf "0.0.0.0:%v" .Values.metrics.port)) }}
{{- end }}
{{- toJson $config }}
{{- end }}

{{- define "cpuplan.instances" -}}
{{- $out := list }}
{{- $base := include "cpuplan.fullname" . }}
{{- if .Values.pools }}
{{- range .Values.pools }}
{{- $config := mergeOverwrite (deepCopy $.Values.config) (deepCopy (.config | default dict)) }}
{{- $config = include "cpuplan.withMetrics" (dict "config" $config "Values" $.Values) | fromJson }}
{{- $out = append $out (dict "name" (printf "%s-%s" $base .name) "pool" .name "config" $config "nodeSelector" (.nodeSelector | default $.Values.nodeSelector) "affinity" (.affinity | default $.Values.affinity) "tolerations" (.tolerations | default $.Values.tolerations)) }}
{{- end }}
{{- else }}
{{- $config := include "cpuplan.withMetrics" (dict "config" (deepCopy .Values.config) "Values" .Values) | fromJson }}
{{- $out = append $out (dict "name" $base "pool" "" "config" $config "nodeSelector" .Values.nodeSelector "affinity" .Values.affinity "tolerations" .Values.tolerations) }}
{{- end }}
{{- toJson (dict "items" $out) }}
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

