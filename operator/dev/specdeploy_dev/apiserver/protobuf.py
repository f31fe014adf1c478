"""Protobuf: the Kubernetes wire envelope for request bodies, and the OpenAPI v2 document.

kubectl's typed clients (``kubectl create configmap|secret|namespace|serviceaccount``, Helm's
release Secrets) send ``Content-Type: application/vnd.kubernetes.protobuf`` and do not fall back
to JSON on 415 (client-go 1.32 falls back only from CBOR). The real server decodes them, so this
module does too: a protobuf wire-format reader (varint, 64-bit, length-delimited and 32-bit
fields; unknown fields skipped, as protobuf decoders do), the ``k8s\\x00`` + ``runtime.Unknown``
envelope, and message tables for the kinds involved. The field numbers are the Kubernetes wire
contract (``k8s.io/api/core/v1`` and ``k8s.io/apimachinery/pkg/apis/meta/v1`` ``generated.proto``).
A kind without a table gets 415 with the media types that work, as the real server answers a
protobuf body for a custom resource.

The writer encodes the OpenAPI v2 document as gnostic's ``openapi.v2.Document``
(``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``), the only form client-go asks
for; kubectl validates client-side with it when the server-side check does not apply (a ``List``).

Pure: bytes in, dicts out (and back).
"""

from __future__ import annotations

import base64
import datetime
import json
import struct
from typing import Any

from .common import JSON, ApiError

PROTOBUF = "application/vnd.kubernetes.protobuf"
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
MAGIC = b"k8s\x00"


# ------------------------------------------------------------------ wire format

class WireError(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) for every field of a message; values are int or bytes."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wtype = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wtype == 0:
            value, pos = _varint(buf, pos)
        elif wtype == 1:
            if pos + 8 > len(buf):
                raise WireError("truncated 64-bit field")
            value, pos = buf[pos:pos + 8], pos + 8
        elif wtype == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise WireError("truncated length-delimited field")
            value, pos = buf[pos:pos + length], pos + length
        elif wtype == 5:
            if pos + 4 > len(buf):
                raise WireError("truncated 32-bit field")
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise WireError(f"unsupported wire type {wtype}")
        out.append((number, wtype, value))
    return out


def _key(number: int, wtype: int) -> bytes:
    return _enc_varint(number << 3 | wtype)


