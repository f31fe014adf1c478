"""Storage and object semantics: the indexed store, create/update/delete, finalizers, owners, CRD registration."""

from __future__ import annotations

import collections
import json
import random
import uuid
from typing import TYPE_CHECKING, Any


from .common import ApiError, JSON, _FIELDS_IMMUTABLE, _GENERATE_ALPHABET, _NAME_RE, _clone, _dumps, _meta, _now
from .faults import FaultInjector
from . import crdschema
from .admission import Admission
from .gc import GarbageCollector
from .limits import check_data, check_serialized_size
from .openapi import OpenApiCache, builtin_definition_name, builtin_definitions
from . import ssa
from .resources import _BUILTINS, ResourceInfo
if TYPE_CHECKING:
    from .watch import _Watcher


class _Bucket:
    """The objects of one resource (all versions share it) with its indexes and event log."""

    __slots__ = ("objects", "by_ns", "log", "compacted", "watchers", "encoded")

    def __init__(self, log_size: int):
        self.objects: dict[tuple[str | None, str], JSON] = {}
        self.by_ns: dict[str | None, dict[str, JSON]] = collections.defaultdict(dict)
        self.log: collections.deque[tuple[int, str, JSON, JSON | None]] = collections.deque(maxlen=log_size)
        self.compacted = 0  # events with resourceVersion <= this are no longer in the log
        self.watchers: set[_Watcher] = set()
        # the serialized JSON of stored objects, by key: (object, bytes), valid while that very object is
        # stored (a stored object is never changed in place: every write stores a new one)
        # key -> (the stored object, its resourceVersion, its bytes): used only for that very object at that version
        self.encoded: dict[tuple[str | None, str], tuple[JSON, object, bytes]] = {}


