"""The HTTP side: routing, discovery, verbs, content negotiation, server-side apply, scale, Tables."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import Callable
from typing import Any


import aiohttp.web
import yaml

from .. import podlogs
from .common import ApiError, JSON, SERVER_VERSION, _clone, _dumps, _human_age, _meta
from .protobuf import OPENAPI_V2_PROTOBUF, PROTOBUF, decode_object
from .admission import AdmitContext
from .limits import check_body
from .patches import json_patch, merge_patch, strategic_merge_patch
from .resources import _BUILTIN_COLUMNS, ResourceInfo
from .selectors import _set_path, jsonpath, parse_field_selector, parse_label_selector
from .watch import _wants_table


def _json_response(body: Any, status: int = 200, warnings: list[str] | None = None) -> aiohttp.web.Response:
    return _bytes_response(_dumps(body), status, warnings)


def _bytes_response(data: bytes, status: int = 200, warnings: list[str] | None = None) -> aiohttp.web.Response:
    """A JSON answer already serialized (``Store.encode``)."""
    headers = None
    if warnings:  # RFC 7234 warn-code 299 with the agent "-", as the real server sends them
        headers = [("Warning", "299 - " + json.dumps(w)) for w in dict.fromkeys(warnings)]
    response = aiohttp.web.Response(body=data, status=status, content_type="application/json")
    for key, value in headers or []:
        response.headers.add(key, value)
    return response


def _parse_path(path: str) -> JSON | None:
    """Split a Kubernetes API path; None for non-resource paths."""
    parts = [p for p in path.strip("/").split("/") if p != ""]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch = False
    if rest and rest[0] == "watch":
        watch, rest = True, rest[1:]
    result: JSON = {"group": group, "version": version, "watch": watch, "namespace": None,
                    "plural": None, "name": None, "sub": None}
    if not rest:
        return result
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        result["namespace"], rest = rest[1], rest[2:]
    result["plural"] = rest[0]
    if len(rest) > 1:
        result["name"] = urllib.parse.unquote(rest[1])
    if len(rest) > 2:
        result["sub"] = "/".join(rest[2:])
    return result


class RestMixin:
    """Request handling (mixed into the server state)."""

    async def dispatch(self, raw: aiohttp.web.BaseRequest, path: str, body: bytes) -> aiohttp.web.StreamResponse:
        method = raw.method
        if path.startswith("/_specdeploy/"):
            return self.control(method, path, body)
        if method == "GET":
            if path == "/version":
                return _json_response(SERVER_VERSION)
            if path in ("/healthz", "/livez", "/readyz"):
                return aiohttp.web.Response(text="ok")
            if path == "/":
                return _json_response({"paths": sorted(self.discovery_paths())})
            if path == "/api":
                host = raw.host or "127.0.0.1"
                return _json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
            if path == "/apis":
                return _json_response(self.api_group_list())
            if path == "/openapi" or path.startswith("/openapi/"):
                return self.openapi(raw, path)
            parts = path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "apis":
                group = self.api_group(parts[1])
                if group is None:
                    raise ApiError(404, "the server could not find the requested resource")
                return _json_response(group)
        parsed = _parse_path(path)
        if parsed is None:
            raise ApiError(404, "the server could not find the requested resource")
        if parsed["plural"] is None:
            if method != "GET":
                raise ApiError(405, f"{method} is not allowed on {path}")
            return _json_response(self.resource_list(parsed["group"], parsed["version"]))
        info = self.resources.get((parsed["group"], parsed["version"], parsed["plural"]))
        if info is None:
            raise ApiError(404, "the server could not find the requested resource")
        return await self.resource_request(raw, info, parsed, body)

    def openapi(self, raw: aiohttp.web.BaseRequest, path: str) -> aiohttp.web.Response:
        """``/openapi/v2``, ``/openapi/v3`` and ``/openapi/v3/<gv>`` (see openapi.py)."""
        infos = list(self.resources.values())
        gen = self.resources_generation
        if path == "/openapi/v3":
            return _json_response(self.openapi_cache.v3_root(gen, infos))
        if path.startswith("/openapi/v3/"):
            got = self.openapi_cache.v3_gv(gen, infos, path[len("/openapi/v3/"):])
            if got is None:
                raise ApiError(404, "the server could not find the requested resource")
            data, digest = got
            headers = {"Etag": f'"{digest}"'}
            if raw.query.get("hash") == digest:  # the real server marks hashed URLs immutable
                headers["Cache-Control"] = "public, immutable"
            else:
                headers["Cache-Control"] = "no-cache, no-store, must-revalidate"
            return aiohttp.web.Response(body=data, status=200, content_type="application/json", headers=headers)
        if path == "/openapi/v2":
            accept = [t.split(";")[0].strip() for t in (raw.headers.get("Accept") or "*/*").split(",")]
            for media in accept:
                if media in (OPENAPI_V2_PROTOBUF, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"):
                    data, digest = self.openapi_cache.v2(gen, infos, protobuf=True)
                    # Answered with the parseable spelling (Go's mime parser refuses the '@' form).
                    return aiohttp.web.Response(body=data, status=200, headers={
                        "Content-Type": "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                        "Etag": f'"{digest}"'})
                if media in ("application/json", "*/*", "application/*"):
                    data, digest = self.openapi_cache.v2(gen, infos)
                    return aiohttp.web.Response(body=data, status=200, content_type="application/json",
                                                headers={"Etag": f'"{digest}"'})
            raise ApiError(406, f"none of the accepted media types is served: {', '.join(accept)}",
                           reason="NotAcceptable")
        raise ApiError(404, "the server could not find the requested resource")

    def control(self, method: str, path: str, body: bytes) -> aiohttp.web.Response:
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            raise ApiError(400, "the body is not JSON")
        if path == "/_specdeploy/faults":
            if method == "GET":
                return _json_response({"pending": self.faults.pending(), "fired": self.faults.fired})
            if method == "DELETE":
                self.faults.clear(data.get("agent") if isinstance(data, dict) else None)
                return _json_response({"pending": self.faults.pending()})
            if method == "POST":
                specs = data if isinstance(data, list) else [data]
                try:
                    added = [vars(self.faults.add(**spec)).copy() for spec in specs]
                except (TypeError, ValueError) as e:
                    raise ApiError(400, f"bad fault: {e}")
                return _json_response({"added": added}, 201)
        if path in ("/_specdeploy/watches/drop", "/_specdeploy/watches/expire") and method == "POST":
            fn = self.faults.drop_watches if path.endswith("drop") else self.faults.expire_watches
            n = fn(data.get("resource", "*"), data.get("group"))
            return _json_response({"watches": n})
        if path == "/_specdeploy/writes" and method == "GET":
            return _json_response({"writes": list(self.writes)})
        if path == "/_specdeploy/stats" and method == "GET":
            return _json_response(self.emulator.stats())
        raise ApiError(404, f"unknown control endpoint {method} {path}")

    # ---- discovery ----

    def discovery_paths(self) -> set[str]:
        paths = {"/api", "/api/v1", "/apis", "/version", "/healthz", "/livez", "/readyz"}
        for g, v, _ in self.resources:
            if g:
                paths |= {f"/apis/{g}", f"/apis/{g}/{v}"}
        return paths

    def _group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for g, v, _ in self.resources:
            if g and v not in groups.setdefault(g, []):
                groups[g].append(v)
        for versions in groups.values():
            versions.sort(key=_version_priority)
        return groups

    def api_group(self, group: str) -> JSON | None:
        versions = self._group_versions().get(group)
        if not versions:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]}}

    def api_group_list(self) -> JSON:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self.api_group(g) for g in sorted(self._group_versions())]}

    def resource_list(self, group: str, version: str) -> JSON:
        infos = [i for (g, v, _), i in sorted(self.resources.items()) if g == group and v == version]
        if not infos:
            raise ApiError(404, "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [entry for info in infos for entry in info.discovery()]}

    # ---- resource requests ----

    async def resource_request(self, raw: aiohttp.web.BaseRequest, info: ResourceInfo, parsed: JSON,
                               body: bytes) -> aiohttp.web.StreamResponse:
        method, q = raw.method, raw.query
        ns, name, sub = parsed["namespace"], parsed["name"], parsed["sub"]
        if info.namespaced is False and ns is not None:
            raise ApiError(404, "the server could not find the requested resource")
        if sub == "log" and info.plural == "pods" and method == "GET" and name:  # proxied to the node's kubelet
            pod, nodes = self.get(info, ns, name), self.find_resource("nodes")
            node = self.bucket(nodes).objects.get((None, (pod.get("spec") or {}).get("nodeName"))) if nodes else None
            return await podlogs.proxy(raw, pod, node)
        if sub is not None and not ((sub == "status" and info.status) or (sub == "scale" and info.scale is not None)
                                    or (sub == "finalize" and info.plural == "namespaces")):
            raise ApiError(404, "the server could not find the requested resource")
        if info.namespaced and name is not None and ns is None and method != "POST":
            raise ApiError(404, "the server could not find the requested resource")
        watch = parsed["watch"] or q.get("watch") in ("true", "1")
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
        elif method == "POST":
            verb = "create"
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise ApiError(405, f"method {method} is not allowed")
        field_name = None
        if name is None:
            fs = q.get("fieldSelector") or ""
            m = re.search(r"(?:^|,)metadata\.name==?([^,]*)", fs)
            field_name = m.group(1) if m else None
        fault = self.faults.take(verb, info, sub, ns, name or field_name, raw.headers.get("User-Agent") or "")
        if fault is not None and not (verb == "watch" and (fault.action == "drop" or fault.status == 410)):
            if fault.action == "drop":
                if raw.transport is not None:
                    raw.transport.abort()
                raise asyncio.CancelledError()
            raise ApiError(fault.status or 500, fault.message or f"injected fault #{fault.id} ({fault.status})",
                           details={"name": name or "", "kind": info.plural, "retryAfterSeconds": 1}
                           if fault.status in (429, 503) else {"name": name or "", "kind": info.plural})
        dry_run = "All" in q.getall("dryRun", [])
        if verb == "watch":
            return await self.watch(raw, info, ns, name, fault)
        if verb == "list":
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"))
            items = self.select(info, ns, labels, fields)
            if _wants_table(raw):
                return _json_response(self.table(info, items, q.get("includeObject")))
            return _bytes_response(self._list_bytes(info, items))
        if verb == "get":
            obj = self.get(info, ns, name)
            if sub == "scale":
                return _json_response(self.scale_of(info, obj))
            if _wants_table(raw):
                return _json_response(self.table(info, [obj], q.get("includeObject")))
            return _bytes_response(self.encode(info, obj))
        check_body(len(body))
        data = _parse_body(raw, body) if body else None
        if verb == "create":
            if name is not None:
                raise ApiError(405, "POST to a named object is not allowed")
            if not isinstance(data, dict):
                raise ApiError(400, "the request body is not a JSON object")
            ctx = self._admit_context(raw, "CREATE", dry_run, sub)
            obj = self.prepare_create(info, ns, data, admit=ctx)
            obj = await self.webhooks(ctx, info, obj, None)
            if not dry_run:
                obj = self.commit_create(info, obj)
            return _bytes_response(self.encode(info, obj), 201, ctx.warnings)
        if verb == "deletecollection":
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"))
            opts = data if isinstance(data, dict) else {}
            items = self.select(info, ns, labels, fields)
            deleted = [self.delete(info, o, opts.get("propagationPolicy") or q.get("propagationPolicy"),
                                   dry_run=dry_run) for o in items]
            return _json_response({"kind": info.list_kind, "apiVersion": info.api_version,
                                   "metadata": {"resourceVersion": str(self.rv)},
                                   "items": [self._serve(info, o) for o in deleted]})
        if verb == "delete":
            obj = self.get(info, ns, name)
            opts = data if isinstance(data, dict) else {}
            if "All" in (opts.get("dryRun") or []):
                dry_run = True
            ctx = self._admit_context(raw, "DELETE", dry_run, sub)
            await self.admission.run(ctx, info, None, obj, mutating=True)
            await self.admission.run(ctx, info, None, obj, mutating=False)
            obj = self.get(info, ns, name)
            result = self.delete(info, obj, opts.get("propagationPolicy") or q.get("propagationPolicy"),
                                 opts.get("preconditions"), dry_run=dry_run)
            if info.custom or _meta(result).get("deletionTimestamp") and self._exists(info, result):
                return _json_response(self._serve(info, result))
            return _json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                   "details": {"name": name, "group": info.group, "kind": info.plural,
                                               "uid": _meta(obj).get("uid")}})
        content_type = (raw.headers.get("Content-Type") or "").split(";")[0].strip()
        if verb == "update":
            if not isinstance(data, dict):
                raise ApiError(400, "the request body is not a JSON object")
            if sub == "scale":
                return _json_response(self.set_scale(info, self.get(info, ns, name), data, dry_run,
                                                     self._admit_context(raw, "UPDATE", dry_run, sub)))
            ctx = self._admit_context(raw, "UPDATE", dry_run, sub)
            result = await self.write(ctx, info, ns, name, lambda old: self.prepare_update(
                info, old, _clone(data), sub, admit=ctx), retry=False)
            return _bytes_response(self.encode(info, result), 200, ctx.warnings)
        # PATCH
        if content_type == "application/apply-patch+yaml":
            return await self.apply(raw, info, ns, name, sub, body, dry_run)
        if content_type == "application/strategic-merge-patch+json" and info.custom:
            raise ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
        if content_type not in ("application/json-patch+json", "application/merge-patch+json",
                                "application/strategic-merge-patch+json"):
            raise ApiError(415, f"unsupported patch content type {content_type!r}")

        def patch(base: JSON) -> JSON:
            if content_type == "application/json-patch+json":
                patched = json_patch(base, data)
            elif content_type == "application/merge-patch+json":
                patched = merge_patch(_clone(base), data)
            else:
                patched = strategic_merge_patch(_clone(base), data)
            if not isinstance(patched, dict):
                raise ApiError(422, "the patched object is not a JSON object")
            return patched

        if sub == "scale":
            old = self.get(info, ns, name)
            return _json_response(self.set_scale(info, old, patch(self.scale_of(info, old)), dry_run,
                                                 self._admit_context(raw, "UPDATE", dry_run, sub)))
        ctx = self._admit_context(raw, "UPDATE", dry_run, sub)
        result = await self.write(ctx, info, ns, name, lambda old: self.prepare_update(
            info, old, patch(old), sub, admit=ctx))
        return _bytes_response(self.encode(info, result), 200, ctx.warnings)

    @staticmethod
    def _admit_context(raw: aiohttp.web.BaseRequest, op: str, dry_run: bool, sub: str | None) -> AdmitContext:
        validation = raw.query.get("fieldValidation") or "Warn"  # the real server's default
        if validation not in ("Ignore", "Warn", "Strict"):
            raise ApiError(400, f"fieldValidation must be one of Ignore, Warn or Strict, not {validation!r}")
        manager = raw.query.get("fieldManager") or (raw.headers.get("User-Agent") or "").split("/")[0] or "unknown"
        if len(manager) > 128:
            raise ApiError(422, "fieldManager: Invalid value: must be no more than 128 characters")
        return AdmitContext(operation=op, validation=validation, dry_run=dry_run, sub=sub, manager=manager)

    async def webhooks(self, ctx: AdmitContext, info: ResourceInfo, obj: JSON, old: JSON | None) -> JSON:
        """Mutating webhooks, schema admission again if they changed the object, validating webhooks."""
        mutated = await self.admission.run(ctx, info, obj, old, mutating=True)
        if mutated is not None and mutated != obj:
            self.admit_schema(info, mutated, ctx, old)
            obj = mutated
        await self.admission.run(ctx, info, obj, old, mutating=False)
        return obj

    async def write(self, ctx: AdmitContext, info: ResourceInfo, ns: str | None, name: str,
                    compute: Callable[[JSON], JSON], retry: bool = True) -> JSON:
        """An update through admission: compute from the stored object, call the webhooks, store;
        recomputed (a patch) or refused with 409 (a PUT) when the object changed meanwhile."""
        for _ in range(5):
            old = self.get(info, ns, name)
            result = compute(old)
            if result is old:
                return old
            result = await self.webhooks(ctx, info, result, old)
            if ctx.dry_run:
                return result
            current = self.get(info, ns, name)
            if current is old:
                return self.commit_update(info, old, result)
            if not retry:
                raise ApiError(409, f'Operation cannot be fulfilled on {info.plural}{"." + info.group if info.group else ""} '
                                    f'"{name}": the object has been modified; please apply your changes to the latest '
                                    "version and try again", reason="Conflict")
        raise ApiError(409, f"the object {name} kept changing during admission", reason="Conflict")

    def _exists(self, info: ResourceInfo, obj: JSON) -> bool:
        meta = _meta(obj)
        return (meta.get("namespace") if info.namespaced else None, meta.get("name")) in self.bucket(info).objects

    def _list_bytes(self, info: ResourceInfo, items: list[JSON]) -> bytes:
        """A list answer, its items' serializations joined (what ``_dumps`` of the whole list gives)."""
        head = _dumps({"kind": info.list_kind, "apiVersion": info.api_version,
                       "metadata": {"resourceVersion": str(self.rv)}, "items": []})
        return head[:-2] + b",".join([self.encode(info, o) for o in items]) + b"]}"

    @staticmethod
    def _serve(info: ResourceInfo, obj: JSON) -> JSON:
        if obj.get("apiVersion") != info.api_version:
            obj = dict(obj, apiVersion=info.api_version)
        return obj

    async def apply(self, raw: aiohttp.web.BaseRequest, info: ResourceInfo, ns: str | None, name: str,
                    sub: str | None, body: bytes, dry_run: bool) -> aiohttp.web.Response:
        manager = raw.query.get("fieldManager")
        if not manager:
            raise ApiError(400, "PATCH with apply-patch+yaml requires the fieldManager parameter")
        try:
            applied = json.loads(body)
        except ValueError:
            try:
                applied = yaml.safe_load(body)
            except yaml.YAMLError as e:
                raise ApiError(400, f"the apply body is not YAML/JSON: {e}")
        if not isinstance(applied, dict) or not applied.get("apiVersion") or not applied.get("kind"):
            raise ApiError(400, "an applied configuration needs apiVersion and kind")
        meta = applied.setdefault("metadata", {})
        if meta.get("managedFields"):
            raise ApiError(400, "metadata.managedFields must be nil")
        if meta.get("name") not in (None, name):
            raise ApiError(400, "the name in the body does not match the name on the URL")
        meta["name"] = name
        if info.namespaced and ns:
            meta.setdefault("namespace", ns)
        bucket = self.bucket(info)
        old = bucket.objects.get((ns if info.namespaced else None, name))
        if old is None:
            if sub is not None:
                raise ApiError(404, f'{info.plural} "{name}" not found')
            ctx = self._admit_context(raw, "CREATE", dry_run, sub)
            obj = self.prepare_create(info, ns, _clone(applied), field_manager=manager, applied=applied, admit=ctx)
            obj = await self.webhooks(ctx, info, obj, None)
            if not dry_run:
                obj = self.commit_create(info, obj)
            return _bytes_response(self.encode(info, obj), 201, ctx.warnings)
        force = (raw.query.get("force") or "").lower() == "true"
        ctx = self._admit_context(raw, "UPDATE", dry_run, sub)
        result = await self.write(ctx, info, ns, name, lambda current: self.prepare_apply(
            info, current, applied, manager, sub, force, ctx), retry=False)
        return _bytes_response(self.encode(info, result), 200, ctx.warnings)

    def scale_of(self, info: ResourceInfo, obj: JSON) -> JSON:
        paths = info.scale or {}
        status: JSON = {"replicas": jsonpath(obj, paths.get("statusReplicasPath", ".status.replicas")) or 0}
        selector = jsonpath(obj, paths.get("labelSelectorPath", "")) if paths.get("labelSelectorPath") else None
        if isinstance(selector, dict):
            selector = ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
        if selector:
            status["selector"] = selector
        meta = _meta(obj)
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": jsonpath(obj, paths.get("specReplicasPath", ".spec.replicas")) or 0},
                "status": status}

    def set_scale(self, info: ResourceInfo, old: JSON, scale: JSON, dry_run: bool, ctx: AdmitContext | None = None) -> JSON:
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, "Scale.spec.replicas must be a non-negative integer")
        rv = _meta(scale).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified; please apply your changes to the latest version")
        new = _clone(old)
        _set_path(new, (info.scale or {}).get("specReplicasPath", ".spec.replicas"), replicas)
        result = self.update(info, old, new, None, dry_run=dry_run, check_rv=False, admit=ctx)
        return self.scale_of(info, result)

    # ---- tables for kubectl get ----

    def table(self, info: ResourceInfo, objs: list[JSON], include: str | None) -> JSON:
        name_col = {"name": "Name", "type": "string", "format": "name", "priority": 0,
                    "description": "Name must be unique within a namespace."}
        columns: list[JSON] = [name_col]
        getters: list[Callable[[JSON], Any]] = [lambda o: _meta(o).get("name", "")]
        if info.custom and info.columns:
            for col in info.columns:
                columns.append({"name": col.get("name", ""), "type": col.get("type", "string"),
                                "format": col.get("format", ""), "priority": col.get("priority", 0),
                                "description": col.get("description", "")})
                getters.append(lambda o, c=col: _cell(jsonpath(o, c.get("jsonPath", "")), c.get("type", "string")))
            age = False
        else:
            for cname, ctype, fn in _BUILTIN_COLUMNS.get(info.storage_key, []):
                columns.append({"name": cname, "type": ctype, "format": "", "priority": 0, "description": cname})
                getters.append(fn)
            age = True
        if age:
            columns.append({"name": "Age", "type": "string", "format": "", "priority": 0,
                            "description": "CreationTimestamp is a timestamp of when the object was created."})
            getters.append(lambda o: _human_age(_meta(o).get("creationTimestamp")))
        rows = []
        for obj in objs:
            row: JSON = {"cells": [g(obj) for g in getters]}
            if include == "Object":
                row["object"] = self._serve(info, obj)
            elif include != "None":
                row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                 "metadata": _meta(obj)}
            rows.append(row)
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": str(self.rv)}, "columnDefinitions": columns, "rows": rows}

def _cell(value: Any, ctype: str) -> Any:
    if value is None:
        return None
    if ctype == "date":
        return _human_age(str(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return value


def _version_priority(version: str) -> tuple[int, int, int]:
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version)
    if not m:
        return (3, 0, 0)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor)


def _parse_body(raw: aiohttp.web.BaseRequest, body: bytes) -> Any:
    content_type = (raw.headers.get("Content-Type") or "").split(";")[0].strip()
    if content_type == "application/apply-patch+yaml":
        return None  # parsed by apply()
    if content_type == PROTOBUF:
        return decode_object(body)
    try:
        return json.loads(body)
    except ValueError:
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError:
            raise ApiError(400, "the request body is neither JSON nor YAML")


