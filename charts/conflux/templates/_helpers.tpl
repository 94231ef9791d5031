{{/*
The objects' names are fixed, as `conflux install --export` writes them: conflux is one per
cluster (its ClusterRoles, admission policy and webhook configuration are cluster-wide), and
`conflux run` looks for the Lease, the webhook Service and its certificate Secret by these names.
*/}}

{{/* Namespace of every namespaced object. */}}
{{- define "conflux.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "conflux.labels" -}}
app.kubernetes.io/part-of: conflux
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The label selecting conflux's pods. */}}
{{- define "conflux.selectorLabels" -}}
app.kubernetes.io/name: conflux
{{- end -}}

{{/* The ServiceAccount the pods run as and the bindings name. */}}
{{- define "conflux.serviceAccountName" -}}
{{- required "serviceAccount.name must be set" .Values.serviceAccount.name -}}
{{- end -}}

{{/* The container image: repository@digest, or repository:tag (the chart's appVersion by default). */}}
{{- define "conflux.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The RBAC data generated from `conflux install --export` (files/rbac.yaml): every controller in
the order `conflux run --controllers` sorts them, each ClusterRole's rules, and the leader
election Role's.
*/}}
{{- define "conflux.rbac" -}}
{{- .Files.Get "files/rbac.yaml" -}}
{{- end -}}

{{/* The controllers that run, comma-separated in that order, after checking the values. */}}
{{- define "conflux.controllers" -}}
{{- $rbac := include "conflux.rbac" . | fromYaml -}}
{{- if not .Values.controllers -}}
{{- fail "controllers names no controller" -}}
{{- end -}}
{{- range .Values.controllers -}}
{{- if not (has . $rbac.controllers) -}}
{{- fail (printf "controllers: unknown controller %q (known: %s)" . (join ", " $rbac.controllers)) -}}
{{- end -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- if hasPrefix "--protect-mode" . -}}
{{- fail (printf "extraArgs: %s: set protectMode instead, which also grants that mode's RBAC" .) -}}
{{- end -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: without it every replica writes" -}}
{{- end -}}
{{- $on := list -}}
{{- range $rbac.controllers -}}
{{- if has . $.Values.controllers -}}
{{- $on = append $on . -}}
{{- end -}}
{{- end -}}
{{- join "," $on -}}
{{- end -}}

{{/* Whether the protect controller runs as a webhook ("true" or ""). */}}
{{- define "conflux.webhook" -}}
{{- if and (has "protect" .Values.controllers) (eq .Values.protectMode "webhook") -}}true{{- end -}}
{{- end -}}
