"""What ``specdeploy render`` reads: a YAML file (or stdin) or a kustomization directory, and the config.json
documents that a SpeculativeDeployment's ``configFrom`` names in the ConfigMaps among them.

A kustomization is read in-process when it uses only ``resources`` (YAML files, or directories holding a
kustomization of their own), ``configMapGenerator`` (``files``, ``literals``), ``generatorOptions``,
``namespace``, ``apiVersion`` and ``kind``: the shape of the examples. Anything else (patches, overlays of
remote bases, components, ...) is built by ``kubectl kustomize DIR`` when kubectl is on the PATH, exactly
what ``kubectl apply -k`` would apply; without kubectl it is an error naming the fields.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from typing import Any

from .common import UsageError

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
READ_IN_PROCESS = {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions", "namespace"}
GENERATOR_FIELDS = {"name", "files", "literals", "behavior", "options"}
KUBECTL_TIMEOUT = 60


def _yaml_docs(text: str, where: str) -> list[dict]:
    import yaml

    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise UsageError(f"{where} is not valid YAML: {str(e).splitlines()[0]}") from None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise UsageError(f"file not found: {path}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None


def load_file(path: str) -> list[dict]:
    """The YAML documents of a file ('-': stdin)."""
    import sys

    if path == "-":
        return _yaml_docs(sys.stdin.read(), "stdin")
    return _yaml_docs(_read(path), path)


def kustomization_file(directory: str) -> str:
    for name in KUSTOMIZATION_FILES:
        p = os.path.join(directory, name)
        if os.path.isfile(p):
            return p
    if not os.path.isdir(directory):
        raise UsageError(f"-k {directory}: not a directory")
    raise UsageError(f"-k {directory}: no kustomization.yaml in it")


def load_kustomization(directory: str, *, kubectl: str | None = None, _depth: int = 0) -> list[dict]:
    """The objects a kustomization directory builds (in-process for the examples' subset, else kubectl kustomize)."""
    kfile = kustomization_file(directory)
    docs = _yaml_docs(_read(kfile), kfile)
    k = docs[0] if docs else {}
    if not isinstance(k, dict):
        raise UsageError(f"{kfile} is not a kustomization (a YAML mapping)")
    other = sorted(set(k) - READ_IN_PROCESS)
    gens = k.get("configMapGenerator") or []
    other += sorted({f"configMapGenerator[].{f}" for g in gens if isinstance(g, dict) for f in set(g) - GENERATOR_FIELDS})
    if other:
        return _kubectl_kustomize(directory, kfile, other, kubectl)
    if _depth > 16:
        raise UsageError(f"{kfile}: kustomizations nested more than 16 deep")
    out: list[dict] = []
    for r in k.get("resources") or []:
        if not isinstance(r, str) or "://" in r or r.startswith("git@"):
            return _kubectl_kustomize(directory, kfile, [f"resources: {r}"], kubectl)
        p = os.path.join(directory, r)
        out += load_kustomization(p, kubectl=kubectl, _depth=_depth + 1) if os.path.isdir(p) else load_file(p)
    for g in gens:
        out.append(_generated_configmap(directory, kfile, g, k.get("namespace")))
    return out


def _generated_configmap(directory: str, kfile: str, g: Any, namespace: str | None) -> dict:
    if not isinstance(g, dict) or not isinstance(g.get("name"), str):
        raise UsageError(f"{kfile}: a configMapGenerator entry without a name")
    data: dict[str, str] = {}
    for f in g.get("files") or []:
        key, _, path = str(f).partition("=") if "=" in str(f) else (os.path.basename(str(f)), "", str(f))
        data[key] = _read(os.path.join(directory, path))
    for lit in g.get("literals") or []:
        key, _, value = str(lit).partition("=")
        data[key] = value
    meta: dict[str, Any] = {"name": g["name"]}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _kubectl_kustomize(directory: str, kfile: str, fields: list[str], kubectl: str | None) -> list[dict]:
    exe = kubectl or shutil.which("kubectl")
    if exe is None:
        raise UsageError(f"{kfile} uses {', '.join(fields)}: specdeploy reads resources (files, directories) and "
                         f"configMapGenerator (files, literals) itself; install kubectl to build the rest "
                         f"(specdeploy render runs `kubectl kustomize {directory}`)")
    try:
        p = subprocess.run([exe, "kustomize", directory], capture_output=True, text=True, timeout=KUBECTL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(f"kubectl kustomize {directory} failed: {e}") from None
    if p.returncode != 0:
        lines = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()
        raise UsageError(f"kubectl kustomize {directory} failed: {lines[-1][:300]}")
    return _yaml_docs(p.stdout, f"the output of kubectl kustomize {directory}")


def config_from_manifests(cr: Any, docs: list[dict], role: str, where: str) -> dict | None:
    """The config.json of ``spec.<role>`` from the ConfigMap its configFrom names among ``docs``; None when
    it names none (the operator reads it from the hub or a PVC: pass --<role>-config)."""
    from ..core import safejson

    src = getattr(cr.spec, role)
    ref = src.config_from.config_map_key_ref if src.config_from else None
    if ref is None:
        return None
    ns = cr.metadata.namespace
    cms = [d for d in docs if isinstance(d, dict) and d.get("kind") == "ConfigMap"
           and (d.get("metadata") or {}).get("name") == ref.name
           and (not ns or not (d.get("metadata") or {}).get("namespace") or d["metadata"]["namespace"] == ns)]
    if not cms:
        raise UsageError(f"spec.{role}.configFrom names ConfigMap {ref.name}, which {where} does not hold: "
                         f"add it there, or pass --{role}-config")
    cm = cms[-1]
    label = f"ConfigMap {ref.name} key {ref.key} (spec.{role}.configFrom)"
    if ref.key in (cm.get("data") or {}):
        text: Any = cm["data"][ref.key]
    elif ref.key in (cm.get("binaryData") or {}):
        try:
            text = base64.b64decode(cm["binaryData"][ref.key], validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise UsageError(f"{label} is not valid base64") from None
    else:
        raise UsageError(f"{label} is missing in {where}")
    try:
        doc = safejson.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{label} is not valid JSON: line {e.lineno} column {e.colno}: {e.msg}") from None
    except (ValueError, TypeError, RecursionError) as e:
        raise UsageError(f"{label} cannot be read as a config.json: {str(e)[:120] or type(e).__name__}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{label} is not a JSON object: it must hold the model's config.json")
    return doc
