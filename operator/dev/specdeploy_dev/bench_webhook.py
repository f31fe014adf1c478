"""Admission webhook latency: 50 concurrent HTTPS clients (aiohttp) x N reviews each.

    python -m specdeploy_dev.bench_webhook [--clients 50] [--requests 40] [--compare REV [--runs 2]]

The webhook server (the operator's own ``WebhookServer`` with a self-signed certificate) runs in
a child process, so clients and server do not share an interpreter. Two workloads:

- object-level: the Kimi example with hub model sources, whose configs the server does not know
  (pydantic parse + ``check_options``; admitted with the "check runs before rollout" warning);
- full check: the Qwen example whose config.json files are in ConfigMaps the server has in its
  watch cache (as the operator has after the first reconcile), so ``analyze`` runs on the pair.

Each runs twice: "every spec new" gives each review a distinct harmless extra argument, so the
memoized checks never hit (a first apply); "same spec again" re-sends one spec (re-applies).

Latency is measured per request from send to parsed response, over kept-alive TLS connections
(as kube-apiserver reuses them). Prints p50/p90/p99/max and throughput per workload.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .procs import stop_process

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
QWEN = EXAMPLES / "qwen3.6-27b-b300-vllm"
KIMI = EXAMPLES / "kimi-k2.6-rtx-pro-6000-sglang"
GVK = {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"}
GVR = {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"}


def _cr(example: Path, hub: bool = False) -> dict:
    import yaml

    cr = yaml.safe_load((example / "speculativedeployment.yaml").read_text())
    cr["metadata"]["namespace"] = "default"
    if hub:
        for role in ("target", "drafter"):
            cr["spec"][role].pop("configFrom", None)
    return cr


def _review(cr: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": GVK, "resource": GVR, "requestKind": GVK, "requestResource": GVR,
        "name": cr["metadata"]["name"], "namespace": "default", "operation": "CREATE",
        "userInfo": {"username": "bench"}, "object": cr, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


# ----------------------------------------------------------------- the server (child process)


class _Cache:
    """The parts of the operator's Resolver the lookup reads: the ConfigMap watch cache, the hub cache."""

    def __init__(self) -> None:
        self.configmaps: dict = {}
        self._hub_cache: dict = {}


def serve(port_file: str, ca_file: str) -> None:
    from specdeploy.controller import certs
    from specdeploy.controller.webhooks import OperatorConfigs, WebhookServer, settle_gc
    from specdeploy.core.policy import POLICY_ENV, TenancyPolicy

    # the Kimi example trusts its target's remote code: allowed for that model, as its administrator would
    # (operator flag --allow-trust-remote-code-model; revisions before the policy ignore the variable)
    os.environ[POLICY_ENV] = TenancyPolicy(trust_remote_code_models=(_cr(KIMI)["spec"]["target"]["model"],)).to_env()

    cache = _Cache()
    for example in (QWEN, KIMI):
        for line in (example / "kustomization.yaml").read_text().splitlines():
            line = line.strip()
            if line.startswith("- name:"):
                name = line.split(":", 1)[1].strip()
                role = "target" if "target" in name else "drafter"
                cache.configmaps[("default", name)] = {
                    "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": "1"},
                    "data": {"config.json": (example / f"{role}.config.json").read_text()}}
    m = certs.new_material(["localhost"], ["127.0.0.1"])

    async def main() -> None:
        server = WebhookServer(lookup=OperatorConfigs(None, cache), ssl_context=certs.server_context(m),
                               addr="127.0.0.1", port=0)
        await server.start()
        settle_gc()  # as the operator does after start-up
        Path(ca_file).write_bytes(m.ca_pem)
        Path(port_file + ".tmp").write_text(str(server.port))
        os.replace(port_file + ".tmp", port_file)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(main())


# ----------------------------------------------------------------- the clients


def _unique(cr: dict, i: int) -> dict:
    """A spec no review has seen: a distinct harmless extra argument defeats the memoized checks."""
    flag = "--max-running-requests" if cr["spec"]["engine"]["name"] == "sglang" else "--max-num-seqs"
    out = json.loads(json.dumps(cr))
    out["spec"]["engine"]["extraArgs"] = [f"{flag}={i + 1}"]
    return out


