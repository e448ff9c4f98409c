{{/* One of the portal's Deployments. Arguments (a dict): root, component, replicas,
     args (the container's command), resources, and optional probes (a YAML string),
     ports, env (a YAML string), strategy, noApi (no Kubernetes API credentials). */}}
{{- define "gpu-portal.deployment" -}}
{{- $root := .root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "gpu-portal.fullname" $root }}-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gpu-portal.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ .replicas }}
  {{- with .strategy }}
  strategy: {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels: {{- include "gpu-portal.selector" (dict "root" $root "component" .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "gpu-portal.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
      annotations:
        # Settings changed: roll the pods.
        checksum/settings: {{ include "gpu-portal.settings" $root | sha256sum }}
    spec:
      serviceAccountName: {{ include "gpu-portal.serviceAccountName" $root }}
      automountServiceAccountToken: {{ not .noApi }}
      {{- include "gpu-portal.podSecurity" $root | nindent 6 }}
      containers:
        - name: {{ .component }}
          image: {{ include "gpu-portal.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: {{- toYaml .args | nindent 12 }}
          envFrom:
            - configMapRef:
                name: {{ include "gpu-portal.fullname" $root }}
          env:
            {{- include "gpu-portal.secretEnv" $root | nindent 12 }}
            {{- with .env }}
            {{- . | trim | nindent 12 }}
            {{- end }}
          {{- with .ports }}
          ports: {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .probes }}
          {{- . | trim | nindent 10 }}
          {{- end }}
          resources: {{- toYaml .resources | nindent 12 }}
          {{- include "gpu-portal.containerSecurity" $root | nindent 10 }}
          {{- include "gpu-portal.tmpMount" $root | nindent 10 }}
      {{- include "gpu-portal.tmpVolume" $root | nindent 6 }}
{{- end -}}
