"""The drafter/target checker (pure): one set of rules for the CLI, webhook, operator and pod preflight.

``check_options`` runs the object-level checks that need no config files (admission's fast
path). ``analyze`` parses both config.json documents, runs every rule of
dflash-engines.md s2 plus the engine and GPU rules, and derives what the renderer needs
(block size, draft window, engine env). It never raises on any JSON input. One concern per module:

- ``options``: ``Options`` and the object-level checks (engine, release, GPU, extraArgs, accept codes, the method
  knobs the engine has no flag for);
- ``results``: ``Analysis``, ``Derived`` and the findings collector the rules write to;
- ``layers``: the target's fields, the drafter's geometry and layer ids, duplicates, layer types;
- ``window``: block size, the draft window (compact cache or native) and the served context;
- ``engine``: engine release rules (releases, drafter architecture, hidden act, draft backend);
- ``fit``: tensor-parallel head split and the weights' fit in GPU memory;
- ``accept``: accepted codes turned into info, one finding per root cause;
- ``family``: ``detect_family`` (a drafter's family from its config.json) and ``serving_method``;
- ``method``: ``check_method``, the gate of every method outside the DFlash path (family detection and the
  per-family rules; also run after the DFlash rules for ``dflash2``);
- ``methodplan``: what the renderer needs for those methods (steps, top-k, draft tokens, n-gram window);
- ``derive``: ``analyze``, which runs them all and derives the renderer's settings;
- ``parsed``: the parsed target/drafter views, one per read-only document (core/memo.py), so that what is
  computed from a document alone (weights, KV shape, family) is remembered across option sets.

Import the entry points from this package, not from the modules: the layout inside may change.
"""

from .accept import ABSENCE_CODES, apply_accept, one_per_root_cause
from .derive import analyze, check
from .family import Family, detect_family, serving_method
from .methodplan import target_mtp_layers
from .fit import FIT_FRACTION, HEADROOM_FRACTION
from .layers import canonical_layer_ids
from .method import check_method
from .options import CPU, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE, WINDOW_OFF, Options, check_options, model_reference_problem
from .results import Analysis, Derived
from .window import draft_kv_bytes_per_token

__all__ = [
    "ABSENCE_CODES", "CPU", "Family", "detect_family", "serving_method", "DEFAULT_BLOCK_SIZE", "FIT_FRACTION", "HEADROOM_FRACTION", "MAX_BLOCK_SIZE", "WINDOW_OFF",
    "Analysis", "Derived", "Options", "analyze", "apply_accept", "canonical_layer_ids", "check", "check_method", "check_options",
    "draft_kv_bytes_per_token", "model_reference_problem", "one_per_root_cause",
    "target_mtp_layers",
]
