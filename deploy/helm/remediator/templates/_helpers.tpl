{{/* Names: the release name when it already says "remediator", else "<release>-remediator". */}}
{{- define "remediator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "remediator" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-remediator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "remediator.selectorLabels" -}}
app.kubernetes.io/name: remediator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The controller's pods only: the node agents share name and instance. */}}
{{- define "remediator.controllerSelectorLabels" -}}
{{ include "remediator.selectorLabels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "remediator.agentSelectorLabels" -}}
{{ include "remediator.selectorLabels" . }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "remediator.labels" -}}
{{ include "remediator.selectorLabels" . }}
app.kubernetes.io/part-of: remediator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "remediator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "remediator.leaseName" -}}
{{ .Values.config.leader_election.lease_name | default "remediator-leader" }}
{{- end -}}

{{/* Where the controller reads policies: the git-sync checkout, or the mounted ConfigMap. */}}
{{- define "remediator.policiesDir" -}}
{{- if eq .Values.policies.source "git" -}}
/var/lib/remediator/policies/current/{{ .Values.policies.git.path }}
{{- else -}}
/var/lib/remediator/policies
{{- end -}}
{{- end -}}

{{/* The Secret as environment: optional only where the database is not in it (dev). */}}
{{- define "remediator.envFrom" -}}
- secretRef:
    name: {{ .Values.secret.name }}
    optional: {{ .Values.secret.optional }}
{{- end -}}

{{- define "remediator.sqliteEnv" -}}
{{- if .Values.sqliteEmptyDir.enabled }}
- name: REMEDIATOR_DATABASE_URL
  value: sqlite:////var/lib/remediator/data/remediator.db
{{- end }}
{{- end -}}
