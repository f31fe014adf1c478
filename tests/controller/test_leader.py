"""LeaderElector (controller/leader.py) against the embedded API server: acquire, follow, take over,
release, and the fence: a partitioned leader stops writing before another replica starts.

Each "replica" is an elector plus a writer that patches a ConfigMap through a fenced Kube as fast as
it may (a stand-in for the reconciler). The API server's write log (``emulator.writes``: every write
request with its User-Agent and wall-clock start/end, faulted ones included) is the evidence.
No timed assertions: the orderings are asserted, the durations printed.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from specdeploy.controller import metrics
from specdeploy.controller.kube import Kube, NotLeader, load_api_client
from specdeploy.controller.leader import LEASES, LeaderElectionSettings, LeaderElector
from specdeploy.core.lease import LeaseTiming
from specdeploy_dev import apiserver

TIMING = LeaseTiming(lease_duration=2, renew_deadline=1.2, retry_period=0.2)
# The partition test asserts that the fenced leader's last write attempt reaches the server before the
# new leader's first: the margin between them is leaseDuration - renewDeadline (0.8 s in TIMING), and
# on a loaded 2-core machine one request can wait longer than that in the client's thread pool between
# the fence's check and the server. Production keeps 5 s (15/10); this test keeps 2.5 s.
PARTITION_TIMING = LeaseTiming(lease_duration=4, renew_deadline=1.5, retry_period=0.2)
NS = "default"
# the partition test's orderings ride on sub-second lease margins: run with the machine alone (.ci/test)
pytestmark = pytest.mark.alone


@pytest.fixture()
def server(tmp_path):
    srv = apiserver.serve_in_thread()
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig", srv.url)
    srv.kubeconfig = kubeconfig
    yield srv
    srv.stop()


class Replica:
    def __init__(self, server, name: str, stop_writer: bool = True, timing: LeaseTiming = TIMING):
        self.stop_writer = stop_writer  # False: only the fence stops the writer (it keeps trying)
        api = load_api_client(server.kubeconfig)
        api.user_agent = f"specdeploy-operator/{name}"
        self.name = name
        self.base = Kube(api)
        self.elector = LeaderElector(self.base, NS, name, timing=timing, on_started=self._started,
                                     on_stopped=self._stopped)
        self.kube = self.base.fenced(self.elector.fence())
        self.events: list[tuple[str, float]] = []
        self.writes = 0
        self.refused = 0
        self._writer: asyncio.Task | None = None

    async def _started(self):
        self.events.append(("started", time.time()))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_loop())

    async def _stopped(self):
        self.events.append(("stopped", time.time()))
        if self._writer is not None and self.stop_writer:
            self._writer.cancel()

    async def _write_loop(self):
        # writes as fast as the fence allows; a refusal (NotLeader) is counted, never sent
        while True:
            try:
                await self.kube.patch("ConfigMap", NS, "shared", {"data": {"writer": self.name}})
                self.writes += 1
            except NotLeader:
                self.refused += 1
            except Exception:  # noqa: BLE001 - a partitioned request fails; keep trying
                pass
            await asyncio.sleep(0.02)


def lease(server) -> dict:
    return server.call(lambda e: e.get_object("leases", "specdeploy-operator", NS, group="coordination.k8s.io"))


def writes_by(server, name: str, path_part: str = "/configmaps/shared") -> list[dict]:
    return [w for w in server.call(lambda e: e.writes) if w["agent"].endswith("/" + name) and path_part in w["path"]]


async def wait(pred, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def a_leads_b_follows(server) -> tuple[Replica, Replica]:
    """Two replicas: a starts and leads, then b starts and sees a as the leader."""
    a, b = Replica(server, "a"), Replica(server, "b")
    a.elector.start()
    await wait(lambda: a.elector.leading, what="a to lead")
    b.elector.start()
    await wait(lambda: b.elector.leader == "a", what="b to observe a")
    return a, b


def test_only_one_replica_leads_and_a_follower_takes_over_after_the_leader_dies(server):
    server.call(lambda e: e.create_object({"apiVersion": "v1", "kind": "ConfigMap",
                                           "metadata": {"name": "shared", "namespace": NS}}))

    async def main():
        a, b = await a_leads_b_follows(server)
        await asyncio.sleep(TIMING.lease_duration)  # b keeps following while a renews
        assert not b.elector.leading and b.writes == 0 and a.writes > 0
        rec = lease(server)["spec"]
        assert rec["holderIdentity"] == "a" and rec["leaseTransitions"] == 0 and rec["leaseDurationSeconds"] == 2
        # a dies (no release: a crash); its writer and elector stop at once
        killed = time.time()
        await a.elector.stop(release=False)
        await asyncio.gather(a._writer, return_exceptions=True)
        assert a._writer.cancelled() and not a.elector.may_write()
        await wait(lambda: b.elector.leading, what="b to take over")
        took = time.time() - killed
        await wait(lambda: b.writes > 0, what="b to write")
        rec = lease(server)["spec"]
        assert rec["holderIdentity"] == "b" and rec["leaseTransitions"] == 1
        print(f"takeover after a crash: {took:.2f}s (leaseDuration {TIMING.lease_duration:g}s, "
              f"retryPeriod {TIMING.retry_period:g}s)")
        last_a = max(w["end"] for w in writes_by(server, "a"))
        first_b = min(w["start"] for w in writes_by(server, "b"))
        assert last_a < first_b
        await b.elector.stop(release=True)
        assert lease(server)["spec"]["holderIdentity"] == ""

    asyncio.run(main())


def test_a_graceful_stop_releases_the_lease_and_the_follower_takes_it_at_once(server):
    async def main():
        a, b = await a_leads_b_follows(server)
        stopped = time.time()
        await a.elector.stop(release=True)
        assert not a.elector.may_write() and a.events[-1][0] == "stopped"
        await wait(lambda: b.elector.leading, what="b to take the released lease")
        print(f"takeover after a release: {time.time() - stopped:.2f}s")
        rec = lease(server)["spec"]
        assert rec["holderIdentity"] == "b" and rec["leaseTransitions"] == 1
        await b.elector.stop(release=False)

    asyncio.run(main())


def test_a_partitioned_leader_stops_writing_before_the_follower_starts(server):
    server.call(lambda e: e.create_object({"apiVersion": "v1", "kind": "ConfigMap",
                                           "metadata": {"name": "shared", "namespace": NS}}))
    transitions_before = metrics.LEADER_TRANSITIONS._value.get()

    async def main():
        # a's writer is never stopped: only its fence keeps it from writing once it cannot renew
        a, b = Replica(server, "a", stop_writer=False, timing=PARTITION_TIMING), Replica(server, "b", timing=PARTITION_TIMING)
        a.elector.start()
        await wait(lambda: a.elector.leading and a.writes > 5, what="a to lead and write")
        b.elector.start()
        await wait(lambda: b.elector.leader == "a", what="b to observe a")
        # partition a from the API server: every request with its User-Agent has its connection dropped
        cut = time.time()
        server.call(lambda e: e.faults.add("*", "*", agent="specdeploy-operator/a", action="drop", count=10**9))
        await wait(lambda: ("stopped", ) == tuple(x[0] for x in a.events[-1:]), what="a to stop leading")
        await wait(lambda: b.elector.leading and b.writes > 5 and a.refused > 0, what="b to take over and write")
        a_attempts = writes_by(server, "a")
        b_writes = writes_by(server, "b")
        fenced_at = a.elector.renew_started_at  # None: a knows it is not leading
        assert fenced_at is None and not a.elector.may_write() and a.refused > 0
        last_a = max(w["start"] for w in a_attempts)
        first_b = min(w["start"] for w in b_writes)
        took = b.events[0][1] - cut
        print(f"partition: a's last write attempt {last_a - cut:+.2f}s after the cut, b's first write "
              f"{first_b - cut:+.2f}s (gap {first_b - last_a:.2f}s; leaseDuration - renewDeadline = "
              f"{PARTITION_TIMING.lease_duration - PARTITION_TIMING.renew_deadline:g}s); b led {took:.2f}s after the cut")
        assert last_a < first_b
        # nothing of a's reached the server after the cut ended its last in-flight request
        assert all(w["status"] == 0 for w in a_attempts if w["start"] > cut)
        # the partition heals: a follows (does not write) and observes b
        server.call(lambda e: e.faults.clear("specdeploy-operator/a"))
        await wait(lambda: a.elector.leader == "b", what="a to observe b")
        n = len(writes_by(server, "a"))
        await asyncio.sleep(PARTITION_TIMING.retry_period * 3)
        assert len(writes_by(server, "a")) == n and not a.elector.leading
        for r in (a, b):
            await r.elector.stop(release=False)
            if r._writer:
                r._writer.cancel()

    asyncio.run(main())
    assert metrics.LEADER_TRANSITIONS._value.get() > transitions_before


def test_settings_round_trip_and_cli_checks(monkeypatch):
    from specdeploy import cli
    from specdeploy.controller import main as opmain

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert cli.main(["operator", "run", "--leader-elect"]) == 2  # no namespace for the Lease
    assert cli.main(["operator", "run", "--leader-elect", "--operator-namespace", "ops", "--lease-duration", "10"]) == 2
    assert cli.main(["operator", "run", "--health-port", "70000"]) == 2
    seen = {}
    monkeypatch.setattr(opmain, "run", lambda settings: seen.update(settings=settings) or 0)
    assert cli.main(["operator", "run", "--leader-elect", "--operator-namespace", "ops", "--health-port", "8081",
                     "--lease-duration", "20", "--renew-deadline", "12", "--retry-period", "3"]) == 0
    assert seen["settings"].election == LeaderElectionSettings(True, "ops", "specdeploy-operator", LeaseTiming(20, 12, 3))
    assert seen["settings"].health_port == 8081
    assert cli.main(["operator", "run", "--leader-elect", "--operator-namespace", "ops"]) == 0
    assert seen["settings"].election == LeaderElectionSettings(True, "ops", "specdeploy-operator", LeaseTiming(15, 10, 2))
    assert cli.main(["operator", "run"]) == 0 and not seen["settings"].election.enabled  # off by default: one local process
    assert LEASES.format(ns="ops") == "/apis/coordination.k8s.io/v1/namespaces/ops/leases"


def test_the_lease_it_creates_carries_its_own_labels_never_helms(server):
    """The operator creates its Lease (the chart does not own it: test_chart_reinstall.py), with its own labels."""
    from specdeploy.controller.leader import LEASE_LABELS

    async def main():
        a = Replica(server, "a")
        a.elector.start()
        await wait(lambda: a.elector.leading, what="a to create and take the lease")
        assert lease(server)["metadata"]["labels"] == LEASE_LABELS
        assert LEASE_LABELS["app.kubernetes.io/part-of"] == "specdeploy"
        await a.elector.stop(release=True)
        assert lease(server)["spec"]["holderIdentity"] == ""

    asyncio.run(main())


def test_an_existing_empty_lease_is_taken_and_keeps_its_labels_on_release(server):
    """A Lease that is already there empty (an older chart created it, labelled for its release): a replica takes it
    at once, and neither a renewal nor the release on a graceful stop drops its labels and annotations."""
    meta = {"name": "specdeploy-operator", "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "specdeploy"}}
    server.call(lambda e: e.create_object({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta}))

    async def main():
        a = Replica(server, "a")
        a.elector.start()
        await wait(lambda: a.elector.leading, what="a to take the empty lease")
        assert lease(server)["metadata"]["labels"] == meta["labels"]
        await a.elector.stop(release=True)
        got = lease(server)
        assert got["spec"]["holderIdentity"] == ""
        assert got["metadata"]["labels"] == meta["labels"] and got["metadata"]["annotations"] == meta["annotations"]

    asyncio.run(main())
