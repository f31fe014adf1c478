"""`specdeploy operator run` as a process: where it listens, whether it serves the webhook, what it logs.

- Outside a cluster it listens on loopback only (metrics, health probes), and serves no admission webhook
  unless --webhook is given; --bind-address / --metrics-bind-address choose the address, and
  inside a pod (KUBERNETES_SERVICE_HOST set) the default is every IPv4 interface.
- At info level it logs one line per reconcile that changed something (the children it wrote,
  the condition transitions) and one WARNING line per error, naming the CR and the reason;
  an idle resync logs nothing.

The listening sockets are read from /proc (the process's socket inodes against
/proc/net/tcp and tcp6), so the test sees exactly what the process bound.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from specdeploy import cli
from specdeploy.controller import main as opmain
from specdeploy_dev.harness import ROOT, Cluster, free_port, kubectl_available, wait_for

EXAMPLE = ROOT / "examples" / "qwen3.6-27b-b300-vllm"
MISTAKE = ROOT / "examples" / "mistakes" / "qwen3.6-ids-plus-one.drafter.json"


# ----------------------------------------------------------------- flags (the process is not started)


@pytest.fixture
def captured(monkeypatch):
    """The one settings object ``operator run`` hands to controller/main.run (kopf is not started)."""
    seen: dict = {}
    monkeypatch.setattr(opmain, "run", lambda settings: seen.update(settings=settings) or 0)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("SPECDEPLOY_WEBHOOK_PORT", raising=False)
    return seen


def test_defaults_outside_a_cluster_are_loopback_and_no_webhook(captured):
    assert cli.main(["operator", "run"]) == 0
    s = captured["settings"]
    assert s.metrics_addr == s.health_addr == "127.0.0.1" and s.metrics_port == 8080
    assert s.webhook.port == 0 and s.webhook.addr == "127.0.0.1"
    assert s.namespaces == ("default",) and not s.all_namespaces


def test_inside_a_pod_the_default_is_every_interface(captured, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert cli.main(["operator", "run", "--webhook"]) == 0
    s = captured["settings"]
    assert s.metrics_addr == s.health_addr == "0.0.0.0"
    assert (s.webhook.port, s.webhook.addr) == (9443, "0.0.0.0")


def test_bind_flags_and_webhook_flag(captured):
    assert cli.main(["operator", "run", "--webhook", "--webhook-port", "9555", "--bind-address", "::",
                     "--metrics-bind-address", "10.0.0.7"]) == 0
    s = captured["settings"]
    assert s.metrics_addr == "10.0.0.7" and s.health_addr == "::"
    assert (s.webhook.port, s.webhook.addr) == (9555, "::")


def test_flags_over_the_environment_defaults_make_one_settings_object(captured, monkeypatch):
    """The documented environment defaults (controller/settings.py ENV; the chart sets some) fill what no flag
    says; a flag wins; the process environment is left as it was (nothing is written into it)."""
    env = {"SPECDEPLOY_ACCEPTANCE_INTERVAL": "7", "SPECDEPLOY_RESYNC_SECONDS": "11", "HF_ENDPOINT": "http://hub",
           "SPECDEPLOY_POD_MONITOR_LABELS": '{"release": "kps"}', "SPECDEPLOY_BENCH_POLL_SECONDS": "1",
           "SPECDEPLOY_INSPECT_SECONDS": "60", "SPECDEPLOY_WEBHOOK_RESYNC_SECONDS": "5", "POD_NAMESPACE": "ops",
           "SPECDEPLOY_IDENTITY": "replica-a", "SPECDEPLOY_ENGINE_NETWORK_POLICY": "monitoring"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    before = dict(os.environ)
    assert cli.main(["operator", "run", "-A", "--kubeconfig", "/kc", "--allowed-pvc", "models"]) == 0
    s = captured["settings"]
    assert dict(os.environ) == before
    assert (s.acceptance_interval, s.reconciler.resync_seconds, s.hub_endpoint, s.identity) == \
        (7.0, 11.0, "http://hub", "replica-a")
    assert s.reconciler.pod_monitor_labels == {"release": "kps"} and s.bench.poll_seconds == 1.0
    assert s.inspect_deadline == 60.0 and s.webhook.resync_seconds == 5.0 and s.webhook.namespace == "ops"
    assert s.reconciler.engine_network_policy == ("monitoring", "ops")
    assert s.all_namespaces and s.watched is None and s.kubeconfig == "/kc"
    assert s.policy is s.reconciler.policy and s.policy.pvcs == ("models",)
    assert cli.main(["operator", "run", "--resync-seconds", "3", "--engine-network-policy",
                     "--operator-namespace", "x"]) == 0
    s = captured["settings"]
    assert s.reconciler.resync_seconds == 3.0 and s.reconciler.engine_network_policy == ("x",)


def test_an_unusable_environment_default_exits_2_naming_it(captured, capsys, monkeypatch):
    monkeypatch.setenv("SPECDEPLOY_ACCEPTANCE_INTERVAL", "soon")
    assert cli.main(["operator", "run"]) == 2
    assert "SPECDEPLOY_ACCEPTANCE_INTERVAL='soon' is not a number" in capsys.readouterr().err
    assert not captured


@pytest.mark.parametrize("argv, message", [
    (["--bind-address", "localhost:80"], "--bind-address 'localhost:80' is not an IP address"),
    (["--metrics-bind-address", "every"], "--metrics-bind-address 'every' is not an IP address"),
    (["--webhook-port", "9443"], "--webhook-port: the admission webhook server is off; add --webhook to serve it"),
    (["--webhook-service", "wh.ops"], "add --webhook"),
    (["--metrics-port", "70000"], "--metrics-port 70000 is not a port"),
    # issue 37: the client CA's source, once; names and optional verification need one
    (["--webhook", "--webhook-client-optional"], "--webhook-client-optional: needs --webhook-client-ca or "
                                                 "--webhook-client-ca-from-cluster"),
    (["--webhook", "--webhook-client-name", "x"], "--webhook-client-name: needs --webhook-client-ca"),
    (["--webhook", "--webhook-client-ca", "/etc/hostname", "--webhook-client-ca-from-cluster"],
     "give one source of the client CA"),
    (["--webhook-client-ca-from-cluster"], "add --webhook"),
])
def test_bad_flags_exit_2_with_the_fix(captured, capsys, argv, message):
    assert cli.main(["operator", "run", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not captured  # nothing started


# ----------------------------------------------------------------- the real process


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(m.group(1))
    out = set()
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, state, inode = f[1], f[3], f[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            addr_hex, port_hex = local.split(":")
            if v6:
                addr = "::" if int(addr_hex, 16) == 0 else addr_hex
            else:
                addr = ".".join(str(b) for b in reversed(bytes.fromhex(addr_hex)))
            out.add((addr, int(port_hex, 16)))
    return out


def _cr(name: str, target_cm: str, drafter_cm: str) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": name},
            "spec": {"engine": {"name": "vllm", "version": "0.33.0"},
                     "target": {"model": "Qwen/Qwen3.6-27B", "configFrom": {"configMapKeyRef": {"name": target_cm}}},
                     "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash",
                                 "configFrom": {"configMapKeyRef": {"name": drafter_cm}}},
                     "gpu": {"type": "b300", "count": 1}}}


def _log_lines(cluster: Cluster, start: int) -> list[str]:
    text = cluster.operator_log.read_text(errors="replace")[start:]
    return [x for x in text.splitlines() if " specdeploy.controller: " in x]


NEEDS_KUBECTL = pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")


@pytest.fixture
def outside_a_pod(monkeypatch):
    """The operator process as run outside a pod: KUBERNETES_SERVICE_HOST (set in every container, a CI
    runner's included) would make it listen on every interface; cleared for the processes the test starts."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@NEEDS_KUBECTL
@pytest.mark.usefixtures("outside_a_pod")
def test_operator_process_listens_on_loopback_and_logs_what_it_did(tmp_path):
    with Cluster(workdir=tmp_path, namespace="models") as cluster:
        cluster.apply_crds()
        cluster.kubectl("apply", "-n", "models", "-k", str(EXAMPLE))
        cluster.kubectl("create", "configmap", "shifted-drafter", "-n", "models", f"--from-file=config.json={MISTAKE}")
        start = cluster.operator_log.stat().st_size if cluster.operator_log.exists() else 0
        health = free_port()
        proc = cluster.start_operator(resync_seconds=2, namespaces=["models"],
                                      extra_args=["--health-port", str(health)])
        # Listening: /metrics and the probes (/healthz, /readyz), loopback only; no webhook server.
        bound = wait_for(lambda: (lambda b: b if len(b) >= 2 else None)(_listening(proc.pid)), 30, "two listeners")
        assert bound == {("127.0.0.1", cluster.operator_metrics_port), ("127.0.0.1", health)}, bound

        # One good CR, one whose drafter is shifted by one layer, one without its ConfigMaps.
        for cr in (_cr("shifted", "qwen36-27b-target-config", "shifted-drafter"),
                   _cr("orphan", "no-such-target", "no-such-drafter")):
            cluster.kubectl("apply", "-n", "models", "-f", "-", input=json.dumps(cr))
        cluster.wait_condition("qwen36-27b", "DrafterCompatible", "True", namespace="models")
        cluster.wait_condition("shifted", "DrafterCompatible", "False", "TargetLayerIdsShifted", namespace="models")
        cluster.wait_condition("orphan", "DrafterCompatible", "Unknown", "ConfigMapNotFound", namespace="models")

        def lines_about(name: str) -> list[str]:
            return [x for x in _log_lines(cluster, start) if f" models/{name}: " in x]

        wait_for(lambda: all(lines_about(n) for n in ("qwen36-27b", "shifted", "orphan")), 30, "a line per CR")
        good = lines_about("qwen36-27b")
        assert any(" INFO " in x and "created Deployment/qwen36-27b" in x and "created ConfigMap/qwen36-27b-engine" in x
                   and "DrafterCompatible=True (Compatible)" in x for x in good), good
        assert not [x for x in good if " WARNING " in x or " ERROR " in x], good
        shifted = lines_about("shifted")
        assert any(" WARNING " in x and "DrafterCompatible=False TargetLayerIdsShifted" in x
                   and "$.dflash_config.target_layer_ids" in x for x in shifted), shifted
        orphan = lines_about("orphan")
        assert any(" WARNING " in x and "ConfigMapNotFound" in x and "no-such-target" in x for x in orphan), orphan
        assert len(shifted) == len(orphan) == 1, (shifted, orphan)  # one line per outcome

        # Idle: resyncs every 2 s change nothing and log nothing (status is already written).
        before = len(_log_lines(cluster, start))
        resyncs = sum(v for k, v in (cluster.operator_metrics() or {}).items() if k.startswith("specdeploy_reconcile_total"))
        wait_for(lambda: sum(v for k, v in (cluster.operator_metrics() or {}).items()
                             if k.startswith("specdeploy_reconcile_total")) >= resyncs + 6, 60, "two more resyncs")
        after = _log_lines(cluster, start)
        assert len(after) == before, after[before:]
        assert proc.poll() is None


@NEEDS_KUBECTL
@pytest.mark.usefixtures("outside_a_pod")
def test_webhook_server_only_with_the_flag(tmp_path):
    with Cluster(workdir=tmp_path) as cluster:
        cluster.apply_crds()
        port = free_port()
        proc = cluster.start_operator(extra_args=["--webhook", "--webhook-port", str(port)])
        bound = wait_for(lambda: (lambda b: b if len(b) >= 2 else None)(_listening(proc.pid)), 30, "two listeners")
        assert bound == {("127.0.0.1", cluster.operator_metrics_port), ("127.0.0.1", port)}, bound
