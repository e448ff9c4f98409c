{{/* Names, labels and the pod parts every workload shares. */}}

{{- define "gpu-portal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-portal.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpu-portal.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpu-portal.serviceAccountName" -}}
{{- default (include "gpu-portal.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "gpu-portal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The hosts Django accepts: the portal URL's, the extra ones, the chart's Service. */}}
{{- define "gpu-portal.allowedHosts" -}}
{{- $svc := include "gpu-portal.fullname" . -}}
{{- $hosts := list (urlParse .Values.portal.url).host $svc (printf "%s.%s.svc" $svc .Release.Namespace) -}}
{{- join "," (concat $hosts .Values.portal.extraAllowedHosts) -}}
{{- end -}}

{{/* Settings (non-secret), as environment variables: the ConfigMap holds them, and the
     pre-install migration Job (which runs before the ConfigMap exists) gets them inline. */}}
{{- define "gpu-portal.settings" -}}
PORTAL_ENV: "production"
PORTAL_URL: {{ .Values.portal.url | quote }}
ALLOWED_HOSTS: {{ include "gpu-portal.allowedHosts" . | quote }}
CSRF_TRUSTED_ORIGINS: {{ printf "%s://%s" (urlParse .Values.portal.url).scheme (urlParse .Values.portal.url).host | quote }}
TIME_ZONE: {{ .Values.portal.timeZone | quote }}
KUBE_IN_CLUSTER: "true"
TRACKER_LEASE_NAMESPACE: {{ .Release.Namespace | quote }}
PORTAL_NAMESPACE: {{ .Release.Namespace | quote }}
PROMETHEUS_URL: {{ .Values.prometheus.url | quote }}
PROMETHEUS_RECORDING_RULES: {{ .Values.prometheus.recordingRules | quote }}
TEAM_NETWORK_POLICY: {{ .Values.teamNetworkPolicy.enabled | quote }}
TEAM_NETWORK_POLICY_INGRESS_NAMESPACES: {{ join "," .Values.teamNetworkPolicy.ingressNamespaces | quote }}
TEAM_NETWORK_POLICY_EGRESS_CIDRS: {{ join "," .Values.teamNetworkPolicy.egressCidrs | quote }}
QUEUEING: {{ .Values.queueing.engine | quote }}
KUEUE_MANAGED: {{ .Values.queueing.kueueManaged | quote }}
STATIC_ROOT: "/app/staticfiles"
LOCAL_LOGIN_ENABLED: {{ .Values.oidc.localLogin | quote }}
{{- if .Values.oidc.issuer }}
OIDC_ISSUER: {{ .Values.oidc.issuer | quote }}
OIDC_CLIENT_ID: {{ .Values.oidc.clientId | quote }}
OIDC_SCOPES: {{ join "," .Values.oidc.scopes | quote }}
OIDC_GROUPS_CLAIM: {{ .Values.oidc.groupsClaim | quote }}
OIDC_DISPLAY_NAME: {{ .Values.oidc.displayName | quote }}
OIDC_SUPPORT_CONTACT: {{ .Values.oidc.supportContact | quote }}
{{- end }}
{{- range $key, $value := .Values.portal.env }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* Secrets: from the operator's existing Secret, by key. */}}
{{- define "gpu-portal.secretEnv" -}}
- name: SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecret.name }}, key: {{ .Values.existingSecret.secretKeyKey }}}}
- name: DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecret.name }}, key: {{ .Values.existingSecret.databaseUrlKey }}}}
- name: REDIS_URL
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecret.name }}, key: {{ .Values.existingSecret.redisUrlKey }}}}
{{- if .Values.oidc.issuer }}
- name: OIDC_CLIENT_SECRET
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecret.name }}, key: {{ .Values.existingSecret.oidcClientSecretKey }}}}
{{- end }}
{{- end -}}

{{/* Pod Security Standards "restricted" for every pod and container. */}}
{{- define "gpu-portal.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "gpu-portal.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* A writable /tmp on a read-only root (gunicorn's heartbeat files, beat's schedule). */}}
{{- define "gpu-portal.tmpVolume" -}}
volumes:
  - name: tmp
    emptyDir: {sizeLimit: 256Mi}
{{- end -}}

{{- define "gpu-portal.tmpMount" -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end -}}
