"""Size limits, as the real server applies them.

- A request body over 3 MiB (kube-apiserver's ``MaxRequestBodyBytes``) is refused before it is
  decoded: 413 ``Request entity too large: limit is 3145728``.
- ConfigMap and Secret data over 1 MiB in total (``MaxConfigMapSize`` / ``MaxSecretSize``) fail
  validation: 422 ``ConfigMap "x" is invalid: []: Too long: must have at most 1048576 bytes``
  (Secrets: the field is ``data``).
- A stored object over 1.5 MiB (etcd's default ``--max-request-bytes``) is refused by the
  storage layer: 500 ``etcdserver: request is too large``.
Pure.
"""

from __future__ import annotations

import base64
import binascii
import json

from .common import JSON, ApiError
from .resources import ResourceInfo

MAX_REQUEST_BODY = 3 * 1024 * 1024
MAX_DATA = 1024 * 1024
MAX_OBJECT = 1536 * 1024  # 1.5 MiB


def check_body(size: int) -> None:
    if size > MAX_REQUEST_BODY:
        raise ApiError(413, f"Request entity too large: limit is {MAX_REQUEST_BODY}", reason="RequestEntityTooLarge")


def _decoded_len(value: str) -> int:
    try:
        return len(base64.b64decode(value, validate=False))
    except (binascii.Error, ValueError):
        return len(value)


def check_data(info: ResourceInfo, obj: JSON) -> None:
    """ConfigMap/Secret payload limit (validation, so dry runs are refused too)."""
    if info.storage_key == ("", "configmaps"):
        total = sum(len(k) + len(str(v).encode()) for k, v in (obj.get("data") or {}).items()) + \
            sum(len(k) + _decoded_len(str(v)) for k, v in (obj.get("binaryData") or {}).items())
        where = "[]"
    elif info.storage_key == ("", "secrets"):
        total = sum(len(k) + _decoded_len(str(v)) for k, v in (obj.get("data") or {}).items()) + \
            sum(len(k) + len(str(v).encode()) for k, v in (obj.get("stringData") or {}).items())
        where = "data"
    else:
        return
    if total > MAX_DATA:
        name = (obj.get("metadata") or {}).get("name", "")
        msg = f"Too long: must have at most {MAX_DATA} bytes"
        raise ApiError(422, f'{info.kind} "{name}" is invalid: {where}: {msg}', reason="Invalid",
                       details={"name": name, "kind": info.kind, "group": info.group,
                                "causes": [{"reason": "FieldValueTooLong", "message": msg, "field": where}]})


def check_size(info: ResourceInfo, obj: JSON) -> None:
    """The storage limit (etcd): the serialized object."""
    check_serialized_size(len(json.dumps(obj, separators=(",", ":"))))


def check_serialized_size(size: int) -> None:
    """The storage limit on an object's compact JSON length."""
    if size > MAX_OBJECT:
        raise ApiError(500, "etcdserver: request is too large", reason="InternalError")
