{{- define "usher.fullname" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The metrics Service; a ServiceMonitor names its job after it (Prometheus Operator's default). */ -}}
{{- define "usher.metricsService" -}}
{{- printf "%s-metrics" (include "usher.fullname" .) -}}
{{- end -}}

{{- /* Keeps only the series of the replica that schedules: followers report queues too, and
       kube-scheduler exports the same names under its own job. */ -}}
{{- define "usher.onlyLeader" -}}
{{- printf "and on (job, instance) (leader_election_master_status{job=%q} == 1)" (include "usher.metricsService" .) -}}
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

{{- define "usher.schedulerNames" -}}
{{- if .Values.config.profiles -}}
{{- range .Values.config.profiles }}{{ .schedulerName }} {{ end -}}
{{- else -}}
{{ .Values.schedulerName }}
{{- end -}}
{{- end -}}

{{- define "usher.leaseName" -}}
{{- .Values.leaderElection.resourceName | default (splitList " " (include "usher.schedulerNames" .) | first) -}}
{{- end -}}

{{- define "usher.leaseNamespace" -}}
{{- .Values.leaderElection.resourceNamespace | default .Release.Namespace -}}
{{- end -}}

{{- define "usher.config" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
{{- $config := omit .Values.config "profiles" }}
{{- with $config }}
{{ toYaml . }}
{{- end }}
leaderElection:
  leaderElect: {{ .Values.leaderElection.enabled }}
  resourceLock: leases
  resourceName: {{ include "usher.leaseName" . }}
  resourceNamespace: {{ include "usher.leaseNamespace" . }}
  leaseDuration: {{ .Values.leaderElection.leaseDuration }}
  renewDeadline: {{ .Values.leaderElection.renewDeadline }}
  retryPeriod: {{ .Values.leaderElection.retryPeriod }}
profiles:
{{- if .Values.config.profiles }}
{{ toYaml .Values.config.profiles }}
{{- else }}
- schedulerName: {{ .Values.schedulerName }}
{{- end }}
{{- end -}}