def _enc_varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def enc_bytes(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _enc_varint(len(data)) + data


def enc_str(number: int, text: str | None) -> bytes:
    return enc_bytes(number, text.encode()) if text else b""


def enc_int(number: int, value: int | None) -> bytes:
    return _key(number, 0) + _enc_varint(int(value)) if value else b""


def enc_bool(number: int, value: bool | None) -> bytes:
    return _key(number, 0) + b"\x01" if value else b""


def enc_double(number: int, value: float | None) -> bytes:
    return _key(number, 1) + struct.pack("<d", float(value)) if value is not None else b""


# ------------------------------------------------------------------ Kubernetes messages
# A table maps field number -> (JSON name, kind, nested table name or None), kind one of:
# str, int, bool, bytes (base64 in JSON), msg, time, map (string -> string), mapbytes, repeated
# variants "str*", "msg*".

MESSAGES: dict[str, dict[int, tuple[str, str, str | None]]] = {
    "TypeMeta": {1: ("apiVersion", "str", None), 2: ("kind", "str", None)},
    "Unknown": {1: ("typeMeta", "msg", "TypeMeta"), 2: ("raw", "rawbytes", None),
                3: ("contentEncoding", "str", None), 4: ("contentType", "str", None)},
    "ObjectMeta": {1: ("name", "str", None), 2: ("generateName", "str", None), 3: ("namespace", "str", None),
                   4: ("selfLink", "str", None), 5: ("uid", "str", None), 6: ("resourceVersion", "str", None),
                   7: ("generation", "int", None), 8: ("creationTimestamp", "time", None),
                   9: ("deletionTimestamp", "time", None), 10: ("deletionGracePeriodSeconds", "int", None),
                   11: ("labels", "map", None), 12: ("annotations", "map", None),
                   13: ("ownerReferences", "msg*", "OwnerReference"), 14: ("finalizers", "str*", None)},
    "OwnerReference": {5: ("apiVersion", "str", None), 1: ("kind", "str", None), 3: ("name", "str", None),
                       4: ("uid", "str", None), 6: ("controller", "bool", None),
                       7: ("blockOwnerDeletion", "bool", None)},
    "ConfigMap": {1: ("metadata", "msg", "ObjectMeta"), 2: ("data", "map", None), 3: ("binaryData", "mapbytes", None),
                  4: ("immutable", "bool", None)},
    "Secret": {1: ("metadata", "msg", "ObjectMeta"), 2: ("data", "mapbytes", None), 3: ("type", "str", None),
               4: ("stringData", "map", None), 5: ("immutable", "bool", None)},
    "Namespace": {1: ("metadata", "msg", "ObjectMeta"), 2: ("spec", "msg", "NamespaceSpec"),
                  3: ("status", "msg", "NamespaceStatus")},
    "NamespaceSpec": {1: ("finalizers", "str*", None)},
    "NamespaceStatus": {1: ("phase", "str", None)},
    "ServiceAccount": {1: ("metadata", "msg", "ObjectMeta"), 2: ("secrets", "msg*", "ObjectReference"),
                       3: ("imagePullSecrets", "msg*", "LocalObjectReference"),
                       4: ("automountServiceAccountToken", "bool", None)},
    "ObjectReference": {1: ("kind", "str", None), 2: ("namespace", "str", None), 3: ("name", "str", None),
                        4: ("uid", "str", None), 5: ("apiVersion", "str", None), 6: ("resourceVersion", "str", None),
                        7: ("fieldPath", "str", None)},
    "LocalObjectReference": {1: ("name", "str", None)},
    "DeleteOptions": {1: ("gracePeriodSeconds", "int", None), 2: ("preconditions", "msg", "Preconditions"),
                      3: ("orphanDependents", "bool", None), 4: ("propagationPolicy", "str", None),
                      5: ("dryRun", "str*", None)},
    "Preconditions": {1: ("uid", "str", None), 2: ("resourceVersion", "str", None)},
}
# The top-level kinds a protobuf body may carry: (apiVersion, kind) -> message.
KINDS = {("v1", "ConfigMap"): "ConfigMap", ("v1", "Secret"): "Secret", ("v1", "Namespace"): "Namespace",
         ("v1", "ServiceAccount"): "ServiceAccount", ("v1", "DeleteOptions"): "DeleteOptions",
         ("meta.k8s.io/v1", "DeleteOptions"): "DeleteOptions"}


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


_GO_ZERO_TIME = -62135596800  # time.Time{} as gogo-protobuf writes it


def _time(buf: bytes) -> str | None:
    seconds = 0
    for number, _, value in fields(buf):
        if number == 1:
            seconds = _signed(value)
    if seconds == _GO_ZERO_TIME:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(buf: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for number, _, v in fields(buf):
        if number == 1:
            key = v.decode()
        elif number == 2:
            value = v
    return key, value


def decode_message(buf: bytes, name: str) -> JSON:
    table = MESSAGES[name]
    out: JSON = {}
    for number, wtype, value in fields(buf):
        spec = table.get(number)
        if spec is None:
            continue  # an unknown field: skipped, as every protobuf decoder does
        key, kind, nested = spec
        if kind in ("str", "rawbytes", "msg", "time", "map", "mapbytes", "str*", "msg*") and wtype != 2:
            raise WireError(f"{name}.{key}: wire type {wtype}, expected length-delimited")
        if kind == "str":
            out[key] = value.decode()
        elif kind == "rawbytes":
            out[key] = value
        elif kind == "int":
            out[key] = _signed(value)
        elif kind == "bool":
            out[key] = bool(value)
        elif kind == "msg":
            out[key] = decode_message(value, nested or "")
        elif kind == "time":
            out[key] = _time(value)
        elif kind == "map":
            k, v = _entry(value)
            out.setdefault(key, {})[k] = v.decode()
        elif kind == "mapbytes":
            k, v = _entry(value)
            out.setdefault(key, {})[k] = base64.b64encode(v).decode()
        elif kind == "str*":
            out.setdefault(key, []).append(value.decode())
        elif kind == "msg*":
            out.setdefault(key, []).append(decode_message(value, nested or ""))
    # gogo-protobuf writes every non-pointer field, empty or not; JSON omits them (omitempty).
    return {k: v for k, v in out.items() if v not in ("", 0, False, None) or isinstance(v, bool) and k in _KEEP_FALSE}


_KEEP_FALSE = {"automountServiceAccountToken"}  # a pointer field: false is meaningful


def decode_object(body: bytes) -> JSON:
    """A protobuf request body -> the JSON object; ApiError 415/400 as the real server answers."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "the protobuf body does not start with the Kubernetes magic number")
    try:
        envelope = decode_message(body[len(MAGIC):], "Unknown")
        type_meta = envelope.get("typeMeta") or {}
        api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
        message = KINDS.get((api_version, kind))
        if message is None:
            raise ApiError(415, f"the body of the request was in an unknown format - accepted media types include: "
                                f"application/json, application/yaml (no protobuf form of {api_version} {kind} here)")
        obj = decode_message(envelope.get("raw", b""), message)
    except (WireError, UnicodeDecodeError) as e:
        raise ApiError(400, f"unable to decode the protobuf body: {e}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}


# ------------------------------------------------------------------ OpenAPI v2 as gnostic protobuf

def _any(value: Any) -> bytes:
    """gnostic Any {yaml = 2}: JSON is YAML."""
    return enc_str(2, json.dumps(value, separators=(",", ":")))


def _named_any(number: int, name: str, value: Any) -> bytes:
    return enc_bytes(number, enc_str(1, name) + enc_bytes(2, _any(value)))


def _schema(s: Any) -> bytes:
    if not isinstance(s, dict):
        return b""
    out = [enc_str(1, s.get("$ref")), enc_str(2, s.get("format")), enc_str(3, s.get("title")),
           enc_str(4, s.get("description"))]
    if "default" in s:
        out.append(enc_bytes(5, _any(s["default"])))
    for number, key in ((6, "multipleOf"), (7, "maximum"), (9, "minimum")):
        if isinstance(s.get(key), (int, float)) and not isinstance(s.get(key), bool):
            out.append(enc_double(number, s[key]))
    out += [enc_bool(8, s.get("exclusiveMaximum") is True), enc_bool(10, s.get("exclusiveMinimum") is True)]
    for number, key in ((11, "maxLength"), (12, "minLength"), (14, "maxItems"), (15, "minItems"),
                        (17, "maxProperties"), (18, "minProperties")):
        if isinstance(s.get(key), int):
            out.append(enc_int(number, s[key]))
    out += [enc_str(13, s.get("pattern")), enc_bool(16, s.get("uniqueItems") is True)]
    out += [enc_str(19, r) for r in s.get("required") or [] if isinstance(r, str)]
    out += [enc_bytes(20, _any(v)) for v in s.get("enum") or []]
    ap = s.get("additionalProperties")
    if isinstance(ap, dict):
        out.append(enc_bytes(21, enc_bytes(1, _schema(ap))))
    elif isinstance(ap, bool):
        out.append(enc_bytes(21, _key(2, 0) + (b"\x01" if ap else b"\x00")))
    if isinstance(s.get("type"), str):
        out.append(enc_bytes(22, enc_str(1, s["type"])))
    if isinstance(s.get("items"), dict):
        out.append(enc_bytes(23, enc_bytes(1, _schema(s["items"]))))
    out += [enc_bytes(24, _schema(x)) for x in s.get("allOf") or []]
    props = s.get("properties")
    if isinstance(props, dict) and props:
        out.append(enc_bytes(25, b"".join(enc_bytes(1, enc_str(1, k) + enc_bytes(2, _schema(v)))
                                          for k, v in props.items())))
    out.append(enc_bool(27, s.get("readOnly") is True))
    out += [_named_any(31, k, v) for k, v in s.items() if k.startswith("x-")]
    return b"".join(out)


def _parameter(p: JSON) -> bytes:
    if p.get("in") == "body":
        body = enc_str(1, p.get("description")) + enc_str(2, p.get("name")) + enc_str(3, "body") + \
            enc_bool(4, p.get("required")) + enc_bytes(5, _schema(p.get("schema")))
        param = enc_bytes(1, body)
    else:
        where = p.get("in")
        if where == "path":
            sub = enc_bool(1, p.get("required")) + enc_str(2, "path") + enc_str(3, p.get("description")) + \
                enc_str(4, p.get("name")) + enc_str(5, p.get("type")) + enc_bool(19, p.get("uniqueItems"))
            non_body = enc_bytes(4, sub)
        else:
            sub = enc_bool(1, p.get("required")) + enc_str(2, "query") + enc_str(3, p.get("description")) + \
                enc_str(4, p.get("name")) + enc_str(6, p.get("type")) + enc_bool(20, p.get("uniqueItems"))
            non_body = enc_bytes(3, sub)
        param = enc_bytes(2, non_body)
    return enc_bytes(1, param)  # ParametersItem.parameter


def _operation(op: JSON) -> bytes:
    out = [enc_str(1, t) for t in op.get("tags") or []]
    out += [enc_str(3, op.get("description")), enc_str(5, op.get("operationId"))]
    out += [enc_str(6, t) for t in op.get("produces") or []]
    out += [enc_str(7, t) for t in op.get("consumes") or []]
    out += [enc_bytes(8, _parameter(p)) for p in op.get("parameters") or []]
    responses = b""
    for code, resp in (op.get("responses") or {}).items():
        response = enc_str(1, resp.get("description"))
        if isinstance(resp.get("schema"), dict):
            response += enc_bytes(2, enc_bytes(1, _schema(resp["schema"])))
        responses += enc_bytes(1, enc_str(1, code) + enc_bytes(2, enc_bytes(1, response)))
    out.append(enc_bytes(9, responses))
    out += [_named_any(13, k, v) for k, v in op.items() if k.startswith("x-")]
    return b"".join(out)


def encode_openapi_v2(doc: JSON) -> bytes:
    """A Swagger 2.0 document (as built by openapi.v2_document) -> gnostic openapi.v2.Document bytes."""
    info = doc.get("info") or {}
    out = [enc_str(1, doc.get("swagger", "2.0")),
           enc_bytes(2, enc_str(1, info.get("title")) + enc_str(2, info.get("version")))]
    paths = b""
    numbers = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}
    for path, item in (doc.get("paths") or {}).items():
        body = b"".join(enc_bytes(numbers[m], _operation(op)) for m, op in item.items() if m in numbers)
        body += b"".join(enc_bytes(9, _parameter(p)) for p in item.get("parameters") or [])
        paths += enc_bytes(2, enc_str(1, path) + enc_bytes(2, body))
    out.append(enc_bytes(8, paths))
    out.append(enc_bytes(9, b"".join(enc_bytes(1, enc_str(1, name) + enc_bytes(2, _schema(schema)))
                                     for name, schema in (doc.get("definitions") or {}).items())))
    return b"".join(out)
