"""Admission webhook latency: 50 concurrent HTTPS clients x N reviews each.

    python -m specdeploy_dev.bench_webhook [--clients 50] [--requests 40] [--compare REV [--runs 2]]
    python -m specdeploy_dev.bench_webhook --server-tree DIR   # another checkout's server, these clients
    python -m specdeploy_dev.bench_webhook --floor   # also the HTTP+TLS stack alone (reviews answered at once)
    python -m specdeploy_dev.bench_webhook --memory [--reviews 1000]   # server RSS after N distinct reviews

The webhook server (the operator's own ``WebhookServer`` with a self-signed certificate) runs in
a child process, so clients and server do not share an interpreter. Two workloads:

- object-level: the Kimi example with hub model sources, whose configs the server does not know
  (pydantic parse + ``check_options``; admitted with the "check runs before rollout" warning);
- full check: the Qwen example whose config.json files are in ConfigMaps the server has in its
  watch cache (as the operator has after the first reconcile), so ``analyze`` runs on the pair.

Each runs twice: "every spec new" gives each review a distinct harmless extra argument, so the
memoized checks never hit (a first apply); "same spec again" re-sends one spec (re-applies).

``--floor`` adds a fifth line: the same server with every review replaced by a fixed answer (no parse, no
check), under the object-level workload. It is what the HTTP and TLS stack alone (aiohttp on asyncio's TLS) costs per
review on this machine, the part of the figures that no work in the checks can remove. The clients wait for each
answer before sending the next, so each client's latency is about clients x the server's time per review: at 50
clients, 400 us of server CPU per review is a 20 ms mean.

``--memory`` measures memory instead (issue 37 hole 3): the server's RSS (``VmRSS``) after 0, 100, 250, 500 and
1000 distinct reviews, one at a time, each a new option set (128 distinct extraArgs of 4 KiB: the CRD's limits)
against a drafter config.json of 1 MiB in a ConfigMap (the Qwen drafter with 4000 out-of-range target_layer_ids and
an extra field of 20000 entries); every review is refused. It prints the load average before and after.

The clients present a client certificate, and the server verifies it (optional client verification, as the
chart's default does with the API server's certificate): only a verified caller gets the full check
(docs/concepts/security.md, "Webhook callers"). Its CA reaches the server in ``SPECDEPLOY_BENCH_CLIENT_CA``;
revisions before that ignore it and serve every caller alike.

Latency is measured per request from send to parsed response, over kept-alive TLS connections
(as kube-apiserver reuses them). Prints p50/p90/p99/max and throughput per workload, and the
server process's CPU time per review.

The clients run in this process on the same CPUs as the server, so they are kept light: plain
asyncio streams speaking the few lines of HTTP/1.1 a review needs (an HTTP client library cost
more CPU per request than the server did). ``--compare REV`` runs this tree's clients against
both servers: this tree's and ``REV``'s (checked out in a temporary worktree, its own bench
module's ``--serve``), so a difference in the figures is the servers'.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .apiserver.frontproxy import FrontProxy
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


FLOOR_WARNING = "w" * 480  # about the length of the object-level review's two warnings


def _fixed_answer() -> None:
    """Replace the review in this (server child) process by a fixed allowed answer with one warning: the server's
    HTTP/TLS handling and body read stay, the parse and every check go (``--floor``)."""
    from specdeploy.controller import webhooks

    async def answer(raw: bytes, **_: object) -> dict:
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": "floor", "allowed": True, "warnings": [FLOOR_WARNING]}}

    webhooks.admission.areview = answer  # type: ignore[assignment]


BIG_DRAFTER_CM = "bench-1mib-drafter-config"


def big_drafter(example: Path = QWEN) -> dict:
    """The example's drafter config.json padded to ~1 MiB: 4000 out-of-range target_layer_ids (a finding each, once)
    and an extra field that no rule reads."""
    d = json.loads((example / "drafter.config.json").read_text())
    d["dflash_config"]["target_layer_ids"] = list(range(64, 64 + 4000))
    d["padding"] = {f"field-{i}": f"value-{i}" * 4 for i in range(20_000)}
    return d

CLIENT_CA_ENV = "SPECDEPLOY_BENCH_CLIENT_CA"


def serve(port_file: str, ca_file: str, floor: bool = False) -> None:
    from specdeploy.controller import certs
    from specdeploy.controller.webhooks import OperatorConfigs, WebhookServer, settle_gc
    from specdeploy.core.policy import TenancyPolicy

    if floor:
        _fixed_answer()

    # the Kimi example trusts its target's remote code: allowed for that model, as its administrator would
    # (operator flag --allow-trust-remote-code-model). The server takes it as an argument; a tree measured from
    # before the settings object (issue 39) read it from SPECDEPLOY_POLICY when the server was built, and one from
    # before the policy ignores both.
    policy = TenancyPolicy(trust_remote_code_models=(_cr(KIMI)["spec"]["target"]["model"],))
    takes_policy = "policy" in inspect.signature(WebhookServer).parameters
    if not takes_policy:
        os.environ["SPECDEPLOY_POLICY"] = policy.to_env()

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
    cache.configmaps[("default", BIG_DRAFTER_CM)] = {
        "metadata": {"name": BIG_DRAFTER_CM, "namespace": "default", "uid": BIG_DRAFTER_CM, "resourceVersion": "1"},
        "data": {"config.json": json.dumps(big_drafter())}}
    m = certs.new_material(["localhost"], ["127.0.0.1"])
    ctx = certs.server_context(m)
    if os.environ.get(CLIENT_CA_ENV):  # the clients are the verified API server (the full check is for it only)
        certs.require_client_certs(ctx, os.environ[CLIENT_CA_ENV], optional=True)

    async def main() -> None:
        server = WebhookServer(lookup=OperatorConfigs(None, cache), ssl_context=ctx, addr="127.0.0.1", port=0,
                               **({"policy": policy} if takes_policy else {}))
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


_CLIENT = "asyncio streams, one kept-alive connection each"


class _Conn:
    """One kept-alive HTTPS connection speaking just enough HTTP/1.1 for the bench: a POST with a body, a response
    with Content-Length (as the webhook server always sends). Far lighter on the CPU than an HTTP client library:
    the clients share the machine with the server, and the figures are the server's."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        self.reader, self.writer, self.head = reader, writer, head

    @classmethod
    async def open(cls, port: int, ctx: ssl.SSLContext, path: str) -> "_Conn":
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n".encode()
        return cls(reader, writer, head)

    async def post(self, body: bytes) -> tuple[int, bytes]:
        self.writer.write(b"%sContent-Length: %d\r\n\r\n%s" % (self.head, len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"response without Content-Length: {head[:200]!r}")
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def _run(port: int, ca_pem: bytes, cr: dict, clients: int, requests: int, expect_warning: bool,
               unique: bool, client_cert: Any = None) -> dict:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    if client_cert is not None:
        client_cert.present(ctx)
    lat: list[float] = []
    bodies = [json.dumps(_review(_unique(cr, i) if unique else cr)).encode() for i in range(clients * requests + clients)]
    # one connection per client, opened (TLS handshake included) before the clock starts, as kube-apiserver keeps
    # its connections alive
    conns = await asyncio.gather(*(_Conn.open(port, ctx, "/validate") for _ in range(clients)))

    async def one(conn: _Conn, body: bytes, record: bool) -> None:
        t0 = time.perf_counter()
        status, raw = await conn.post(body)
        doc = json.loads(raw)
        dt = time.perf_counter() - t0
        resp = doc["response"]
        assert status == 200 and resp["allowed"] is True, doc
        assert bool(resp.get("warnings")) is expect_warning, resp
        if record:
            lat.append(dt)

    try:
        # warm-up: one review per connection
        await asyncio.gather(*(one(conns[i], bodies[i], False) for i in range(clients)))

        async def worker(w: int) -> None:
            for k in range(requests):
                await one(conns[w], bodies[clients + w * requests + k], True)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        wall = time.perf_counter() - t0
    finally:
        for c in conns:
            c.close()
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(round(p / 100 * len(lat))) - 1 if p < 100 else len(lat) - 1)] * 1000

    return {"n": len(lat), "p50": pct(50), "p90": pct(90), "p99": pct(99), "max": lat[-1] * 1000,
            "mean": statistics.fmean(lat) * 1000, "rps": len(lat) / wall}


