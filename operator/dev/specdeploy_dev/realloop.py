"""The real loop: a SpeculativeDeployment on the CPU pool served by real vLLM, end to end.

Used by ``specdeploy demo --engine vllm-cpu`` (``bash .ci/demo --engine vllm-cpu``) and by
``e2e/test_e2e_vllm_cpu.py``. Everything runs on loopback, every wait has a deadline:

1. ``tinymodels`` writes the tiny target and drafters; the hub stand-in serves them, and
   ``HF_ENDPOINT`` points the operator (config resolution), the preflight init container and
   the engine at it.
2. The embedded API server, the CRD, the operator (``specdeploy operator run``, acceptance
   monitor every ``interval`` seconds) and the dev kubelet (``specdeploy dev kubelet``:
   Deployments -> pods -> local processes; ``vllm`` is ``.venv-vllm-cpu/bin/vllm``).
3. A ``SpeculativeDeployment`` with ``gpu.type: cpu`` is applied with kubectl; the operator's
   gate resolves both configs from the hub and renders the Deployment; the kubelet runs the
   preflight and real ``vllm serve`` from the rendered command.
4. :class:`Load` sends greedy completions while the operator's monitor scrapes the pod's real
   ``vllm:spec_decode_*`` counters into ``status.acceptance`` and ``SpeculationHealthy``.
5. Real Prometheus (when installed) scrapes the engine pod (the loop writes its address into a
   file_sd target file, as a PodMonitor would discover it: job ``<namespace>/<deployment>``)
   and the operator, with the shipped recording rules and alerts (rate window ``rule_window``,
   alerts after ``alert_for``).

The engine's own counters are read with :meth:`RealLoop.engine_scrape` and turned into tau by
the same ``core.acceptance`` code the operator uses, so three independent readings meet.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from specdeploy.core.names import PORT_MAP_ANNOTATION
from specdeploy.core.podsecurity import ENGINE_CACHE
from .harness import BIN, ROOT, Cluster, HarnessError, free_port, pod_ip_args, wait_for
from .procs import stop_process

VLLM_CPU = ROOT / ".venv-vllm-cpu" / "bin" / "vllm"
PROMPTS = ("The quick brown fox", "Speculative decoding", "Kubernetes runs pods", "A tiny model for tests",
           "Numbers help a tokenizer too")
BOOT_TIMEOUT = 300.0  # a cold boot takes 40-100 s on 2 busy cores
ENGINE_VERSION = "0.32.0"  # the vllm-cpu build installed by .ci/install-vllm-cpu
RUNTIME_IMAGE = f"ghcr.io/specdeploy/runtime:vllm-cpu-{ENGINE_VERSION}"  # images/runtime/vllm-cpu (images/build.sh)
# The dev node's environment for the engines the loop runs as local processes (the rig's, not the rendered pod's: a
# pod's own variable of the same name wins). vLLM's CPU build runs its model worker in a third process (spawned:
# torch and vLLM imported once more) bound to core 0 with core 1 reserved; with V1 multiprocessing off the engine core
# runs the worker itself (UniProcExecutor, no thread binding: the rollout module's nobind). Measured on 2 shared
# cores with the tiny pair: healthy after 23-24 s instead of 37-70 s, the same tokens and counters. A production
# CPU pod keeps vLLM's default (its worker pinned to the cores the pod was given).
FAST_BOOT_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
THREADS_ENV = "OMP_NUM_THREADS"  # an engine's OpenMP (torch) threads: unbound in-process workers take all cores


def node_modelinfo_cache() -> str:
    """The machine's vLLM model-class cache (``VLLM_CACHE_ROOT/modelinfos``, vLLM's default root), which the dev
    node links into every engine pod's cache volume (kubelet ``--node-cache``). vLLM inspects each model class of a
    boot (target, drafter) in a subprocess that imports torch and vLLM again unless this cache holds the class's
    entry (a file per class, keyed by the hash of its source): the rendered pod's cache is an emptyDir, so every
    loop pod paid 9-11 s per model on 2 busy cores. A production pod keeps its own emptyDir."""
    root = os.environ.get("VLLM_CACHE_ROOT") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm")
    return os.path.join(root, "modelinfos")


def http(url: str, body: dict | None = None, timeout: float = 120) -> Any:
    """GET (text) or POST JSON (parsed answer)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read().decode()
    return json.loads(raw) if body is not None else raw


