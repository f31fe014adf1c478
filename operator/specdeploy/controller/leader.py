"""Leader election: the I/O around core/lease.py (a Lease in the operator's namespace).

One ``LeaderElector`` per operator process. It campaigns (retryPeriod, jittered like client-go's
``wait.JitterUntil``), calls ``on_started`` when it acquires the Lease, renews every retryPeriod,
and calls ``on_stopped`` when a renewal has not succeeded within renewDeadline; then it campaigns
again (the process stays up: its webhook keeps serving and its caches stay warm). Independently of
that loop, ``may_write()`` is the fence the controller's API client checks before every write.

The loop runs on an event loop of its own, in its own thread, with its own API client and
threads: a busy operator (hundreds of reconciles at once) must not delay its renewals past the
renew deadline. The callbacks run on the operator's loop (the one ``start()`` was called on).
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable

from ..core import lease as L
from ..core import names as N
from . import metrics
from .kube import Fence, Kube, KubeError, load_api_client

log = logging.getLogger("specdeploy.leader")

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
# The operator creates its Lease itself, as client-go's leader election does (the chart does not own it: a Lease
# that Helm deleted while a replica still renewed would come back without Helm's ownership metadata and block
# the next `helm install`). These labels find it: `kubectl get lease -l app.kubernetes.io/part-of=specdeploy`.
LEASE_LABELS = {N.LABEL_PART_OF: N.MANAGED_BY, N.LABEL_COMPONENT: N.COMPONENT_LEADER_ELECTION}


@dataclass(frozen=True)
class LeaderElectionSettings:
    """``operator run --leader-elect`` and its Lease flags (settings.OperatorSettings.election)."""

    enabled: bool = False
    namespace: str = ""
    name: str = L.LEASE_NAME
    timing: L.LeaseTiming = L.DEFAULT_TIMING


def default_identity(pod_name: str | None = None) -> str:
    """POD_NAME (the chart sets it from the downward API; settings.OperatorSettings.pod_name), else the host name;
    plus a unique suffix."""
    base = pod_name or socket.gethostname() or "specdeploy"
    return f"{base}_{uuid.uuid4().hex[:8]}"


def new_elector(settings: LeaderElectionSettings, identity: str, *, user_agent: str,
                kubeconfig: str | None = None) -> "LeaderElector":
    """An elector on its own API client and threads: renewals never wait behind the reconciler's requests."""
    from concurrent.futures import ThreadPoolExecutor

    api = load_api_client(kubeconfig or None)
    api.user_agent = user_agent
    kube = Kube(api, executor=ThreadPoolExecutor(2, thread_name_prefix="specdeploy-lease"))
    return LeaderElector(kube, settings.namespace, identity, name=settings.name, timing=settings.timing)


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, identity: str, *, name: str = L.LEASE_NAME,
                 timing: L.LeaseTiming = L.DEFAULT_TIMING,
                 on_started: Callable[[], Awaitable[None]] | None = None,
                 on_stopped: Callable[[], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.timing = timing
        self.on_started, self.on_stopped = on_started, on_stopped
        self.clock = clock
        self.observed: L.LeaseRecord | None = None
        self.observed_at: float = 0.0
        self._observed_rv: str | None = None
        self._observed_meta: dict = {}
        self.leading = False
        self.renew_started_at: float | None = None  # start of the last successful acquire/renew request
        self.acquired_at: float | None = None
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the elector's own loop (its thread)
        self._main: asyncio.AbstractEventLoop | None = None  # the operator's loop: callbacks run there
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------- the fence

    def fence(self) -> Fence:
        """What the reconciler's client checks before every write (kube.Kube.fenced)."""
        return Fence(self.may_write, self.write_budget)

    def may_write(self) -> bool:
        return L.may_write(self.leading, self.renew_started_at, self.clock(), self.timing)

    def write_budget(self) -> float:
        return L.write_budget(self.renew_started_at, self.clock(), self.timing) if self.leading else 0.0

    @property
    def leader(self) -> str:
        """The holder last observed ('' when none)."""
        return self.observed.holder if self.observed else ""

    # ------------------------------------------------------------- loop

    def start(self) -> None:
        """Start campaigning in a thread of its own (call from the operator's event loop)."""
        self._main = asyncio.get_running_loop()
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._task = loop.create_task(self.run(), name="specdeploy-leader-election")
            ready.set()
            try:
                loop.run_until_complete(self._task)
            except BaseException:  # noqa: BLE001 - cancelled by stop(); anything else was logged by run()
                pass
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name="specdeploy-leader-election", daemon=True)
        self._thread.start()
        ready.wait(10)

    async def stop(self, release: bool = True) -> None:
        """Stop campaigning; when leading, stop leading (on_stopped) and, with ``release``, hand the Lease back."""
        if self._loop is not None and self._task is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
            await asyncio.to_thread(self._thread.join, 10)
        self._task = self._thread = self._loop = None
        if self.leading:
            await self._stop_leading("shutting down")
            if release:
                await self.release()

    async def _callback(self, fn: Callable[[], Awaitable[None]] | None, what: str) -> None:
        """Run a callback on the operator's loop and wait for it; an error is logged, never ends the election."""
        if fn is None:
            return
        try:
            if self._main is None or self._main is asyncio.get_running_loop():
                await fn()
            else:
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(), self._main))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001
            log.exception("leader election: the %s callback failed", what)

    async def run(self) -> None:
        while True:
            await self._acquire()
            await self._start_leading()
            await self._renew()
            await self._stop_leading(f"could not renew the Lease within --renew-deadline ({self.timing.renew_deadline:g}s)")

    async def _acquire(self) -> None:
        log.info("leader election: %s campaigning for Lease %s/%s", self.identity, self.namespace, self.name)
        while not await self.try_acquire_or_renew():
            # wait.JitterUntil(retryPeriod, JitterFactor): retryPeriod * (1 + rand * 1.2)
            await asyncio.sleep(self.timing.retry_period * (1 + random.random() * L.JITTER_FACTOR))

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.timing.retry_period)
            while not await self.try_acquire_or_renew():
                if not self.may_write():
                    return
                await asyncio.sleep(min(self.timing.retry_period / 4, 0.5))
            if not self.may_write():  # succeeded, but too late to trust (cannot happen with sane timing)
                return

    async def _start_leading(self) -> None:
        self.leading = True
        self.acquired_at = self.clock()
        metrics.LEADER.set(1)
        log.info("leader election: %s acquired Lease %s/%s (transitions %d)", self.identity, self.namespace, self.name,
                 self.observed.transitions if self.observed else 0)
        await self._callback(self.on_started, "started-leading")

    async def _stop_leading(self, why: str) -> None:
        self.leading = False
        self.renew_started_at = None
        metrics.LEADER.set(0)
        log.warning("leader election: %s stopped leading: %s", self.identity, why)
        await self._callback(self.on_stopped, "stopped-leading")

    # ------------------------------------------------------------- one try

    def _observe(self, body: dict | None) -> None:
        rec = L.LeaseRecord.from_lease(body)
        self._observed_meta = dict((body or {}).get("metadata") or {})  # labels kept on release (the chart's)
        rv = self._observed_meta.get("resourceVersion")
        if rec != self.observed:
            if rec is not None and (self.observed is None or rec.holder != self.observed.holder) and rec.holder:
                metrics.LEADER_TRANSITIONS.inc()
            self.observed, self.observed_at = rec, self.clock()
        self._observed_rv = rv

    async def try_acquire_or_renew(self) -> bool:
        """client-go tryAcquireOrRenew: read the Lease, write our record if we may; True when we hold it."""
        t0 = self.clock()
        # a request outliving the fence is useless to a leader: bound it by what is left of the deadline
        timeout = self.timing.renew_deadline if not self.leading else max(
            0.05, (self.renew_started_at or t0) + self.timing.renew_deadline - t0)
        try:
            return await asyncio.wait_for(self._try(t0), timeout)
        except Exception as e:  # noqa: BLE001 - timeouts, API errors, broken connections (urllib3): retried
            log.info("leader election: %s could not %s the Lease: %s", self.identity,
                     "renew" if self.leading else "acquire", str(e) or type(e).__name__)
            return False

    async def _try(self, t0: float) -> bool:
        path = LEASES.format(ns=self.namespace)
        try:
            body = await self.kube.call("GET", f"{path}/{self.name}")
        except KubeError as e:
            if e.status != 404:
                raise
            body = None
        self._observe(body)
        plan = L.plan_acquire_or_renew(self.observed, self.observed_at, self.clock(), self.identity, self.timing,
                                       L.micro_time())
        if plan is None:
            return False
        if body is None:
            written = await self.kube.call("POST", path, body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": LEASE_LABELS},
                "spec": plan.to_spec()})
        else:
            meta = body.get("metadata") or {}
            written = await self.kube.call("PUT", f"{path}/{self.name}", body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {**meta, "resourceVersion": self._observed_rv}, "spec": plan.to_spec()})
        self._observe(written)
        self.renew_started_at = t0
        return True

    async def release(self) -> None:
        """client-go release(): hand the Lease back so a follower takes over at once (graceful stop)."""
        if self.observed is None or self.observed.holder != self.identity:
            return
        rec = L.released(self.observed, L.micro_time())
        try:
            await asyncio.wait_for(self.kube.call("PUT", f"{LEASES.format(ns=self.namespace)}/{self.name}", body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {**self._observed_meta, "name": self.name, "namespace": self.namespace,
                             "resourceVersion": self._observed_rv},
                "spec": rec.to_spec()}), self.timing.retry_period)
            log.info("leader election: %s released Lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as e:  # noqa: BLE001 - the Lease then expires by itself
            log.info("leader election: could not release the Lease (%s); it expires in %ss", e,
                     self.timing.lease_duration)
