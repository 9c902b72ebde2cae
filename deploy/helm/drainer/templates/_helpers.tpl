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

{{/* GOMEMLIMIT of the daemon: goMemLimit if set, else 90% of
resources.limits.memory (whole Mi or Gi), in MiB: docs/operating.md asks for
it a little under the memory limit, so that the collector works harder
before the kernel would kill the process. Empty (not set) without a memory
limit, or when extraEnv sets GOMEMLIMIT itself. */}}
{{- define "drainer.goMemLimit" -}}
{{- $own := false -}}
{{- range .Values.extraEnv -}}
{{- if eq (toString .name) "GOMEMLIMIT" -}}{{- $own = true -}}{{- end -}}
{{- end -}}
{{- if not $own -}}
{{- if .Values.goMemLimit -}}
{{- .Values.goMemLimit -}}
{{- else -}}
{{- $lim := toString (dig "limits" "memory" "" (.Values.resources | default dict)) -}}
{{- if regexMatch "^[0-9]+Mi$" $lim -}}
{{- div (mul (trimSuffix "Mi" $lim | atoi) 9) 10 -}}MiB
{{- else if regexMatch "^[0-9]+Gi$" $lim -}}
{{- div (mul (trimSuffix "Gi" $lim | atoi) 1024 9) 10 -}}MiB
{{- else if $lim -}}
{{- fail (printf "resources.limits.memory %q is not whole Mi or Gi: set goMemLimit (e.g. 90%% of the limit, as 460MiB)" $lim) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
