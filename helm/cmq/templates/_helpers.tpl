{{/* The chart's name, cut to the 63 characters a label value allows. */}}
{{- define "cmq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resource name; pod names add "-<ordinal>", so keep room for it. */}}
{{- define "cmq.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "cmq.headless" -}}
{{- printf "%s-headless" (include "cmq.fullname" .) }}
{{- end }}

{{- define "cmq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cmq.labels" -}}
helm.sh/chart: {{ include "cmq.chart" . }}
{{ include "cmq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "cmq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "cmq.peerTlsSecret" -}}
{{- default (printf "%s-peer-tls" (include "cmq.fullname" .)) .Values.peerTls.secretName }}
{{- end }}

{{- define "cmq.secretName" -}}
{{- default (printf "%s-secret" (include "cmq.fullname" .)) .Values.secret.existingSecret }}
{{- end }}

{{- define "cmq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cmq.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The domain of the pods' stable DNS names: <headless>.<namespace>.svc.<clusterDomain>. */}}
{{- define "cmq.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "cmq.headless" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* The stable DNS name of pod <ordinal> through the headless Service. */}}
{{- define "cmq.podHost" -}}
{{- $root := index . 0 }}{{ $i := index . 1 -}}
{{- printf "%s-%d.%s" (include "cmq.fullname" $root) $i (include "cmq.podDomain" $root) }}
{{- end }}

{{/* The founding members: every pod with scaling=static, the first cluster.founders with join. */}}
{{- define "cmq.founders" -}}
{{- if eq .Values.cluster.scaling "static" }}{{ int .Values.replicaCount }}{{ else }}{{ int .Values.cluster.founders }}{{ end }}
{{- end }}

{{/* --peers: node id = ordinal + 1, at its pod's stable DNS name (the founding members). */}}
{{- define "cmq.peers" -}}
{{- $root := . }}
{{- $out := list }}
{{- range $i := until (int (include "cmq.founders" .)) }}
{{- $out = append $out (printf "%d=%s:%d" (add1 $i) (include "cmq.podHost" (list $root $i)) (int $root.Values.ports.peer)) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* --join: the founding members' HTTP URLs at their stable DNS names. */}}
{{- define "cmq.joinURLs" -}}
{{- $root := . }}
{{- $out := list }}
{{- range $i := until (int (include "cmq.founders" .)) }}
{{- $out = append $out (printf "http://%s:%d" (include "cmq.podHost" (list $root $i)) (int $root.Values.ports.http)) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* The client Service's URL inside the cluster. */}}
{{- define "cmq.clientURL" -}}
{{- printf "http://%s.%s.svc.%s:%d" (include "cmq.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.service.port) }}
{{- end }}

{{- define "cmq.dataMount" -}}
{{- printf "/var/lib/cmq/%s" . }}
{{- end }}
