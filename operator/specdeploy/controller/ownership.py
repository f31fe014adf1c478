"""Field ownership of the children: what the operator applied last, and whether it still holds.

Pure (no I/O): the executor (executor.py) applies every child with server-side apply as
field manager ``specdeploy`` and uses these to decide whether a child is in sync without a
write, and how to take over children written by versions before server-side apply.

- ``conflict``: whether the operator may act on an object at all. Before any apply, update or
  delete of a child (both controllers, the inspector, the tuning Job), the object must be absent
  or controlled by the CR acting (its uid in a controller ownerReference); anything else (another
  controller's object, an unowned one, one this CR owns without controlling it) is left alone and
  named in a ``ChildConflict`` condition (docs/concepts/security.md, "Children we do not own").

- ``intent``: the rendered child plus the annotation ``specdeploy.io/applied``, a digest of the
  rendered child. The digest says which intent was applied last; the server removed every field
  an earlier intent set and this one does not (the fields specdeploy owned and stopped applying).
- ``in_sync``: the live child carries the digest of the new intent, and specdeploy's entry in
  ``managedFields`` (``own_entry``: its Apply entry, or the Update entry of the create that made the
  child) still covers every field of it. A user or controller that changed one of
  those fields (``kubectl edit``, a merge patch, a forced apply) took its ownership from
  specdeploy (structured-merge-diff ``Updater.update``), so the entry no longer covers it and the
  child is applied again. The walk reads the server's own ``fieldsV1`` (``k:`` keys of
  associative lists, ``v:`` set items, atomic leaves), so it needs no copy of the schemas.
- ``for_cache``: an object as the operator's caches keep it: of ``managedFields`` only what
  ``in_sync`` and ``takeover_patch`` read (specdeploy's Apply entry; every entry of an object a
  takeover would rewrite), so 1000 CRs and their children do not hold every manager's field sets.
- ``takeover_patch``: children created and merge-patched by an earlier version are owned by
  Update entries (manager ``specdeploy``, or the Python client's default ``OpenAPI-Generator``),
  and so is a child the executor created (a create is an Update operation: POST refuses a name
  that is taken, which server-side apply cannot). Their fields move into specdeploy's Apply
  entry, as kubectl does when it upgrades client-side apply (k8s.io/client-go/util/csaupgrade
  ``UpgradeManagedFields``), before the first apply that changes the child, so that apply
  neither conflicts with specdeploy's own Update entry nor leaves what it stops applying behind.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from ..core.names import APPLIED_ANNOTATION, FIELD_MANAGER  # noqa: F401 (own.APPLIED_ANNOTATION for its readers)

# Update managers of the versions before server-side apply: the operator's own name, and the name
# the API server derives from the Python client's User-Agent when no fieldManager is sent.
LEGACY_MANAGERS = (FIELD_MANAGER, "OpenAPI-Generator")
_SKIP_META = {"name", "namespace"}


def controller_uids(obj: dict | None) -> list[str]:
    """The uids of the controller ownerReferences of ``obj`` (normally at most one)."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return [r.get("uid") for r in refs if isinstance(r, dict) and r.get("controller") is True and r.get("uid")]


def owner_uid(obj: dict) -> str | None:
    """The uid of the controller ownerReference of a rendered child: the CR it is applied for."""
    uids = controller_uids(obj)
    return uids[0] if uids else None


def conflict(actual: dict | None, uid: str | None) -> str | None:
    """Why the operator must not touch ``actual`` on behalf of the CR with ``uid``; None when it may.

    It may when the object is absent, or controlled by that CR (``uid`` in a controller ownerReference).
    Every other object is someone else's, however it came to have the name: controlled by another object,
    owned by nobody (created by a person or a tool), or owned by this CR without the controller flag. A CR
    without a uid (not yet stored) may only create.
    """
    if actual is None:
        return None
    uids = controller_uids(actual)
    if uid and uid in uids:
        return None
    if uids:
        return "controlled by another object"
    if uid and any(isinstance(r, dict) and r.get("uid") == uid for r in (actual.get("metadata") or {}).get("ownerReferences") or []):
        return "owned by this resource but not as its controller"
    return "not owned by specdeploy"


