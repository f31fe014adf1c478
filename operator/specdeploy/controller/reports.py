"""The observers' reports: what each observer saw, typed, written by that observer only (pure; no I/O).

The controller is one-way: observers report, the planner decides, the reconciler applies.

- ``AcceptanceReport`` (per SpeculativeDeployment): the acceptance monitor's (controller/monitor.py) part of the
  status: status.acceptance, SpeculationHealthy, SpeculationProfitable. Read by the reconciler's one status path
  (``plan.plan_status``).
- ``CanaryReport``: the canary analysis (controller/canary.py): both tracks' totals since the analysis started,
  the canary pods' health and the probe's result (controller/probe.py). Read by the planner (``plan.plan_rollout``),
  which decides promotion, rollback and the promoted baseline.
- ``Admission``: the reconciler's own report to the monitor: the (uid, generation) of a SpeculativeDeployment that
  passed validation and the tenancy policy; the canary probe reads an engine API key Secret for no other.

Each kind lives in one ``Reports`` store of the shared caches (controller/cache.py: ``acceptances``, ``canaries``,
``admitted``). A store is a read-only mapping for everyone; ``put`` and ``drop`` are called by its writer only
(``WRITERS``; tests/controller/test_one_way.py walks the product's code and fails on a write elsewhere). Where the
reconciler needs an observer to change what it reports (a promotion's baseline, a deleted CR), it asks through the
observer's commands (``Observer``), never by writing the observer's store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Iterator, Mapping, Protocol, TypeVar

from ..core.rollout import canary as ro

Key = tuple[str, str]  # (namespace, SpeculativeDeployment name)


@dataclass(frozen=True)
class AcceptanceReport:
    """The acceptance monitor's part of one status (None: nothing to say; the stored value is cleared when the
    report says None for a part it had)."""

    acceptance: dict[str, Any] | None = None  # status.acceptance (camelCase, as written)
    condition: dict[str, Any] | None = None  # SpeculationHealthy
    profitable: dict[str, Any] | None = None  # SpeculationProfitable (while spec.speculation.guard is set)

    def with_baseline(self, baseline: dict[str, Any]) -> "AcceptanceReport":
        """This report with status.acceptance.baseline replaced (a promotion's baseline)."""
        return AcceptanceReport(acceptance={**(self.acceptance or {}), "baseline": baseline},
                                condition=self.condition, profitable=self.profitable)


@dataclass(frozen=True)
class CanaryReport:
    """One deployment's canary analysis in this process (in memory: a new process starts from new scrapes)."""

    revision: str  # the rollout revision under analysis ("" when no canary pod says)
    stable: ro.Totals
    canary: ro.Totals
    probe: ro.Probe | None  # the probe's last result (None: not run yet)
    health: ro.Health
    since: float  # monotonic clock at the start of the analysis


@dataclass(frozen=True)
class Admission:
    """A SpeculativeDeployment generation the reconciler admitted (valid, and the tenancy policy passed)."""

    uid: str | None
    generation: int


R = TypeVar("R")


class Reports(Mapping[Key, R], Generic[R]):
    """One kind of report by key: a mapping for every reader; ``put``/``drop`` for its one writer."""

    def __init__(self, kind: type):
        self.kind = kind
        self._by_key: dict[Key, R] = {}

    def __getitem__(self, key: Key) -> R:
        return self._by_key[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __repr__(self) -> str:
        return f"Reports[{self.kind.__name__}]({self._by_key!r})"

    def put(self, key: Key, report: R) -> bool:
        """Store ``report`` for ``key`` (the writer only); whether it differs from the one stored."""
        if not isinstance(report, self.kind):
            raise TypeError(f"a {self.kind.__name__} store takes {self.kind.__name__} reports, not "
                            f"{type(report).__name__}")
        changed = self._by_key.get(key) != report
        self._by_key[key] = report
        return changed

    def drop(self, key: Key) -> bool:
        """Forget ``key``'s report (the writer only); whether there was one."""
        return self._by_key.pop(key, None) is not None


# store (an attribute of cache.Caches) -> the one module that writes it (tests/controller/test_one_way.py)
WRITERS = {
    "acceptances": "specdeploy.controller.monitor",
    "canaries": "specdeploy.controller.canary",
    "admitted": "specdeploy.controller.reconciler",
}


class Observer(Protocol):
    """What the reconciler may ask of an observer it holds (commands; it never writes the observer's reports)."""

    async def run(self) -> None:
        """Observe until cancelled."""

    def forget(self, key: Key) -> None:
        """The SpeculativeDeployment is gone: drop what is reported and remembered of it."""

    def promoted(self, key: Key, baseline: dict[str, Any]) -> None:
        """A canary was promoted: report ``baseline`` (the canary's measured tau, for the new revision) as the
        acceptance baseline from now on."""