def complete(url: str, model: str, prompts: tuple[str, ...] | list[str] = PROMPTS, max_tokens: int = 64
             ) -> tuple[list[str], int, float]:
    """Greedy completions, one after another: (texts, completion tokens, seconds)."""
    texts, tokens = [], 0
    t0 = time.perf_counter()
    for prompt in prompts:
        doc = http(f"{url}/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                             "temperature": 0, "ignore_eos": True})
        texts.append(doc["choices"][0]["text"])
        tokens += doc["usage"]["completion_tokens"]
    return texts, tokens, time.perf_counter() - t0


class Load:
    """Greedy completions in a background thread until stopped: the traffic the monitor judges."""

    def __init__(self, url: str, model: str, max_tokens: int = 64, prompts: tuple[str, ...] | list[str] = PROMPTS):
        self.url, self.model, self.max_tokens = url, model, max_tokens
        self.prompts = tuple(prompts)
        self.tokens = self.requests = 0
        self.errors: list[str] = []
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        t0 = time.perf_counter()
        i = 0
        while not self._stop.is_set():
            try:
                _, tokens, _ = complete(self.url, self.model, [self.prompts[i % len(self.prompts)]], self.max_tokens)
                self.tokens += tokens
                self.requests += 1
            except Exception as e:  # noqa: BLE001 - recorded; the caller decides
                self.errors.append(f"{type(e).__name__}: {e}")
                if len(self.errors) > 20:
                    break
                time.sleep(0.5)
            i += 1
        self.seconds = time.perf_counter() - t0

    def __enter__(self) -> "Load":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=180)

    @property
    def tokens_per_s(self) -> float:
        return round(self.tokens / self.seconds, 1) if self.seconds else 0.0


def truncated_copy(models: Path, source: str, repo: str, keep: float = 0.5) -> Path:
    """``models/<repo>``: ``models/<source>``'s files with every ``*.safetensors`` cut to ``keep`` of its size (the
    header intact, the tensor data short), as an interrupted upload leaves a repository. Its config.json is the
    source's, so the operator's gate and the preflight (which read configs, not tensors) pass it; the engine fails
    when it loads the weights. Returns the new repository's directory."""
    src, dst = models / source, models / repo
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file():
            data = f.read_bytes()
            if f.suffix == ".safetensors":
                header = 8 + int.from_bytes(data[:8], "little")
                data = data[:header + int((len(data) - header) * keep)]
            (dst / f.name).write_bytes(data)
    return dst


