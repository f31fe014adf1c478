"""A Kubernetes API to run against, with the real operator and real kubectl.

Embedded by default: ``specdeploy dev apiserver`` (the kmock-based stand-in) as a separate
process. With a kubeconfig given, a real cluster instead (nothing is started there except
the operator, which runs locally against it). Used by the demo, the e2e suite and the scale
benchmark. Dev/test infrastructure only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from specdeploy.api.benchmark import BENCH_PLURAL
from specdeploy.core import names as N

from .procs import stop_process

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HarnessError(Exception):
    pass


IP_RANGE_ENV = "SPECDEPLOY_E2E_IP_RANGE"


def pod_ip_range() -> tuple[int, int]:
    """The dev kubelet's pod addresses for this process's scenes (127.0.0.FIRST .. 127.0.0.LAST):
    ``$SPECDEPLOY_E2E_IP_RANGE`` (``FIRST-LAST``; the repository's conftest.py gives each pytest-xdist worker
    its own share, so two workers' kubelets never put two pods on one address and port), else the
    kubelet's default 2-254."""
    from .kubelet_pods import parse_ip_range

    value = os.environ.get(IP_RANGE_ENV, "")
    if not value:
        return 2, 254
    try:
        return parse_ip_range(value)
    except ValueError as e:
        raise ValueError(f"{IP_RANGE_ENV}={e}") from None


def worker_env(worker: str, count: int, cores: int) -> dict[str, str]:
    """The environment of pytest-xdist worker ``worker`` (``gw0``..) of ``count`` on ``cores`` cores: its own
    pod addresses (an equal share of 127.0.0.2..254, ``IP_RANGE_ENV``) and its share of the cores for torch's
    OpenMP threads (``OMP_NUM_THREADS``). Nothing outside xdist or with one worker."""
    if not worker.startswith("gw") or not worker[2:].isdigit() or count < 2:
        return {}
    index = int(worker[2:])
    span = 253 // count
    first = 2 + index * span
    return {IP_RANGE_ENV: f"{first}-{first + span - 1}", "OMP_NUM_THREADS": str(max(1, cores // count))}


def pod_ip_args(first: int | None = None, last: int | None = None) -> list[str]:
    """``--ip-range`` for a dev kubelet: ``pod_ip_range()``, or the part of it from ``first``/to ``last``."""
    lo, hi = pod_ip_range()
    return ["--ip-range", f"{lo if first is None else first}-{hi if last is None else last}"]


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll until check() returns a truthy value; raise HarnessError naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception as e:  # noqa: BLE001 - the check may fail until the thing exists
            last_exc = e
        time.sleep(interval)
    raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


def get_form(args: tuple[str, ...] | list[str]) -> tuple[str, str | None, str, str | None] | None:
    """(resource, name, namespace, label selector) of ``kubectl get`` arguments of the form
    ``RESOURCE [NAME] -n NAMESPACE [-l SELECTOR]`` (the flags in either order, ``-n``/``-l`` or
    ``--namespace``/``--selector``, with or without ``=``); None for anything else."""
    words: list[str] = []
    flags: dict[str, str] = {}
    it = iter(args)
    for a in it:
        key, eq, value = a.partition("=")
        key = {"--namespace": "-n", "--selector": "-l"}.get(key, key)
        if key in ("-n", "-l"):
            value = value if eq else next(it, "")
            if not value or key in flags:
                return None
            flags[key] = value
        elif a.startswith("-"):
            return None
        else:
            words.append(a)
    if "-n" not in flags or not 1 <= len(words) <= 2 or (len(words) == 2 and "-l" in flags):
        return None
    return words[0], (words[1] if len(words) == 2 else None), flags["-n"], flags.get("-l")


class Cluster:
    def __init__(self, workdir: str | os.PathLike | None = None, kubeconfig: str | None = None, namespace: str = "default"):
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="specdeploy-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.embedded = kubeconfig is None
        self.kubeconfig = str(self.workdir / "kubeconfig") if self.embedded else kubeconfig
        self.namespace = namespace
        self.url: str | None = None
        self._procs: list[tuple[subprocess.Popen, Any]] = []
        self.operator: subprocess.Popen | None = None
        self.operator_log = self.workdir / "operator.log"
        self.operator_metrics_port: int | None = None
        self.operator_container: str | None = None  # play_operator_pod(image=...): the podman container

    # ------------------------------------------------------------ lifecycle

    def start(self, port: int | None = None) -> "Cluster":
        """Start the embedded API server (on ``port``, else a free one) and create the namespace."""
        if self.embedded:
            port = port or free_port()
            log = open(self.workdir / "apiserver.log", "w")
            p = subprocess.Popen([str(BIN / "specdeploy"), "dev", "apiserver", "--kubeconfig", self.kubeconfig,
                                  "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            self._procs.append((p, log))
            self.url = f"http://127.0.0.1:{port}"
            wait_for(lambda: Path(self.kubeconfig).exists() and self._get("/version"), 30, "the embedded API server")
        if self.namespace != "default":
            self.kubectl("apply", "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}))
        return self

    def stop(self) -> None:
        self.stop_operator()
        for p, log in reversed(self._procs):
            stop_process(p, 15)
            log.close()
        self._procs.clear()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ tools

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.kubeconfig}

    def kubectl(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        argv = ["kubectl", "--kubeconfig", self.kubeconfig, *args]
        p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=self.env())
        if check and p.returncode != 0:
            raise HarnessError(f"kubectl {' '.join(args)} failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
        return p

    def get_json(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``; on the embedded server, the forms ``RESOURCE [NAME] -n NS [-l SELECTOR]``
        of a resource in ``READ_PATHS`` are one GET (``read_json``: no kubectl process). kubectl itself is what
        the tests of kubectl run (``kubectl``: apply, logs, explain, ``get -o wide``)."""
        form = get_form(args)
        if form is not None and self.embedded and form[0] in self.READ_PATHS:
            return self.read_json(*form)
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def _get(self, path: str, timeout: float = 5) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    # kubectl's names for the namespaced resources tests read -> (API prefix, plural)
    READ_PATHS = {name: (prefix, plural) for prefix, plural, names in (
        ("/api/v1", "pods", ("pod", "pods", "po")),
        ("/api/v1", "events", ("event", "events", "ev")),
        ("/api/v1", "configmaps", ("configmap", "configmaps", "cm")),
        ("/api/v1", "services", ("service", "services", "svc")),
        ("/api/v1", "secrets", ("secret", "secrets")),
        ("/api/v1", "endpoints", ("endpoints", "ep")),
        ("/apis/apps/v1", "deployments", ("deployment", "deployments", "deploy")),
        ("/apis/apps/v1", "replicasets", ("replicaset", "replicasets", "rs")),
        ("/apis/batch/v1", "jobs", ("job", "jobs")),
        ("/apis/policy/v1", "poddisruptionbudgets", ("poddisruptionbudget", "poddisruptionbudgets", "pdb")),
        ("/apis/coordination.k8s.io/v1", "leases", ("lease", "leases")),
        (f"/apis/{N.GROUP_VERSION}", N.PLURAL, ("specdeploy", N.KIND.lower(), N.PLURAL)),
        (f"/apis/{N.GROUP_VERSION}", BENCH_PLURAL, ("specbench", N.BENCH_KIND.lower(), BENCH_PLURAL)),
    ) for name in names}

    def read_json(self, resource: str, name: str | None, namespace: str, selector: str | None = None) -> Any:
        """``kubectl get RESOURCE [NAME] -n NAMESPACE [-l SELECTOR] -o json``, answered as kubectl prints it
        (managedFields left out, a list as kind List), from one GET straight to the embedded API server. A kubectl
        process costs 85-95 ms of CPU on these 2 cores and the tests' waits poll several times a second: a
        quarter of a core, which an engine boot or the operator being waited for needs. Only for the resources in
        ``READ_PATHS`` on the embedded server; a missing object raises HarnessError naming NotFound, as kubectl's
        refusal does."""
        if not self.embedded or resource not in self.READ_PATHS or (name and selector):
            raise HarnessError(f"read_json: {resource} is read with kubectl (get_json)")
        prefix, plural = self.READ_PATHS[resource]
        path = f"{prefix}/namespaces/{urllib.parse.quote(namespace)}/{plural}"
        if name:
            path += "/" + urllib.parse.quote(name)
        elif selector:
            path += "?labelSelector=" + urllib.parse.quote(selector)
        try:
            doc = self._get(path, timeout=60)
        except urllib.error.HTTPError as e:
            reason = "NotFound" if e.code == 404 else str(e.code)
            raise HarnessError(f"GET {path} ({reason}): {e.read().decode(errors='replace')[:300]}") from None
        except (OSError, ValueError) as e:  # refused, reset, timed out, not JSON: as a failed kubectl
            raise HarnessError(f"GET {path}: {e}") from None
        if name:
            (doc.get("metadata") or {}).pop("managedFields", None)
            return doc
        kind, version = doc.get("kind", "").removesuffix("List"), doc.get("apiVersion")
        items = []
        for item in doc.get("items") or []:
            (item.get("metadata") or {}).pop("managedFields", None)
            items.append({"apiVersion": version, "kind": kind, **item})
        return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}

    def fault(self, **spec: Any) -> None:
        """Inject a fault into the embedded API server (see specdeploy_dev.apiserver.Fault)."""
        if not self.embedded:
            raise HarnessError("fault injection needs the embedded API server")
        req = urllib.request.Request(self.url + "/_specdeploy/faults", data=json.dumps(spec).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(req, timeout=5).read()

    def drop_watches(self) -> None:
        req = urllib.request.Request(self.url + "/_specdeploy/watches/drop", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()

    def apply_crds(self) -> None:
        self.kubectl("apply", "-f", str(ROOT / "crds"))
        if self.embedded:
            wait_for(lambda: self.kubectl("get", "specdeploy", "-n", self.namespace, check=False).returncode == 0, 30,
                     "the SpeculativeDeployment API")

    # ------------------------------------------------------------ operator

    def start_operator(self, *, resync_seconds: float = 60, extra_env: dict[str, str] | None = None,
                       namespaces: list[str] | None = None, extra_args: list[str] | None = None) -> subprocess.Popen:
        self.stop_operator()
        self.operator_metrics_port = free_port()
        ns_args: list[str] = []
        for ns in namespaces or [self.namespace]:
            ns_args += ["--namespace", ns]
        log = open(self.operator_log, "a")
        self.operator = subprocess.Popen(
            [str(BIN / "specdeploy"), "operator", "run", "--kubeconfig", self.kubeconfig, *ns_args,
             "--metrics-port", str(self.operator_metrics_port), "--resync-seconds", str(resync_seconds),
             *(extra_args or [])],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env={**self.env(), **(extra_env or {})})
        self._operator_logfile = log
        wait_for(lambda: self.operator_metrics() is not None, 60, "the operator's /metrics endpoint")
        return self.operator

    def play_operator_pod(self, namespace: str, deployment: str, *, extra_env: dict[str, str] | None = None,
                          timeout: float = 60, image: str | None = None) -> subprocess.Popen:
        """Play the kubelet and the endpoints controller for an installed operator Deployment (the
        chart's): run its container's args as a local ``specdeploy`` process (ports rewritten to
        free loopback ports, ``--kubeconfig`` added, ``POD_NAMESPACE`` set as the Downward API
        would), and write the Endpoints of its webhook Service so the API server reaches it.
        With ``image``, the container runs from that image with podman as the pod spec says
        (its securityContext, the pod's, volumes, limits: :mod:`specdeploy_dev.kubelet_podman`),
        on the host network, the kubeconfig mounted read-only.
        The embedded cluster runs no pods; on a real cluster use the Deployment itself."""
        if not self.embedded:
            raise HarnessError("play_operator_pod is for the embedded API server (a real cluster runs the pod)")
        dep = self.get_json("deployment", deployment, "-n", namespace)
        container = dep["spec"]["template"]["spec"]["containers"][0]
        args = list(container.get("args") or [])
        ports: dict[str, int] = {}

        def rewrite(flag: str, make: Callable[[int], str], name: str) -> None:
            if flag in args:
                i = args.index(flag)
                ports[name] = free_port()
                args[i + 1] = make(ports[name])

        rewrite("--metrics-port", str, "metrics")
        rewrite("--webhook-port", str, "webhook")
        rewrite("--liveness", lambda p: f"http://127.0.0.1:{p}/healthz", "health")
        rewrite("--health-port", str, "health")
        for flag in ("--bind-address", "--metrics-bind-address"):  # a pod's every interface: loopback here
            if flag in args:
                args[args.index(flag) + 1] = "127.0.0.1"
        self.stop_operator()
        self.operator_metrics_port = ports.get("metrics")
        log = open(self.operator_log, "a")
        if image is None:
            env = {**self.env(), "POD_NAMESPACE": namespace, **(extra_env or {})}
            self.operator = subprocess.Popen([str(BIN / "specdeploy"), *args, "--kubeconfig", self.kubeconfig],
                                             stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        else:
            argv = self._operator_container_argv(dep, namespace, image, args, extra_env or {})
            self.operator = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                             stdin=subprocess.DEVNULL)
        self._operator_logfile = log
        if "--webhook-service" in args and "webhook" in ports:
            svc = args[args.index("--webhook-service") + 1].split(".")[0]
            service = self.get_json("service", svc, "-n", namespace)
            names = [p.get("name") for p in service["spec"].get("ports") or [] if p.get("name")]
            endpoints = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": svc, "namespace": namespace},
                         "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                      "ports": [{"name": n, "port": ports["webhook"], "protocol": "TCP"} for n in names]
                                      or [{"port": ports["webhook"], "protocol": "TCP"}]}]}
            self.kubectl("apply", "-f", "-", input=json.dumps(endpoints))
        if "metrics" in ports:
            wait_for(lambda: self.operator_metrics() is not None, timeout, "the operator's /metrics endpoint")
        return self.operator

    OPERATOR_CONTAINER = "specdeploy-dev-operator"

    def _operator_container_argv(self, dep: dict, namespace: str, image: str, args: list[str],
                                 extra_env: dict[str, str]) -> list[str]:
        """podman run of the operator Deployment's first container from ``image`` (container mode)."""
        from . import kubelet_podman as kpm
        from . import kubelet_pods as kp

        template = dep["spec"]["template"]
        pod = {"metadata": {**(template.get("metadata") or {}), "name": self.OPERATOR_CONTAINER,
                            "namespace": namespace, "uid": self.OPERATOR_CONTAINER}, "spec": template["spec"]}
        container = {**template["spec"]["containers"][0], "image": image, "command": None,
                     "args": [*args, "--kubeconfig", "/etc/specdeploy/kubeconfig"]}
        pod_dir = self.workdir / "operator-pod"
        shutil.rmtree(pod_dir, ignore_errors=True)
        volumes = kp.plan_volumes(pod, str(pod_dir), str(pod_dir / "pvc"), {}, {}, "127.0.0.1", "127.0.0.1")
        for vol in volumes.values():
            Path(vol.path).mkdir(parents=True, exist_ok=True)
            os.chmod(vol.path, 0o777)
        kubeconfig = pod_dir / "kubeconfig"
        shutil.copyfile(self.kubeconfig, kubeconfig)
        os.chmod(kubeconfig, 0o644)
        termination = pod_dir / "termination-log"
        termination.write_bytes(b"")
        os.chmod(termination, 0o666)
        env = {**kp.resolve_env(pod, container, {}, {}, "127.0.0.1", "127.0.0.1"), **extra_env}
        user = subprocess.run(["podman", "image", "inspect", "--format", "{{.Config.User}}", "--", image],
                              capture_output=True, text=True, timeout=60)
        if user.returncode != 0:
            raise HarnessError(f"image {image} is not in podman's storage: build it with bash images/build.sh")
        subprocess.run(["podman", "rm", "-f", "-t", "0", self.OPERATOR_CONTAINER], capture_output=True, timeout=60)
        mounts = [*kpm.plan_mounts(container, volumes), kpm.Mount("/etc/specdeploy/kubeconfig", str(kubeconfig), True)]
        argv = kpm.podman_run_argv(pod, container, env=env, mounts=mounts, pod_ip="127.0.0.1", port_map={},
                                   termination_log=str(termination), image_user=user.stdout.strip(),
                                   root_label=str(self.workdir))
        name_at = argv.index("--name") + 1
        argv[name_at] = self.OPERATOR_CONTAINER
        self.operator_container = self.OPERATOR_CONTAINER
        return argv

    def stop_operator(self, kill: bool = False) -> None:
        if self.operator is not None:
            stop_process(self.operator, 30, sig=signal.SIGKILL if kill else signal.SIGTERM)
            self._operator_logfile.close()
        if self.operator_container:
            subprocess.run(["podman", "rm", "-f", "-t", "0", self.operator_container], capture_output=True, timeout=60)
            self.operator_container = None
        self.operator = None

    def operator_metrics(self) -> dict[str, float] | None:
        """The operator's metric samples ({'name{labels}': value}), or None when it does not answer."""
        if not self.operator_metrics_port:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.operator_metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def api_writes(self) -> float:
        m = self.operator_metrics() or {}
        return sum(v for k, v in m.items() if k.startswith(N.OP_API_WRITES))

    # ------------------------------------------------------------ helpers for scenarios

    def condition(self, name: str, ctype: str, namespace: str | None = None) -> dict | None:
        obj = self.get_json("specdeploy", name, "-n", namespace or self.namespace)
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == ctype:
                return c
        return None

    def wait_condition(self, name: str, ctype: str, status: str, reason: str | None = None, timeout: float = 60,
                       namespace: str | None = None) -> dict:
        def check():
            c = self.condition(name, ctype, namespace)
            return c if c and c["status"] == status and (reason is None or c["reason"] == reason) else None
        return wait_for(check, timeout, f"{name} {ctype}={status}" + (f" ({reason})" if reason else ""))

    def mark_workload_ready(self, name: str, kind: str = "deployment", namespace: str | None = None) -> None:
        """Play the workload controller: the embedded API server runs no pods."""
        obj = self.get_json(kind, name, "-n", namespace or self.namespace)
        replicas = int((obj.get("spec") or {}).get("replicas") or 0)
        gen = (obj.get("metadata") or {}).get("generation") or 1
        status = {"observedGeneration": gen, "replicas": replicas, "readyReplicas": replicas,
                  "updatedReplicas": replicas, "availableReplicas": replicas}
        self.kubectl("patch", kind, name, "-n", namespace or self.namespace, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": status}))

    def diagnostics(self) -> str:
        """Operator log tail, events and describe output, for failed tests."""
        parts = []
        if self.operator_log.exists():
            parts.append("== operator log (tail)\n" + "\n".join(self.operator_log.read_text().splitlines()[-80:]))
        for args in (("get", "events", "-n", self.namespace), ("describe", "specdeploy", "-n", self.namespace),
                     ("get", "all,cm,pdb", "-n", self.namespace, "-o", "wide")):
            p = self.kubectl(*args, check=False)
            parts.append(f"== kubectl {' '.join(args)}\n{p.stdout}{p.stderr}")
        return "\n".join(parts)


def kubectl_available() -> bool:
    return shutil.which("kubectl") is not None
