{{/* Names and labels. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.redisName" -}}
{{- printf "%s-redis" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "sluice.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: directory
{{- end -}}

{{/* Whether each pod holds its node's ports (hostNetwork or hostPorts). */}}
{{- define "sluice.perNode" -}}
{{- if or .Values.hostNetwork .Values.hostPorts }}true{{ end -}}
{{- end -}}

{{/* RTSP's RTP port range: the value, else "30000-30199" with hostNetwork, else "off". */}}
{{- define "sluice.rtspRtp" -}}
{{- if .Values.ports.rtspRtp -}}
{{- .Values.ports.rtspRtp -}}
{{- else if .Values.hostNetwork -}}
30000-30199
{{- else -}}
off
{{- end -}}
{{- end -}}

{{/* The directory's URL in the ConfigMap: the external one, else the chart's Redis. */}}
{{- define "sluice.directory" -}}
{{- if .Values.cluster.directory -}}
{{- .Values.cluster.directory -}}
{{- else if .Values.redis.enabled -}}
{{- printf "redis://%s:%d" (include "sluice.redisName" .) (int .Values.redis.port) -}}
{{- end -}}
{{- end -}}

{{/* One TOML value: a string, bool, number (whole numbers without a fraction) or an
array of them. */}}
{{- define "sluice.tomlValue" -}}
{{- $v := . -}}
{{- if kindIs "string" $v -}}
{{- $v | toJson -}}
{{- else if kindIs "bool" $v -}}
{{- $v -}}
{{- else if or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) -}}
{{- if eq (float64 $v) (float64 (int64 $v)) }}{{ int64 $v }}{{ else }}{{ $v }}{{ end -}}
{{- else if kindIs "slice" $v -}}
[{{ range $i, $e := $v }}{{ if $i }}, {{ end }}{{ include "sluice.tomlValue" $e }}{{ end }}]
{{- else -}}
{{- fail (printf "config: a %s cannot be written as a TOML value (use config.extraToml)" (kindOf $v)) -}}
{{- end -}}
{{- end -}}

{{/* sluice.toml: the chart's settings over config.global and config.tables. */}}
{{- define "sluice.toml" -}}
{{- $global := deepCopy (default dict .Values.config.global) -}}
{{- $_ := set $global "media_root" "/var/lib/sluice/media" -}}
{{- $tables := deepCopy (default dict .Values.config.tables) -}}
{{- $any := "0.0.0.0" -}}
{{- $rtmp := default dict (get $tables "rtmp") -}}
{{- $_ := set $rtmp "listen" (printf "%s:%d" $any (int .Values.ports.rtmp)) -}}
{{- $_ := set $tables "rtmp" $rtmp -}}
{{- $rtsp := default dict (get $tables "rtsp") -}}
{{- $_ := set $rtsp "listen" (printf "%s:%d" $any (int .Values.ports.rtsp)) -}}
{{- $_ := set $rtsp "rtp_ports" (include "sluice.rtspRtp" .) -}}
{{- $_ := set $tables "rtsp" $rtsp -}}
{{- $http := default dict (get $tables "http") -}}
{{- $_ := set $http "listen" (printf "%s:%d" $any (int .Values.ports.http)) -}}
{{- if .Values.tls.secretName -}}
{{- $_ := set $http "https" (printf "%s:%d" $any (int .Values.ports.https)) -}}
{{- $_ := set $http "tls_cert" "/etc/sluice/tls/tls.crt" -}}
{{- $_ := set $http "tls_key" "/etc/sluice/tls/tls.key" -}}
{{- else -}}
{{- $_ := set $http "https" "off" -}}
{{- end -}}
{{- $_ := set $tables "http" $http -}}
{{- $webrtc := default dict (get $tables "webrtc") -}}
{{- $_ := set $webrtc "udp" (printf "%s:%d" $any (int .Values.ports.webrtc)) -}}
{{- $_ := set $tables "webrtc" $webrtc -}}
{{- $srt := default dict (get $tables "srt") -}}
{{- $_ := set $srt "listen" (printf "%s:%d" $any (int .Values.ports.srt)) -}}
{{- $_ := set $tables "srt" $srt -}}
{{- $limits := default dict (get $tables "limits") -}}
{{- $_ := set $limits "drain_on_sigterm" .Values.drain.onSigterm -}}
{{- $_ := set $limits "drain_ms" .Values.drain.drainMs -}}
{{- $_ := set $limits "shutdown_grace_ms" .Values.drain.shutdownGraceMs -}}
{{- $_ := set $tables "limits" $limits -}}
{{- if .Values.cluster.enabled -}}
{{- $cluster := default dict (get $tables "cluster") -}}
{{- $directory := include "sluice.directory" . -}}
{{- if $directory -}}
{{- $_ := set $cluster "directory" $directory -}}
{{- end -}}
{{- $_ := set $cluster "ttl_ms" .Values.cluster.ttlMs -}}
{{- if .Values.cluster.prefix -}}
{{- $_ := set $cluster "prefix" .Values.cluster.prefix -}}
{{- end -}}
{{- $_ := set $tables "cluster" $cluster -}}
{{- else -}}
{{- $_ := unset $tables "cluster" -}}
{{- end -}}
# Written by the Helm chart deploy/helm/sluice from its values; docs/configuration.md
# lists every key. Flags in the pod's args add the pod's own addresses.
{{- range $key, $value := $global }}
{{ $key }} = {{ include "sluice.tomlValue" $value }}
{{- end }}
{{ range $name, $table := $tables }}
[{{ $name }}]
{{- range $key, $value := $table }}
{{ $key }} = {{ include "sluice.tomlValue" $value }}
{{- end }}
{{ end -}}
{{- with .Values.config.extraToml }}
{{ . }}
{{- end -}}
{{- end -}}
