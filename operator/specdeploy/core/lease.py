"""Leader election on a ``coordination.k8s.io/v1`` Lease: the pure decisions (no I/O).

The semantics are client-go's (``staging/src/k8s.io/client-go/tools/leaderelection/
leaderelection.go``, functions ``NewLeaderElector``, ``tryAcquireOrRenew``, ``renew``,
``release``):

- timing: ``leaseDuration > renewDeadline > JitterFactor (1.2) * retryPeriod``, all positive
  (``NewLeaderElector``); core clients use 15 s / 10 s / 2 s, and so do we by default.
- expiry is judged on the candidate's own clock: a record is valid while the time it was last
  *observed to change* plus its ``leaseDurationSeconds`` is in the future (``isLeaseValid`` on
  ``observedTime``), never by comparing ``renewTime`` with the local clock (clock skew).
- an empty ``holderIdentity`` (a released lease) may be taken at once.
- taking over someone else's lease increments ``leaseTransitions`` and sets ``acquireTime``;
  renewing our own keeps both.
- the write is an update with the observed ``resourceVersion``: of two candidates the API server
  lets one win (409 for the other).

What client-go leaves out and this adds (``may_write``): client-go's leader stops leading when a
renewal has not succeeded within ``renewDeadline`` of the start of the renew poll; here the
leader refuses its own writes once ``renewDeadline`` has passed since the *start* of its last
successful renewal request. A follower can take over only ``leaseDuration`` after it observed that
renewal, which is later than the request started, so the old leader's writes stop at least
``leaseDuration - renewDeadline`` (5 s by default) before anyone else's may begin.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

JITTER_FACTOR = 1.2  # client-go leaderelection.JitterFactor
LEASE_NAME = "specdeploy-operator"


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """client-go's NewLeaderElector checks, as messages naming the flags to change."""
        out = []
        if self.lease_duration <= 0 or self.renew_deadline <= 0 or self.retry_period <= 0:
            out.append("--lease-duration, --renew-deadline and --retry-period must all be greater than zero")
        if self.lease_duration <= self.renew_deadline:
            out.append(f"--lease-duration ({self.lease_duration:g}s) must be greater than --renew-deadline "
                       f"({self.renew_deadline:g}s): the margin is the time a deposed leader has to stop writing")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            out.append(f"--renew-deadline ({self.renew_deadline:g}s) must be greater than {JITTER_FACTOR} x "
                       f"--retry-period ({self.retry_period:g}s)")
        if self.lease_duration != int(self.lease_duration):
            out.append(f"--lease-duration ({self.lease_duration:g}s) must be whole seconds "
                       "(Lease spec.leaseDurationSeconds is an integer)")
        return out


DEFAULT_TIMING = LeaseTiming()


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's spec."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict | None) -> "LeaseRecord | None":
        if not lease:
            return None
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "",
                   lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0))

    def to_spec(self) -> dict:
        spec: dict = {"holderIdentity": self.holder, "leaseDurationSeconds": self.lease_duration_seconds,
                      "leaseTransitions": self.transitions}
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


def micro_time(at: dt.datetime | None = None) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    at = at or dt.datetime.now(dt.timezone.utc)
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_valid(observed: LeaseRecord, observed_at: float, now: float) -> bool:
    """client-go isLeaseValid: the record has not expired on our clock (observed_at: when it last changed)."""
    return observed_at + observed.lease_duration_seconds > now


def plan_acquire_or_renew(observed: LeaseRecord | None, observed_at: float, now: float, identity: str,
                          timing: LeaseTiming, stamp: str) -> LeaseRecord | None:
    """The record to write to acquire or renew; None while someone else holds a valid lease.

    ``observed``: the record as last read (None: no Lease exists, create it); ``observed_at``:
    our clock when that record last changed; ``stamp``: the MicroTime to write.
    """
    mine = LeaseRecord(holder=identity, lease_duration_seconds=int(timing.lease_duration),
                       acquire_time=stamp, renew_time=stamp, transitions=0)
    if observed is None:
        return mine
    if observed.holder and observed.holder != identity and lease_valid(observed, observed_at, now):
        return None
    if observed.holder == identity:
        return LeaseRecord(identity, mine.lease_duration_seconds, observed.acquire_time or stamp, stamp,
                           observed.transitions)
    return LeaseRecord(identity, mine.lease_duration_seconds, stamp, stamp, observed.transitions + 1)


def released(observed: LeaseRecord, stamp: str) -> LeaseRecord:
    """client-go release(): no holder, a 1 s duration, transitions kept (others may take it at once)."""
    return LeaseRecord(holder="", lease_duration_seconds=1, acquire_time=stamp, renew_time=stamp,
                       transitions=observed.transitions)


def may_write(leading: bool, renew_started_at: float | None, now: float, timing: LeaseTiming) -> bool:
    """The fencing rule: a leader writes only within renewDeadline of the start of its last successful renewal."""
    return leading and renew_started_at is not None and now < renew_started_at + timing.renew_deadline


def write_budget(renew_started_at: float | None, now: float, timing: LeaseTiming) -> float:
    """Seconds a write started now may take before a follower could take over (0: none left).

    A follower takes over at the earliest ``leaseDuration`` after the renewal it observed, which
    started no earlier than ``renew_started_at``; the request timeout of a write is capped by this.
    """
    if renew_started_at is None:
        return 0.0
    return max(0.0, renew_started_at + timing.lease_duration - now)
