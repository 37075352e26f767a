{{- define "usher.fullname" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "usher.labels" -}}
app.kubernetes.io/name: usher
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "usher.selectorLabels" -}}
app.kubernetes.io/name: usher
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
