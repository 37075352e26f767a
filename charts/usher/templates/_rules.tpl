{{- define "usher.rules" -}}
{{- $job := printf "job=%q" (include "usher.metricsService" .) -}}
{{- $leader := include "usher.onlyLeader" . -}}
groups:
  - name: usher
    rules:
      - alert: UsherPodsUnschedulable
        expr: sum(scheduler_pending_pods{queue="unschedulable", {{ $job }}} {{ $leader }}) > 0
        for: {{ .Values.prometheusRule.stuckFor }}
        labels: {severity: warning}
        annotations:
          summary: Pods have been unschedulable for {{ .Values.prometheusRule.stuckFor }}
          description: "{{ "{{ $value }}" }} pods wait for the cluster to change; `usher explain NS/POD` says why."
      - alert: UsherPodsGated
        expr: sum(scheduler_pending_pods{queue="gated", {{ $job }}} {{ $leader }}) > 0
        for: {{ .Values.prometheusRule.stuckFor }}
        labels: {severity: info}
        annotations:
          summary: Pods have been held back before scheduling for {{ .Values.prometheusRule.stuckFor }}
          description: "{{ "{{ $value }}" }} pods are gated (scheduling gates, missing ResourceClaims); see their NotReadyForScheduling condition."
      - alert: UsherPodsScheduledAfterFlush
        expr: sum(increase(scheduler_pod_scheduled_after_flush_total{ {{- $job -}} }[30m]) {{ $leader }}) > 0
        labels: {severity: warning}
        annotations:
          summary: Pods were scheduled only after the 5-minute flush
          description: A cluster event that should have requeued them was missed (a QueueingHint or PreQueueingHint gap).
      - alert: UsherBindingErrors
        expr: sum(rate(scheduler_async_api_call_execution_total{call_type="pod_binding", result="error", {{ $job }}}[10m]) {{ $leader }}) > 0
        for: 10m
        labels: {severity: warning}
        annotations:
          summary: usher's bindings fail
          description: The API server rejects pods/binding calls; check usher's logs and its RBAC.
{{- end -}}