async def _run(port: int, ca_pem: bytes, cr: dict, clients: int, requests: int, expect_warning: bool,
               unique: bool) -> dict:
    import aiohttp

    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    url = f"https://127.0.0.1:{port}/validate"
    lat: list[float] = []
    bodies = [json.dumps(_review(_unique(cr, i) if unique else cr)).encode() for i in range(clients * requests + clients)]
    conn = aiohttp.TCPConnector(limit=clients, ssl=ctx)
    async with aiohttp.ClientSession(connector=conn, headers={"Content-Type": "application/json"}) as session:
        async def one(body: bytes, record: bool) -> None:
            t0 = time.perf_counter()
            async with session.post(url, data=body) as r:
                doc = await r.json()
            dt = time.perf_counter() - t0
            resp = doc["response"]
            assert r.status == 200 and resp["allowed"] is True, doc
            assert bool(resp.get("warnings")) is expect_warning, resp
            if record:
                lat.append(dt)

        # warm-up: open every connection (TLS handshakes are not part of a review's latency)
        await asyncio.gather(*(one(bodies[i], False) for i in range(clients)))

        async def worker(w: int) -> None:
            for k in range(requests):
                await one(bodies[clients + w * requests + k], True)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        wall = time.perf_counter() - t0
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(round(p / 100 * len(lat))) - 1 if p < 100 else len(lat) - 1)] * 1000

    return {"n": len(lat), "p50": pct(50), "p90": pct(90), "p99": pct(99), "max": lat[-1] * 1000,
            "mean": statistics.fmean(lat) * 1000, "rps": len(lat) / wall}


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=40, help="reviews per client")
    ap.add_argument("--compare", metavar="REV", help="also run git revision REV (checked out in a temporary "
                    "worktree), alternating with this tree, and print both figures with the load average")
    ap.add_argument("--runs", type=int, default=2, help="with --compare: runs of each revision (default 2)")
    ap.add_argument("--serve", nargs=2, metavar=("PORT_FILE", "CA_FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    if args.compare:
        from . import compare

        return compare.side_by_side(
            "webhook bench", args.compare, args.runs,
            lambda tree: [sys.executable, "-m", compare.bench_module(tree, "specdeploy_dev.bench_webhook",
                                                                     "specdeploy.dev.bench_webhook"),
                          "--clients", str(args.clients), "--requests", str(args.requests)],
            compare.parse_webhook)
    tmp = Path(tempfile.mkdtemp(prefix="specdeploy-bench-webhook-"))
    port_file, ca_file = tmp / "port", tmp / "ca.pem"
    proc = subprocess.Popen([sys.executable, "-m", "specdeploy_dev.bench_webhook", "--serve", str(port_file), str(ca_file)],
                            cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                print("bench_webhook: the server did not start", file=sys.stderr)
                return 1
            time.sleep(0.05)
        port, ca = int(port_file.read_text()), ca_file.read_bytes()
        print(f"webhook latency over HTTPS, {args.clients} concurrent clients x {args.requests} reviews "
              f"(server: one process, {os.cpu_count()} CPUs on this machine)")
        for label, cr, warn, unique in (
                ("object-level, every spec new", _cr(KIMI, hub=True), True, True),
                ("object-level, same spec again", _cr(KIMI, hub=True), True, False),
                ("full check, every spec new", _cr(QWEN), False, True),
                ("full check, same spec again", _cr(QWEN), False, False)):
            cpu0 = _cpu_seconds(proc.pid)
            s = asyncio.run(_run(port, ca, cr, args.clients, args.requests, warn, unique))
            cpu1 = _cpu_seconds(proc.pid)
            cpu = f", server CPU {(cpu1 - cpu0) / (s['n'] + args.clients) * 1e6:.0f} us/review" if cpu0 is not None and cpu1 is not None else ""
            print(f"  {label:<30} p50 {s['p50']:5.1f} ms  p90 {s['p90']:5.1f} ms  p99 {s['p99']:5.1f} ms  "
                  f"max {s['max']:5.1f} ms  ({s['n']} reviews, {s['rps']:.0f}/s{cpu})")
    finally:
        stop_process(proc, 10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
