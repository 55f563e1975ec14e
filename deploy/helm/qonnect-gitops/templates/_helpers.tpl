{{/* The image: repository@digest when a digest is given, else repository:tag (default: appVersion). */}}
{{- define "qonnect.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The labels every object carries (kustomize's `labels:` of deploy/leads and deploy/agent). */}}
{{- define "qonnect.partOf" -}}
app.kubernetes.io/part-of: qonnect
{{- end -}}

{{/* TCP ports of a NetworkPolicy rule, from a list of numbers. */}}
{{- define "qonnect.tcpPorts" -}}
{{- $ports := list }}
{{- range . }}
{{- $ports = append $ports (dict "protocol" "TCP" "port" .) }}
{{- end }}
{{- toYaml $ports }}
{{- end -}}

{{/* The leads' API URL in this namespace (the agent's default --lead). */}}
{{- define "qonnect.leadURL" -}}
http://qonnect-lead.{{ .Release.Namespace }}.svc:8080
{{- end -}}
