{{/* The release's name for its objects: the release name, with "walrelay" unless it holds it. */}}
{{- define "walrelay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "walrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "walrelay.labels" -}}
{{ include "walrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ include "walrelay.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "walrelay.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "walrelay.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "walrelay.imageTag" .) -}}
{{- end -}}

{{/* The HTTP port, from [http] listen ("0.0.0.0:9187", "[::]:9187"). */}}
{{- define "walrelay.port" -}}
{{- include "walrelay.config" . | fromYaml | dig "http" "listen" "" | splitList ":" | last | int -}}
{{- end -}}

{{/*
The configuration the release runs, as YAML: config, with what the chart sets, after refusing
what must not be in it. Every template that needs a value of walrelay.toml reads it from here.
*/}}
{{- define "walrelay.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- range $section, $keys := $config -}}
{{- if not (kindIs "map" $keys) -}}
{{- fail (printf "config.%s: a section of walrelay.toml is a map of keys" $section) -}}
{{- end -}}
{{- range $key, $value := $keys -}}
{{- if include "walrelay.isSecretKey" $key -}}
{{- fail (printf "config.%s.%s is a secret: give it from a Secret (values secrets.*), not in the ConfigMap" $section $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $source := $config.source | default dict -}}
{{- range list (list "source" "secrets.postgresPassword, PGPASSWORD") (list "nats" "secrets.natsPassword, WALRELAY_NATS_PASSWORD") (list "rabbitmq" "secrets.rabbitmqUrl: the whole URL, WALRELAY_RABBITMQ_URL") (list "webhook" "the receiver's credentials do not belong in the URL: sign with secrets.webhookSecret") -}}
{{- $url := (index $config (index . 0) | default dict).url | default "" -}}
{{- if regexMatch "^[a-z][a-z0-9+.-]*://[^/@?#]*:[^/@?#]*@" $url -}}
{{- fail (printf "config.%s.url holds a password: give it from a Secret (%s)" (index . 0) (index . 1)) -}}
{{- end -}}
{{- end -}}
{{- if regexMatch "(^|\\s)password\\s*=" ($source.url | default "") -}}
{{- fail "config.source.url holds a password: give it from a Secret (secrets.postgresPassword, PGPASSWORD)" -}}
{{- end -}}
{{- $http := $config.http | default dict -}}
{{- $_ := set $http "listen" ($http.listen | default "0.0.0.0:9187") -}}
{{- $_ := set $config "http" $http -}}
{{- $console := $http.console | default "off" -}}
{{- if and (ne $console "off") (not .Values.secrets.consoleToken.secretName) -}}
{{- fail (printf "config.http.console = %q needs secrets.consoleToken: on the pod's address every console request carries the token" $console) -}}
{{- end -}}
{{- $delivery := $config.delivery | default dict -}}
{{- if eq ($delivery.guarantee | default "at-least-once") "exactly-once" -}}
{{- $_ := set $delivery "transactional_id" ($delivery.transactional_id | default (printf "walrelay-%s-%s" .Release.Namespace .Release.Name)) -}}
{{- $_ := set $config "delivery" $delivery -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
Whether a key is a secret, by walrelay's own rule (src/options/secret.rs, docs/operations.md
"Secrets"): its name, lower case with "_" read as ".", contains one of these.
*/}}
{{- define "walrelay.isSecretKey" -}}
{{- $name := . | lower | replace "_" "." -}}
{{- range list "password" "passwd" "passphrase" "secret" "token" "jaas" "credential" "key.pem" "keystore.key" "private.key" "oauthbearer.config" "api.key" "apikey" -}}
{{- if contains . $name -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* One TOML value: a string, a whole or fractional number, a boolean or a list of them. */}}
{{- define "walrelay.tomlValue" -}}
{{- $kind := kindOf . -}}
{{- if eq $kind "string" -}}{{ include "walrelay.tomlString" . }}
{{- else if eq $kind "bool" -}}{{ . }}
{{- else if eq $kind "float64" -}}{{ if eq (floor .) . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if or (eq $kind "int") (eq $kind "int64") -}}{{ . }}
{{- else if eq $kind "slice" -}}[{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ include "walrelay.tomlValue" $e }}{{ end }}]
{{- else -}}{{ fail (printf "a value of kind %s has no place in walrelay.toml" $kind) }}
{{- end -}}
{{- end -}}

{{/* A TOML basic string: JSON's escapes are TOML's, less the HTML ones JSON adds. */}}
{{- define "walrelay.tomlString" -}}
{{- toJson . | replace "\\u0026" "&" | replace "\\u003c" "<" | replace "\\u003e" ">" -}}
{{- end -}}

{{/* walrelay.toml from the configuration: one table per section, keys quoted where TOML needs it. */}}
{{- define "walrelay.toml" -}}
{{- range $section, $keys := (include "walrelay.config" . | fromYaml) }}
[{{ $section }}]
{{- range $key, $value := $keys }}
{{ if regexMatch "^[A-Za-z0-9_-]+$" $key }}{{ $key }}{{ else }}{{ include "walrelay.tomlString" $key }}{{ end }} = {{ include "walrelay.tomlValue" $value }}
{{- end }}
{{ end -}}
{{- end -}}

{{/* The sink records go to: [delivery] sink, Kafka unless it is set. */}}
{{- define "walrelay.sink" -}}
{{- (.Values.config.delivery | default dict).sink | default "kafka" -}}
{{- end -}}

{{/* The environment from Secrets, by secretKeyRef: the same for the relay and the audit. */}}
{{- define "walrelay.secretEnv" -}}
{{- $known := list
  (list "PGPASSWORD" .Values.secrets.postgresPassword)
  (list "WALRELAY_KAFKA_SASL__PASSWORD" .Values.secrets.kafkaSaslPassword)
  (list "WALRELAY_KAFKA_SSL__KEY__PASSWORD" .Values.secrets.kafkaSslKeyPassword)
  (list "WALRELAY_HTTP_CONSOLE_TOKEN" .Values.secrets.consoleToken)
  (list "WALRELAY_SCHEMA_REGISTRY_PASSWORD" .Values.secrets.schemaRegistryPassword)
  (list "WALRELAY_NATS_PASSWORD" .Values.secrets.natsPassword)
  (list "WALRELAY_NATS_TOKEN" .Values.secrets.natsToken)
  (list "WALRELAY_RABBITMQ_URL" .Values.secrets.rabbitmqUrl)
  (list "WALRELAY_SQS_ACCESS_KEY_ID" .Values.secrets.sqsAccessKeyId)
  (list "WALRELAY_SQS_SECRET_ACCESS_KEY" .Values.secrets.sqsSecretAccessKey)
  (list "WALRELAY_WEBHOOK_SECRET" .Values.secrets.webhookSecret) -}}
{{- range $known }}
{{- $ref := index . 1 | default dict }}
{{- if $ref.secretName }}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.secretName }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- range .Values.secrets.extra }}
{{- if not (hasPrefix "WALRELAY_" .name) }}
{{- fail (printf "secrets.extra: %s is not a WALRELAY_* variable" .name) }}
{{- end }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ required "secrets.extra[].secretName" .secretName }}
      key: {{ required "secrets.extra[].key" .key }}
{{- end }}
{{- end -}}

