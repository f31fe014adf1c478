"""The canary analysis (spec.rollout Canary): both tracks measured, the canary's health, the probe.

One place for the canary feature's observing side; the deciding side is the planner's branch
(``plan.plan_rollout`` -> ``core.rollout.step``), the rendering side ``core.render.build_canary``.

- **Tracks**: pods labelled ``TRACK_LABEL=canary`` are the canary track of their deployment (trusted through the
  uids of their owners, as every engine pod: controller/monitor.py). While a deployment has a canary (its canary
  Deployment in the controller's cache, or canary pods), every scrape the acceptance monitor makes of both tracks
  feeds a per-deployment ``core.rollout.Accumulator`` (canary pods of another revision are not scraped);
  status.acceptance, the baseline and the guard read the stable pods only.
- **Health** comes from the monitor's pod cache (``canary_health``), the **probe** from controller/probe.py (once
  per revision when both tracks have a ready pod; again while a run had errors, ``PROBE_ATTEMPTS`` runs at most).
- **Report**: ``CanaryReport`` (controller/reports.py) in ``Caches.canaries``, written here only, read by the
  planner; the monitor asks for a reconcile (``notify``) when it changed; dropped when the canary goes. In memory
  only: a new process starts from new scrapes (the planner counts the window from the canary Deployment's
  creationTimestamp).
- **Engine API key** (``spec.engine.apiKey``): read for the probe only for a spec the reconciler admitted (this
  generation passed validation and the tenancy policy: ``Caches.admitted``, the reconciler's report) and whose
  Secret name and key the policy allows (``core.policy.api_key_allowed``); a refused spec's Secret is never read.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from typing import Any, Awaitable, Callable, Mapping

from ..core.rollout import canary as ro
from ..core.names import REVISION_ANNOTATION, TRACK_CANARY
from ..core.policy import TenancyPolicy, api_key_allowed
from ..core.render.children import names
from . import probe as pr
from .pods import http_port, is_ready, pod_revision
from .reports import Admission, CanaryReport, Key, Reports

log = logging.getLogger("specdeploy.monitor")

PROBE_ATTEMPTS = 3  # probe runs per canary revision while a run has errors (unreachable pod, timeout)
MESSAGE_TAIL = 300  # characters of a failed container's termination message in Health.failed_to_start
# Waiting reasons of a container that cannot start without a change of the pod (an image that does not exist or
# cannot be pulled, a missing Secret or ConfigMap key): a canary in one of them fails to start.
CANNOT_START = ("ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError")

Notify = Callable[[Key], Awaitable[None]]
# (target, the engine's series as text or None, why the scrape failed or None); the target has .uid, .name,
# .namespace (monitor.Target)
Scrape = tuple[Any, "str | None", "str | None"]


def canary_name(name: str) -> str:
    """The canary Deployment of SpeculativeDeployment ``name`` (core/render/children.names()["canary"])."""
    return names(name).get("canary") or f"{name}-canary"


def of_revision(pod_rev: str | None, revision: str) -> bool:
    """Whether a canary pod belongs to the revision under analysis (every canary pod when none is annotated)."""
    return not revision or pod_rev == revision


def _failure(pod_name: str, cs: dict, init: bool) -> str | None:
    """A container that terminated non-zero and has not run since ("pod: container NAME exited CODE (REASON):
    tail"), or one waiting for a reason that needs a change of the pod (CANNOT_START)."""
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    what = "init container" if init else "container"
    waiting = state.get("waiting") if isinstance(state.get("waiting"), dict) else {}
    if waiting.get("reason") in CANNOT_START:
        tail = " ".join(str(waiting.get("message") or "").split())[-MESSAGE_TAIL:]
        return f"{pod_name}: {what} {cs.get('name') or '?'} {waiting['reason']}" + (f": {tail}" if tail else "")
    term = state.get("terminated") if isinstance(state.get("terminated"), dict) else None
    if term is None and not cs.get("ready") and "running" not in state:
        term = last.get("terminated") if isinstance(last.get("terminated"), dict) else None  # restarting after it
    if term is None or not isinstance(term.get("exitCode"), int) or term["exitCode"] == 0:
        return None
    tail = " ".join(str(term.get("message") or "").split())[-MESSAGE_TAIL:]
    reason = f" ({term['reason']})" if term.get("reason") else ""
    return f"{pod_name}: {what} {cs.get('name') or '?'} exited {term['exitCode']}{reason}" + (f": {tail}" if tail else "")


def canary_health(pods: list[dict]) -> ro.Health:
    """The canary pods as the pod cache shows them: ready, restarts, CrashLoopBackOff, a container that failed to
    start (an init container or the engine that terminated non-zero, with its name, exit code and message tail)."""
    ready = restarts = 0
    crash = False
    failed: str | None = None
    for p in pods:
        ready += is_ready(p)
        st_ = p.get("status") or {}
        name = (p.get("metadata") or {}).get("name") or "?"
        for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses")):
            for cs in st_.get(key) or []:
                if not isinstance(cs, dict):
                    continue
                n = cs.get("restartCount")
                restarts += n if isinstance(n, int) and n > 0 else 0
                waiting = (cs.get("state") or {}).get("waiting") or {}
                crash = crash or (isinstance(waiting, dict) and waiting.get("reason") == "CrashLoopBackOff")
                failed = failed or _failure(name, cs, init)
    return ro.Health(pods=len(pods), ready=ready, restarts=restarts, crash_looping=crash, failed_to_start=failed)


@dataclasses.dataclass
class _Analysis:
    """One deployment's canary analysis in this process (in memory: an operator restart starts a new one from new
    scrapes; the planner counts the window from the canary Deployment's creationTimestamp)."""

    revision: str
    since: float  # monotonic clock at the start
    acc: ro.Accumulator
    probe: ro.Probe | None = None
    probe_runs: int = 0
    probe_task: asyncio.Task | None = None


class CanaryAnalysis:
    """Every deployment's canary analysis; fed by the acceptance monitor's tick (``observe``), its pod cache
    (``pods``, read only) and pod deletions (``forget_pod``). Writes ``CanaryReport``s into ``canaries`` (the one
    writer of Caches.canaries) and reads the reconciler's ``admitted`` report before any Secret read."""

    def __init__(self, canaries: Reports[CanaryReport], *, children: Mapping[tuple[str, str, str], dict],
                 admitted: Mapping[Key, Admission], pods: Mapping[tuple[str, str], dict], clock: Callable[[], float],
                 notify: Notify | None = None, policy: TenancyPolicy | None = None, kube: Any = None,
                 probe_request: pr.Request | None = None, probe_timeout: float = pr.DEFAULT_TIMEOUT):
        self.canaries = canaries  # Caches.canaries: this object is its one writer
        self.children, self.admitted, self.pods = children, admitted, pods
        self.clock, self.notify = clock, notify
        # the tenancy policy: the engine API key Secret is read only when it allows its name and key (None: the
        # defaults, which allow no Secret)
        self.policy = policy if policy is not None else TenancyPolicy()
        self.kube = kube  # reads the engine API key Secret for the probe (spec.engine.apiKey); None: no Secret reads
        self.probe_request, self.probe_timeout = probe_request, probe_timeout
        self.analyses: dict[Key, _Analysis] = {}

    def of(self, key: Key, pods: list[dict]) -> tuple[str, list[dict]] | None:
        """(revision under analysis, its canary pods) while the deployment has a canary: a canary Deployment in the
        controller's cache (``names()["canary"]``) or canary-labelled pods (``pods``, owned, not being deleted);
        None otherwise. The revision is the Deployment's pod template's (REVISION_ANNOTATION), else the newest
        canary pod's ("" when none says)."""
        ns, name = key
        dep = self.children.get(("Deployment", ns, canary_name(name)))
        if dep is not None and (dep.get("metadata") or {}).get("deletionTimestamp"):
            dep = None
        if dep is None and not pods:
            return None
        rev = (((((dep or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations")
               or {}).get(REVISION_ANNOTATION)
        if not isinstance(rev, str):
            revs = sorted((p["metadata"].get("creationTimestamp") or "", pod_revision(p)) for p in pods
                          if pod_revision(p))
            rev = revs[-1][1] if revs else ""
        return rev, [p for p in pods if of_revision(pod_revision(p), rev)]

    def observe(self, key: Key, engine: str, body: dict, canary: tuple[str, list[dict]] | None,
                stable: list[Scrape], canary_scrapes: list[Scrape]) -> bool:
        """Feed this tick's scrapes of both tracks into the deployment's canary analysis, start the probe when it is
        due, and report; whether the report changed."""
        if canary is None:
            return self.drop(key)
        revision, pods = canary
        c = self.analyses.get(key)
        if c is None or c.revision != revision:
            self.drop(key)
            c = self.analyses[key] = _Analysis(revision=revision, since=self.clock(), acc=ro.Accumulator())
            log.info("canary of %s/%s: analysing revision %s", key[0], key[1], revision or "(unannotated)")
        live = {p["metadata"].get("uid") for p in self.pods.values()}
        for uid in c.acc.pods() - live:  # deleted while the watch was away: what it measured stays counted
            c.acc.forget_pod(uid)
        now = self.clock()
        for track, scrapes in (("stable", stable), (TRACK_CANARY, canary_scrapes)):
            for t, text, _ in scrapes:
                if text is not None:
                    c.acc.observe(t.uid, track, engine, text, now)
        self._maybe_probe(key, c, body, stable, canary_scrapes)
        return self.canaries.put(key, CanaryReport(
            revision=c.revision, stable=c.acc.totals("stable"), canary=c.acc.totals(TRACK_CANARY), probe=c.probe,
            health=canary_health(pods), since=c.since))

    def drop(self, key: Key) -> bool:
        """The canary is gone (promoted, rolled back, deleted): drop its analysis; whether a report was removed."""
        c = self.analyses.pop(key, None)
        if c is not None and c.probe_task is not None:
            c.probe_task.cancel()
        return self.canaries.drop(key)

    def forget_pod(self, uid: str) -> None:
        """An engine pod was deleted: the analyses stop expecting it (what it measured stays counted)."""
        for c in self.analyses.values():
            c.acc.forget_pod(uid)

    # ------------------------------------------------------------- the probe

    def _probe_pod(self, scrapes: list[Scrape]) -> dict | None:
        """A ready pod of a track whose metrics answered this tick (the first by name)."""
        for t, text, _ in sorted(scrapes, key=lambda x: x[0].name):
            p = self.pods.get((t.namespace, t.name))
            if text is not None and p is not None and is_ready(p):
                return p
        return None

    def _maybe_probe(self, key: Key, c: _Analysis, body: dict, stable: list[Scrape], canary: list[Scrape]) -> None:
        """Start the probe of this canary revision when both tracks have a ready pod: once, again while a run had
        errors (at most PROBE_ATTEMPTS runs), never when spec.rollout.analysis.probe.enabled is false."""
        enabled, max_tokens = pr.settings(body)
        if c.probe_task is not None and c.probe_task.done():
            c.probe_task = None  # cancelled before it ran (the monitor stopped and started again)
        if not enabled or c.probe_task is not None or c.probe_runs >= PROBE_ATTEMPTS \
                or (c.probe is not None and c.probe.errors == 0):
            return
        if self.api_key_refusal(key, body) is not None:
            return  # not admitted (yet, or refused): no Secret read, no run counted; the next tick asks again
        s, k = self._probe_pod(stable), self._probe_pod(canary)
        if s is None or k is None:
            return
        c.probe_runs += 1
        c.probe_task = asyncio.get_running_loop().create_task(self._run_probe(key, c, body, s, k, max_tokens),
                                                              name=f"specdeploy-probe-{key[0]}-{key[1]}")

    async def _run_probe(self, key: Key, c: _Analysis, body: dict, stable: dict, canary: dict,
                         max_tokens: int) -> None:
        try:
            api_key, problem = await self._api_key(key, body)
            if problem is not None:  # nothing sent: every prompt is an error (none a difference)
                n = len(pr.prompts())
                result = ro.Probe(prompts=n, identical=0, errors=n, message=problem)
            else:
                result = await pr.probe(stable, canary, port_of=http_port, max_tokens=max_tokens, api_key=api_key,
                                        request=self.probe_request, timeout=self.probe_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the probe never ends the monitor
            log.exception("canary probe of %s/%s failed", key[0], key[1])
            result = ro.Probe(prompts=1, identical=0, errors=1, message=f"the probe failed: {type(e).__name__}")
        finally:
            c.probe_task = None
        if self.analyses.get(key) is not c:
            return  # the canary went or changed revision meanwhile
        c.probe = result
        log.info("canary probe of %s/%s (revision %s): %s", key[0], key[1], c.revision, result.message)
        report = self.canaries.get(key)
        if report is not None and report.revision == c.revision and report.probe != result:
            self.canaries.put(key, dataclasses.replace(report, probe=result))
            if self.notify is not None:
                await self.notify(key)

    def api_key_refusal(self, key: Key, body: dict) -> str | None:
        """Why the engine API key Secret of ``body`` may not be read (None: it may, or there is none): only for the
        generation the reconciler admitted (validation and tenancy policy passed: ``Caches.admitted``) and a
        Secret name and key the policy allows (``api_key_allowed``, the admission rule asked again)."""
        ref = pr.api_key_ref(body)
        if ref is None:
            return None
        meta = body.get("metadata") or {}
        gen = meta.get("generation") or 1
        if self.admitted.get(key) != Admission(uid=meta.get("uid"), generation=gen):
            return (f"the engine API key is not read: generation {gen} of the spec is not admitted (not yet "
                    "reconciled, or refused: see the Progressing condition)")
        if not api_key_allowed(self.policy, ref[0], ref[1]):
            return (f"the engine API key is not read: Secret {ref[0]!r} key {ref[1]!r} (spec.engine.apiKey) is not "
                    "allowed by the tenancy policy (hub.tokenSecrets, policy.allowedApiKeySecretKeys)")
        return None

    async def _api_key(self, key: Key, body: dict) -> tuple[str | None, str | None]:
        """(the engine API key, None) or (None, why it cannot be read); (None, None) without spec.engine.apiKey."""
        ref = pr.api_key_ref(body)
        if ref is None:
            return None, None
        refusal = self.api_key_refusal(key, body)
        if refusal is not None:
            return None, refusal
        where = f"Secret {key[0]}/{ref[0]} key {ref[1]!r} (spec.engine.apiKey)"
        if self.kube is None:
            return None, f"the engine API key cannot be read: the monitor has no API client to read {where}"
        try:
            secret = await self.kube.get("Secret", key[0], ref[0])
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - forbidden, unreachable API server
            return None, f"the engine API key cannot be read from {where}: {type(e).__name__}"
        raw = ((secret or {}).get("data") or {}).get(ref[1])
        if not isinstance(raw, str):
            return None, f"the engine API key is missing: {where} does not exist or has no such key"
        try:
            return base64.b64decode(raw).decode().strip(), None
        except (ValueError, UnicodeDecodeError):
            return None, f"the engine API key in {where} is not base64 text"

    async def settle(self) -> None:
        """Wait for the probes in flight (tests; close cancels them)."""
        tasks = [c.probe_task for c in self.analyses.values() if c.probe_task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Cancel the probes in flight (the monitor stops)."""
        for c in self.analyses.values():
            if c.probe_task is not None:
                c.probe_task.cancel()
