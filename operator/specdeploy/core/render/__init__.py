"""Rendering (pure): from (CR, target config, drafter config, profile, engine version) to the objects the
operator applies. ``specdeploy render`` prints the same objects. One concern per module:

- ``objects``: the workload objects (Deployment/LeaderWorkerSet, Service, PDB, engine ConfigMap,
  PodMonitor), the engine container's resources, the engine config, the image choice, and ``render``,
  which assembles them;
- ``argv``: the engine's command line per (engine, method), kubelet ``$(VAR)`` expansion and escaping;
- ``children``: names, labels and owner metadata every child object shares, and the pod's paths;
- ``guard``: the speculation guard merged into the speculative-config argv;
- ``tuning``: the tuned fused-MoE kernels (tuning Job, tuned ConfigMap, the pods' volumes);
- ``strip``: speculation removed from an argv (a benchmark's baseline variant);
- ``gate``: the tenancy policy before any pod (``render`` applies it; ``admit`` for the resolver and the inspector
  Job; ``benchmark_refusals`` for a SpeculativeBenchmark);
- ``jobs``: the config-inspector Job and the benchmark client Job's pod.

Only these modules build pod specs (tests/unit/test_pod_choke_point.py).

Import the entry points from this package, not from the modules: the layout inside may change.
"""

from .argv import ARG_BUILDERS, escape_kubelet_vars, expand_kubelet_vars, method_render_problem
from ..cache import HF_HOME
from .children import CONFIG_HASH_ANNOTATION, RUNTIME_COMMAND, child_labels, names, selector_labels
from .guard import apply_guard, guard_limit, plan_guard
from .gate import Admitted, PolicyRefused, admit, benchmark_claims, benchmark_refusals, refusal_text, with_drafter
from .jobs import build_inspector_job, client_pod_spec, inspector_job_name
from .objects import (RenderError, Rendered, build_canary, build_configmap, build_deployment, build_engine_config,
                      build_leaderworkerset, build_pdb, build_podmonitor, build_service, choose_image, pin_commits,
                      render)
from .objects import CPU_POD_DEFAULTS, cpu_kv_cache_gib, pod_resources
from .strip import strip_speculation_args
from .tuning import TUNING_KEY_ANNOTATION, TuningPlan, build_tuned_configmap, build_tuning_job, render_tuning, tuning_plan

__all__ = [
    "Admitted", "PolicyRefused", "admit", "benchmark_claims", "benchmark_refusals", "build_inspector_job",
    "client_pod_spec", "inspector_job_name", "refusal_text", "with_drafter",
    "ARG_BUILDERS", "CONFIG_HASH_ANNOTATION", "CPU_POD_DEFAULTS", "HF_HOME", "RUNTIME_COMMAND", "TUNING_KEY_ANNOTATION",
    "RenderError", "Rendered", "TuningPlan", "apply_guard", "build_canary", "build_configmap", "build_deployment",
    "build_engine_config", "build_leaderworkerset", "build_pdb", "build_podmonitor", "build_service",
    "build_tuned_configmap", "build_tuning_job", "child_labels", "choose_image", "cpu_kv_cache_gib",
    "escape_kubelet_vars", "expand_kubelet_vars", "guard_limit", "method_render_problem", "names", "plan_guard",
    "pin_commits", "pod_resources", "render", "render_tuning", "selector_labels", "strip_speculation_args", "tuning_plan",
]
