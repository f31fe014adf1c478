"""The safetensors file format for the small float tensors of this repository's reference code.

:func:`encode_safetensors` writes float arrays as BF16 or F32 with a JSON header (the layout the
engines and ``huggingface_hub`` read), integer arrays as I64 and boolean ones as BOOL (an EAGLE-3
head's ``d2t`` / ``t2d`` vocabulary maps); :func:`decode_safetensors` reads such a file back (float32,
int64 and bool arrays). Used by the reference DFlash forward (:mod:`specdeploy_runtime.dflash_ref`) to load trained
weights and by the development rig's tiny models generator. numpy only (the runtime extra).
"""

from __future__ import annotations

import json
import struct
from typing import Any, Mapping

import numpy as np

__all__ = ["decode_safetensors", "encode_safetensors"]

_DTYPES = {"BF16": 2, "F32": 4}


def _bf16_bytes(a: np.ndarray) -> bytes:
    """float32 -> bfloat16 (round to nearest even), little-endian bytes."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def encode_safetensors(tensors: Mapping[str, np.ndarray], dtype: str = "BF16",
                       metadata: Mapping[str, str] | None = None) -> bytes:
    """The safetensors file of ``tensors``: float arrays stored as ``dtype``, integer ones as I64, boolean ones as BOOL."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}")
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype == np.bool_:
            kind, raw = "BOOL", np.ascontiguousarray(a, dtype=np.uint8).tobytes()
        elif np.issubdtype(a.dtype, np.integer):
            kind, raw = "I64", np.ascontiguousarray(a, dtype="<i8").tobytes()
        else:
            a = a.astype(np.float32)
            kind = dtype
            raw = _bf16_bytes(a) if dtype == "BF16" else np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces to 8 bytes
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def decode_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """Read a safetensors file written by :func:`encode_safetensors`: BF16 and F32 into float32 arrays, I64 and BOOL
    as int64 and bool."""
    if len(data) < 8:
        raise ValueError("not a safetensors file: shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("not a safetensors file: header length past the end")
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = body[start:end]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif info["dtype"] == "I64":
            a = np.frombuffer(raw, dtype="<i8").astype(np.int64)
        elif info["dtype"] == "BOOL":
            a = np.frombuffer(raw, dtype=np.uint8).astype(bool)
        else:
            raise ValueError(f"{name}: dtype {info['dtype']} is not supported here")
        out[name] = a.reshape(info["shape"])
    return out
