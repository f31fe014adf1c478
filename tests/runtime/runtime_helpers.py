"""Helpers for the pod-runtime tests (test modules import them explicitly)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

from testkit import ROOT, pair

RUNTIME = str(Path(sys.executable).parent / "specdeploy-runtime")


def run_runtime(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the installed ``specdeploy-runtime`` console script as a real process."""
    return subprocess.run([RUNTIME, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def make_cr(engine: str = "sglang", version: str = "0.5.23", gpu_type: str = "b300", count: int = 1, **spec_extra):
    """A SpeculativeDeployment for the Qwen3.6-27B pair; keyword arguments merge into spec."""
    from specdeploy.api.types import SpeculativeDeployment

    spec = {
        "engine": {"name": engine, "version": version},
        "target": {"model": "Qwen/Qwen3.6-27B"},
        "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"},
        "gpu": {"type": gpu_type, "count": count},
    }
    for k, v in spec_extra.items():
        spec[k] = {**spec[k], **v} if isinstance(v, dict) and isinstance(spec.get(k), dict) else v
    return SpeculativeDeployment.model_validate({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                                                 "metadata": {"name": "qwen36", "namespace": "models"}, "spec": spec})


class Pod:
    """A pod's view: the engine config the operator rendered and the two mounted model dirs."""

    def __init__(self, root: Path, engine_config: dict, target: dict, drafter: dict):
        self.root = root
        self.ec_path = root / "engine-config.json"
        self.target_dir = root / "models" / "target"
        self.drafter_dir = root / "models" / "drafter"
        self.termination_log = root / "termination-log"
        self.target_dir.mkdir(parents=True, exist_ok=True)
        self.drafter_dir.mkdir(parents=True, exist_ok=True)
        self.engine_config = engine_config
        self.write(target=target, drafter=drafter)

    def write(self, *, target: dict | None = None, drafter: dict | None = None) -> None:
        self.ec_path.write_text(json.dumps(self.engine_config, indent=2))
        if target is not None:
            (self.target_dir / "config.json").write_text(json.dumps(target))
        if drafter is not None:
            (self.drafter_dir / "config.json").write_text(json.dumps(drafter))

    def edit_args(self, fn, key: str = "args") -> None:
        self.engine_config[key] = fn(list(self.engine_config[key]))
        self.write()

    def preflight_argv(self, *extra: str) -> list[str]:
        return ["preflight", "--target-dir", str(self.target_dir), "--drafter-dir", str(self.drafter_dir),
                "--engine-config", str(self.ec_path), "--termination-log", str(self.termination_log), *extra]

    def preflight(self, *extra: str):
        """In-process run: (exit code, PreflightResult, termination log text)."""
        from specdeploy_runtime.preflight import run_preflight

        res = run_preflight(str(self.target_dir), str(self.drafter_dir), str(self.ec_path),
                            strict_digest="--allow-digest-mismatch" not in extra)
        return res

    def codes(self, severity: str = "error", *extra: str) -> set[str]:
        return {p.code for p in self.preflight(*extra).problems if p.severity == severity}


def rendered_pod(tmp_path: Path, engine: str = "sglang", version: str | None = None, *, checked_drafter: dict | None = None,
                 mounted_drafter: dict | None = None, max_model_len: int | None = None, **spec_extra) -> Pod:
    """Render the Qwen3.6-27B pair with the operator's renderer (from ``checked_drafter`` when
    given: what the operator saw) and mount ``mounted_drafter`` (default: the same files)."""
    from specdeploy.core.render import render

    version = version or ("0.5.23" if engine == "sglang" else "0.33.0")
    d, t = pair("qwen3.6-27b")
    seen = checked_drafter if checked_drafter is not None else d
    cr = make_cr(engine, version, **spec_extra)
    if max_model_len is not None:
        cr.spec.engine.max_model_len = max_model_len
    r = render(cr, t, seen)
    ec = json.loads(r.engine_config.to_json())
    return Pod(tmp_path, ec, t, copy.deepcopy(mounted_drafter if mounted_drafter is not None else seen))


def drop_flag(name: str):
    """An args editor removing ``name`` and its value."""

    def edit(args: list[str]) -> list[str]:
        i = args.index(name)
        return args[:i] + args[i + 2:]

    return edit


def set_flag(name: str, value: str):
    def edit(args: list[str]) -> list[str]:
        i = args.index(name)
        return args[: i + 1] + [value] + args[i + 2:]

    return edit
