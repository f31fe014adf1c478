"""High availability on the embedded cluster: two operator replicas with leader election.

1. kill -9 the leader while 100 SpeculativeDeployments are being created and AdmissionReviews flow
   to both replicas: the follower takes over, converges everything (each CR has exactly one of each
   child, status at its generation, the spec changes made after the kill applied), admission keeps
   answering on the surviving replica, and the reconciler's writes stay within a stated bound.
2. partition the leader from the API server (every request with its User-Agent dropped): it stops
   writing, and no write of it starts after the new leader's first write.

The evidence is the API server's write log (User-Agent, wall-clock start/end of every write request,
faulted ones included). Takeover times and write counts are printed (docs/benchmarks.md keeps them);
nothing here asserts a duration.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from e2e_support import (OPERATOR_ARGS, QWEN, Cluster, configmap, embedded_only, example_cr, example_doc, new_cluster,
                         stop_cluster, wait_for)
from specdeploy_dev.harness import BIN, ROOT, free_port
from specdeploy_dev.procs import stop_process

# kill -9 and partition orderings ride on lease margins: run with the machine alone (.ci/test)
pytestmark = [embedded_only, pytest.mark.alone]

# leaseDuration, renewDeadline, retryPeriod (seconds): short, to keep the test short;
# SPECDEPLOY_E2E_LEASE=15,10,2 measures the chart's defaults (docs/benchmarks.md)
LEASE = tuple(float(x) if "." in x else int(x) for x in os.environ.get("SPECDEPLOY_E2E_LEASE", "3,2,0.5").split(","))
CRS = 100
KILL_AFTER = 30  # CRs created before the leader is killed
UPDATED = 10  # CRs whose spec changes after the kill (their new replicas must reach the Deployments)
PLURAL = "/apis/specdeploy.io/v1alpha1/namespaces/{ns}/speculativedeployments"
# Per CR: 4 children created + 1 status patch + 1 Event (e2e/test_e2e_writes.py); per spec change:
# Deployment + engine ConfigMap patches, a status patch, an Event; plus, for the CRs the killed leader
# was reconciling, their reconcile repeated once by the new leader.
MAX_WRITES = 6 * CRS + 4 * UPDATED + 6 * 8


class Replica:
    def __init__(self, c: Cluster, name: str):
        self.name = name
        self.agent = f"specdeploy-operator/{name}"
        self.ports = {k: free_port() for k in ("metrics", "health", "webhook")}
        self.log_path = Path(c.workdir) / f"operator-{name}.log"
        self.log = open(self.log_path, "a")
        argv = [str(BIN / "specdeploy"), "operator", "run", "--kubeconfig", c.kubeconfig, "--namespace", c.namespace,
                "--metrics-port", str(self.ports["metrics"]), "--health-port", str(self.ports["health"]),
                "--resync-seconds", "30", "--webhook", "--webhook-port", str(self.ports["webhook"]),
                "--operator-namespace", c.namespace, "--leader-elect",
                "--lease-duration", str(LEASE[0]), "--renew-deadline", str(LEASE[1]), "--retry-period", str(LEASE[2]),
                *OPERATOR_ARGS]
        env = {**c.env(), "SPECDEPLOY_IDENTITY": name, "SPECDEPLOY_ACCEPTANCE_INTERVAL": "0"}
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['health']}/readyz", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.HTTPError):
            return False

    def metric(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def stop(self) -> None:
        stop_process(self.proc, 20)
        self.log.close()

    def tail(self) -> str:
        return self.log_path.read_text()[-4000:] if self.log_path.exists() else ""


def api(c: Cluster, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(c.url + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/merge-patch+json" if method == "PATCH"
                                          else "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def lease(c: Cluster) -> dict:
    status, body = api(c, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{c.namespace}/leases/specdeploy-operator")
    return (body.get("spec") or {}) if status == 200 else {}


def lease_holder(c: Cluster) -> str:
    return lease(c).get("holderIdentity") or ""


def acquired_at(c: Cluster) -> float:
    """The Lease's acquireTime (written by the new holder's clock: the same machine here) as a Unix time."""
    import datetime as dt

    return dt.datetime.strptime(lease(c)["acquireTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc).timestamp()


def reconciler_writes(c: Cluster, agent: str) -> list[dict]:
    """The writes of one replica's reconciler (its Lease and webhook TLS upkeep left out: every replica does those)."""
    ws = json.loads(urllib.request.urlopen(c.url + "/_specdeploy/writes", timeout=30).read())["writes"]
    return [w for w in ws if w["agent"] == agent and "/leases" not in w["path"] and "/secrets" not in w["path"]
            and "admissionregistration" not in w["path"]]