def _server_command(tree: Path, port_file: Path, ca_file: Path, floor: bool = False) -> tuple[list[str], dict]:
    """(argv, Popen keywords) of the webhook server of checkout ``tree``: its own bench module's ``--serve`` with its
    own source roots first (compare.child_env), or this tree's as it is installed (``floor``: with the review
    replaced by a fixed answer; this tree only)."""
    if tree == ROOT:
        return [sys.executable, "-m", "specdeploy_dev.bench_webhook", "--serve-floor" if floor else "--serve",
                str(port_file), str(ca_file)], {"cwd": ROOT}
    from . import compare

    module = compare.bench_module(tree, "specdeploy_dev.bench_webhook", "specdeploy.dev.bench_webhook")
    return [sys.executable, "-m", module, "--serve", str(port_file), str(ca_file)], \
        {"cwd": tree, "env": compare.child_env(tree)}


def _rss_mib(pid: int) -> float | None:
    """Resident memory of a process in MiB (Linux /proc), or None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def _memory_cr(i: int) -> dict:
    cr = _cr(QWEN)
    cr["spec"]["drafter"]["configFrom"]["configMapKeyRef"]["name"] = BIG_DRAFTER_CM
    cr["spec"]["engine"]["extraArgs"] = [f"pad-{i}-{j}-{'x' * 4000}" for j in range(128)]
    return cr


async def _memory_run(port: int, ca_pem: bytes, pid: int, reviews: int, marks: tuple[int, ...],
                      client_cert: Any = None) -> list[tuple]:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    if client_cert is not None:  # the verified API server: only it gets the configs lookup (the 1 MiB drafter)
        client_cert.present(ctx)
    conn = await _Conn.open(port, ctx, "/validate")
    out = [(0, _rss_mib(pid), 0.0)]
    t0 = time.perf_counter()
    try:
        for i in range(reviews):
            status, raw = await conn.post(json.dumps(_review(_memory_cr(i))).encode())
            resp = json.loads(raw)["response"]
            causes = (resp.get("status") or {}).get("details", {}).get("causes", [])
            assert status == 200 and resp["allowed"] is False and \
                any("is outside the target's" in c["message"] for c in causes), str(resp)[:500]
            if i + 1 in marks:
                out.append((i + 1, _rss_mib(pid), time.perf_counter() - t0))
    finally:
        conn.close()
    return out



def _start_server(tree: Path, tmp: Path, floor: bool) -> tuple[subprocess.Popen, int | None, bytes, Any]:
    """A server child of ``tree`` that verifies the API server's client certificate (only it gets the full check):
    (process, port or None when it did not start, its CA, the client certificate the clients present)."""
    port_file, ca_file = tmp / "port", tmp / "ca.pem"
    cmd, where = _server_command(tree, port_file, ca_file, floor)
    client = FrontProxy.generate()  # the API server's client certificate and its CA
    (tmp / "client-ca.pem").write_bytes(client.ca_pem)
    where = {**where, "env": {**(where.get("env") or os.environ), CLIENT_CA_ENV: str(tmp / "client-ca.pem")}}
    proc = subprocess.Popen(cmd, **where)
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            print("bench_webhook: the server did not start", file=sys.stderr)
            return proc, None, b"", client
        time.sleep(0.05)
    return proc, int(port_file.read_text()), ca_file.read_bytes(), client

def memory(reviews: int) -> int:
    """Server RSS after N distinct reviews against the 1 MiB drafter (``--memory``)."""
    marks = tuple(n for n in (100, 250, 500, 1000) if n < reviews) + (reviews,)
    limit = "512Mi"  # charts/specdeploy/values.yaml resources.limits.memory
    print(f"webhook memory: RSS of the server process after N distinct reviews against a 1 MiB drafter config "
          f"(chart limit {limit}; {os.cpu_count()} CPUs; {_load()})", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="specdeploy-bench-webhook-"))
    proc, port, ca, client = _start_server(ROOT, tmp, False)
    try:
        if port is None:
            return 1
        for n, rss, took in asyncio.run(_memory_run(port, ca, proc.pid, reviews, marks, client)):
            print(f"  after {n:5d} reviews: RSS {rss:6.1f} MiB" + (f"  ({took:.1f} s)" if n else ""), flush=True)
    finally:
        stop_process(proc, 10)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"  ({_load()})")
    return 0


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
    ap.add_argument("--server-tree", metavar="DIR", help="run the webhook server of this checkout (its own bench "
                    "module's --serve, its own code); the clients are always this tree's (what --compare uses)")
    ap.add_argument("--floor", action="store_true", help="also measure the server with every review answered at "
                    "once by a fixed answer (the HTTP and TLS stack alone), under the object-level workload")
    ap.add_argument("--memory", action="store_true", help="measure the server's RSS after N distinct reviews against "
                    "a 1 MiB drafter config instead of latency")
    ap.add_argument("--reviews", type=int, default=1000, help="with --memory: how many reviews (default 1000)")
    ap.add_argument("--serve", nargs=2, metavar=("PORT_FILE", "CA_FILE"), help=argparse.SUPPRESS)
    ap.add_argument("--serve-floor", nargs=2, metavar=("PORT_FILE", "CA_FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve or args.serve_floor:
        serve(*(args.serve or args.serve_floor), floor=bool(args.serve_floor))
        return 0
    if args.memory:
        return memory(args.reviews)
    if args.floor and (args.compare or args.server_tree):
        ap.error("--floor measures this tree's server: run it without --compare and --server-tree")
    if args.compare:
        from . import compare

        # both revisions' servers are measured with this tree's clients (they share the CPUs with the server)
        return compare.side_by_side(
            "webhook bench", args.compare, args.runs,
            lambda tree: [sys.executable, "-m", "specdeploy_dev.bench_webhook", "--server-tree", str(tree),
                          "--clients", str(args.clients), "--requests", str(args.requests)],
            compare.parse_webhook, from_here=True)
    tree = Path(args.server_tree).resolve() if args.server_tree else ROOT
    # the reviews are of the server tree's own examples (its API and the ConfigMaps it serves are of that tree)
    kimi, qwen = (tree / "examples" / KIMI.name, tree / "examples" / QWEN.name)
    print(f"webhook latency over HTTPS, {args.clients} concurrent clients x {args.requests} reviews "
          f"(server: one process, {os.cpu_count()} CPUs on this machine; clients: {_CLIENT})")
    rc = _measure(tree, False, args.clients, args.requests, (
        ("object-level, every spec new", _cr(kimi, hub=True), True, True),
        ("object-level, same spec again", _cr(kimi, hub=True), True, False),
        ("full check, every spec new", _cr(qwen), False, True),
        ("full check, same spec again", _cr(qwen), False, False)))
    if rc == 0 and args.floor:
        rc = _measure(tree, True, args.clients, args.requests,
                      (("HTTP+TLS floor, fixed answer", _cr(kimi, hub=True), True, False),))
    return rc


def _measure(tree: Path, floor: bool, clients: int, requests: int, workloads: tuple) -> int:
    """Start a server child of ``tree``, run each (label, CR, warning expected, every spec new) workload against it and
    print its figures; 1 when the server does not start."""
    tmp = Path(tempfile.mkdtemp(prefix="specdeploy-bench-webhook-"))
    proc, port, ca, client = _start_server(tree, tmp, floor)
    try:
        if port is None:
            return 1
        for label, cr, warn, unique in workloads:
            cpu0 = _cpu_seconds(proc.pid)
            s = asyncio.run(_run(port, ca, cr, clients, requests, warn, unique, client))
            cpu1 = _cpu_seconds(proc.pid)
            cpu = f", server CPU {(cpu1 - cpu0) / (s['n'] + clients) * 1e6:.0f} us/review" if cpu0 is not None and cpu1 is not None else ""
            print(f"  {label:<30} p50 {s['p50']:5.1f} ms  p90 {s['p90']:5.1f} ms  p99 {s['p99']:5.1f} ms  "
                  f"max {s['max']:5.1f} ms  ({s['n']} reviews, {s['rps']:.0f}/s{cpu})")
    finally:
        stop_process(proc, 10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
