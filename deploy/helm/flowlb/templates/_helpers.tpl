{{/*
Labels of every object's metadata: kustomize's (part-of, the base's
`labels:`) and Helm's standard ones. Selectors and pod templates carry
only app.kubernetes.io/name, as deploy/kubernetes has them (a selector
cannot change on upgrade).
*/}}
{{- define "flowlb.labels" -}}
app.kubernetes.io/part-of: flowlb
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "flowlb.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The container's image and, when set, its pull policy. */}}
{{- define "flowlb.containerImage" -}}
image: {{ include "flowlb.image" . }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{- define "flowlb.agentServers" -}}
{{ .Values.config.agentServers | default (printf "flowlb-server.%s.svc.cluster.local:9877" .Release.Namespace) }}
{{- end }}

{{- define "flowlb.octaviaEndpoint" -}}
{{ .Values.config.octaviaEndpoint | default (printf "https://flowlb-server.%s.svc.cluster.local:9876" .Release.Namespace) }}
{{- end }}

{{/*
A key of the ConfigMap flowlb-config as an environment variable's source.
Call with (list NAME KEY).
*/}}
{{- define "flowlb.configEnv" -}}
- name: {{ index . 0 }}
  valueFrom:
    configMapKeyRef:
      name: flowlb-config
      key: {{ index . 1 }}
{{- end }}

{{/*
components/kube-api: the API server's own address for flowlb's pods, on
a cluster without kube-proxy.
*/}}
{{- define "flowlb.kubeAPIEnv" -}}
{{ include "flowlb.configEnv" (list "KUBERNETES_SERVICE_HOST" "kubernetes-service-host") }}
{{ include "flowlb.configEnv" (list "KUBERNETES_SERVICE_PORT" "kubernetes-service-port") }}
{{- end }}

{{/* The data of the ConfigMap flowlb-config. */}}
{{- define "flowlb.configData" -}}
cluster-name: {{ .Values.config.clusterName | quote }}
cluster-ip-cidr: {{ .Values.config.clusterIPCIDR | quote }}
external-cidr: {{ .Values.config.externalCIDR | quote }}
pod-cidrs: {{ .Values.config.podCIDRs | quote }}
agent-servers: {{ include "flowlb.agentServers" . | quote }}
octavia-endpoint: {{ include "flowlb.octaviaEndpoint" . | quote }}
{{- if .Values.keystone.enabled }}
keystone-url: {{ required "keystone.url is required with keystone.enabled" .Values.keystone.url | quote }}
{{- end }}
{{- if .Values.kubernetesAPI.host }}
kubernetes-service-host: {{ .Values.kubernetesAPI.host | quote }}
kubernetes-service-port: {{ required "kubernetesAPI.port is required with kubernetesAPI.host" .Values.kubernetesAPI.port | toString | quote }}
{{- end }}
{{- end }}

{{/*
The pod template annotation that rolls a workload's pods when the data of
the ConfigMap it reads changes, as kustomize's hashed ConfigMap name
does (and only then: not at a new chart version).
*/}}
{{- define "flowlb.configChecksum" -}}
checksum/config: {{ include "flowlb.configData" . | sha256sum }}
{{- end }}
