{{/* Chart name, overridable. */}}
{{- define "atelier.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-atelier", or the release name when it already contains the chart name. */}}
{{- define "atelier.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "atelier.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "atelier.labels" -}}
helm.sh/chart: {{ include "atelier.chart" . }}
{{ include "atelier.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: atelier
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "atelier.selectorLabels" -}}
app.kubernetes.io/name: {{ include "atelier.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "atelier.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding database-url and temporal. */}}
{{- define "atelier.secretName" -}}
{{- if .Values.existingSecret }}
{{- .Values.existingSecret }}
{{- else if .Values.secret.databaseURL }}
{{- include "atelier.fullname" . }}
{{- else }}
{{- fail "atelier: set existingSecret (a Secret with keys database-url and temporal) or secret.databaseURL; see values.yaml" }}
{{- end }}
{{- end }}

{{- define "atelier.serviceAccountName" -}}
{{- default (include "atelier.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "atelier.clusterWorkerServiceAccountName" -}}
{{- default (printf "%s-cluster-worker" (include "atelier.fullname" .)) .Values.serviceAccount.clusterWorkerName }}
{{- end }}

{{/* Environment of every container: connection settings from the Secret, then config. */}}
{{- define "atelier.env" -}}
- name: ATELIER_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "atelier.secretName" . }}
      key: {{ .Values.secretKeys.databaseURL }}
- name: ATELIER_TEMPORAL
  valueFrom:
    secretKeyRef:
      name: {{ include "atelier.secretName" . }}
      key: {{ .Values.secretKeys.temporal }}
- name: ATELIER_SECRETS_KEY_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "atelier.secretName" . }}
      key: {{ .Values.secretKeys.secretsKeyURL }}
      optional: true
- name: ATELIER_NAMESPACE
  value: {{ .Values.config.namespace | quote }}
{{- with .Values.config.temporalUIURL }}
- name: ATELIER_TEMPORAL_UI
  value: {{ . | quote }}
{{- end }}
- name: ATELIER_TASK_QUEUE
  value: {{ .Values.config.taskQueue | quote }}
- name: ATELIER_LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: ATELIER_LOG_FORMAT
  value: {{ .Values.config.logFormat | quote }}
- name: ATELIER_SHUTDOWN_TIMEOUT
  value: {{ .Values.config.shutdownTimeout | quote }}
- name: ATELIER_METRICS_TENANT_LABELS
  value: {{ .Values.metrics.tenantLabels | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A worker container's metrics address and port (metrics.workerPort; nothing when 0). Call with $ and nindent the env part under env: (atelier.workerMetricsEnv) and the port under the container (atelier.workerMetricsPort). */}}
{{- define "atelier.workerMetricsEnv" -}}
{{- if gt (int .Values.metrics.workerPort) 0 }}
- name: ATELIER_METRICS_ADDR
  value: {{ printf ":%d" (int .Values.metrics.workerPort) | quote }}
{{- end }}
{{- end }}

{{- define "atelier.workerMetricsPort" -}}
{{- if gt (int .Values.metrics.workerPort) 0 }}
ports:
  - name: metrics
    containerPort: {{ int .Values.metrics.workerPort }}
{{- end }}
{{- end }}

{{/* Pod spec fields shared by every pod: scheduling (the component's own values, else the top-level ones) and imagePullSecrets. Call with (list $ component). */}}
{{- define "atelier.scheduling" -}}
{{- $root := index . 0 }}
{{- $c := index . 1 }}
{{- with (default $root.Values.nodeSelector $c.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $root.Values.tolerations $c.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $root.Values.affinity $c.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
