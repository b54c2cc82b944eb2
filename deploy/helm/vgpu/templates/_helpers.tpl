{{/* The release's name prefix of every object. */}}
{{- define "vgpu.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vgpu.labels" -}}
app.kubernetes.io/name: vgpu
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "vgpu.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The modes that run, each with its merged node selector. */}}
{{- define "vgpu.modes" -}}
{{- $modes := list -}}
{{- if .Values.devicePlugin.enabled -}}
{{- $modes = append $modes (dict "name" "device-plugin" "nodeSelector" (merge (deepCopy .Values.devicePlugin.nodeSelector) .Values.nodeSelector)) -}}
{{- end -}}
{{- if .Values.dra.enabled -}}
{{- $modes = append $modes (dict "name" "dra" "nodeSelector" (merge (deepCopy .Values.dra.nodeSelector) .Values.nodeSelector)) -}}
{{- end -}}
{{- if and (eq (len $modes) 2) (eq (toJson (index $modes 0).nodeSelector) (toJson (index $modes 1).nodeSelector)) -}}
{{- fail "devicePlugin and dra are both enabled on the same nodes: a node serves one of them; give devicePlugin.nodeSelector and dra.nodeSelector different node pools" -}}
{{- end -}}
{{- if eq (len $modes) 0 -}}
{{- fail "neither devicePlugin.enabled nor dra.enabled: enable one (or both, on different node pools)" -}}
{{- end -}}
{{- toJson $modes -}}
{{- end -}}

{{/* The installer's flags: where things are on the node. */}}
{{- define "vgpu.installFlags" -}}
- --host-root=/host
- --payload=/payload
- --install-root={{ .Values.host.installRoot }}
- --config={{ .Values.host.configPath }}
- --containerd-config={{ .Values.host.containerdConfig }}
- --restart-command={{ .Values.host.containerdRestart }}
- --state-dir={{ .Values.host.stateDir }}
{{- end -}}

{{/* The node's / at /host: binaries, configuration, containerd, driver. */}}
{{- define "vgpu.hostVolume" -}}
- name: host
  hostPath:
    path: /
    type: Directory
{{- end -}}
