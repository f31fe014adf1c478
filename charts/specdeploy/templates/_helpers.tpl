{{/* Chart name. */}}
{{- define "specdeploy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the prefix of every object. Kept to 45 characters so that suffixed names
("-webhook-tls", "-selfsigned") stay valid DNS labels.
*/}}
{{- define "specdeploy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "specdeploy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specdeploy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specdeploy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "specdeploy.labels" -}}
helm.sh/chart: {{ include "specdeploy.chart" . }}
{{ include "specdeploy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specdeploy
{{- end }}

{{/*
The job label of the operator's scrape target. The ServiceMonitor's jobLabel names this Service
label, so prometheus-operator sets job="specdeploy-operator" whatever the release is called;
the SpecdeployOperatorDown alert and the operator dashboard select it (rules.OPERATOR_JOB).
*/}}
{{- define "specdeploy.operatorJob" -}}
specdeploy-operator
{{- end }}

{{/*
Fail with a clear message when a prometheus-operator object is asked for on a cluster that does not
serve monitoring.coreos.com/v1 (Helm's own error is "no matches for kind ... ensure CRDs are installed
first", after part of the release may have been applied). Argument: (list $ "value.path" "Kind").
*/}}
{{- define "specdeploy.requireMonitoringAPI" -}}
{{- $root := index . 0 }}
{{- if not (or $root.Values.monitoring.skipCRDCheck ($root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) }}
{{- fail (printf "%s=true needs the prometheus-operator API monitoring.coreos.com/v1 (%s), which this cluster does not serve: install prometheus-operator or kube-prometheus-stack first, or set %s=false. With helm template, pass --api-versions monitoring.coreos.com/v1 (or --set monitoring.skipCRDCheck=true)." (index . 1) (index . 2) (index . 1)) }}
{{- end }}
{{- end }}

{{- define "specdeploy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specdeploy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "specdeploy.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The note an operator pod carries while image.repository is the unpublished default (NOTES.txt warns too):
what its ImagePullBackOff means and the fix. Empty for any other image.
*/}}
{{- define "specdeploy.unpublishedImageNote" -}}
{{- if and (eq .Values.image.repository "ghcr.io/specdeploy/operator") (not .Values.image.digest) -}}
ghcr.io/specdeploy/operator is not published, so this pod cannot pull it (ImagePullBackOff). Build and push the images with `bash images/build.sh --push REGISTRY` from the repository, then `helm upgrade {{ .Release.Name }} charts/specdeploy -n {{ .Release.Namespace }} --reuse-values --set image.repository=REGISTRY/specdeploy/operator`.
{{- end -}}
{{- end }}

{{- define "specdeploy.webhookService" -}}
{{- printf "%s-webhook" (include "specdeploy.fullname" .) }}
{{- end }}

{{- define "specdeploy.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "specdeploy.fullname" .) }}
{{- end }}

{{- define "specdeploy.webhookCertificate" -}}
{{- printf "%s-webhook" (include "specdeploy.fullname" .) }}
{{- end }}

{{/*
The namespaces the operator watches and holds workload rules in, as JSON (read with fromJsonArray):
watch.namespaces, else the release namespace; [] with rbac.clusterWide (every namespace).
*/}}
{{- define "specdeploy.watchedNamespaces" -}}
{{- if .Values.rbac.clusterWide }}
{{- if .Values.watch.namespaces }}
{{- fail "rbac.clusterWide=true watches every namespace: leave watch.namespaces empty, or set rbac.clusterWide=false to watch only the listed namespaces" }}
{{- end }}
{{- toJson list }}
{{- else }}
{{- toJson (default (list .Release.Namespace) .Values.watch.namespaces) }}
{{- end }}
{{- end }}

{{/* The engine pods' ServiceAccount name, or "" when the operator should not name one. */}}
{{- define "specdeploy.engineServiceAccount" -}}
{{- if .Values.policy.engineServiceAccount.name }}
{{- .Values.policy.engineServiceAccount.name }}
{{- else if and .Values.policy.engineServiceAccount.create (not .Values.rbac.clusterWide) }}
{{- printf "%s-engine" (include "specdeploy.fullname" .) }}
{{- end }}
{{- end }}

{{/* True (non-empty) when the operator itself issues the webhook certificate and patches caBundle. */}}
{{- define "specdeploy.selfManagedCerts" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) }}true{{- end }}
{{- end }}

{{/*
Rules the operator needs in every namespace it watches. One list, used as a ClusterRole
when watching all namespaces and as a Role in each namespace otherwise. Why each rule
exists, with the code that needs it (operator/specdeploy/controller/):
*/}}
{{- define "specdeploy.workloadRules" -}}
# The custom resource: kopf lists and watches it (handlers.on_speculativedeployment feeds the
# controller's cache); the operator never GETs, creates, updates or deletes one.
- apiGroups: ["specdeploy.io"]
  resources: ["speculativedeployments"]
  verbs: ["list", "watch"]
# Status: Executor.write_status merge-patches the status subresource (conditions, resolved).
- apiGroups: ["specdeploy.io"]
  resources: ["speculativedeployments/status"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion=true (core/render/, the inspector Job);
# with the OwnerReferencesPermissionEnforcement admission plugin that needs update on the owner's
# finalizers subresource. The operator adds no finalizer itself.
- apiGroups: ["specdeploy.io"]
  resources: ["speculativedeployments/finalizers"]
  verbs: ["update"]
# SpeculativeBenchmarks (controller/benchmark.py): kopf lists and watches them (handlers.on_speculativebenchmark;
# the same watch feeds spec.speculation.guard.fromBenchmark: Controller.observe_benchmark, Controller.benchmarks);
# BenchmarkController._expire deletes one spec.ttlSecondsAfterFinished after it finished. No get, create or update.
- apiGroups: ["specdeploy.io"]
  resources: ["speculativebenchmarks"]
  verbs: ["list", "watch", "delete"]
# Their status: BenchmarkController._status merge-patches phase, progress, points, recommendation.
- apiGroups: ["specdeploy.io"]
  resources: ["speculativebenchmarks/status"]
  verbs: ["patch"]
# The variant Deployments/Services/ConfigMaps, client Jobs and the results ConfigMap carry ownerReferences
# to the benchmark with blockOwnerDeletion=true (core/bench/render.py): update on its finalizers subresource.
- apiGroups: ["specdeploy.io"]
  resources: ["speculativebenchmarks/finalizers"]
  verbs: ["update"]
# ConfigMaps: watched (handlers.on_configmap: the target/drafter config.json sources and the engine
# ConfigMap child); get on a cache miss (Resolver._from_configmap, and the admission webhook's
# OperatorConfigs._configmap); create (Executor.create_child, when not cached), server-side apply (patch)
# and delete of the engine ConfigMap child (Executor.apply_child, Executor.apply).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Services: the engine Service child; watched (handlers.on_service), created, server-side applied and deleted
# in Executor.apply; get: is the name taken by a Service it does not control (Executor.claim on a watch-cache
# miss, the benchmark's claims through it; docs/concepts/security.md).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Deployments: the single-node engine workload; watched (handlers.on_deployment), created, server-side applied and
# deleted in Executor.apply (deleted when the CR switches to multi-node). A benchmark's variant
# Deployment: get (is it Ready?), created and deleted through the same Executor (BenchmarkController._put,
# _delete_variant: Executor.create_child, Executor._delete with a uid precondition);
# the serving Deployment: get only (spec.useServingDeployment, BenchmarkController._measure_serving).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# PodDisruptionBudgets: the engine PDB child; watched (handlers.on_pdb), created, server-side applied and
# deleted in Executor.apply; get: is the name taken by one it does not control (Executor.claim on a cache miss).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# NetworkPolicies: the engine NetworkPolicy child (engineNetworkPolicy.enabled); watched (handlers.on_networkpolicy)
# so that one left over after the value is turned off is deleted; created, server-side applied and deleted in
# Executor.apply; get: the ownership check on a cache miss (Executor.claim). A benchmark variant's NetworkPolicy
# (same value): created, claimed and deleted through the Executor; list: BenchmarkController._cleanup.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# LeaderWorkerSets: the multi-node engine workload (spec.nodes > 1); watched (handlers.on_leaderworkerset),
# created, server-side applied and deleted in Executor.apply; get: the ownership check on a cache miss
# (Executor.claim).
# Harmless when the LWS CRD is not installed.
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# ReplicaSets and StatefulSets: watched only (list, watch; never get or written), by label (the engine pods'
# ReplicaSets; the LeaderWorkerSet controller's StatefulSets): the acceptance monitor scrapes and probes an engine
# pod only when its owners' uids lead to the SpeculativeDeployment's own workload (handlers.on_engine_replicaset,
# handlers.on_lws_statefulset; controller/monitor.py), never on its labels alone.
- apiGroups: ["apps"]
  resources: ["replicasets", "statefulsets"]
  verbs: ["list", "watch"]
# PodMonitors: the engine's prometheus-operator scrape config, created only when the CRD is served;
# watched (handlers.on_podmonitor), created, server-side applied and deleted in Executor.apply; get: the
# ownership check on a cache miss (Executor.claim).
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Jobs: the config inspector that reads config.json from a PVC (Resolver._from_pvc: get, create, and
# delete when its inputs changed); watched so its completion requeues the owner (handlers.on_inspector_job).
# The kernel-tuning Job: get, and created once (Executor.tuning; a Job's template is immutable). A benchmark's
# client Job: claimed (get), created once (Executor.create_child) and deleted (Executor._delete, uid precondition).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
# Pods: list the inspector Job's pods (label job-name=...) to read the termination message that
# carries config.json (Resolver._from_pvc); list and watch the engine pods (label selector
# app.kubernetes.io/managed-by=specdeploy,app.kubernetes.io/component=engine: handlers.on_engine_pod)
# whose /metrics the acceptance monitor scrapes (controller/monitor.py). No get and no write.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# Pod logs: the benchmark client Job's pod prints its result as the last log line
# (BenchmarkController._client_log reads the log's tail; core/bench/result.py parses it, untrusted).
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
# PersistentVolumeClaims: Executor.policy_labels reads a claim's labels for the tenancy policy's pvcLabel
# rule (core/policy.py). get only: no list, no watch, no write.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get"]
# Events: Executor.event posts core/v1 Events on condition transitions (kopf's own posting is off).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- with .Values.hub.tokenSecrets }}
# Hub tokens: Resolver._token GETs the Secret named by spec.{target,drafter}.tokenSecretRef. Only the
# names listed in hub.tokenSecrets (resourceNames); no list or watch, so no other Secret is readable.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: {{ toJson . }}
  verbs: ["get"]
{{- end }}
{{- end }}

{{/* Cluster-scoped rules, always in a ClusterRole (these resources have no namespace). */}}
{{- define "specdeploy.clusterRules" -}}
# CRDs: kopf lists and watches CustomResourceDefinitions (kopf resource_observer) so that watches on
# LeaderWorkerSets and PodMonitors start when those CRDs are installed after the operator. Read-only.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- if include "specdeploy.selfManagedCerts" . }}
# Webhook configurations: the operator writes its CA into caBundle of the chart's own two
# configurations (certs.SelfSigned.sync_ca_bundle: get, JSON patch) and watches them to set it again
# at once when they change (list/watch with a metadata.name field selector), by name only. Not
# needed with cert-manager (its cainjector does it).
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"]
  resourceNames: [{{ include "specdeploy.fullname" . | quote }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}

{{/* Fields shared by the validating and mutating webhook. */}}
{{- define "specdeploy.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: {{ .Values.webhook.failurePolicy }}
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- if .Values.webhook.namespaceSelector }}
namespaceSelector:
  {{- toYaml .Values.webhook.namespaceSelector | nindent 2 }}
{{- else if not .Values.rbac.clusterWide }}
# Only the watched namespaces (webhook.namespaceSelector overrides this).
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: In
      values: {{ include "specdeploy.watchedNamespaces" . }}
{{- end }}
{{- with .Values.webhook.objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
rules:
  # SpeculativeBenchmarks are validated only (controller/admission._benchmark_review); /mutate admits them unchanged
  - apiGroups: ["specdeploy.io"]
    apiVersions: ["v1alpha1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["speculativedeployments", "speculativebenchmarks"]
    scope: Namespaced
{{- end }}

{{/*
Non-empty when the operator reads the webhook's client CA from kube-system/extension-apiserver-authentication
(webhook.clientAuth on, no caConfigMap): the chart then binds the built-in Role extension-apiserver-authentication-reader.
*/}}
{{- define "specdeploy.clientCAFromCluster" -}}
{{- if and .Values.webhook.enabled .Values.webhook.clientAuth.enabled (not .Values.webhook.clientAuth.caConfigMap) -}}true{{- end -}}
{{- end }}

{{/*
Non-empty when the webhook's client CA comes from a ConfigMap of the release namespace (mounted at /client-ca).
*/}}
{{- define "specdeploy.clientCAMounted" -}}
{{- if and .Values.webhook.enabled .Values.webhook.clientAuth.enabled .Values.webhook.clientAuth.caConfigMap -}}true{{- end -}}
{{- end }}
