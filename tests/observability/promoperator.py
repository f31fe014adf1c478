"""What prometheus-operator makes of a ServiceMonitor or PodMonitor, for a Prometheus without Kubernetes.

prometheus-operator turns each monitor into a scrape job with kubernetes_sd and relabel
rules (pkg/prometheus/promcfg.go, ``generateServiceMonitorConfig`` and
``generatePodMonitorConfig``; read at prometheus-operator commit 6adcebc5). The parts that
decide a target's labels:

- ServiceMonitor (role endpoints): keep targets whose Service carries every
  ``selector.matchLabels`` label and whose endpoint port name is the endpoint's ``port``;
  ``namespace`` <- __meta_kubernetes_namespace, ``service`` <- __meta_kubernetes_service_name,
  ``pod`` <- __meta_kubernetes_pod_name, ``container`` <- __meta_kubernetes_pod_container_name;
  ``job`` <- __meta_kubernetes_service_name ("generate a safe job name from the service
  name"), then, when ``spec.jobLabel`` is set, ``job`` <- the Service label it names
  (regex ``(.+)``: only when that label has a value); ``endpoint`` <- the port name.
- PodMonitor (role pod): keep pods carrying every ``selector.matchLabels`` label and the
  container port named ``port``; ``namespace``, ``container``, ``pod`` as above; ``job`` <-
  "<PodMonitor namespace>/<PodMonitor name>", then the pod label named by ``spec.jobLabel``
  if set and non-empty; ``endpoint`` <- the port name.

Debian's Prometheus 2.42 has no kubernetes_sd, so ``file_sd`` hands Prometheus one target
with the ``__meta_kubernetes_*`` labels kubernetes_sd would attach, and the relabel rules
below, built from the monitor the way prometheus-operator builds them, do the rest inside
the real Prometheus. ``expected_*_labels`` derive the same labels in Python, so a test can
check that Prometheus and the derivation agree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize(name: str) -> str:
    """prometheus-operator's sanitizeLabelName."""
    return _INVALID.sub("_", name)


def _selects(match_labels: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in (match_labels or {}).items())


# ----------------------------------------------------------------- ServiceMonitor


def service_for(monitor: dict, objects: list[dict]) -> dict:
    """The one Service of ``objects`` the ServiceMonitor selects (labels and namespace)."""
    spec = monitor["spec"]
    names = (spec.get("namespaceSelector") or {}).get("matchNames") or [monitor["metadata"]["namespace"]]
    found = [o for o in objects if o["kind"] == "Service" and o["metadata"].get("namespace") in names
             and _selects(spec["selector"].get("matchLabels"), o["metadata"].get("labels") or {})]
    assert len(found) == 1, f"the ServiceMonitor selects {[o['metadata']['name'] for o in found]}"
    return found[0]


def expected_service_monitor_labels(monitor: dict, service: dict, pod: str, container: str) -> dict[str, str]:
    (ep,) = monitor["spec"]["endpoints"]
    meta = service["metadata"]
    job = meta["name"]
    job_label = monitor["spec"].get("jobLabel")
    if job_label and (meta.get("labels") or {}).get(job_label):
        job = meta["labels"][job_label]
    return {"namespace": meta["namespace"], "service": meta["name"], "pod": pod, "container": container,
            "job": job, "endpoint": ep["port"]}