class Store:
    """All mutable state and the object semantics; single-threaded on the server's loop."""

    def __init__(self, emulator: Any):
        self.emulator = emulator
        self.served = 0
        self.rv = 0
        self.resources: dict[tuple[str, str, str], ResourceInfo] = {}
        self.buckets: dict[tuple[str, str], _Bucket] = {}
        self.uids: dict[str, tuple[tuple[str, str], str | None, str]] = {}  # uid -> bucket key, ns, name
        self.children: dict[str, set[str]] = collections.defaultdict(set)  # owner uid -> child uids
        self.ns_counts: collections.Counter[str] = collections.Counter()
        self._types: dict[tuple, ssa.Types] = {}  # field ownership view of each resource's schema
        self.crd_versions: dict[str, list[tuple[str, str, str]]] = {}  # CRD name -> resource keys
        self.faults = FaultInjector(emulator)
        # every write request (POST/PUT/PATCH/DELETE of a resource) with its User-Agent, wall-clock
        # start and end, and the status answered (faulted ones included): who wrote when (writes.py)
        self.writes: collections.deque[JSON] = collections.deque(maxlen=200_000)
        self.resources_generation = 0  # bumped whenever the set of resources or a schema changes
        self.openapi_cache = OpenApiCache()
        self.admission = Admission(self)
        self.gc = GarbageCollector(self)
        self.gc_owners: set[str] = set()  # uids deleted with Foreground or Orphan propagation
        for g, v, plural, kind, short, namespaced, status, scale, cats in _BUILTINS:
            self.register(ResourceInfo(group=g, version=v, plural=plural, kind=kind, namespaced=namespaced,
                                       short_names=list(short), status=status, scale=scale,
                                       categories=list(cats), singular=kind.lower()))

    # ---- resources ----

    def register(self, info: ResourceInfo) -> None:
        self.resources[(info.group, info.version, info.plural)] = info
        self.resources_generation += 1
        self.bucket(info)

    def bucket(self, info: ResourceInfo) -> _Bucket:
        bucket = self.buckets.get(info.storage_key)
        if bucket is None:
            bucket = self.buckets[info.storage_key] = _Bucket(self.emulator.watch_log_size)
        return bucket

    def find_resource(self, plural: str | None, group: str = "", version: str | None = None) -> ResourceInfo | None:
        for (g, v, p), info in self.resources.items():
            if p == plural and g == group and (version is None or v == version):
                return info
        return None

    def find_kind(self, group: str, version: str, kind: str) -> ResourceInfo | None:
        for (g, v, _), info in self.resources.items():
            if g == group and v == version and info.kind == kind:
                return info
        return None

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    # ---- reading ----

    def select(self, info: ResourceInfo, namespace: str | None, labels: Any, fields: Any) -> list[JSON]:
        bucket = self.bucket(info)
        if info.namespaced and namespace is not None:
            items = bucket.by_ns.get(namespace, {})
            objs = [items[k] for k in sorted(items)]
        else:
            objs = [bucket.objects[k] for k in sorted(bucket.objects, key=lambda k: (k[0] or "", k[1]))]
        if labels is not None:
            objs = [o for o in objs if labels(_meta(o).get("labels") or {})]
        if fields is not None:
            objs = [o for o in objs if fields(o)]
        return objs

    def encode(self, info: ResourceInfo, obj: JSON) -> bytes:
        """The object as served for ``info`` (its apiVersion), serialized: once per stored object, shared by
        the answers to its write, GET and LIST and by every watcher's event."""
        if obj.get("apiVersion") != info.api_version:
            return _dumps(dict(obj, apiVersion=info.api_version))
        meta = _meta(obj)
        key = (meta.get("namespace") if info.namespaced else None, meta.get("name"))
        bucket = self.bucket(info)
        hit = bucket.encoded.get(key)  # type: ignore[arg-type]
        rv = meta.get("resourceVersion")
        if hit is not None and hit[0] is obj and hit[1] == rv:  # an in-place change bumps the version: not served
            return hit[2]
        data = _dumps(obj)
        if bucket.objects.get(key) is obj:  # type: ignore[arg-type]
            bucket.encoded[key] = (obj, rv, data)  # type: ignore[index]
        return data

    def get(self, info: ResourceInfo, namespace: str | None, name: str) -> JSON:
        obj = self.bucket(info).objects.get((namespace if info.namespaced else None, name))
        if obj is None:
            raise ApiError(404, f'{info.plural}{"." + info.group if info.group else ""} "{name}" not found',
                           details={"name": name, "group": info.group, "kind": info.plural})
        return obj

    # ---- writing: the one place where objects change, events go out and the GC runs ----

    def _emit(self, info: ResourceInfo, etype: str, obj: JSON, old: JSON | None, rv: int) -> None:
        bucket = self.bucket(info)
        if len(bucket.log) == bucket.log.maxlen and bucket.log:
            bucket.compacted = bucket.log[0][0]
        bucket.log.append((rv, etype, obj, old))
        for watcher in bucket.watchers:
            seen = watcher.translate(etype, obj, old)
            if seen is not None:
                watcher.queue.put_nowait((seen, obj))

    def _store(self, info: ResourceInfo, obj: JSON) -> None:
        meta = obj["metadata"]
        bucket = self.bucket(info)
        ns = meta.get("namespace") if info.namespaced else None
        bucket.objects[(ns, meta["name"])] = obj
        bucket.encoded.pop((ns, meta["name"]), None)
        bucket.by_ns[ns][meta["name"]] = obj

    def _unstore(self, info: ResourceInfo, obj: JSON) -> None:
        meta = obj["metadata"]
        bucket = self.bucket(info)
        ns = meta.get("namespace") if info.namespaced else None
        bucket.objects.pop((ns, meta["name"]), None)
        bucket.encoded.pop((ns, meta["name"]), None)
        items = bucket.by_ns.get(ns)
        if items is not None:
            items.pop(meta["name"], None)
            if not items:
                del bucket.by_ns[ns]

    def _index_owners(self, uid: str, old: JSON | None, new: JSON | None) -> None:
        old_owners = {r.get("uid") for r in (_meta(old).get("ownerReferences") or [])} if old else set()
        new_owners = {r.get("uid") for r in (_meta(new).get("ownerReferences") or [])} if new else set()
        for owner in old_owners - new_owners:
            self.children.get(owner, set()).discard(uid)
            if owner in self.children and not self.children[owner]:
                del self.children[owner]
        for owner in new_owners - old_owners:
            if owner:
                self.children[owner].add(uid)

    def _check_namespace(self, info: ResourceInfo, namespace: str | None) -> None:
        if not info.namespaced:
            return
        if not namespace:
            raise ApiError(400, "the namespace of the object is not set and the request has none")
        ns = self.buckets[("", "namespaces")].objects.get((None, namespace))
        if ns is None:
            raise ApiError(404, f'namespaces "{namespace}" not found',
                           details={"name": namespace, "kind": "namespaces"})
        if _meta(ns).get("deletionTimestamp"):
            raise ApiError(403, f"unable to create new content in namespace {namespace} because it is being terminated",
                           reason="Forbidden")

    def _validate(self, info: ResourceInfo, obj: JSON) -> None:
        if not isinstance(obj, dict):
            raise ApiError(400, "the request body is not a JSON object")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind and kind != info.kind:
            raise ApiError(400, f"the kind {kind!r} does not match the resource {info.plural!r} ({info.kind})")
        if api_version and api_version.rpartition("/")[0] != info.group:
            raise ApiError(400, f"the apiVersion {api_version!r} does not match the group {info.group!r}")
        name = _meta(obj).get("name")
        if not name:
            raise crdschema.invalid(info.kind, info.group, "", [crdschema.Cause(
                "metadata.name", "FieldValueRequired", "Required value: name or generateName is required")])
        if len(name) > 253 or not _NAME_RE.match(name):
            msg = (f"Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must consist of lower case "
                   "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                   "(e.g. 'example.com', regex used for validation is "
                   "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
            if len(name) > 253:
                msg = "Invalid value: " + json.dumps(name) + ": must be no more than 253 characters"
            raise crdschema.invalid(info.kind, info.group, name, [crdschema.Cause("metadata.name", "FieldValueInvalid", msg)])

    def create(self, info: ResourceInfo, namespace: str | None, obj: JSON, dry_run: bool = False,
               field_manager: str | None = None, applied: JSON | None = None, admit: Any = None) -> JSON:
        """Prepare (metadata, defaults, schema admission when ``admit`` is given) and store ``obj``."""
        obj = self.prepare_create(info, namespace, obj, field_manager, applied, admit)
        return obj if dry_run else self.commit_create(info, obj, field_manager, applied)

    def prepare_create(self, info: ResourceInfo, namespace: str | None, obj: JSON,
                       field_manager: str | None = None, applied: JSON | None = None, admit: Any = None) -> JSON:
        if not isinstance(obj, dict):
            raise ApiError(400, "the request body is not a JSON object")
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if info.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
            namespace = namespace or body_ns
            meta["namespace"] = namespace
            self._check_namespace(info, namespace)
        else:
            meta.pop("namespace", None)
            namespace = None
        bucket = self.bucket(info)
        if not meta.get("name") and meta.get("generateName"):
            for _ in range(100):
                name = meta["generateName"] + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
                if (namespace, name) not in bucket.objects:
                    meta["name"] = name
                    break
        self._validate(info, obj)
        name = meta["name"]
        if (namespace, name) in bucket.objects:
            raise ApiError(409, f'{info.plural}{"." + info.group if info.group else ""} "{name}" already exists',
                           reason="AlreadyExists", details={"name": name, "group": info.group, "kind": info.plural})
        obj["apiVersion"], obj["kind"] = info.api_version, info.kind
        given = meta.get("managedFields")
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
            meta.pop(key, None)
        if info.status:
            obj.pop("status", None)  # a create ignores .status when it is a subresource
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        self._defaults(info, obj)
        if admit is not None:
            self.admit_schema(info, obj, admit, None)
        _check_controller(info, obj)
        check_data(info, obj)
        types = self.types_for(info)
        if field_manager and applied is not None:  # an apply that creates
            managers = ssa.Managers([])
            me = (field_manager, "Apply", None, None)
            managers.entries[me] = ({}, ssa.field_set(applied, types))
        else:  # a create is an Update operation of its manager (managedFields given on the create are kept)
            managers = ssa.Managers(given)
            me = ((admit.manager if admit is not None else None) or "unknown", "Update", info.api_version, None)
            ssa.update_managers(managers, me, {}, obj, types, None, force=True)
        ssa.stamp(managers, me, info.api_version, changed=True)
        entries = managers.encode()
        if entries:
            meta["managedFields"] = entries
        return obj

    def types_for(self, info: ResourceInfo) -> ssa.Types:
        """The structured-merge-diff view of a resource's schema (ssa.py), cached per schema generation."""
        key = (info.storage_key, info.version, self.resources_generation)
        hit = self._types.get(key)
        if hit is not None:
            return hit
        try:
            defs = builtin_definitions()
        except Exception:  # noqa: BLE001 - no upstream schemas: every value untyped
            defs = {}
        root: JSON | None = None
        if info.custom:
            if isinstance(info.schema, dict):
                props = dict(info.schema.get("properties") or {})
                props["metadata"] = {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
                root = dict(info.schema, properties=props)
        else:
            name = builtin_definition_name(info.group, info.version, info.kind) if defs else None
            root = {"$ref": f"#/$defs/{name}"} if name else None
        types = ssa.Types(root, defs, status_sub=bool(info.status))
        self._types = {k: v for k, v in self._types.items() if k[2] == self.resources_generation}
        self._types[key] = types
        return types

    def prepare_apply(self, info: ResourceInfo, current: JSON, applied: JSON, manager: str, sub: str | None,
                      force: bool, admit: Any) -> JSON:
        """Server-side apply onto the stored object (ssa.py): merged, pruned, owned; ``current`` on a no-op."""
        types = self.types_for(info)
        managers = ssa.Managers(_meta(current).get("managedFields"))
        me = (manager, "Apply", None, sub)
        before = {mid: set(p) for mid, (_, p) in managers.entries.items()}
        merged = ssa.apply(current, applied, types, managers, me, sub, force)
        after = {mid: p for mid, (_, p) in managers.entries.items()}
        ssa.stamp(managers, me, info.api_version, changed=before != after or merged != current)
        return self.prepare_update(info, current, merged, sub, check_rv=False, managed_fields=managers.encode(),
                                   admit=admit)

    def _versioned(self, obj: JSON) -> tuple[int, bytes]:
        """The storage limit (limits.check_size), then the object's next resourceVersion; one
        serialization for both, with the new resourceVersion (kept for ``encode``). The limit is checked
        on the object as it came (its former resourceVersion), as check_size did; over it, the object is
        left as it was and no resourceVersion is used."""
        meta = obj["metadata"]
        had, before = "resourceVersion" in meta, meta.get("resourceVersion")
        text = str(self.rv + 1)
        meta["resourceVersion"] = text  # in place: its position in metadata stays (or it is the last key)
        data = _dumps(obj)
        size = len(data) - len(_dumps(text)) - (len(b',"resourceVersion":') if not had else -len(_dumps(before)))
        try:
            check_serialized_size(size)
        except ApiError:
            if had:
                meta["resourceVersion"] = before
            else:
                del meta["resourceVersion"]
            raise
        return self.next_rv(), data

    def commit_create(self, info: ResourceInfo, obj: JSON, field_manager: str | None = None,
                      applied: JSON | None = None) -> JSON:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace") if info.namespaced else None, meta["name"]
        self._check_namespace(info, namespace)
        if (namespace, name) in self.bucket(info).objects:  # created while admission ran
            raise ApiError(409, f'{info.plural}{"." + info.group if info.group else ""} "{name}" already exists',
                           reason="AlreadyExists", details={"name": name, "group": info.group, "kind": info.plural})
        rv, data = self._versioned(obj)
        self._store(info, obj)
        self.bucket(info).encoded[(namespace, name)] = (obj, meta.get("resourceVersion"), data)
        self.uids[meta["uid"]] = (info.storage_key, namespace, name)
        self._index_owners(meta["uid"], None, obj)
        if meta.get("ownerReferences"):
            self.gc.wake(*(r.get("uid") for r in meta["ownerReferences"]))  # a dangling owner?
        if namespace:
            self.ns_counts[namespace] += 1
        self._emit(info, "ADDED", obj, None, rv)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_changed(obj)
        return obj

    def admit_schema(self, info: ResourceInfo, obj: JSON, admit: Any, old: JSON | None) -> None:
        """Field validation (unknown fields), and for custom resources pruning, defaults, the
        structural schema and the CEL rules (crdschema.py); raises the real server's errors."""
        if info.custom and isinstance(info.schema, dict):
            crdschema.admit_custom(obj, info.schema, info.kind, info.group, info.version, admit.validation,
                                   admit.warnings, old)
        elif not info.custom and admit.validation in ("Strict", "Warn"):
            name = builtin_definition_name(info.group, info.version, info.kind)
            if name:
                defs = builtin_definitions()
                resolve = lambda ref: defs.get(ref.rsplit("/", 1)[-1])  # noqa: E731
                unknown = crdschema.unknown_fields(obj, defs[name], resolve) if old is None else \
                    crdschema.unknown_fields(obj, defs[name], resolve, old=old)
                if unknown and admit.validation == "Strict":
                    raise crdschema.strict_error(info.kind, info.version, unknown)
                admit.warnings.extend(f'unknown field "{p}"' for p in unknown)

    def _defaults(self, info: ResourceInfo, obj: JSON) -> None:
        if info.storage_key == ("", "namespaces"):
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            obj["status"] = self._crd_status(obj)
        elif info.storage_key == ("", "secrets"):
            obj.setdefault("type", "Opaque")

    def update(self, info: ResourceInfo, old: JSON, new: JSON, sub: str | None = None,
               dry_run: bool = False, check_rv: bool = True, managed_fields: list[JSON] | None = None,
               admit: Any = None) -> JSON:
        """Store ``new`` in place of ``old``: immutables kept, status isolation, generation, GC."""
        result = self.prepare_update(info, old, new, sub, check_rv, managed_fields, admit)
        if dry_run or result is old:
            return result
        return self.commit_update(info, old, result)

    def prepare_update(self, info: ResourceInfo, old: JSON, new: JSON, sub: str | None = None,
                       check_rv: bool = True, managed_fields: list[JSON] | None = None, admit: Any = None) -> JSON:
        """The object an update would store (``old`` itself for a no-op), without storing it."""
        if not isinstance(new, dict):
            raise ApiError(400, "the request body is not a JSON object")
        old_meta = old["metadata"]
        new_meta = new.get("metadata")
        if not isinstance(new_meta, dict):
            new_meta = new["metadata"] = {}
        if new_meta.get("name") not in (None, old_meta["name"]):
            raise ApiError(400, f"the name of the object ({new_meta.get('name')}) does not match the name on the URL ({old_meta['name']})")
        if info.namespaced and new_meta.get("namespace") not in (None, old_meta.get("namespace")):
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        if check_rv and new_meta.get("resourceVersion") not in (None, "", old_meta["resourceVersion"]):
            raise ApiError(409, f'Operation cannot be fulfilled on {info.plural}{"." + info.group if info.group else ""} '
                                f'"{old_meta["name"]}": the object has been modified; please apply your changes '
                                "to the latest version and try again", reason="Conflict",
                           details={"name": old_meta["name"], "group": info.group, "kind": info.plural})
        kind, api_version = new.get("kind"), new.get("apiVersion")
        if kind and kind != info.kind:
            raise ApiError(400, f"the kind {kind!r} does not match the resource {info.plural!r}")
        if api_version and api_version.rpartition("/")[0] != info.group:
            raise ApiError(400, f"the apiVersion {api_version!r} does not match the group {info.group!r}")
        if sub == "status":
            # Only .status changes through the status subresource.
            result = {k: v for k, v in old.items() if k != "status"}
            if "status" in new:
                result["status"] = new["status"]
            result["metadata"] = dict(old_meta)
        else:
            result = dict(new)
            if info.status:
                result.pop("status", None)
                if "status" in old:
                    result["status"] = old["status"]
            for key in _FIELDS_IMMUTABLE:
                if key in old_meta:
                    new_meta[key] = old_meta[key]
                else:
                    new_meta.pop(key, None)
            given = new_meta.pop("managedFields", None)
            if given is not None and given != old_meta.get("managedFields"):
                new_meta["managedFields"] = given  # replaces the managers (csaupgrade; [{}] clears)
            elif "managedFields" in old_meta:
                new_meta["managedFields"] = old_meta["managedFields"]
            result["metadata"] = new_meta
        result["apiVersion"], result["kind"] = old["apiVersion"], old["kind"]
        meta = result["metadata"]
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise ApiError(422, f"{info.kind} \"{old_meta['name']}\" is invalid: metadata.finalizers: "
                                    f"Forbidden: no new finalizers can be added if the object is being deleted, "
                                    f"found new finalizers {sorted(added)!r}")
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions") and sub != "status":
            result["status"] = self._crd_status(result)
        if admit is not None:
            self.admit_schema(info, result, admit, old)
        _check_controller(info, result)
        check_data(info, result)
        if _content(result, info) != _content(old, info):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if managed_fields is None and admit is not None and admit.manager:
            managers = ssa.Managers(meta.get("managedFields"))
            me = (admit.manager, "Update", info.api_version, sub)
            before = {mid: set(p) for mid, (_, p) in managers.entries.items()}
            ssa.update_managers(managers, me, old, result, self.types_for(info), sub, force=True)
            after = {mid: p for mid, (_, p) in managers.entries.items()}
            ssa.stamp(managers, me, info.api_version, changed=before != after)
            managed_fields = managers.encode()
        if managed_fields is not None:
            if managed_fields:
                meta["managedFields"] = managed_fields
            else:
                meta.pop("managedFields", None)
        if result == old:
            return old  # a no-op write: no new resourceVersion, no event (as the real server)
        return result

    def commit_update(self, info: ResourceInfo, old: JSON, result: JSON) -> JSON:
        meta = result["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._index_owners(meta["uid"], old, result)
            return self.remove(info, result)
        rv, data = self._versioned(result)
        self._store(info, result)
        self.bucket(info).encoded[(meta.get("namespace") if info.namespaced else None, meta["name"])] = (
            result, meta.get("resourceVersion"), data)
        self._index_owners(meta["uid"], old, result)
        if meta.get("ownerReferences") != _meta(old).get("ownerReferences"):
            self.gc.wake(*(r.get("uid") for r in meta.get("ownerReferences") or []))
        self._emit(info, "MODIFIED", result, old, rv)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_changed(result)
        return result

    def remove(self, info: ResourceInfo, obj: JSON) -> JSON:
        """Remove an object for good (no finalizers left), then collect its dependents."""
        meta = obj["metadata"]
        uid = meta["uid"]
        self._unstore(info, obj)
        self.uids.pop(uid, None)
        self._index_owners(uid, obj, None)
        ns = meta.get("namespace") if info.namespaced else None
        rv = self.next_rv()
        obj = dict(obj, metadata=dict(meta, resourceVersion=str(rv)))
        self._emit(info, "DELETED", obj, None, rv)
        if ns:
            self.ns_counts[ns] -= 1
            if self.ns_counts[ns] <= 0:
                del self.ns_counts[ns]
                self._namespace_maybe_gone(ns)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_removed(obj)
        if info.storage_key == ("", "namespaces"):
            self.ns_counts.pop(meta["name"], None)
        self.gc.wake(uid)  # dependents are collected asynchronously (gc.py)
        return obj

    def lookup_uid(self, uid: str | None) -> tuple[ResourceInfo, JSON] | None:
        where = self.uids.get(uid or "")
        if where is None:
            return None
        key, ns, name = where
        bucket = self.buckets.get(key)
        obj = bucket.objects.get((ns, name)) if bucket else None
        if obj is None:
            return None
        info = self._info_by_storage_key().get(key)
        return (info, obj) if info else None

    def _info_by_storage_key(self) -> dict:
        """storage key -> the first registered ResourceInfo with it, rebuilt when the resources change
        (the garbage collector looks owners up by uid on every pass)."""
        cached = getattr(self, "_by_storage_key", None)
        if cached is None or cached[0] != self.resources_generation:
            index: dict = {}
            for i in self.resources.values():
                index.setdefault(i.storage_key, i)
            cached = self._by_storage_key = (self.resources_generation, index)
        return cached[1]

    def _namespace_maybe_gone(self, ns: str) -> None:
        nsobj = self.buckets[("", "namespaces")].objects.get((None, ns))
        if nsobj is not None and _meta(nsobj).get("deletionTimestamp") and not self.ns_counts.get(ns):
            self.remove(self.resources[("", "v1", "namespaces")], nsobj)

    def delete(self, info: ResourceInfo, obj: JSON, policy: str | None = None,
               preconditions: JSON | None = None, dry_run: bool = False) -> JSON:
        meta = obj["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise ApiError(409, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise ApiError(409, f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                                f"ResourceVersion in object meta: {meta['resourceVersion']}")
        policy = policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise ApiError(400, f"invalid propagationPolicy {policy!r}")
        if dry_run:
            return obj
        uid = meta["uid"]
        finalizers = list(meta.get("finalizers") or [])
        is_namespace = info.storage_key == ("", "namespaces")
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")  # the collector removes it when the dependents are gone
            self.gc_owners.add(uid)
        elif policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")  # the collector removes it once the dependents are orphaned
            self.gc_owners.add(uid)
        if is_namespace and self.ns_counts.get(meta["name"]):
            if not meta.get("deletionTimestamp"):
                new = _clone(obj)
                new["metadata"]["deletionTimestamp"] = _now()
                new["status"] = {"phase": "Terminating"}
                self._mark_deleting(info, obj, new, finalizers)
            for bucket_key, bucket in list(self.buckets.items()):
                cinfo = next((i for i in self.resources.values() if i.storage_key == bucket_key), None)
                for _, child in sorted(bucket.by_ns.get(meta["name"], {}).items()):
                    if cinfo is not None and not _meta(child).get("deletionTimestamp"):
                        self.delete(cinfo, child, "Background")
            self._namespace_maybe_gone(meta["name"])
            current = self.buckets[("", "namespaces")].objects.get((None, meta["name"]))
            return current if current is not None else obj
        if meta.get("deletionTimestamp"):
            return obj  # already terminating: nothing more to do
        if finalizers:
            new = _clone(obj)
            result = self._mark_deleting(info, obj, new, finalizers)
            self.gc.wake(_meta(obj).get("uid"))
            return result
        return self.remove(info, obj)

    def _mark_deleting(self, info: ResourceInfo, old: JSON, new: JSON, finalizers: list[str]) -> JSON:
        meta = new["metadata"]
        meta["deletionTimestamp"] = meta.get("deletionTimestamp") or _now()
        meta["deletionGracePeriodSeconds"] = 0
        meta["generation"] = int(meta.get("generation", 1)) + 1
        if finalizers:
            meta["finalizers"] = finalizers
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        self._store(info, new)
        self._emit(info, "MODIFIED", new, old, rv)
        return new

    # ---- CRDs ----

    @staticmethod
    def _crd_status(crd: JSON) -> JSON:
        spec = crd.get("spec") or {}
        names = dict(spec.get("names") or {})
        names.setdefault("singular", (names.get("kind") or "").lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        now = _now()
        storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")] or \
            [v["name"] for v in (spec.get("versions") or [])[:1]]
        return {"acceptedNames": names, "storedVersions": storage, "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now}]}

    def _crd_changed(self, crd: JSON) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, plural, kind = spec.get("group", ""), names.get("plural", ""), names.get("kind", "")
        old_keys = set(self.crd_versions.get(crd["metadata"]["name"], []))
        new_keys: list[tuple[str, str, str]] = []
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            subs = version.get("subresources") or spec.get("subresources") or {}
            columns = version.get("additionalPrinterColumns") or spec.get("additionalPrinterColumns")
            info = ResourceInfo(
                group=group, version=version["name"], plural=plural, kind=kind,
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or kind.lower(), short_names=list(names.get("shortNames") or []),
                categories=list(names.get("categories") or []), status="status" in subs,
                scale=subs.get("scale") if "scale" in subs else None, columns=columns, custom=True,
                schema=((version.get("schema") or spec.get("validation") or {}).get("openAPIV3Schema")))
            self.register(info)
            new_keys.append((group, version["name"], plural))
        for key in old_keys - set(new_keys):
            self.resources.pop(key, None)
        self.resources_generation += 1
        self.crd_versions[crd["metadata"]["name"]] = new_keys

    def _crd_removed(self, crd: JSON) -> None:
        keys = self.crd_versions.pop(crd["metadata"]["name"], [])
        infos = [self.resources[k] for k in keys if k in self.resources]
        if infos:
            info = infos[0]
            bucket = self.bucket(info)
            for obj in list(bucket.objects.values()):
                self.remove(info, obj)
            for watcher in list(bucket.watchers):
                watcher.queue.put_nowait("end")
            self.buckets.pop(info.storage_key, None)
        for key in keys:
            self.resources.pop(key, None)
        self.resources_generation += 1

    # ---- HTTP dispatch ----

def _content(obj: JSON, info: ResourceInfo) -> JSON:
    """What counts for metadata.generation: everything but metadata (and status if a subresource)."""
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if info.status else set())
    return {k: v for k, v in obj.items() if k not in skip}


def _check_controller(info: ResourceInfo, obj: JSON) -> None:
    """ValidateOwnerReferences (apimachinery): at most one owner reference is the controller."""
    refs = [r for r in _meta(obj).get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")]
    if len(refs) > 1:
        names = " and ".join(f"{r.get('kind')}/{r.get('name')}" for r in refs[:2])
        raise crdschema.invalid(info.kind, info.group, _meta(obj).get("name") or "", [crdschema.Cause(
            "metadata.ownerReferences", "FieldValueInvalid",
            f'Invalid value: []v1.OwnerReference{{...}}: Only one reference can have Controller set to true. '
            f'Found "true" in references for {names}')])