class Reviews(threading.Thread):
    """AdmissionReviews to every replica, round robin, until stopped: per replica (answered, failed)."""

    def __init__(self, c: Cluster, replicas: list[Replica], cr: dict):
        super().__init__(daemon=True)
        secret = wait_for(lambda: api(c, "GET", f"/api/v1/namespaces/{c.namespace}/secrets/specdeploy-webhook-tls")[1]
                          .get("data"), 30, "the shared webhook TLS Secret")
        self.ctx = ssl.create_default_context(cadata=base64.b64decode(secret["ca.crt"]).decode())
        self.replicas, self.cr, self.ns = replicas, cr, c.namespace
        self.answered = {r.name: 0 for r in replicas}
        self.failed = {r.name: 0 for r in replicas}
        self.refusals: list[str] = []
        self.halt = threading.Event()

    def review(self, r: Replica, i: int) -> None:
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": f"ha-{i}", "operation": "CREATE", "namespace": self.ns, "name": f"review-{i}",
            "kind": {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"},
            "resource": {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"},
            "object": {**self.cr, "metadata": {"name": f"review-{i}", "namespace": self.ns}},
            "userInfo": {"username": "ha-test"}}}
        req = urllib.request.Request(f"https://127.0.0.1:{r.ports['webhook']}/validate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5, context=self.ctx) as resp:
                got = json.loads(resp.read())["response"]
        except OSError:
            self.failed[r.name] += 1
            return
        self.answered[r.name] += 1
        if not got.get("allowed"):
            self.refusals.append(f"{r.name}: {(got.get('status') or {}).get('message', '')[:200]}")

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            for r in self.replicas:
                i += 1
                self.review(r, i)
            time.sleep(0.01)


@pytest.fixture
def ha(request):
    c = new_cluster("ha", operator=False)
    replicas: list[Replica] = []
    before = request.session.testsfailed
    try:
        yield c, replicas
    finally:
        for r in replicas:
            r.stop()
            if request.session.testsfailed > before:
                print(f"\n======== operator {r.name} log tail\n{r.tail()}")
        stop_cluster(c)


def start_pair(c: Cluster, replicas: list[Replica]) -> tuple[Replica, Replica]:
    api(c, "POST", f"/api/v1/namespaces/{c.namespace}/configmaps", configmap("ha-target", example_doc(QWEN, "target")))
    api(c, "POST", f"/api/v1/namespaces/{c.namespace}/configmaps", configmap("ha-drafter", example_doc(QWEN, "drafter")))
    replicas += [Replica(c, "op-a"), Replica(c, "op-b")]
    wait_for(lambda: all(r.ready() for r in replicas), 60, "both replicas ready (webhook serving, caches synced)")
    holder = wait_for(lambda: lease_holder(c), 30, "a leader")
    leader = next(r for r in replicas if r.name == holder)
    follower = next(r for r in replicas if r is not leader)
    wait_for(lambda: leader.metric("specdeploy_leader") == 1 and follower.metric("specdeploy_leader") == 0, 30,
             "the leader gauge of both replicas")
    return leader, follower


def converged(c: Cluster, names: list[str], replicas_of: dict[str, int]) -> bool:
    _, crs = api(c, "GET", PLURAL.format(ns=c.namespace))
    by_name = {o["metadata"]["name"]: o for o in crs.get("items") or []}
    for n in names:
        o = by_name.get(n)
        st = (o or {}).get("status") or {}
        if not o or st.get("observedGeneration") != o["metadata"].get("generation"):
            return False
    _, deps = api(c, "GET", f"/apis/apps/v1/namespaces/{c.namespace}/deployments")
    have = {d["metadata"]["name"]: d["spec"].get("replicas") for d in deps.get("items") or []}
    return all(have.get(n) == replicas_of.get(n, 1) for n in names)


def test_kill_the_leader_while_crs_are_created_and_reviews_flow(ha):
    c, replicas = ha
    leader, follower = start_pair(c, replicas)
    cr = example_cr(QWEN, target_cm="ha-target", drafter_cm="ha-drafter")
    reviews = Reviews(c, replicas, cr)
    reviews.start()
    names = [f"ha-{i:03d}" for i in range(CRS)]
    created: list[str] = []
    kill_at: list[float] = []

    def create_all():
        for i, n in enumerate(names):
            if i == KILL_AFTER:
                kill_at.append(time.time())
                leader.proc.kill()  # SIGKILL: no release of the Lease, no goodbye
            status, _ = api(c, "POST", PLURAL.format(ns=c.namespace), {**cr, "metadata": {"name": n}})
            assert status == 201, (n, status)
            created.append(n)

    creator = threading.Thread(target=create_all, daemon=True)
    creator.start()
    creator.join(120)
    assert len(created) == CRS and kill_at
    leader.proc.wait(10)
    # spec changes after the kill: the new leader must not lose them
    replicas_of = {n: 2 for n in names[:UPDATED]}
    for n in names[:UPDATED]:
        assert api(c, "PATCH", f"{PLURAL.format(ns=c.namespace)}/{n}", {"spec": {"replicas": 2}})[0] == 200
    wait_for(lambda: lease_holder(c) == follower.name, 30, "the follower to take the Lease")
    took_lease = acquired_at(c) - kill_at[0]
    assert lease(c)["leaseTransitions"] == 1
    wait_for(lambda: converged(c, names, replicas_of), 120, "every CR converged by the new leader", interval=1.0)
    done = time.time() - kill_at[0]
    reviews.halt.set()
    reviews.join(10)

    # exactly one of each child per CR, owned by it
    for plural, api_path in (("configmaps", "/api/v1"), ("deployments", "/apis/apps/v1"), ("services", "/api/v1"),
                             ("poddisruptionbudgets", "/apis/policy/v1")):
        _, lst = api(c, "GET", f"{api_path}/namespaces/{c.namespace}/{plural}?labelSelector=app.kubernetes.io/managed-by%3Dspecdeploy")
        owners = [o["metadata"]["ownerReferences"][0]["name"] for o in lst["items"]]
        assert sorted(owners) == sorted(names), (plural, len(owners))

    a_writes = reconciler_writes(c, leader.agent)
    b_writes = reconciler_writes(c, follower.agent)
    first_b = min(w["start"] for w in b_writes)
    # every request of the old leader had ended (answered, or its connection gone) before the new one's first
    assert all(w["end"] < first_b for w in a_writes), "the two replicas' writes overlap"
    total = len(a_writes) + len(b_writes)
    conflicts = len([w for w in b_writes if w["status"] == 409])
    print(f"\nHA kill -9: {CRS} CRs ({KILL_AFTER} created before the kill), {UPDATED} spec changes after it; "
          f"Lease taken {took_lease:.2f}s after the kill (leaseDuration {LEASE[0]}s, retryPeriod {LEASE[2]}s), "
          f"first write of the new leader {first_b - kill_at[0]:.2f}s, all converged {done:.1f}s; "
          f"writes: old leader {len(a_writes)}, new leader {len(b_writes)} ({conflicts} conflicts), "
          f"total {total} (bound {MAX_WRITES}); reviews answered {reviews.answered}, failed {reviews.failed}")
    assert total <= MAX_WRITES
    # admission through the surviving replica never failed and allowed every valid object
    assert reviews.failed[follower.name] == 0 and reviews.answered[follower.name] > 0
    assert not reviews.refusals, reviews.refusals[:3]
    assert follower.metric("specdeploy_leader") == 1
    assert (follower.metric("specdeploy_leader_transitions_total") or 0) >= 2  # saw op-a, then itself


def test_a_partitioned_leader_stops_writing(ha):
    c, replicas = ha
    leader, follower = start_pair(c, replicas)
    cr = example_cr(QWEN, target_cm="ha-target", drafter_cm="ha-drafter")
    names = [f"part-{i}" for i in range(5)]
    for n in names:
        assert api(c, "POST", PLURAL.format(ns=c.namespace), {**cr, "metadata": {"name": n}})[0] == 201
    wait_for(lambda: converged(c, names, {}), 60, "the CRs converged by the first leader", interval=0.5)
    # cut the leader off: every request with its User-Agent gets its connection dropped; then give
    # it work (spec changes it still sees through kopf's watch, which is another client)
    cut = time.time()
    c.fault(verb="*", resource="*", agent=leader.agent, action="drop", count=10**9)
    for n in names:
        api(c, "PATCH", f"{PLURAL.format(ns=c.namespace)}/{n}", {"spec": {"replicas": 3}})
    wait_for(lambda: lease_holder(c) == follower.name, 30, "the follower to take the Lease")
    took = acquired_at(c) - cut
    wait_for(lambda: converged(c, names, {n: 3 for n in names}), 60, "the new leader to apply the changes", interval=0.5)
    wait_for(lambda: leader.metric("specdeploy_leader") == 0, 30, "the partitioned leader to know it lost the Lease")
    a_writes = [w for w in reconciler_writes(c, leader.agent) if w["start"] >= cut]
    b_writes = reconciler_writes(c, follower.agent)
    first_b = min(w["start"] for w in b_writes)
    last_a = max((w["end"] for w in a_writes), default=cut)
    print(f"\nHA partition: the old leader's last write attempt ended {last_a - cut:+.2f}s after the cut "
          f"({len(a_writes)} attempts, all dropped), the new leader's first write {first_b - cut:+.2f}s; "
          f"Lease taken {took:.2f}s after the cut (leaseDuration {LEASE[0]}s, renewDeadline {LEASE[1]}s)")
    assert last_a < first_b
    assert all(w["status"] == 0 for w in a_writes)  # none reached the store
    fenced = leader.metric("specdeploy_fenced_writes_total")
    print(f"writes the partitioned replica's fence refused: {fenced}")
