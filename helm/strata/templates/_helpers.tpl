{{/* Names */}}
{{- define "strata.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "strata.fullname" -}}
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

{{/* "<fullname>-<component>", within 63 characters */}}
{{- define "strata.component" -}}
{{- printf "%s-%s" (include "strata.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "strata.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "strata.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: strata
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* labels of one component: dict "root" . "component" "minio" */}}
{{- define "strata.componentLabels" -}}
{{ include "strata.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ include "strata.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "strata.image" -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- end -}}

{{- define "strata.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Endpoints: the chart's component when enabled, the external one otherwise */}}
{{- define "strata.s3Endpoint" -}}
{{- if .Values.minio.enabled -}}
{{- printf "http://%s:%d" (include "strata.component" (dict "root" . "component" "minio")) (int .Values.minio.port) -}}
{{- else -}}
{{- required "objectStore.endpoint is required when minio.enabled is false" .Values.objectStore.endpoint -}}
{{- end -}}
{{- end -}}

{{- define "strata.catalogHost" -}}
{{- if .Values.postgresql.enabled -}}
{{- include "strata.component" (dict "root" . "component" "postgresql") -}}
{{- else -}}
{{- required "catalog.host is required when postgresql.enabled is false" .Values.catalog.host -}}
{{- end -}}
{{- end -}}

{{- define "strata.jdbcUri" -}}
{{- printf "jdbc:postgresql://%s:%d/%s" (include "strata.catalogHost" .) (int .Values.catalog.port) .Values.catalog.database -}}
{{- end -}}

{{- define "strata.kafkaBootstrap" -}}
{{- if .Values.kafka.enabled -}}
{{- printf "%s:%d" (include "strata.component" (dict "root" . "component" "kafka")) (int .Values.kafka.port) -}}
{{- else -}}
{{- .Values.kafka.bootstrapServers -}}
{{- end -}}
{{- end -}}

{{- define "strata.warehouse" -}}
{{- printf "s3://%s/%s" .Values.objectStore.bucket (trimAll "/" .Values.objectStore.path) | trimSuffix "/" -}}
{{- end -}}

{{/* Secret names and keys */}}
{{- define "strata.objectStoreSecret" -}}
{{- default (include "strata.component" (dict "root" . "component" "object-store")) .Values.objectStore.existingSecret -}}
{{- end -}}

{{- define "strata.catalogSecret" -}}
{{- default (include "strata.component" (dict "root" . "component" "catalog")) .Values.catalog.existingSecret -}}
{{- end -}}

{{- define "strata.icebergRestSecret" -}}
{{- default (include "strata.component" (dict "root" . "component" "iceberg-rest")) .Values.strata.icebergRest.existingSecret -}}
{{- end -}}

{{/* "true" when the Iceberg REST catalog requires a bearer token */}}
{{- define "strata.icebergRestAuth" -}}
{{- if or .Values.strata.icebergRest.token .Values.strata.icebergRest.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "strata.paimonRestSecret" -}}
{{- default (include "strata.component" (dict "root" . "component" "paimon-rest")) .Values.strata.paimonRest.existingSecret -}}
{{- end -}}

{{/* "true" when the Paimon REST catalog requires a bearer token */}}
{{- define "strata.paimonRestAuth" -}}
{{- if or .Values.strata.paimonRest.token .Values.strata.paimonRest.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "strata.icebergRestUri" -}}
{{- printf "http://%s:%d" (include "strata.component" (dict "root" . "component" "iceberg-rest")) (int .Values.strata.icebergRest.port) -}}
{{- end -}}

{{/* Trino's `strata` catalog: Strata tables through the Iceberg REST catalog, data files on the object store */}}
{{- define "strata.trinoStrataCatalog" -}}
connector.name=iceberg
iceberg.catalog.type=rest
iceberg.rest-catalog.uri={{ include "strata.icebergRestUri" . }}
{{- if include "strata.icebergRestAuth" . }}
iceberg.rest-catalog.security=OAUTH2
iceberg.rest-catalog.oauth2.token=${ENV:STRATA_ICEBERG_REST_TOKEN}
{{- end }}
iceberg.security=read_only
fs.native-s3.enabled=true
s3.endpoint={{ include "strata.s3Endpoint" . }}
s3.region={{ .Values.objectStore.region }}
s3.path-style-access=true
s3.aws-access-key=${ENV:AWS_ACCESS_KEY_ID}
s3.aws-secret-key=${ENV:AWS_SECRET_ACCESS_KEY}
{{- end -}}

{{/* true when the chart renders Trino's `strata` catalog */}}
{{- define "strata.trinoStrataCatalogEnabled" -}}
{{- if and .Values.strata.icebergRest.enabled (not (hasKey .Values.trino.catalogs "strata")) -}}true{{- end -}}
{{- end -}}

{{- define "strata.grafanaSecret" -}}
{{- default (include "strata.component" (dict "root" . "component" "grafana")) .Values.grafana.existingSecret -}}
{{- end -}}

{{/* Environment shared by every Strata container */}}
{{- define "strata.env" -}}
- name: STRATA_WAREHOUSE
  value: {{ include "strata.warehouse" . | quote }}
- name: STRATA_JDBC_URI
  value: {{ include "strata.jdbcUri" . | quote }}
- name: STRATA_JDBC_USER
  value: {{ .Values.catalog.user | quote }}
- name: STRATA_JDBC_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "strata.catalogSecret" . }}
      key: password
- name: AWS_ENDPOINT_URL
  value: {{ include "strata.s3Endpoint" . | quote }}
- name: AWS_REGION
  value: {{ .Values.objectStore.region | quote }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "strata.objectStoreSecret" . }}
      key: access-key
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "strata.objectStoreSecret" . }}
      key: secret-key
