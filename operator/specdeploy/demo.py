"""The main job (for now): check and render every example, print each engine command line.

Each example directory holds ``speculativedeployment.yaml`` with ``target.config.json`` and
``drafter.config.json`` beside it (the files its kustomization turns into ConfigMaps).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .api.types import SpeculativeDeployment
from .core import engines as eng
from .core.render import RenderError, expand_kubelet_vars, render

CR_FILE = "speculativedeployment.yaml"
# What LeaderWorkerSet injects into every pod of a group (values as on a cluster).
LWS_SAMPLE_ENV = {"LWS_LEADER_ADDRESS": "demo-0.demo.default", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}


@dataclass
class Example:
    name: str
    cr: SpeculativeDeployment
    target: Any
    drafter: Any


def load_examples(root: str | Path = "examples") -> list[Example]:
    out = []
    for cr_path in sorted(Path(root).glob(f"*/{CR_FILE}")):
        d = cr_path.parent
        doc = yaml.safe_load(cr_path.read_text())
        out.append(Example(
            name=d.name,
            cr=SpeculativeDeployment.model_validate(doc),
            target=json.loads((d / "target.config.json").read_text()),
            drafter=json.loads((d / "drafter.config.json").read_text()),
        ))
    return out


def run(root: str) -> int:
    examples = load_examples(root)
    if not examples:
        print(f"specdeploy demo: no examples under {root}/*/{CR_FILE}", file=sys.stderr)
        return 2
    failed = 0
    for ex in examples:
        spec = ex.cr.spec
        print(f"== {ex.name}: {spec.target.model} + {spec.drafter.model} on {spec.engine.name} {spec.engine.version}, "
              f"{spec.gpu.count} x {spec.gpu.type}")
        try:
            r = render(ex.cr, ex.target, ex.drafter)
        except RenderError as e:
            failed += 1
            print("   INCOMPATIBLE:")
            for f in e.findings:
                print(f"   {f.one_line()}")
            continue
        for f in r.analysis.findings:
            print(f"   {f.one_line()}")
        d = r.analysis.derived
        print(f"   derived: block {d.block_size}, draft tokens {d.num_speculative_tokens}, "
              f"window {d.draft_window}, env {r.engine_config.env}")
        print(f"   objects: {', '.join(o['kind'] + '/' + o['metadata']['name'] for o in r.objects)}")
        ec = r.engine_config
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(ec.env.items()))
        print(f"   engine: {env} {shlex.join(ec.command + ec.args)}")
    print(f"{len(examples) - failed}/{len(examples)} examples check and render cleanly")
    return 1 if failed else 0


def flag_commands(root: str = "examples") -> list[dict]:
    """Every example rendered on every engine's verified version, single- and multi-node.

    The flag-drift check (e2e/flagdrift/run.sh) parses each argv with the engine's own
    parser; the unit suite checks them against the recorded snapshots.
    """
    out = []
    for ex in load_examples(root):
        for info in eng.ENGINES.values():
            version = info.newest_verified
            for nodes in (1, 2):
                spec = ex.cr.spec.model_copy(deep=True)
                spec.engine.name = info.name
                spec.engine.version = version
                spec.engine.extra_args = []
                spec.nodes = nodes
                if spec.gpu.count % nodes:
                    spec.gpu.count *= nodes
                cr = ex.cr.model_copy(update={"spec": spec})
                try:
                    r = render(cr, ex.target, ex.drafter)
                except RenderError:
                    continue
                ec = r.engine_config
                name = f"{ex.name}/{info.name}-{version}/nodes-{nodes}"
                # Parse what the engine process will see: kubelet has expanded the variables
                # LeaderWorkerSet injects.
                for suffix, argv, rank in (("", ec.args, "0"), ("/worker", ec.worker_args, "1")):
                    if argv is None:
                        continue
                    lws = {**LWS_SAMPLE_ENV, "LWS_WORKER_INDEX": rank}
                    out.append({"name": name + suffix, "engine": info.name, "version": version,
                                "argv": [expand_kubelet_vars(a, lws) for a in argv], "env": ec.env})
    return out
