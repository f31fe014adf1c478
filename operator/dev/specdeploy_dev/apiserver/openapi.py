"""OpenAPI v2 and v3 documents for the served resources, built from real schemas.

Built-in kinds: the upstream definitions that the ``kubernetes-validate`` package ships for the
server's Kubernetes minor (``_definitions.json``, JSON-Schema flavoured: ``type: [X, "null"]``,
``$ref: #/$defs/...``, ``oneOf`` for IntOrString and Quantity) converted back to the OpenAPI
shape the real server serves (``type: X``, ``format: int-or-string``, ``#/definitions/...`` in v2,
``#/components/schemas/...`` in v3). Custom resources: each served version's
``openAPIV3Schema`` with ``metadata`` pointing at ObjectMeta, as the real server publishes them.

Endpoints (mirroring kube-apiserver):
- ``GET /openapi/v3``: the discovery document ``{"paths": {"apis/<g>/<v>": {"serverRelativeURL":
  "/openapi/v3/apis/<g>/<v>?hash=<H>"}}}``; ``H`` changes with the content (kubectl caches by URL).
- ``GET /openapi/v3/api/v1`` and ``/openapi/v3/apis/<group>/<version>``: one OpenAPI 3.0 document
  per group-version, with paths whose operations carry ``x-kubernetes-group-version-kind`` and,
  on create/update/patch, the ``fieldValidation`` query parameter: kubectl's query-parameter
  verifier reads that to decide to use server-side field validation.
- ``GET /openapi/v2``: one Swagger 2.0 document (JSON; a client that asks only for the protobuf
  form gets 406 Not Acceptable, as from a server without it).

Pure: no I/O besides reading the packaged schema file once.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from .common import JSON, SERVER_VERSION
from .protobuf import encode_openapi_v2
from .resources import ResourceInfo

SCHEMA_MINOR = f"v{SERVER_VERSION['major']}.{SERVER_VERSION['minor'].rstrip('+')}.0"
_V2_PREFIX = "#/definitions/"
_V3_PREFIX = "#/components/schemas/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
OBJECT_META = META + "ObjectMeta"
LIST_META = META + "ListMeta"
# Definitions every group-version document carries (requests and responses of every resource).
COMMON_DEFS = [OBJECT_META, LIST_META, META + "Status", META + "DeleteOptions", META + "Patch",
               META + "WatchEvent"]


class SchemaUnavailable(Exception):
    pass


@functools.lru_cache(maxsize=2)
def builtin_definitions(minor: str = SCHEMA_MINOR) -> dict[str, JSON]:
    """The upstream definitions for ``minor`` (e.g. ``v1.32.0``), converted to OpenAPI form.

    References are left as ``#/$defs/NAME``; ``render_refs`` rewrites them per document."""
    try:
        import kubernetes_validate  # the test extra; the schemas are data files of the package
    except ImportError as e:  # pragma: no cover - install problem
        raise SchemaUnavailable("the kubernetes-validate package (upstream schemas) is not installed") from e
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = root / f"{minor}-local" / "_definitions.json"
    if not path.exists():
        raise SchemaUnavailable(f"kubernetes-validate has no schemas for {minor} under {root}")
    defs = json.loads(path.read_text())["$defs"]
    return {name: _to_openapi(schema, top=True) for name, schema in defs.items()}


