"""The garbage collector: asynchronous, like kube-controller-manager's.

What it mirrors (k8s.io/kubernetes/pkg/controller/garbagecollector):
- Background deletion: the owner goes at once; its dependents are deleted afterwards by the
  collector (each with background propagation, so whole trees go).
- Foreground deletion: the owner keeps a ``foregroundDeletion`` finalizer while the collector
  deletes its dependents (in the foreground too); when none is left the finalizer is removed and
  the owner goes.
- Orphan: the owner keeps an ``orphan`` finalizer until the collector has removed the owner's
  reference from every dependent; then the finalizer goes.
- Dangling references: a dependent whose every owner is absent (no object with that uid) is
  deleted, also when the owner never existed or went before the dependent was created; a
  dependent with another live owner only loses the dead reference.
The collector runs as one task on the server's loop, woken by every write that can give it
work, and processes everything pending in one synchronous step (so it never races the request
path). Idle, it does nothing and writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .common import _clone, _meta

log = logging.getLogger("specdeploy_dev.apiserver.gc")


class GarbageCollector:
    def __init__(self, store: Any):
        self.store = store
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.passes = 0
        self.deleted = 0
        # owners whose dependents may need work: woken for by uid (a write naming them, their removal or
        # their deletionTimestamp), so a pass costs what changed, not every owner in the store
        self.pending: set[str] = set()
        self._everything = False

    def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()  # bound to the running loop
            self._task = asyncio.get_running_loop().create_task(self._run(), name="specdeploy-apiserver-gc")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def wake(self, *owner_uids: str | None) -> None:
        """Schedule a pass over these owners (every owner when none is named)."""
        if owner_uids:
            self.pending.update(u for u in owner_uids if u)
        else:
            self._everything = True
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # let the request that woke us answer first
            try:
                while self.collect_once():
                    await asyncio.sleep(0)
            except Exception:  # a bug: keep the server alive, try again at the next wake-up
                log.exception("garbage collection failed")

    def collect_once(self) -> bool:
        """One pass over the pending work; True when it changed anything (another pass may follow)."""
        st = self.store
        self.passes += 1
        changed = False
        owners = list(st.children) if self._everything else [u for u in self.pending if u in st.children]
        self.pending.clear()
        self._everything = False
        for owner_uid in owners:
            owner = st.lookup_uid(owner_uid)
            if owner is None:
                for child_uid in sorted(st.children.get(owner_uid, set())):
                    changed |= self._drop_owner(child_uid, owner_uid)
                continue
            info, obj = owner
            finalizers = _meta(obj).get("finalizers") or []
            if not _meta(obj).get("deletionTimestamp"):
                continue
            if "orphan" in finalizers:
                for child_uid in sorted(st.children.get(owner_uid, set())):
                    changed |= self._orphan(child_uid, owner_uid)
            elif "foregroundDeletion" in finalizers:
                for child_uid in sorted(st.children.get(owner_uid, set())):
                    found = st.lookup_uid(child_uid)
                    if found and not _meta(found[1]).get("deletionTimestamp"):
                        st.delete(found[0], found[1], "Foreground")
                        self.deleted += 1
                        changed = True
        changed |= self._release_finalizers()
        return changed

    def _drop_owner(self, child_uid: str, owner_uid: str) -> bool:
        st = self.store
        found = st.lookup_uid(child_uid)
        if found is None:
            st.children.get(owner_uid, set()).discard(child_uid)
            if owner_uid in st.children and not st.children[owner_uid]:
                del st.children[owner_uid]
            return False
        info, child = found
        refs = _meta(child).get("ownerReferences") or []
        remaining = [r for r in refs if r.get("uid") != owner_uid]
        if any(st.lookup_uid(r.get("uid")) is not None for r in remaining):
            new = _clone(child)
            new["metadata"]["ownerReferences"] = remaining
            st.update(info, child, new, check_rv=False)
            return True
        if _meta(child).get("deletionTimestamp"):
            return False  # already going (its own finalizers hold it)
        st.delete(info, child, "Background")
        self.deleted += 1
        return True

    def _orphan(self, child_uid: str, owner_uid: str) -> bool:
        st = self.store
        found = st.lookup_uid(child_uid)
        if found is None:
            return False
        info, child = found
        new = _clone(child)
        refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        st.update(info, child, new, check_rv=False)
        return True

    def _release_finalizers(self) -> bool:
        """Owners whose foreground or orphan finalizer has nothing left to wait for."""
        st = self.store
        changed = False
        for uid in sorted(st.gc_owners):
            found = st.lookup_uid(uid)
            if found is None:
                st.gc_owners.discard(uid)
                continue
            info, obj = found
            meta = _meta(obj)
            finalizers = meta.get("finalizers") or []
            if st.children.get(uid):
                continue
            keep = [f for f in finalizers if f not in ("foregroundDeletion", "orphan")]
            st.gc_owners.discard(uid)
            if keep != finalizers:
                new = _clone(obj)
                new["metadata"]["finalizers"] = keep
                st.update(info, obj, new, check_rv=False)
                changed = True
        return changed
