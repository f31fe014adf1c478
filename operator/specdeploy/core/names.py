"""The vocabulary (pure, no imports but the package's API identity): every name the operator
writes on objects or reads back, every condition type, the operator's metric names, defined once.

Builders (core/render, core/bench/render, controller/*) and readers (controller/monitor,
handlers, the dev kubelet, dashboards, rules, the engine stand-in) import these; a literal
label key, annotation key, component name, field manager, condition type or metric name
elsewhere in the source is a second home for a fact (tests/unit/test_vocabulary.py finds them).
"""

from __future__ import annotations

from .. import API_GROUP, API_VERSION, KIND, PLURAL  # noqa: F401 (N.KIND, N.PLURAL)

GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"  # apiVersion of the product's objects
BENCH_KIND = "SpeculativeBenchmark"

# ----------------------------------------------------------------- labels
# Kubernetes recommended labels (kubernetes.io/docs/concepts/overview/working-with-objects/common-labels).
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"  # the owning SpeculativeDeployment's (or benchmark's) name
LABEL_COMPONENT = "app.kubernetes.io/component"  # one of the COMPONENT_* below
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
MANAGED_BY = "specdeploy"  # the value of managed-by and part-of on everything the operator writes
MANAGED_LABELS = {LABEL_MANAGED_BY: MANAGED_BY}
# The product's own labels.
ENGINE_LABEL = f"{API_GROUP}/engine"  # the engine (vllm, sglang) of an engine or tuning pod
TUNING_KEY_LABEL = f"{API_GROUP}/tuning-key"  # the short key of a kernel-tuning Job's inputs
BENCH_LABEL = f"{API_GROUP}/benchmark"  # the SpeculativeBenchmark a benchmark child belongs to
VARIANT_LABEL = f"{API_GROUP}/variant"  # the benchmark variant of a benchmark child
# a ConfigMap its namespace's admins marked as a benchmark prompt set: spec.prompts.configMapRef names only these
PROMPTS_LABEL = f"{API_GROUP}/prompts"
PROMPTS_LABEL_VALUE = "true"
DEV_KUBELET_LABEL = f"{API_GROUP}/dev-kubelet"  # the dev kubelet's Node (dev rig only)
TRACK_LABEL = f"{API_GROUP}/track"  # canary Deployment, its selector and pods: TRACK_CANARY (stable objects have none)
TRACK_CANARY = "canary"
# Read, never written: the LeaderWorkerSet controller's label on the leader StatefulSet it creates (its value: the
# LeaderWorkerSet's name); the acceptance monitor watches those StatefulSets to trust a leader pod by uid.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"

# app.kubernetes.io/name values
NAME_OPERATOR = "specdeploy"
NAME_ENGINE = "specdeploy-engine"
NAME_TUNING = "specdeploy-tuning"
NAME_BENCH_CLIENT = "specdeploy-bench-client"

# app.kubernetes.io/component values
COMPONENT_ENGINE = "engine"
COMPONENT_TUNING = "kernel-tuning"
COMPONENT_INSPECTOR = "config-inspector"
COMPONENT_WEBHOOK = "webhook"
COMPONENT_LEADER_ELECTION = "leader-election"  # the operator's own Lease (controller/leader.py)
COMPONENT_BENCH_ENGINE = "benchmark-engine"
COMPONENT_BENCH_CLIENT = "benchmark-client"
COMPONENT_BENCH_RESULTS = "benchmark-results"

# ----------------------------------------------------------------- annotations
CONFIG_HASH_ANNOTATION = f"{API_GROUP}/config-hash"  # pod template: digest of the engine config
TUNING_KEY_ANNOTATION = f"{API_GROUP}/tuning-key"  # tuned-kernels ConfigMap: the full key of its inputs
APPLIED_ANNOTATION = f"{API_GROUP}/applied"  # every applied child: digest of the intent (controller/ownership)
RESET_ANNOTATION = f"{API_GROUP}/reset-acceptance-baseline"  # on the CR: a new value learns a new baseline
REVISION_ANNOTATION = f"{API_GROUP}/revision"  # pod template under spec.rollout Canary: the rollout revision
ROLLOUT_ANNOTATION = f"{API_GROUP}/rollout"  # on the CR: a user's request, promote|abort|retry[@token]
INSPECT_INPUTS_ANNOTATION = f"{API_GROUP}/inspect-inputs"  # config-inspector Job: digest of its inputs
PORT_MAP_ANNOTATION = f"dev.{API_GROUP}/port-map"  # dev kubelet: container port -> loopback port
TUNED_KERNELS_KIND = f"{API_GROUP}/tuned-kernels"  # the kind of the tuned-kernels envelope document

# ----------------------------------------------------------------- writes
FIELD_MANAGER = "specdeploy"  # every write names it: managedFields show what the operator owns

# ----------------------------------------------------------------- condition types
# SpeculativeDeployment (controller/status.py computes them)
DRAFTER_COMPATIBLE = "DrafterCompatible"
PROGRESSING = "Progressing"
READY = "Ready"  # also the Pod condition type the monitor and the dev kubelet read
DEGRADED = "Degraded"
SPECULATION_HEALTHY = "SpeculationHealthy"  # the acceptance monitor's
SPECULATION_GUARDED = "SpeculationGuarded"  # spec.speculation.guard as rendered (core/rollout/guard.py)
SPECULATION_PROFITABLE = "SpeculationProfitable"  # live load against the guard (controller/monitor.py)
ROLLOUT = "Rollout"  # spec.rollout Canary: the canary's analysis and decision (core/rollout/canary.py)
# SpeculativeBenchmark (and Job conditions, the same words)
RUNNING = "Running"  # a benchmark's: True while it measures; False with the reason it waits, failed or finished
COMPLETE = "Complete"
FAILED = "Failed"

# ----------------------------------------------------------------- metric names
# The engines' series and the acceptance gauges are named in core/acceptance.py (standard library only,
# beside the math that reads them); the operator's other series are named here.
# The operator's own series (controller/metrics.py registers them; rules and dashboards read them).
OP_RECONCILES = "specdeploy_reconcile_total"
OP_RECONCILE_SECONDS = "specdeploy_reconcile_duration_seconds"
OP_ERRORS = "specdeploy_reconcile_errors_total"
OP_API_WRITES = "specdeploy_api_writes_total"
OP_CHECK_FAILURES = "specdeploy_check_failures_total"
OP_QUEUE_DEPTH = "specdeploy_queue_depth"
OP_MANAGED = "specdeploy_managed_deployments"
OP_LEADER = "specdeploy_leader"
OP_LEADER_TRANSITIONS = "specdeploy_leader_transitions_total"
OP_FENCED_WRITES = "specdeploy_fenced_writes_total"
OP_ROLLOUT_DECISIONS = "specdeploy_rollout_decisions_total"  # namespace, deployment, decision, reason
OP_ROLLOUT_PHASE = "specdeploy_rollout_phase"  # 1 for the current phase: namespace, deployment, phase
OP_ROLLOUT_ANALYSIS = "specdeploy_rollout_analysis"  # namespace, deployment, track, figure


def selector(labels: dict[str, str]) -> str:
    """A label selector string (``k=v,k2=v2``) for a dict of labels."""
    return ",".join(f"{k}={v}" for k, v in labels.items())

