{{/*
Every object is one of deploy/'s own files (read through the symlinks base/, admission/, dra/,
monitoring/ and prometheus/), changed only where a value says so: with the default values the chart renders what
`kubectl kustomize deploy/base` renders (tests/unit/test_chart.py), and the two cannot drift.
*/}}

{{/* "-GROUP" for a node group other than "default", as deploy/overlays/node-group-* names theirs. */}}
{{- define "cmk.suffix" -}}
{{- if ne .Values.nodeGroup "default" }}-{{ .Values.nodeGroup }}{{ end -}}
{{- end }}

{{/* The labels deploy/base's kustomization puts on every object (and a node group's own). */}}
{{- define "cmk.labels" -}}
app.kubernetes.io/name: cmk-deviceplugin
app.kubernetes.io/part-of: cmk-deviceplugin
{{- if ne .Values.nodeGroup "default" }}
cmk.intel.com/node-group: {{ .Values.nodeGroup }}
{{- end }}
{{- end }}

{{/* A manifest of deploy/ as kustomize renders it: ARGS = (list $ FILE NAMESPACED SUFFIXED), as YAML. */}}
{{- define "cmk.object" -}}
{{- $root := index . 0 }}
{{- $object := $root.Files.Get (index . 1) | fromYaml }}
{{- $metadata := $object.metadata }}
{{- if index . 2 }}
{{- $_ := set $metadata "namespace" $root.Release.Namespace }}
{{- end }}
{{- if index . 3 }}
{{- $_ := set $metadata "name" (printf "%s%s" $metadata.name (include "cmk.suffix" $root)) }}
{{- end }}
{{- $_ := set $metadata "labels" (merge (include "cmk.labels" $root | fromYaml) ($metadata.labels | default dict)) }}
{{- toYaml $object }}
{{- end }}

{{/* kustomize's configMapGenerator name: NAME-HASH, HASH from the data alone (sigs.k8s.io/kustomize/api/hasher). */}}
{{- define "cmk.hashedName" -}}
{{- $hash := dict "data" (index . 1) "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{- printf "%s-%s" (index . 0) ($hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t") -}}
{{- end }}

{{/* The `config` value as the daemon's --config file, and the name of the ConfigMap holding it. */}}
{{- /* The daemon's config file: deploy/base's config.yaml as written (its comments show the pool size keys)
while the value is that file's. Helm merges the chart's flat defaults into a release's default:/nodes:
sections, and the daemon refuses flat keys beside them: with sections, flat keys join default:, its own winning. */}}
{{- define "cmk.configText" -}}
{{- $config := .Values.config }}
{{- $base := .Files.Get "base/config.yaml" }}
{{- if eq (toYaml $config) (toYaml (fromYaml $base)) }}
{{- $base }}
{{- else if or (hasKey $config "default") (hasKey $config "nodes") }}
{{- $sections := dict "default" (merge (deepCopy ($config.default | default dict)) (omit $config "default" "nodes")) }}
{{- with $config.nodes }}{{ $_ := set $sections "nodes" . }}{{ end }}
{{- printf "%s\n" (toYaml $sections) }}
{{- else }}
{{- printf "%s\n" (toYaml $config) }}
{{- end }}
{{- end }}

{{- /* "true" when any section of the config steers IRQs (the daemon then needs the host's /proc/irq). */}}
{{- define "cmk.irqSteering" -}}
{{- $config := .Values.config }}
{{- $on := index $config "irq-steering" }}
{{- with $config.default }}{{ if index . "irq-steering" }}{{ $on = true }}{{ end }}{{ end }}
{{- range $config.nodes }}{{ with .config }}{{ if index . "irq-steering" }}{{ $on = true }}{{ end }}{{ end }}{{ end }}
{{- if $on }}true{{ end }}
{{- end }}

{{- define "cmk.configName" -}}
{{- include "cmk.hashedName" (list (printf "cmk-config%s" (include "cmk.suffix" .)) (dict "config.yaml" (include "cmk.configText" .))) }}
{{- end }}

{{/* Every object of deploy/'s files matching a glob, with the labels their kustomization puts on them:
ARGS = (list $ GLOB). For the cluster-wide directories, whose kustomization.yaml is .helmignore'd. */}}
{{- define "cmk.manifests" -}}
{{- $root := index . 0 }}
{{- range $path, $_ := $root.Files.Glob (index . 1) }}
{{- range $text := regexSplit "(?m)^---\\s*$" ($root.Files.Get $path) -1 }}
{{- $object := $text | fromYaml }}
{{- if $object.kind }}
{{- $_ := set $object.metadata "labels" (merge (include "cmk.labels" $root | fromYaml) ($object.metadata.labels | default dict)) }}
---
{{ toYaml $object }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