def _to_openapi(schema: Any, top: bool = False) -> Any:
    """JSON-Schema flavoured upstream definition -> the OpenAPI form kube-apiserver serves."""
    if isinstance(schema, list):
        return [_to_openapi(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    one_of = schema.get("oneOf")
    if isinstance(one_of, list) and {_base_type(s) for s in one_of} in ({"string", "integer"}, {"string", "number"}):
        # IntOrString and Quantity are strings with a format in the upstream OpenAPI.
        fmt = "int-or-string" if {_base_type(s) for s in one_of} == {"string", "integer"} else "quantity"
        out = {k: v for k, v in schema.items() if k != "oneOf"}
        out.update({"type": "string", "format": fmt})
        if fmt == "int-or-string":
            out["x-kubernetes-int-or-string"] = True
        return out
    out: JSON = {}
    for key, value in schema.items():
        if key == "type":
            base = _base_type(schema)
            if base:
                out["type"] = base
        elif key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _to_openapi(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _to_openapi(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_to_openapi(v) for v in value]
        else:
            out[key] = copy.deepcopy(value)
    props = out.get("properties")
    if top and isinstance(props, dict):
        # kubernetes-validate pins apiVersion/kind with an enum; the real documents do not.
        for k in ("apiVersion", "kind"):
            if isinstance(props.get(k), dict):
                props[k] = {kk: vv for kk, vv in props[k].items() if kk != "enum"}
    return out


def _base_type(schema: Any) -> str | None:
    t = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(t, list):
        t = [x for x in t if x != "null"]
        return t[0] if len(t) == 1 else None
    return t


def render_refs(schema: Any, prefix: str) -> Any:
    """Rewrite ``#/$defs/NAME`` references to ``prefix + NAME`` (a copy)."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
                out[k] = prefix + v[len("#/$defs/"):]
            else:
                out[k] = render_refs(v, prefix)
        return out
    if isinstance(schema, list):
        return [render_refs(v, prefix) for v in schema]
    return schema


def _refs(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
                yield v[len("#/$defs/"):]
            else:
                yield from _refs(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from _refs(v)


def closure(defs: dict[str, JSON], roots: Iterable[str]) -> list[str]:
    """The named definitions reachable from ``roots`` (sorted)."""
    seen: set[str] = set()
    todo = [r for r in roots if r in defs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(r for r in _refs(defs[name]) if r not in seen and r in defs)
    return sorted(seen)


@functools.lru_cache(maxsize=4)
def _gvk_index(minor: str = SCHEMA_MINOR) -> dict[tuple[str, str, str], str]:
    index: dict[tuple[str, str, str], str] = {}
    for name, schema in builtin_definitions(minor).items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            index.setdefault((gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")), name)
    return index


def builtin_definition_name(group: str, version: str, kind: str) -> str | None:
    return _gvk_index().get((group, version, kind))


# ------------------------------------------------------------------ custom resources

def crd_definition_name(group: str, version: str, kind: str) -> str:
    """``specdeploy.io`` ``v1alpha1`` ``SpeculativeDeployment`` -> ``io.specdeploy.v1alpha1.SpeculativeDeployment``."""
    return ".".join(reversed(group.split("."))) + f".{version}.{kind}"


def crd_definitions(info: ResourceInfo) -> dict[str, JSON]:
    """The object and list definitions of one custom resource version (``#/$defs/`` references)."""
    gvk = [{"group": info.group, "version": info.version, "kind": info.kind}]
    schema = copy.deepcopy(info.schema) if isinstance(info.schema, dict) else {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props = schema.setdefault("properties", {}) if schema.get("type", "object") == "object" else {}
    schema.setdefault("type", "object")
    props["apiVersion"] = {"type": "string", "description": _API_VERSION_DOC}
    props["kind"] = {"type": "string", "description": _KIND_DOC}
    meta_doc = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
    props["metadata"] = {"allOf": [{"$ref": "#/$defs/" + OBJECT_META}], "description": meta_doc}
    schema["x-kubernetes-group-version-kind"] = gvk
    name = crd_definition_name(info.group, info.version, info.kind)
    lst = {"type": "object", "required": ["items"],
           "description": f"{info.list_kind} is a list of {info.kind}",
           "properties": {"apiVersion": {"type": "string", "description": _API_VERSION_DOC},
                          "items": {"type": "array", "description": f"List of {info.plural}. More info: "
                                    "https://git.k8s.io/community/contributors/devel/api-conventions.md",
                                    "items": {"$ref": "#/$defs/" + name}},
                          "kind": {"type": "string", "description": _KIND_DOC},
                          "metadata": {"allOf": [{"$ref": "#/$defs/" + LIST_META}],
                                       "description": "Standard list metadata."}},
           "x-kubernetes-group-version-kind": [{"group": info.group, "version": info.version, "kind": info.list_kind}]}
    return {name: schema, crd_definition_name(info.group, info.version, info.list_kind): lst}


_API_VERSION_DOC = ("APIVersion defines the versioned schema of this representation of an object. Servers should "
                    "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
                    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources")
_KIND_DOC = ("Kind is a string value representing the REST resource this object represents. Servers may infer this "
             "from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
             "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")


# ------------------------------------------------------------------ documents

def _definitions_for(infos: list[ResourceInfo]) -> tuple[dict[str, JSON], dict[tuple[str, str, str], str]]:
    """Definitions (``#/$defs/`` refs) for ``infos`` plus the common meta types; and GVK -> name."""
    builtin = builtin_definitions()
    extra: dict[str, JSON] = {}
    names: dict[tuple[str, str, str], str] = {}
    roots = list(COMMON_DEFS)
    for info in infos:
        if info.custom:
            defs = crd_definitions(info)
            extra.update(defs)
            names[(info.group, info.version, info.kind)] = crd_definition_name(info.group, info.version, info.kind)
            names[(info.group, info.version, info.list_kind)] = crd_definition_name(info.group, info.version, info.list_kind)
            roots.extend(defs)
        else:
            for kind in (info.kind, info.list_kind):
                name = builtin_definition_name(info.group, info.version, kind)
                if name:
                    names[(info.group, info.version, kind)] = name
                    roots.append(name)
    pool = {**builtin, **extra}
    return {n: pool[n] for n in closure(pool, roots)}, names


def _param(name: str, where: str = "query", desc: str = "", required: bool = False, v3: bool = True) -> JSON:
    p: JSON = {"name": name, "in": where, "description": desc or name}
    if required:
        p["required"] = True
    if v3:
        p["schema"] = {"type": "string", "uniqueItems": True}
    else:
        p["type"] = "string"
        p["uniqueItems"] = True
    return p


_FIELD_VALIDATION_DOC = ("fieldValidation instructs the server on how to handle objects in the request "
                         "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - "
                         "Warn - Strict")


def _operations(info: ResourceInfo, names: dict[tuple[str, str, str], str], prefix: str, v3: bool) -> dict[str, JSON]:
    """Paths and operations of one resource, with the extensions and parameters clients read."""
    base = f"/api/{info.version}" if not info.group else f"/apis/{info.group}/{info.version}"
    ns = "/namespaces/{namespace}" if info.namespaced else ""
    obj = names.get((info.group, info.version, info.kind))
    lst = names.get((info.group, info.version, info.list_kind))
    gvk = {"group": info.group, "version": info.version, "kind": info.kind}
    kind = info.kind
    # Custom resources take no strategic merge patch (the API server answers 415); kubectl apply reads
    # this list (apply/patcher.go gvkSupportsPatchOpenAPIV3) to choose between strategic and JSON merge.
    patch_types = ["application/json-patch+json", "application/merge-patch+json",
                   *([] if info.custom else ["application/strategic-merge-patch+json"]), "application/apply-patch+yaml"]

    def response(ref: str | None) -> JSON:
        if ref is None:
            return {"description": "OK"}
        if v3:
            return {"description": "OK", "content": {"application/json": {"schema": {"$ref": prefix + ref}}}}
        return {"description": "OK", "schema": {"$ref": prefix + ref}}

    def body(ref: str | None, patch: bool = False) -> JSON | None:
        if v3:
            types = patch_types if patch else ["*/*"]
            schema = {"$ref": prefix + (META + "Patch" if patch else ref)} if (patch or ref) else {"type": "object"}
            return {"requestBody": {"required": True, "content": {t: {"schema": schema} for t in types}}}
        return None

    def op(action: str, verb: str, desc: str, ref: str | None, writes: bool = False, patch: bool = False,
           list_params: bool = False) -> JSON:
        params = [_param("pretty", desc="If 'true', then the output is pretty printed.", v3=v3)]
        if writes:
            params += [_param("dryRun", desc="When present, indicates that modifications should not be persisted.", v3=v3),
                       _param("fieldManager", desc="fieldManager is a name associated with the actor or entity "
                                                   "that is making these changes.", v3=v3),
                       _param("fieldValidation", desc=_FIELD_VALIDATION_DOC, v3=v3)]
            if patch:
                params.append(_param("force", desc="Force is going to \"force\" Apply requests.", v3=v3))
        if list_params:
            params += [_param(n, v3=v3) for n in ("labelSelector", "fieldSelector", "resourceVersion",
                                                  "timeoutSeconds", "watch", "limit", "continue")]
        o: JSON = {"description": desc, "operationId": f"{verb}{kind}", "tags": [f"{info.group or 'core'}_{info.version}"],
                   "parameters": params, "responses": {"200": response(ref), "401": {"description": "Unauthorized"}},
                   "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
        b = body(ref, patch) if writes else None
        if b:
            o.update(b)
        elif writes and not v3:
            o["parameters"].append({"name": "body", "in": "body", "required": True,
                                    "schema": {"$ref": prefix + (META + "Patch" if patch else ref)} if (patch or ref) else {"type": "object"}})
        if not v3:
            o["consumes"] = patch_types if patch else ["*/*"]
            o["produces"] = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
        return o

    path_params = [{"name": "namespace", "in": "path", "required": True, "description": "object name and auth scope",
                    **({"schema": {"type": "string", "uniqueItems": True}} if v3 else {"type": "string", "uniqueItems": True})}] if ns else []
    name_param = {"name": "name", "in": "path", "required": True, "description": f"name of the {kind}",
                  **({"schema": {"type": "string", "uniqueItems": True}} if v3 else {"type": "string", "uniqueItems": True})}
    verbs = set(info.verbs)
    coll: JSON = {"parameters": list(path_params)}
    if "list" in verbs:
        coll["get"] = op("list", f"list{'Namespaced' if ns else ''}", f"list or watch objects of kind {kind}", lst,
                         list_params=True)
    if "create" in verbs:
        coll["post"] = op("post", f"create{'Namespaced' if ns else ''}", f"create a {kind}", obj, writes=True)
    if "deletecollection" in verbs:
        coll["delete"] = op("deletecollection", f"deleteCollection{'Namespaced' if ns else ''}",
                            f"delete collection of {kind}", META + "Status", list_params=True)
    item: JSON = {"parameters": list(path_params) + [name_param]}
    if "get" in verbs:
        item["get"] = op("get", f"read{'Namespaced' if ns else ''}", f"read the specified {kind}", obj)
    if "update" in verbs:
        item["put"] = op("put", f"replace{'Namespaced' if ns else ''}", f"replace the specified {kind}", obj, writes=True)
    if "patch" in verbs:
        item["patch"] = op("patch", f"patch{'Namespaced' if ns else ''}", f"partially update the specified {kind}",
                           obj, writes=True, patch=True)
    if "delete" in verbs:
        item["delete"] = op("delete", f"delete{'Namespaced' if ns else ''}", f"delete a {kind}", META + "Status")
    paths = {f"{base}{ns}/{info.plural}": coll, f"{base}{ns}/{info.plural}/{{name}}": item}
    if info.status:
        sub: JSON = {"parameters": list(path_params) + [name_param],
                     "get": op("get", f"read{'Namespaced' if ns else ''}Status", f"read status of the specified {kind}", obj),
                     "put": op("put", f"replace{'Namespaced' if ns else ''}Status", f"replace status of the specified {kind}",
                               obj, writes=True),
                     "patch": op("patch", f"patch{'Namespaced' if ns else ''}Status",
                                 f"partially update status of the specified {kind}", obj, writes=True, patch=True)}
        paths[f"{base}{ns}/{info.plural}/{{name}}/status"] = sub
    return paths


def group_version_key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def v3_document(infos: list[ResourceInfo], group: str, version: str) -> JSON:
    """The OpenAPI 3.0 document of one group-version."""
    defs, names = _definitions_for(infos)
    paths: JSON = {}
    for info in sorted(infos, key=lambda i: i.plural):
        paths.update(_operations(info, names, _V3_PREFIX, v3=True))
    title = "Kubernetes"
    return {"openapi": "3.0.0", "info": {"title": title, "version": SERVER_VERSION["gitVersion"]},
            "paths": paths,
            "components": {"schemas": {n: render_refs(s, _V3_PREFIX) for n, s in sorted(defs.items())},
                           "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication",
                                                               "name": "authorization", "in": "header"}}}}


def v2_document(infos: list[ResourceInfo]) -> JSON:
    """The Swagger 2.0 document of every served resource."""
    defs, names = _definitions_for(infos)
    paths: JSON = {}
    for info in sorted(infos, key=lambda i: (i.group, i.version, i.plural)):
        paths.update(_operations(info, names, _V2_PREFIX, v3=False))
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "definitions": {n: render_refs(s, _V2_PREFIX) for n, s in sorted(defs.items())},
            "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header",
                                                    "description": "Bearer Token authentication"}},
            "security": [{"BearerToken": []}]}


def content_hash(doc: JSON) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:128].upper()


class OpenApiCache:
    """Documents built on demand and cached until the set of resources (or a CRD schema) changes."""

    def __init__(self) -> None:
        self._generation = -1
        self._v3: dict[str, tuple[JSON, bytes, str]] = {}
        self._v2: tuple[bytes, str] | None = None
        self._v2_pb: bytes | None = None

    def _reset(self, generation: int) -> None:
        if generation != self._generation:
            self._generation = generation
            self._v3.clear()
            self._v2 = None
            self._v2_pb = None

    @staticmethod
    def _by_gv(infos: Iterable[ResourceInfo]) -> dict[str, list[ResourceInfo]]:
        out: dict[str, list[ResourceInfo]] = {}
        for info in infos:
            out.setdefault(group_version_key(info.group, info.version), []).append(info)
        return out

    def v3_gv(self, generation: int, infos: Iterable[ResourceInfo], key: str) -> tuple[bytes, str] | None:
        self._reset(generation)
        if key not in self._v3:
            gvs = self._by_gv(infos)
            if key not in gvs:
                return None
            first = gvs[key][0]
            doc = v3_document(gvs[key], first.group, first.version)
            data = json.dumps(doc, separators=(",", ":")).encode()
            self._v3[key] = (doc, data, content_hash(doc))
        _, data, digest = self._v3[key]
        return data, digest

    def v3_root(self, generation: int, infos: Iterable[ResourceInfo]) -> JSON:
        infos = list(infos)
        paths = {}
        for key in sorted(self._by_gv(infos)):
            got = self.v3_gv(generation, infos, key)
            if got is not None:
                paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={got[1]}"}
        return {"paths": paths}

    def v2(self, generation: int, infos: Iterable[ResourceInfo], protobuf: bool = False) -> tuple[bytes, str]:
        """(body, etag) of the v2 document as JSON, or as gnostic protobuf."""
        self._reset(generation)
        if self._v2 is None:
            doc = v2_document(list(infos))
            self._v2 = (json.dumps(doc, separators=(",", ":")).encode(), content_hash(doc))
            self._v2_pb = encode_openapi_v2(doc)
        return (self._v2_pb or b"", self._v2[1]) if protobuf else self._v2
