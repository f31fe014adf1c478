"""Tuned fused-MoE kernels on the GPU node: run the engine's tuner, collect and install its files.

The naming, layout, tuning command and result envelope are pure and live in
``specdeploy.core.tuning`` (the renderer uses them too); re-exported here for the runtime.
"""

from __future__ import annotations

import json
import os

from specdeploy.core.tuning import *  # noqa: F401,F403  (the pure part, re-exported)
from specdeploy.core.tuning import MANIFEST_KEY, _safe_relpath  # noqa: F401
from specdeploy.core.errors import Permanent


def install_from_configmap(src_dir: str, dest_dir: str) -> list[str]:
    """Lay the files of a mounted tuned-kernels ConfigMap out in the engine's layout under ``dest_dir``.
    An absent manifest (ConfigMap not created yet: optional volume) installs nothing."""
    manifest_path = os.path.join(src_dir, MANIFEST_KEY)
    if not os.path.exists(manifest_path):
        return []
    with open(manifest_path, encoding="utf-8") as fh:
        manifest = json.load(fh)
    out = []
    for key, rel in sorted((manifest.get("files") or {}).items()):
        rel = _safe_relpath(rel)
        with open(os.path.join(src_dir, os.path.basename(key)), "rb") as fh:
            content = fh.read()
        json.loads(content)
        dest = os.path.join(dest_dir, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as fh:
            fh.write(content)
        out.append(rel)
    return out


# ----------------------------------------------------------------- running it (GPU node)


class NoGpu(Permanent, RuntimeError):
    pass


def detect_gpu() -> tuple[str, int, str]:
    """(torch device name, GPU count, triton version) of this node; NoGpu when there is none."""
    try:
        import torch
    except ImportError:
        raise NoGpu("torch is not installed: run `tune` in the engine's runtime image on a GPU node") from None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise NoGpu(f"torch {torch.__version__} sees no CUDA device: the tuning measures the kernels on the GPU the "
                    "engine will run on, so it must run on that GPU node (nothing was written)")
    try:
        import triton

        tv = triton.__version__
    except ImportError:
        raise NoGpu("triton is not installed: run `tune` in the engine's runtime image") from None
    return torch.cuda.get_device_name(0), torch.cuda.device_count(), tv


def collect_results(engine: str, work_dir: str, expected_name: str) -> bytes:
    """The tuner's output file named as the engine will look it up; a differently named file is an
    error (the tuner computed another E/N/dtype than the engine will use)."""
    produced = sorted(f for f in os.listdir(work_dir) if f.startswith("E=") and f.endswith(".json"))
    if expected_name not in produced:
        raise RuntimeError(f"the {engine} tuner wrote {produced or 'no file'} but the engine will look up {expected_name}: "
                           "its E/N/dtype differ from the engine's (shared-expert fusion, quantization); nothing installed")
    with open(os.path.join(work_dir, expected_name), "rb") as fh:
        return fh.read()