class ServiceLoad:
    """Greedy completions through a Service, as a client in the cluster sends them: ``clients`` threads, each sending
    its next request when the last one ends (after ``pause`` seconds), through the dev kubelet's Service proxy (kube-proxy's part: a random ready
    pod per connection). Every request is kept (start, end, ok, error) so that a scenario can count the failed ones
    and say when they happened; nothing is retried."""

    def __init__(self, proxy: str, url: str, model: str, *, clients: int = 2, max_tokens: int = 64,
                 prompts: tuple[str, ...] | list[str] = PROMPTS, timeout: float = 300, pause: float = 0.0):
        self.url, self.model, self.max_tokens, self.timeout = url, model, max_tokens, timeout
        self.pause = pause  # seconds between a client's requests (a think time: CPU left for other pods' boots)
        self.prompts = tuple(prompts)
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
        self.results: list[dict] = []  # {"start", "end" (time.time()), "ok", "tokens", "error"}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"service-load-{i}", daemon=True)
                         for i in range(clients)]

    def _one(self, prompt: str) -> int:
        req = urllib.request.Request(f"{self.url}/v1/completions", data=json.dumps(
            {"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens, "temperature": 0,
             "ignore_eos": True}).encode(), headers={"Content-Type": "application/json"})
        with self.opener.open(req, timeout=self.timeout) as r:
            doc = json.loads(r.read())
        tokens = int(doc["usage"]["completion_tokens"])
        if tokens != self.max_tokens:
            raise ValueError(f"{tokens} completion tokens, not {self.max_tokens}")
        return tokens

    def _run(self, i: int) -> None:
        n = i
        while not self._stop.is_set():
            t0 = time.time()
            try:
                tokens, error = self._one(self.prompts[n % len(self.prompts)]), None
            except Exception as e:  # noqa: BLE001 - recorded; the scenario decides
                tokens, error = 0, f"{type(e).__name__}: {e}"[:300]
            with self._lock:
                self.results.append({"start": t0, "end": time.time(), "ok": error is None, "tokens": tokens,
                                     "error": error})
            if error is not None or self.pause:
                self._stop.wait(max(self.pause, 0.5 if error is not None else 0.0))
            n += len(self._threads)

    def __enter__(self) -> "ServiceLoad":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.timeout + 10)

    @property
    def requests(self) -> int:
        return len(self.results)

    @property
    def failed(self) -> list[dict]:
        with self._lock:
            return [r for r in self.results if not r["ok"]]


EXAMPLE = ROOT / "examples" / "dev" / "tiny-cpu.yaml"  # the documented SpeculativeDeployment of the loop


def cpu_cr(name: str, target: str, drafter: str) -> dict:
    """examples/dev/tiny-cpu.yaml with this name, target and drafter (models on the hub stand-in)."""
    cr = yaml.safe_load(EXAMPLE.read_text())
    cr["metadata"]["name"] = name
    cr["spec"]["target"]["model"], cr["spec"]["drafter"]["model"] = target, drafter
    return cr