def service_monitor_scrape_config(monitor: dict, service: dict, target: str, pod: str, container: str,
                                  sd_dir: Path, interval: str = "1s") -> dict:
    """A scrape config with file_sd (one target carrying kubernetes_sd's endpoint-role meta
    labels) and prometheus-operator's relabel rules for this ServiceMonitor."""
    (ep,) = monitor["spec"]["endpoints"]
    meta = service["metadata"]
    labels = {"__meta_kubernetes_namespace": meta["namespace"], "__meta_kubernetes_service_name": meta["name"],
              "__meta_kubernetes_pod_name": pod, "__meta_kubernetes_pod_container_name": container,
              "__meta_kubernetes_endpoint_port_name": ep["port"],
              "__meta_kubernetes_endpoint_address_target_kind": "Pod",
              "__meta_kubernetes_endpoint_address_target_name": pod}
    for k, v in (meta.get("labels") or {}).items():
        labels[f"__meta_kubernetes_service_label_{sanitize(k)}"] = v
        labels[f"__meta_kubernetes_service_labelpresent_{sanitize(k)}"] = "true"
    relabel = []
    for k, v in sorted((monitor["spec"]["selector"].get("matchLabels") or {}).items()):
        relabel.append({"action": "keep", "source_labels": [f"__meta_kubernetes_service_label_{sanitize(k)}",
                                                            f"__meta_kubernetes_service_labelpresent_{sanitize(k)}"],
                        "regex": f"({v});true"})
    relabel += [
        {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": ep["port"]},
        {"source_labels": ["__meta_kubernetes_endpoint_address_target_kind",
                           "__meta_kubernetes_endpoint_address_target_name"],
         "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
    ]
    if monitor["spec"].get("jobLabel"):
        relabel.append({"source_labels": [f"__meta_kubernetes_service_label_{sanitize(monitor['spec']['jobLabel'])}"],
                        "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
    relabel.append({"target_label": "endpoint", "replacement": ep["port"]})
    name = f"serviceMonitor/{monitor['metadata']['namespace']}/{monitor['metadata']['name']}/0"
    return _file_sd_job(name, target, labels, relabel, sd_dir, ep.get("path", "/metrics"), interval)


# ----------------------------------------------------------------- PodMonitor


def expected_pod_monitor_labels(monitor: dict, pod_labels: dict, pod: str, container: str) -> dict[str, str]:
    (ep,) = monitor["spec"]["podMetricsEndpoints"]
    meta = monitor["metadata"]
    job = f"{meta['namespace']}/{meta['name']}"
    job_label = monitor["spec"].get("jobLabel")
    if job_label and pod_labels.get(job_label):
        job = pod_labels[job_label]
    return {"namespace": meta["namespace"], "container": container, "pod": pod, "job": job, "endpoint": ep["port"]}


def pod_monitor_scrape_config(monitor: dict, pod_labels: dict, port_name: str, target: str, pod: str, container: str,
                              sd_dir: Path, interval: str = "1s") -> dict:
    """A scrape config with file_sd (one target carrying kubernetes_sd's pod-role meta labels)
    and prometheus-operator's relabel rules for this PodMonitor."""
    (ep,) = monitor["spec"]["podMetricsEndpoints"]
    meta = monitor["metadata"]
    labels = {"__meta_kubernetes_namespace": meta["namespace"], "__meta_kubernetes_pod_name": pod,
              "__meta_kubernetes_pod_container_name": container,
              "__meta_kubernetes_pod_container_port_name": port_name}
    for k, v in pod_labels.items():
        labels[f"__meta_kubernetes_pod_label_{sanitize(k)}"] = v
        labels[f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"] = "true"
    relabel = []
    for k, v in sorted((monitor["spec"]["selector"].get("matchLabels") or {}).items()):
        relabel.append({"action": "keep", "source_labels": [f"__meta_kubernetes_pod_label_{sanitize(k)}",
                                                            f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"],
                        "regex": f"({v});true"})
    relabel += [
        {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": ep["port"]},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
    ]
    if monitor["spec"].get("jobLabel"):
        relabel.append({"source_labels": [f"__meta_kubernetes_pod_label_{sanitize(monitor['spec']['jobLabel'])}"],
                        "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
    relabel.append({"target_label": "endpoint", "replacement": ep["port"]})
    name = f"podMonitor/{meta['namespace']}/{meta['name']}/0"
    return _file_sd_job(name, target, labels, relabel, sd_dir, ep.get("path", "/metrics"), interval)


def _file_sd_job(name: str, target: str, labels: dict, relabel: list[dict], sd_dir: Path, path: str,
                 interval: str) -> dict:
    sd_dir.mkdir(parents=True, exist_ok=True)
    sd_file = sd_dir / (sanitize(name) + ".json")
    sd_file.write_text(json.dumps([{"targets": [target], "labels": labels}]))
    return {"job_name": name, "metrics_path": path, "honor_labels": False, "scrape_interval": interval,
            "scrape_timeout": interval, "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}],
            "relabel_configs": relabel}