{{/* The pod's security context, the relay's and the audit's. */}}
{{- define "walrelay.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "walrelay.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The volumes both pods mount: the config, the TLS Secrets, and /tmp. */}}
{{- define "walrelay.volumes" -}}
- name: config
  configMap:
    name: {{ include "walrelay.fullname" . }}
{{- range .Values.tls }}
- name: tls-{{ .name }}
  secret:
    secretName: {{ .secretName }}
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.audit.tmpSizeLimit }}
{{- end -}}

{{- define "walrelay.volumeMounts" -}}
- name: config
  mountPath: /etc/walrelay
  readOnly: true
{{- range .Values.tls }}
- name: tls-{{ .name }}
  mountPath: /etc/walrelay-tls/{{ .name }}
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* The stop budget in whole seconds: [limits] shutdown_grace_ms (10 s by default), rounded up. */}}
{{- define "walrelay.stopBudgetSeconds" -}}
{{- $ms := include "walrelay.config" . | fromYaml | dig "limits" "shutdown_grace_ms" 10000 | int -}}
{{- div (add $ms 999) 1000 -}}
{{- end -}}

{{/* With 2 replicas, how long an old pod keeps running after its deletion (0 with 1 replica). */}}
{{- define "walrelay.preStopSleepSeconds" -}}
{{- if gt (int .Values.replicas) 1 -}}{{ .Values.rollout.preStopSleepSeconds | int }}{{- else -}}0{{- end -}}
{{- end -}}
