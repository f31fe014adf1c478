"""Watch: per-watcher selection and event translation, and the chunked watch stream."""

from __future__ import annotations

import asyncio
import time
from typing import Any


import aiohttp.web

from .common import ApiError, JSON, _dumps, _meta
from .faults import Fault
from .resources import ResourceInfo
from .selectors import parse_field_selector, parse_label_selector


class _Watcher:
    __slots__ = ("info", "namespace", "labels", "fields", "queue", "table")

    def __init__(self, info: ResourceInfo, namespace: str | None, labels: Any, fields: Any, table: bool):
        self.info = info
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.table = table
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def matches(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        meta = _meta(obj)
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels(meta.get("labels") or {}):
            return False
        if self.fields is not None and not self.fields(obj):
            return False
        return True

    def translate(self, etype: str, obj: JSON, old: JSON | None) -> str | None:
        """The event type this watcher sees, with selector transitions as ADDED/DELETED."""
        new_ok = self.matches(obj)
        if etype == "ADDED":
            return "ADDED" if new_ok else None
        if etype == "DELETED":
            return "DELETED" if new_ok else None
        old_ok = self.matches(old)
        if new_ok and old_ok:
            return "MODIFIED"
        if new_ok:
            return "ADDED"
        if old_ok:
            return "DELETED"
        return None


class WatchMixin:
    """The watch verb of the request path (mixed into the server state)."""

    # ---- watch ----

    async def watch(self, raw: aiohttp.web.BaseRequest, info: ResourceInfo, ns: str | None, name: str | None,
                    fault: Fault | None) -> aiohttp.web.StreamResponse:
        q = raw.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"))
        if name is not None:  # the legacy /watch/.../<name> form
            by_name = lambda o: _meta(o).get("name") == name  # noqa: E731
            fields = (lambda o: by_name(o) and fields(o)) if fields else by_name  # type: ignore[misc]
        watcher = _Watcher(info, ns if info.namespaced else None, labels, fields, _wants_table(raw))
        rv_text = q.get("resourceVersion") or ""
        send_initial = q.get("sendInitialEvents") == "true"
        bucket = self.bucket(info)
        expired = fault is not None and fault.status == 410
        initial: list[tuple[str, JSON]] = []
        # Snapshot and subscription in one synchronous step: no event can fall in between.
        if not expired:
            if rv_text in ("", "0") or send_initial:
                initial = [("ADDED", o) for o in self.select(info, watcher.namespace, labels, fields)]
            else:
                try:
                    since = int(rv_text)
                except ValueError:
                    raise ApiError(400, f"invalid resourceVersion {rv_text!r}")
                if since < bucket.compacted:
                    expired = True
                else:
                    for rv, etype, obj, old in bucket.log:
                        if rv > since:
                            seen = watcher.translate(etype, obj, old)
                            if seen is not None:
                                initial.append((seen, obj))
            if not expired:
                bucket.watchers.add(watcher)
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                                   "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(raw)
            if expired:
                await response.write(self._error_event(410, "Expired", f"too old resource version: {rv_text}"))
                await response.write_eof()
                return response
            for etype, obj in initial:
                await response.write(self._event(watcher, etype, obj))
            if send_initial:
                await response.write(_dumps({"type": "BOOKMARK", "object": {
                    "kind": info.kind, "apiVersion": info.api_version, "metadata": {
                        "resourceVersion": str(self.rv), "annotations": {"k8s.io/initial-events-end": "true"}}}}) + b"\n")
            if fault is not None and fault.action == "drop":
                self._abort(raw)
                return response
            timeout = q.get("timeoutSeconds")
            deadline = time.monotonic() + float(timeout) if timeout else None
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
                if item == "end":
                    break
                if item == "drop":
                    self._abort(raw)
                    return response
                if item == "expire":
                    await response.write(self._error_event(410, "Expired", "the watch was expired by a fault"))
                    break
                chunks = [self._event(watcher, *item)]
                while not watcher.queue.empty() and isinstance(watcher.queue._queue[0], tuple):  # type: ignore[attr-defined]
                    chunks.append(self._event(watcher, *watcher.queue.get_nowait()))
                await response.write(b"".join(chunks))
            await response.write_eof()
            return response
        except (ConnectionResetError, ConnectionError):
            return response
        finally:
            bucket.watchers.discard(watcher)

    @staticmethod
    def _abort(raw: aiohttp.web.BaseRequest) -> None:
        if raw.transport is not None:
            raw.transport.abort()

    def _event(self, watcher: _Watcher, etype: str, obj: JSON) -> bytes:
        if watcher.table:
            return _dumps({"type": etype, "object": self.table(watcher.info, [obj], "Object")}) + b"\n"
        # what _dumps({"type": etype, "object": served}) gives, the object serialized once for every watcher
        return b'{"type":' + _dumps(etype) + b',"object":' + self.encode(watcher.info, obj) + b"}\n"

    @staticmethod
    def _error_event(code: int, reason: str, message: str) -> bytes:
        return _dumps({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                   "status": "Failure", "message": message, "reason": reason,
                                                   "code": code}}) + b"\n"

def _wants_table(raw: aiohttp.web.BaseRequest) -> bool:
    accept = raw.headers.get("Accept") or ""
    first = accept.split(",")[0]
    return "as=Table" in first