def digest(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def intent(obj: dict, d: str | None = None) -> tuple[dict, str]:
    """The applied configuration of a rendered child: the child with its digest annotation."""
    d = d or digest(obj)
    body = dict(obj, metadata=dict(obj["metadata"]))
    body["metadata"]["annotations"] = {**(obj["metadata"].get("annotations") or {}), APPLIED_ANNOTATION: d}
    return body, d


def apply_entry(live: dict) -> dict | None:
    for e in (live.get("metadata") or {}).get("managedFields") or []:
        if e.get("manager") == FIELD_MANAGER and e.get("operation") == "Apply" and not e.get("subresource"):
            return e
    return None


def _created(e: dict) -> bool:
    """specdeploy's own Update entry: the create that made the child (or a pre-server-side-apply write)."""
    return e.get("manager") == FIELD_MANAGER and e.get("operation") == "Update" and not e.get("subresource")


def own_entry(live: dict) -> dict | None:
    """The entry whose fields specdeploy owns on a child it applied or created: the Apply entry, else (a child
    created by the executor and not changed since) the create's Update entry, when the child carries a digest."""
    entry = apply_entry(live)
    if entry is not None:
        return entry
    meta = live.get("metadata") or {}
    if APPLIED_ANNOTATION not in (meta.get("annotations") or {}):
        return None
    return next((e for e in meta.get("managedFields") or [] if isinstance(e, dict) and _created(e)), None)


def _legacy(e: dict) -> bool:
    return e.get("manager") in LEGACY_MANAGERS and e.get("operation") == "Update" and not e.get("subresource")


def _takeover_pending(meta: dict, entries: list) -> bool:
    """Update entries a takeover would move into the Apply entry: a legacy one on a child of a version before
    server-side apply (no digest), or specdeploy's own (the create's) on a child that carries one."""
    if APPLIED_ANNOTATION not in (meta.get("annotations") or {}):
        return any(isinstance(e, dict) and _legacy(e) for e in entries)
    return any(isinstance(e, dict) and _created(e) for e in entries)


def for_cache(obj: dict) -> dict:
    """``obj`` as the caches keep it: of ``managedFields`` only what ``in_sync`` and ``takeover_patch`` read.

    That is specdeploy's Apply entry, with its ``fieldsV1`` as JSON text (a tenth of the memory of the
    decoded field set; ``in_sync`` decodes it), or every entry while a takeover is pending (``_takeover_pending``:
    the takeover writes them all back): as they are on a child of a version before server-side apply, with
    each ``fieldsV1`` as JSON text on a child the executor created (specdeploy's Update entry until its first
    change). Both functions answer the same on the result as on ``obj``; ``obj`` is not modified (a shallow
    copy when anything changes).
    """
    meta = obj.get("metadata")
    entries = meta.get("managedFields") if isinstance(meta, dict) else None
    if not entries or not isinstance(entries, list):
        return obj
    if _takeover_pending(meta, entries):
        if APPLIED_ANNOTATION not in (meta.get("annotations") or {}) or not any(
                isinstance(e, dict) and isinstance(e.get("fieldsV1"), dict) for e in entries):
            return obj  # a child of a version before server-side apply (rare: kept as it is)
        return {**obj, "metadata": {**meta, "managedFields": [_as_text(e) for e in entries]}}
    mine = apply_entry(obj)
    if mine is not None and not isinstance(mine.get("fieldsV1"), str):
        mine = {"manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": mine.get("apiVersion"),
                "fieldsType": "FieldsV1", "fieldsV1": json.dumps(mine.get("fieldsV1") or {}, separators=(",", ":"))}
    elif mine is not None and len(entries) == 1:
        return obj
    return {**obj, "metadata": {**meta, "managedFields": [mine] if mine is not None else []}}


def _as_text(entry: Any) -> Any:
    """An entry with its ``fieldsV1`` as JSON text (as the cache keeps field sets)."""
    if isinstance(entry, dict) and isinstance(entry.get("fieldsV1"), dict):
        return {**entry, "fieldsV1": json.dumps(entry["fieldsV1"], separators=(",", ":"))}
    return entry


def _fields(entry: dict) -> dict:
    """An entry's ``fieldsV1``, decoded when the cache keeps it as JSON text (``for_cache``)."""
    fields = entry.get("fieldsV1") or {}
    return json.loads(fields) if isinstance(fields, str) else fields


def _as_sent(entry: Any) -> Any:
    """An entry as a write sends it back: ``fieldsV1`` decoded."""
    if isinstance(entry, dict) and isinstance(entry.get("fieldsV1"), str):
        return {**entry, "fieldsV1": _fields(entry)}
    return entry


def in_sync(live: dict, body: dict, d: str) -> bool:
    """No write needed: the live child has this intent applied and specdeploy still owns all of it.

    ``body`` is the rendered child, with or without the digest annotation (its ownership is checked).
    """
    meta = live.get("metadata") or {}
    if (meta.get("annotations") or {}).get(APPLIED_ANNOTATION) != d:
        return False
    entry = own_entry(live)
    if entry is None:
        return False
    fields = _fields(entry)
    if "f:" + APPLIED_ANNOTATION not in ((fields.get("f:metadata") or {}).get("f:annotations") or {}):
        return False
    for key, value in body.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata":
            mf = fields.get("f:metadata")
            for mk, mv in value.items():
                if mk in _SKIP_META:
                    continue
                if mf is None or not covers(mf.get(f"f:{mk}"), mv):
                    return False
            continue
        if not covers(fields.get(f"f:{key}"), value):
            return False
    return True


def covers(node: Any, value: Any) -> bool:
    """Whether a ``fieldsV1`` node owns every field of ``value`` (leaf nodes own all below them)."""
    if not isinstance(node, dict):
        return False
    children = [k for k in node if k != "."]
    if not children:
        return True  # a member with nothing under it: a scalar, or an atomic map or list
    if isinstance(value, dict):
        return all(covers(node.get(f"f:{k}"), v) for k, v in value.items())
    if isinstance(value, list):
        keyed = [(json.loads(k[2:]), node[k]) for k in children if k.startswith("k:")]
        values = {k[2:] for k in children if k.startswith("v:")}
        for item in value:
            if isinstance(item, dict) and keyed:
                sub = next((n for key, n in keyed if all(item.get(f) == v for f, v in key.items())), None)
                if sub is None or not covers(sub, item):
                    return False
            elif json.dumps(item, separators=(",", ":")) not in values:
                return False
        return True
    return False


def _merge_fields(into: dict, other: dict) -> dict:
    for k, v in other.items():
        into[k] = _merge_fields(into.get(k) or {}, v) if isinstance(v, dict) else v
    return into


def takeover_patch(live: dict) -> list[dict] | None:
    """A JSON patch moving the fields of specdeploy's Update entries into its Apply entry: those of the
    managers before server-side apply (a child without the digest annotation), or the create's (a child
    the executor created: it carries the digest).

    None when there is nothing to take over: no such Update entry owns anything on the main resource.
    """
    meta = live.get("metadata") or {}
    entries = meta.get("managedFields") or []
    if not _takeover_pending(meta, entries):
        return None
    digest = APPLIED_ANNOTATION in (meta.get("annotations") or {})
    legacy = [e for e in entries if isinstance(e, dict) and (_created(e) if digest else _legacy(e))]
    mine = apply_entry(live)
    merged = copy.deepcopy(_fields(mine or {}))
    for e in legacy:
        _merge_fields(merged, _fields(e))
    entry = {"manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": (mine or legacy[0]).get("apiVersion"),
             "time": legacy[-1].get("time"), "fieldsType": "FieldsV1", "fieldsV1": merged}
    kept = [_as_sent(e) for e in entries if e is not mine and not any(e is x for x in legacy)]
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
            {"op": "replace", "path": "/metadata/managedFields", "value": [entry, *kept]}]


_CONFLICT = re.compile(r'conflicts? with "([^"]+)"')


def conflict_managers(message: str) -> list[str]:
    """The managers named in a server-side apply conflict (409) message."""
    return sorted(set(_CONFLICT.findall(message or "")))
