"""The executor: carries a plan (controller/plan.py) out through the API client.

The only code of the reconcile path that talks to the API server: creation of the children the
watch cache does not hold (a POST, refused when the name is taken) and server-side apply of the
others, with the ownership checks of ownership.py (no request while a child is in sync),
deletion of obsolete children (each delete names the object read: its uid as the precondition),
the tuning Job, the status patch, Events, API discovery and the PVC labels the tenancy policy reads.
What it learns it writes back into the caches (controller/cache.py), so that the watch delivering it
later changes nothing. The benchmark controller (controller/benchmark.py) writes and deletes its
children through the same functions, with ``Unwatched`` caches (nothing kept: every claim reads the
live object).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from ..core import names as N
from ..core.render import Rendered, build_tuned_configmap
from . import ownership
from .cache import WORKLOAD_KINDS, Caches, Key
from .kube import Kube, KubeError
from .plan import StatusPlan
from .status import now_rfc3339

log = logging.getLogger("specdeploy.controller")

Note = Callable[[Key, str], None]  # (key, what changed): the reconcile's one log line
_UNREAD = object()  # claim: no GET made for it yet


class _Forgetful(dict):
    """A cache that keeps nothing: every lookup misses, every store is dropped."""

    def __setitem__(self, key, value) -> None:
        pass


class Unwatched:
    """The caches of a controller without watches of its children (the benchmark controller): nothing is kept,
    so every ``claim`` reads the live object (its status included) and every desired child is created with a
    POST first (``apply``); the ownership gates are the same."""

    def __init__(self):
        self.children: dict = _Forgetful()
        self.verified: dict = _Forgetful()

    def owner_body(self, obj: dict) -> dict | None:
        return None


class Executor:
    def __init__(self, kube: Kube, cache: Caches | Unwatched | None = None, *, note: Note | None = None,
                 capability_ttl: float = 60.0, clock: Callable[[], float] = time.monotonic):
        """``cache``: the reconciler's watch-fed caches; None: ``Unwatched`` (nothing cached)."""
        self.kube = kube
        self.cache = cache if cache is not None else Unwatched()
        self.note: Note = note or (lambda key, change: None)
        self.capability_ttl = capability_ttl
        self.clock = clock
        self._caps: dict[tuple[str, str], tuple[float, bool]] = {}

    # ------------------------------------------------------------- reads

    async def has(self, api: tuple[str, str]) -> bool:
        hit = self._caps.get(api)
        if hit and self.clock() - hit[0] < self.capability_ttl:
            return hit[1]
        ok = await self.kube.has_api(*api)
        self._caps[api] = (self.clock(), ok)
        return ok

    async def policy_labels(self, ns: str, claims) -> dict[str, dict | None]:
        """The labels of the claims the tenancy policy needs to see (None: the claim does not exist)."""
        labels: dict[str, dict | None] = {}
        for claim in claims:
            pvc = await self.kube.get("PersistentVolumeClaim", ns, claim)
            labels[claim] = ((pvc.get("metadata") or {}).get("labels") or {}) if pvc else None
        return labels

    # ------------------------------------------------------------- children

    async def claim(self, kind: str, ns: str, cname: str, uid: str | None,
                    fetched: dict | None | object = _UNREAD) -> tuple[dict | None, str | None]:
        """The one ownership gate before any write to a child (ownership.conflict): the live object (the
        watch-fed cache, else a GET: the watches see only labelled children, a name may be taken by an object
        without them) and why it is not ours to touch (None: absent, or controlled by ``uid``). ``fetched``:
        that GET's answer, when the caller made it (``fetch``)."""
        actual = self.cache.children.get((kind, ns, cname))
        if actual is None:
            got = await self.kube.get(kind, ns, cname) if fetched is _UNREAD else fetched
            if got is not None:
                actual = ownership.for_cache({**got, "kind": kind})
                if ownership.conflict(actual, uid) is None:
                    self.cache.children[(kind, ns, cname)] = actual
        return actual, ownership.conflict(actual, uid)

    async def fetch(self, ns: str, names: list[tuple[str, str]]) -> dict[tuple[str, str], dict | None]:
        """The GETs ``claim`` would make for these (kind, name), made now in one hand-off to the client's thread
        (the same requests in the same order, before any write); names the cache holds are not read."""
        missing = [(kind, cname) for kind, cname in dict.fromkeys(names)
                   if (kind, ns, cname) not in self.cache.children]
        if len(missing) < 2 or not hasattr(self.kube, "get_many"):
            return {}  # claim reads it itself
        got = await self.kube.get_many([(kind, ns, cname) for kind, cname in missing])
        return dict(zip(missing, got))

    async def apply(self, ns: str, name: str, desired: list[dict], obsolete: list[tuple[str, str]],
                    uid: str | None = None, claims: list[tuple[str, str]] | tuple = ()) -> list[str]:
        """Apply drifted or missing children (server-side apply), delete obsolete ones. Returns conflicts
        (``Kind/name (why)``): names taken by an object this CR (``uid``) does not control.

        All or nothing: while any desired child or ``claims`` (other names the pods read: the tuning Job and
        its ConfigMap) is taken, nothing is applied or deleted. The workload mounts the engine ConfigMap and
        the tuned-kernels ConfigMap by name, so applying it beside another's ConfigMap of that name would run
        the engine with what that ConfigMap says.

        A desired child the watch-fed cache does not hold is created (``create_child``: a POST, which the
        server refuses when the name is taken, so it never lands on another's object) instead of being read
        first; the workload is created last. A name found taken that way is claimed like the others, and
        what this pass created is deleted again before the conflicts are returned."""
        conflicts: list[str] = []
        live: dict[tuple[str, str], dict | None] = {}
        children = self.cache.children
        owners = {(o["kind"], o["metadata"]["name"]): ownership.owner_uid(o) or uid for o in desired}
        fresh = {(kind, cname) for kind, cname in owners if (kind, ns, cname) not in children}  # to be created
        wanted = [(kind, cname, owner) for (kind, cname), owner in owners.items() if (kind, cname) not in fresh] \
            + [(kind, cname, uid) for kind, cname in claims if (kind, cname) not in owners]
        fetched = await self.fetch(ns, [(kind, cname) for kind, cname, _ in wanted])
        for kind, cname, owner in wanted:
            live[(kind, cname)], why = await self.claim(kind, ns, cname, owner, fetched.get((kind, cname), _UNREAD))
            if why is not None:
                conflicts.append(f"{kind}/{cname} ({why})")
        if conflicts:
            return conflicts
        created: dict[tuple[str, str], str | None] = {}  # what this pass created -> its uid
        for obj in sorted(desired, key=lambda o: o["kind"] in WORKLOAD_KINDS):  # the workload last
            kind, cname = obj["kind"], obj["metadata"]["name"]
            if (kind, cname) in fresh:
                made = await self.create_child(ns, obj)
                if made is not None:
                    created[(kind, cname)] = (made.get("metadata") or {}).get("uid")
                    self.note((ns, name), f"created {kind}/{cname}")
                    continue
                # the name is taken: another's object, or this CR's child not in the cache yet
                actual, why = await self.claim(kind, ns, cname, owners[(kind, cname)])
                if why is not None:
                    rest = [(k, c, o) for (k, c), o in owners.items()  # in the desired order
                            if (k, c) in fresh and (k, c) != (kind, cname) and (k, c) not in created]
                    return await self._undo(ns, name, created, [f"{kind}/{cname} ({why})"] + await self._taken(ns, rest))
            else:
                actual = live[(kind, cname)]
            applied = await self.apply_child(ns, obj, actual)
            if applied is None:
                conflicts.append(f"{kind}/{cname} (controlled by another object)")
            elif applied is not actual:  # a request was made: the child was created or changed
                self.note((ns, name), f"{'created' if actual is None else 'updated'} {kind}/{cname}")
        for kind, cname in obsolete:
            if await self.delete_child(ns, kind, cname, uid):
                self.note((ns, name), f"deleted obsolete {kind}/{cname}")
        return conflicts

    async def delete_child(self, ns: str, kind: str, cname: str, uid: str | None) -> bool:
        """Delete a child when the CR ``uid`` controls it (``claim``); whether it was deleted. Absent, or
        another's: nothing is deleted."""
        actual, why = await self.claim(kind, ns, cname, uid)
        if actual is None or why is not None:
            return False
        return await self.delete_owned(ns, {**actual, "kind": kind}, uid)

    async def delete_owned(self, ns: str, actual: dict, uid: str | None) -> bool:
        """Delete ``actual`` (a live object as read: its ``kind`` set) when the CR ``uid`` controls it, and only
        that object: its uid is the delete's precondition, so an object created under the same name since it was
        read (by anyone) is never deleted (the server answers 409 and nothing happens)."""
        if ownership.conflict(actual, uid) is not None:
            return False
        kind, meta = actual["kind"], actual.get("metadata") or {}
        cname = meta["name"]
        self.cache.children.pop((kind, ns, cname), None)
        self.cache.verified.pop((kind, ns, cname), None)
        return await self._delete(kind, ns, cname, meta.get("uid"))

    async def _delete(self, kind: str, ns: str, cname: str, uid: str | None) -> bool:
        """One DELETE with the object's uid as its precondition; False when the name holds another object now."""
        try:
            await self.kube.delete(kind, ns, cname, uid=uid)
        except KubeError as e:
            if e.status == 409:
                log.info("%s %s/%s not deleted: the name holds another object now", kind, ns, cname)
                return False
            raise
        return True

    async def create_child(self, ns: str, obj: dict) -> dict | None:
        """A child the cache does not hold, created with its applied digest (``ownership.intent``); None when the
        name is taken (409 AlreadyExists: the server wrote nothing). The create's Update entry is specdeploy's
        entry until the child's first change moves it into the Apply entry (``ownership.takeover_patch``)."""
        kind, cname = obj["kind"], obj["metadata"]["name"]
        digest = ownership.digest(obj)
        body, _ = ownership.intent(obj, digest)
        try:
            live = await self.kube.create(body)
        except KubeError as e:
            if e.status == 409:
                return None
            raise
        live = ownership.for_cache({**live, "kind": kind} if isinstance(live, dict) else body)
        self.cache.children[(kind, ns, cname)] = live
        self.cache.verified[(kind, ns, cname)] = ((live.get("metadata") or {}).get("resourceVersion"), digest)
        return live

    async def _taken(self, ns: str, names: list[tuple[str, str, str | None]]) -> list[str]:
        """The conflicts among ``names`` (kind, name, owner uid) not created yet, for the full list in a status."""
        out = []
        for kind, cname, owner in names:
            _, why = await self.claim(kind, ns, cname, owner)
            if why is not None:
                out.append(f"{kind}/{cname} ({why})")
        return out

    async def _undo(self, ns: str, name: str, created: dict[tuple[str, str], str | None],
                    conflicts: list[str]) -> list[str]:
        """A name turned out taken after this pass created other children: those are deleted again (all or
        nothing), each only as the object this pass created (its uid as the delete's precondition)."""
        for (kind, cname), made_uid in created.items():
            self.cache.children.pop((kind, ns, cname), None)
            self.cache.verified.pop((kind, ns, cname), None)
            await self._delete(kind, ns, cname, made_uid)
            self.note((ns, name), f"deleted {kind}/{cname} again: {conflicts[0]}")
        return conflicts

    async def apply_child(self, ns: str, obj: dict, actual: dict | None) -> dict | None:
        """One child through server-side apply (ownership.py); no request when it is in sync.

        ``actual`` is the live child as ``claim`` found it: absent or controlled by this CR (the caller checks).
        Conflicts (another manager changed a field specdeploy applies) are forced, with a Warning
        Event naming the other managers. Returns the live child, or None when the name is taken
        by an object another controller owns.
        """
        kind, cname = obj["kind"], obj["metadata"]["name"]
        digest = ownership.digest(obj)
        if actual is not None:
            seen = ((actual.get("metadata") or {}).get("resourceVersion"), digest)
            if self.cache.verified.get((kind, ns, cname)) == seen:
                return actual  # this version of the child was found in sync with this intent already
            if ownership.in_sync(actual, obj, digest):
                self.cache.verified[(kind, ns, cname)] = seen
                return actual
        body, _ = ownership.intent(obj, digest)
        if actual is not None:
            takeover = ownership.takeover_patch(actual)
            if takeover is not None:  # children of a version before server-side apply: fields move to our entry
                await self.kube.patch(kind, ns, cname, takeover, content_type="application/json-patch+json")
        try:
            live = await self.kube.apply(body)
        except KubeError as e:
            if e.status == 422 and "Only one reference can have Controller set to true" in str(e):
                return None  # the name belongs to an object another controller owns
            if e.status != 409:
                raise
            managers = ownership.conflict_managers(str(e))
            owner = self.cache.owner_body(obj)
            if owner is not None:
                await self.event(owner, "Warning", "FieldOwnershipConflict",
                                 f"{kind}/{cname}: fields specdeploy applies were changed by "
                                 f"{', '.join(managers) or 'another field manager'}; applying them again "
                                 f"(force): {' '.join(str(e).split())[:600]}")
            live = await self.kube.apply(body, force=True)
        live = {**live, "kind": kind} if isinstance(live, dict) else body
        self.cache.children[(kind, ns, cname)] = live = ownership.for_cache(live)
        self.cache.verified[(kind, ns, cname)] = ((live.get("metadata") or {}).get("resourceVersion"), digest)
        return live

    async def tuning(self, ns: str, cr, rendered: Rendered) -> list[str]:
        """spec.tuning: run the tuning Job once; publish its result as the ConfigMap the engine pods mount.

        The Job is created and never patched (its pod template is immutable); a new tuning key
        (another GPU, engine, image or model) names a new Job. Engine pods mount the ConfigMap as
        an optional volume, so pods started before the result exists run with default kernels.
        A Job or ConfigMap of that name that this CR does not control is neither read nor written:
        returned as a conflict (``Kind/name (why)``).
        """
        plan = rendered.tuning
        uid = cr.metadata.uid
        children = self.cache.children
        job, why = await self.claim("Job", ns, plan.job_name, uid)
        if why is not None:
            return [f"Job/{plan.job_name} ({why})"]  # another's Job: its result is never published
        if job is None:  # created once: a Job's pod template is immutable, a new key names a new Job
            created = await self.kube.create(rendered.tuning_objects[0])
            children[("Job", ns, plan.job_name)] = {**(created or rendered.tuning_objects[0]), "kind": "Job"}
            self.note((ns, cr.metadata.name), f"created tuning Job/{plan.job_name}")
            return []
        if plan.storage != "configMap" or not (job.get("status") or {}).get("succeeded"):
            return []  # running, failed (its pod status says why), or written to the PVC directly
        existing, why = await self.claim("ConfigMap", ns, plan.configmap_name, uid)
        if why is not None:
            return [f"ConfigMap/{plan.configmap_name} ({why})"]
        if existing is not None and ((existing.get("metadata") or {}).get("annotations") or {}).get(N.TUNING_KEY_ANNOTATION) == plan.key:
            return []
        pods = await self.kube.list("Pod", ns, f"job-name={plan.job_name}")
        messages = [((c.get("state") or {}).get("terminated") or {}).get("message")
                    for p in pods for c in ((p.get("status") or {}).get("containerStatuses") or [])]
        messages = [m for m in messages if m]
        if not messages:
            return []
        try:
            cm = build_tuned_configmap(cr, plan, messages[-1])
        except ValueError as e:
            log.warning("tuning Job %s/%s produced an unusable result: %s", ns, plan.job_name, e)
            return []
        if await self.apply_child(ns, cm, existing) is None:
            return [f"ConfigMap/{plan.configmap_name} (controlled by another object)"]
        return []

    # ------------------------------------------------------------- status and Events

    async def write_status(self, key: Key, body: dict, plan: StatusPlan) -> None:
        """The status merge patch, then the Events of the condition transitions (Warning ones first noted)."""
        ns, name = key
        await self.kube.patch("SpeculativeDeployment", ns, name, {"status": plan.patch}, sub="status")
        body["status"] = plan.status  # our view until the watch delivers the write
        for _, ev in plan.events:
            await self.event(body, *ev)

    async def event(self, body: dict, type_: str, reason: str, message: str) -> None:
        meta = body.get("metadata") or {}
        ts = now_rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace") or "default"},
            "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "name": meta.get("name"),
                               "namespace": meta.get("namespace") or "default", "uid": meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": type_,
            "source": {"component": "specdeploy-operator"}, "reportingComponent": "specdeploy-operator",
            "reportingInstance": "specdeploy-operator",
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
        }
        try:
            await self.kube.create(event)
        except KubeError as e:  # an Event is best effort; never fail a reconcile for it
            log.info("could not post event %s: %s", reason, e)
