{{/* The release's full name: the release name, or release-gantry when it lacks "gantry". */}}
{{- define "gantry.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gantry.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gantry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "gantry.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gantry.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "gantry.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The namespace the worker pods run in. */}}
{{- define "gantry.workersNamespace" -}}
{{- .Values.workers.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* The Service's in-cluster URL: where worker pods reach Gantry. */}}
{{- define "gantry.serviceURL" -}}
{{- printf "http://%s.%s.svc:%d" (include "gantry.fullname" .) .Release.Namespace (int .Values.service.port) -}}
{{- end -}}

{{- define "gantry.storeSecret" -}}
{{- .Values.store.existingSecret | default (printf "%s-store" (include "gantry.fullname" .)) -}}
{{- end -}}
