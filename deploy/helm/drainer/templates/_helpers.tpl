{{/* The objects' name: the release name if it contains "drainer", else
release-drainer. `helm install drainer …` names everything drainer, the
job label the alert rules and the KEDA query select. */}}
{{- define "drainer.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "drainer.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "drainer.labels" -}}
{{ include "drainer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pods: selectorLabels plus the component. */}}
{{- define "drainer.podSelectorLabels" -}}
{{ include "drainer.selectorLabels" . }}
app.kubernetes.io/component: daemon
{{- end -}}

{{- define "drainer.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The database URL as DRAINER_DATABASE_URL, from a Secret: (dict "ref" X)
with X a {secretName, secretKey}. */}}
{{- define "drainer.databaseUrlEnv" -}}
- name: DRAINER_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "databaseUrl.secretName: the Secret holding the database URL" .ref.secretName }}
      key: {{ required "databaseUrl.secretKey: the key of the database URL in that Secret" .ref.secretKey }}
{{- end -}}