@dataclass
class RealLoop:
    workdir: Path
    vllm: Path = VLLM_CPU
    namespace: str = "default"
    interval: float = 1.0  # the operator's acceptance monitor interval (SPECDEPLOY_ACCEPTANCE_INTERVAL)
    prometheus: bool = True  # start real Prometheus when it is installed
    runtime: str = "process"  # the dev kubelet's: process (vllm from .venv-vllm-cpu) or podman (the runtime image)
    # probe periods capped at this many seconds: the startup probe's 360 failures then allow 360 x cap seconds
    probe_period_cap: float = 1.0
    rule_window: str = "10s"
    alert_for: str = "2s"
    trained: bool = False  # also write train-tiny-drafter's models (tiny/lang-*; trained or from its cache)
    train_methods: tuple[str, ...] = ("dflash",)  # which drafters train-tiny-drafter writes (--method each)
    trained_manifest: dict | None = None  # the first method's manifest
    trained_manifests: dict[str, dict] = field(default_factory=dict)  # method (or "METHOD-seedN") -> its manifest
    # more drafters of the same trained target (train-tiny-drafter --drafter-seed N, each method): tiny/lang-dflash-seedN
    drafter_seeds: tuple[int, ...] = ()
    # more repositories: called with the models directory once the tiny and trained models are written, before the
    # hub stand-in reads it (e.g. truncated_copy: a drafter whose weights file is cut short)
    more_models: Callable[[Path], None] | None = None
    kubelet_args: list[str] = field(default_factory=list)  # more `specdeploy dev kubelet` arguments
    operator_env: dict[str, str] = field(default_factory=dict)  # more operator environment
    # the dev node's environment for engines run as local processes (runtime "process"): FAST_BOOT_ENV
    engine_env: dict[str, str] = field(default_factory=lambda: dict(FAST_BOOT_ENV))
    node_cache: bool = True  # runtime "process": the engines share the machine's vLLM modelinfos (node_modelinfo_cache)
    hub: Any = None
    cluster: Cluster | None = None
    prom: Any = None
    figures: dict[str, Any] = field(default_factory=dict)
    _stack: ExitStack = field(default_factory=ExitStack)
    _kubelet: subprocess.Popen | None = None
    _kubelet_log: Any = None

    # ------------------------------------------------------------- lifecycle
    def __enter__(self) -> "RealLoop":
        """``with RealLoop(...) as loop:`` starts the scene and stops it after, a failed start included (its
        processes would outlive the test); a start that fails raises HarnessError with the diagnostics."""
        try:
            return self.start()
        except HarnessError as e:
            diagnostics = self.diagnostics()
            self.stop()
            raise HarnessError(f"the loop did not start: {e}\n{diagnostics}") from None
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "RealLoop":
        from . import tinymodels
        from .hubserver import repos_from_directory, start_in_thread

        if self.runtime == "podman":
            if subprocess.run(["podman", "image", "exists", RUNTIME_IMAGE], capture_output=True).returncode != 0:
                raise HarnessError(f"{RUNTIME_IMAGE} is not built: run bash images/build.sh runtime-cpu first")
        elif not (self.vllm.exists() and os.access(self.vllm, os.X_OK)):
            raise HarnessError(f"{self.vllm} is missing: run bash .ci/install-vllm-cpu first")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            t0 = time.perf_counter()
            tinymodels.write_tiny_models(self.workdir / "models")
            self.figures["tiny_models_build_s"] = round(time.perf_counter() - t0, 2)
            if self.trained:
                self.train()
            if self.more_models is not None:
                self.more_models(self.workdir / "models")
            self.hub = self._stack.enter_context(start_in_thread(repos_from_directory(self.workdir / "models")))
            c = self.cluster = Cluster(workdir=self.workdir / "cluster", namespace=self.namespace).start()
            self._stack.callback(c.stop)
            c.apply_crds()
            self.start_operator()
            self._start_kubelet()
            wait_for(lambda: c.kubectl("get", "node", "specdeploy-dev", check=False).returncode == 0, 30,
                     "the dev kubelet's Node")
            if self.prometheus:
                self._start_prometheus()
        except BaseException:
            self.stop()
            raise
        return self

    def start_operator(self) -> None:
        """(Re)start the operator (``specdeploy operator run``) with the loop's environment."""
        self.cluster.start_operator(resync_seconds=30, extra_env={
            "HF_ENDPOINT": str(self.hub), "SPECDEPLOY_ACCEPTANCE_INTERVAL": f"{self.interval:g}",
            "SPECDEPLOY_WEBHOOK_PORT": "0", **self.operator_env})

    def kill_operator(self) -> None:
        """``kill -9`` the operator: no shutdown of any kind (what a node loss or an OOM kill does)."""
        self.cluster.stop_operator(kill=True)

    def service_proxy(self) -> str:
        """The dev kubelet's Service proxy (``--service-proxy`` in ``kubelet_args``): ``http://127.0.0.1:PORT``."""
        path = self.workdir / "kubelet" / "service-proxy"
        return wait_for(lambda: path.exists() and path.read_text().strip(), 30, f"{path} (the kubelet's Service proxy)")

    def service_url(self, service: str, port: int = 8000) -> str:
        return f"http://{service}.{self.namespace}.svc:{port}"

    def train(self) -> dict:
        """``specdeploy-runtime train-tiny-drafter --method M`` into the models directory for each of
        ``train_methods`` (a process: torch stays out of this one); the manifests (figures, prompts of the
        language) land in ``self.trained_manifests`` and the first in ``self.trained_manifest``."""
        for method, seed in [(m, None) for m in self.train_methods] + \
                [(m, s) for m in self.train_methods for s in self.drafter_seeds]:
            t0 = time.perf_counter()
            more = ["--drafter-seed", str(seed)] if seed is not None else []
            p = subprocess.run([str(BIN / "specdeploy-runtime"), "train-tiny-drafter", str(self.workdir / "models"),
                                "--method", method, *more, "-o", "json"], capture_output=True, text=True, cwd=ROOT,
                               timeout=1800)
            if p.returncode != 0:
                raise HarnessError(f"train-tiny-drafter --method {method} {' '.join(more)} failed ({p.returncode}): "
                                   f"{(p.stdout + p.stderr)[-3000:]}")
            label = method if seed is None else f"{method}-seed{seed}"
            m = self.trained_manifests[label] = json.loads(p.stdout)
            key = "train_tiny_drafter_s" if label == "dflash" else f"train_tiny_drafter_{label.replace('-', '_')}_s"
            self.figures[key] = {"this_run": round(time.perf_counter() - t0, 1), "cached": m["cached"],
                                 "training": m["training"]}
        self.trained_manifest = self.trained_manifests[self.train_methods[0]]
        return self.trained_manifest

    def _node_args(self) -> list[str]:
        """What this process's environment gives the scene's node, unless the module's ``kubelet_args`` say it:
        the pod addresses (``harness.pod_ip_range``: another loop or kubelet on the same machine would otherwise
        put an engine on the same address and port, and each would answer the other's probes and traffic) and
        ``OMP_NUM_THREADS`` (a pytest worker's share of the cores, conftest.py: with FAST_BOOT_ENV an engine's
        worker is not bound to cores and its torch takes a thread per core, so two workers' engines would run
        four spinning threads on two cores)."""
        args = [] if "--ip-range" in self.kubelet_args else pod_ip_args()
        threads = os.environ.get(THREADS_ENV)
        if threads and not any(a.startswith(f"{THREADS_ENV}=") for a in self.kubelet_args):
            args += ["--env", f"{THREADS_ENV}={threads}"]
        return args

    def _start_kubelet(self) -> None:
        c = self.cluster
        self._kubelet_log = open(self.workdir / "kubelet.log", "w")
        self._kubelet = subprocess.Popen(
            [str(BIN / "specdeploy"), "dev", "kubelet", "--kubeconfig", c.kubeconfig, "--root", str(self.workdir / "kubelet"),
             *(["--exec", f"vllm={self.vllm}"] if self.runtime == "process" else []),
             "--env", f"HF_ENDPOINT={self.hub}", "--env", "HF_HUB_DISABLE_TELEMETRY=1",
             "--env", "VLLM_NO_USAGE_STATS=1",
             *[a for k, v in (self.engine_env if self.runtime == "process" else {}).items() for a in ("--env", f"{k}={v}")],
             *(["--node-cache", f"{ENGINE_CACHE}/.cache/vllm/modelinfos={node_modelinfo_cache()}"]
               if self.runtime == "process" and self.node_cache else []),
             "--probe-period-cap", str(self.probe_period_cap), "--backoff", "2",
             "--max-grace", "20",
             "--runtime", self.runtime, *self._node_args(), *self.kubelet_args],
            stdout=self._kubelet_log, stderr=subprocess.STDOUT, cwd=ROOT)

        def stop_kubelet() -> None:
            stop_process(self._kubelet, 60)
            self._kubelet_log.close()
        self._stack.callback(stop_kubelet)

    def _start_prometheus(self) -> None:
        from specdeploy.observability import rules as R
        from .prometheus import Prometheus, find_exe, scrape_job

        exe = find_exe()
        if exe is None:
            return
        rules = self.workdir / "prometheus-rules.yaml"
        rules.write_text(R.render_rules_yaml(R.RuleParams(window=self.rule_window, collapse_for=self.alert_for,
                                                          cliff_for=self.alert_for, regression_for=self.alert_for)))
        self.targets_file.write_text("[]")
        engines = {"job_name": "engine-pods", "metrics_path": "/metrics",
                   "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}]}
        op = scrape_job("specdeploy-operator", f"127.0.0.1:{self.cluster.operator_metrics_port}", honor_labels=True,
                        labels={"namespace": "specdeploy-system", "pod": "specdeploy-operator-0"})  # as the chart's
        self.prom = Prometheus([engines, op], [rules], exe=exe).start()
        self._stack.callback(self.prom.stop)

    @property
    def targets_file(self) -> Path:
        return self.workdir / "engine-targets.json"

    def stop(self) -> None:
        self._stack.close()

    # ------------------------------------------------------------- the deployment
    def apply(self, cr: dict) -> None:
        path = self.workdir / f"{cr['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(cr, sort_keys=False))
        self.cluster.kubectl("apply", "-n", self.namespace, "-f", str(path))

    def get(self, *args: str) -> Any:
        """``kubectl get ARGS -n NAMESPACE -o json`` (what the waits poll: one GET, ``Cluster.get_json``)."""
        return self.cluster.get_json(*args, "-n", self.namespace)

    def ready_pod(self, deployment: str, exclude: frozenset[str] | set[str] = frozenset(),
                  timeout: float = BOOT_TIMEOUT) -> dict:
        """Wait for the Deployment's only pod (not in ``exclude``) to be Ready; return it. A container
        that keeps failing ends the wait with its last termination."""
        def check():
            dep = self.get("deployment", deployment)
            sel = ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())
            pods = [p for p in self.get("pods", "-l", sel)["items"] if p["metadata"]["name"] not in exclude]
            for p in pods:
                st = p.get("status") or {}
                for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
                    last = (cs.get("lastState") or {}).get("terminated") or {}
                    if cs.get("restartCount", 0) >= 2 and last.get("exitCode"):
                        raise _Fatal(f"{p['metadata']['name']}/{cs['name']} keeps failing: {json.dumps(last)[:2000]}")
            ok = [p for p in pods if any(x["type"] == "Ready" and x["status"] == "True"
                                         for x in (p.get("status") or {}).get("conditions") or [])]
            return ok[0] if len(pods) == 1 and ok else None

        return _wait(check, timeout, f"a ready pod of Deployment {deployment}")

    @staticmethod
    def pod_url(pod: dict) -> str:
        moved = json.loads((pod["metadata"].get("annotations") or {}).get(PORT_MAP_ANNOTATION) or "{}")
        port = int(moved.get("engine", {}).get("8000", 8000))
        return f"http://{pod['status']['podIP']}:{port}"

    def discover(self, deployment: str, pod: dict) -> None:
        """What a PodMonitor would do: the engine pod becomes Prometheus's target, job <namespace>/<deployment>."""
        if self.prom is None:
            return
        host = self.pod_url(pod).removeprefix("http://")
        self.targets_file.write_text(json.dumps([{"targets": [host], "labels": {
            "job": f"{self.namespace}/{deployment}", "namespace": self.namespace, "pod": pod["metadata"]["name"]}}]))

    def status(self, name: str) -> dict:
        return self.get("specdeploy", name).get("status") or {}

    def condition(self, name: str, ctype: str) -> dict | None:
        return next((c for c in self.status(name).get("conditions") or [] if c.get("type") == ctype), None)

    def wait_condition(self, name: str, ctype: str, status: str, reason: str | None = None, timeout: float = 60) -> dict:
        def check():
            c = self.condition(name, ctype)
            return c if c and c["status"] == status and (reason is None or c["reason"] == reason) else None
        return wait_for(check, timeout, f"{name} {ctype}={status}" + (f" ({reason})" if reason else ""))

    def events(self, name: str, reason: str | None = None) -> list[dict]:
        items = self.get("events").get("items") or []
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name
                and (e.get("involvedObject") or {}).get("kind") == "SpeculativeDeployment"
                and (reason is None or e.get("reason") == reason)]

    def wide(self) -> str:
        return self.cluster.kubectl("get", "specdeploy", "-o", "wide", "-n", self.namespace).stdout.rstrip()

    # ------------------------------------------------------------- three readings of tau
    @staticmethod
    def engine_scrape(url: str) -> str:
        return http(f"{url}/metrics")

    @staticmethod
    def engine_acceptance(before: str, after: str, seconds: float | None = None):
        """tau from two scrapes of the engine's own counters (core.acceptance, as the operator computes it)."""
        from specdeploy.core.acceptance import acceptance_from_scrapes

        return acceptance_from_scrapes("vllm", before, after, interval_s=seconds)

    def wait_status_length(self, name: str, want: Callable[[float], bool], what: str, timeout: float = 90) -> float:
        def check():
            v = (self.status(name).get("acceptance") or {}).get("length")
            return v if isinstance(v, (int, float)) and want(v) else None
        return wait_for(check, timeout, f"status.acceptance.length of {name} {what}", interval=0.2)

    def prom_length(self, deployment: str, model: str) -> float | None:
        from specdeploy.observability import rules as R

        if self.prom is None:
            return None
        got = self.prom.query(f'{R.LENGTH}{{job="{self.namespace}/{deployment}",model_name="{model}"}}')
        return float(got[0]["value"][1]) if len(got) == 1 else None

    def firing(self, deployment: str, alert: str | None = None) -> list[dict]:
        """The firing alert (default SpecdeployAcceptanceCollapsed) for the deployment."""
        from specdeploy.observability import rules as R

        if self.prom is None:
            return []
        return self.prom.query(f'ALERTS{{alertname="{alert or R.A_COLLAPSED}",alertstate="firing",'
                               f'job="{self.namespace}/{deployment}"}}')

    def operator_length(self, deployment: str) -> float | None:
        m = self.cluster.operator_metrics() or {}
        want = (f'namespace="{self.namespace}"', f'deployment="{deployment}"')
        got = [v for k, v in m.items() if k.startswith("specdeploy_acceptance_length{") and all(w in k for w in want)]
        return got[0] if len(got) == 1 else None

    def diagnostics(self) -> str:
        parts = []
        if (self.workdir / "kubelet.log").exists():
            parts.append("== kubelet log (tail)\n" + "\n".join((self.workdir / "kubelet.log").read_text().splitlines()[-40:]))
        if self.cluster is not None:
            try:
                for p in self.get("pods")["items"]:
                    name = p["metadata"]["name"]
                    parts.append(f"== pod {name}: {json.dumps(p.get('status') or {})[:3000]}")
                    for cont in [c["name"] for c in (p["spec"].get("initContainers") or []) + p["spec"]["containers"]]:
                        out = self.cluster.kubectl("logs", name, "-n", self.namespace, "-c", cont, "--tail", "40",
                                                   check=False)
                        parts.append(f"== logs {name}/{cont}\n{out.stdout}{out.stderr}")
                parts.append(self.cluster.diagnostics())
            except Exception as e:  # noqa: BLE001 - diagnostics are best effort
                parts.append(f"(no cluster diagnostics: {e})")
        if self.prom is not None:
            parts.append("== prometheus log\n" + self.prom.log())
        return "\n".join(parts)


class _Fatal(Exception):
    """A wait that cannot succeed any more."""


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except _Fatal as e:
            raise HarnessError(str(e)) from None
        except Exception as e:  # noqa: BLE001 - not there yet
            last = e
        time.sleep(1.0)
    raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last})" if last else ""))


__all__ = ["RealLoop", "Load", "ServiceLoad", "cpu_cr", "truncated_copy", "complete", "http", "PROMPTS", "VLLM_CPU", "ENGINE_VERSION", "RUNTIME_IMAGE",
           "FAST_BOOT_ENV",
           "free_port"]