- name: METRICS_HOST
  value: {{ .Values.strata.metricsHost | quote }}
- name: STRATA_LOG_LEVEL
  value: {{ .Values.strata.logLevel | quote }}
- name: STRATA_STOP_TIMEOUT_SECONDS
  value: {{ .Values.strata.stopTimeoutSeconds | quote }}
{{- if .Values.strata.catalogOptions }}
- name: STRATA_CATALOG_OPTIONS
  value: {{ include "strata.catalogOptions" . | quote }}
{{- end }}
{{- with .Values.strata.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "strata.catalogOptions" -}}
{{- $pairs := list -}}
{{- range $key, $value := .Values.strata.catalogOptions -}}
{{- $pairs = append $pairs (printf "%s=%v" $key $value) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/*
A Strata Deployment: dict "root" . "component" "compaction" "role" "compaction" "values" <section>
"metricsPort" <port> "env" <extra env list> "volumes" <bool: checkpoint PVC>
*/}}
{{- define "strata.deployment" -}}
{{- $root := .root -}}
{{- $values := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "strata.component" . }}
  labels:
    {{- include "strata.componentLabels" . | nindent 4 }}
spec:
  replicas: 1
  # one writer per job: never two pods of the same job at once
  strategy:
    type: Recreate
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "strata.selectorLabels" . | nindent 8 }}
      annotations:
        checksum/secrets: {{ include (print $root.Template.BasePath "/secrets.yaml") $root | sha256sum }}
    spec:
      {{- include "strata.imagePullSecrets" $root | nindent 6 }}
      automountServiceAccountToken: false
      {{- include "strata.podNetworking" $root | nindent 6 }}
      terminationGracePeriodSeconds: {{ $root.Values.strata.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $root.Values.strata.podSecurityContext | nindent 8 }}
      initContainers:
        - name: init
          image: {{ include "strata.image" $root.Values.strata.image | quote }}
          imagePullPolicy: {{ $root.Values.strata.image.pullPolicy }}
          args: ["init"]
          env:
            {{- include "strata.env" $root | nindent 12 }}
            - name: STRATA_DATABASES
              value: {{ join "," $root.Values.strata.databases | quote }}
          securityContext:
            {{- toYaml $root.Values.strata.securityContext | nindent 12 }}
          resources:
            requests: {cpu: 50m, memory: 128Mi}
            limits: {memory: 512Mi}
      containers:
        - name: {{ .role }}
          image: {{ include "strata.image" $root.Values.strata.image | quote }}
          imagePullPolicy: {{ $root.Values.strata.image.pullPolicy }}
          args: [{{ .role | quote }}]
          env:
            {{- include "strata.env" $root | nindent 12 }}
            - name: METRICS_PORT
              value: {{ .metricsPort | quote }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ .metricsPort }}
              protocol: TCP
          startupProbe:
            httpGet: {path: /metrics, port: metrics}
            periodSeconds: 5
            failureThreshold: 60
          readinessProbe:
            httpGet: {path: /metrics, port: metrics}
            periodSeconds: 10
          livenessProbe:
            httpGet: {path: /metrics, port: metrics}
            periodSeconds: 20
            failureThreshold: 3
          securityContext:
            {{- toYaml $root.Values.strata.securityContext | nindent 12 }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          {{- if .checkpoint }}
          volumeMounts:
            - name: checkpoints
              mountPath: /var/lib/strata/checkpoints
          {{- end }}
      {{- if .checkpoint }}
      volumes:
        - name: checkpoints
          persistentVolumeClaim:
            claimName: {{ include "strata.component" . }}-checkpoints
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "strata.component" . }}
  labels:
    {{- include "strata.componentLabels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "strata.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .metricsPort }}
      targetPort: metrics
      protocol: TCP
{{- end -}}

{{/* A PVC spec body: dict "size" .. "storageClass" .. */}}
{{- define "strata.pvcSpec" -}}
accessModes: [ReadWriteOnce]
{{- if .storageClass }}
storageClassName: {{ .storageClass | quote }}
{{- end }}
resources:
  requests:
    storage: {{ .size }}
{{- end -}}

{{/* Pod-level networking of every pod: host network and extra /etc/hosts entries */}}
{{- define "strata.podNetworking" -}}
{{- if .Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- with .Values.hostAliases }}
hostAliases:
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* "<listenAddress>:<port>" (":<port>", all interfaces, when listenAddress is empty): dict "root" . "port" N */}}
{{- define "strata.listen" -}}
{{- printf "%s:%d" .root.Values.listenAddress (int .port) -}}
{{- end -}}

{{/* The host a process of a pod uses to reach a server of the same pod */}}
{{- define "strata.localHost" -}}
{{- default "localhost" .Values.listenAddress -}}
{{- end -}}

{{/*
Update strategy of the Deployments that otherwise roll (Trino, Grafana, the Iceberg REST catalog).
On the host network a new pod cannot start beside the old one (same node ports), so the old one
goes first. Recreate rather than maxSurge 0 / maxUnavailable 1: with the latter one replica may be
unavailable, and `helm install --wait` would not wait for the pod at all.
*/}}
{{- define "strata.rollingStrategy" -}}
{{- if .Values.hostNetwork }}
strategy:
  type: Recreate
{{- end }}
{{- end -}}
