{{- define "vms.labels" -}}
app.kubernetes.io/instance: {{ .name }}
app.kubernetes.io/managed-by: vm-operator
app.kubernetes.io/name: vm-runner
{{- end }}
