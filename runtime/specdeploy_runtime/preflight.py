"""``preflight``: check the engine command the operator wrote against the config.json files
actually mounted in the pod, before the engine starts.

The operator checked the pair from the configs it fetched and rendered the engine config
(``/etc/specdeploy/engine-config.json``). Between that check and the pod, the files can
change (a moved hub revision, a re-populated volume) and the rendered command can drift
from what the files imply. Preflight re-reads the mounted files and:

1. compares their digests with ``target.configDigest`` / ``drafter.configDigest``
   (the files mounted are not the ones the check saw);
2. runs the same core checker (``specdeploy.core.checker.analyze``) with the options the
   engine config records (engine, version, GPU profile, tensor parallel size, block size,
   draft window);
3. checks the plan the engine config records (block size, layer types, drafter window,
   target layer ids) against what the mounted drafter implies;
4. checks the engine argv and env: SGLang's compact-cache window flag is present exactly
   when the re-run check derives one (releases without native draft windows, or
   spec.speculation.draftWindow), with that value; the context-length, block size, drafter
   and target flags; vLLM's ``--speculative-config`` (method, model,
   num_speculative_tokens) and the V2 model runner env for drafters that mix sliding
   and full layers.

Speculation off (``run_target_only``, ``preflight --no-speculation``: a SpeculativeBenchmark's baseline variant
serves the target alone) checks what applies to a target-only pod: the target config's digest (1.), an engine
argv without any speculative flag, the release's flag snapshot and the engine's entrypoint (4.).

A failure exits non-zero with a one-screen message that is also written to the
termination log, so ``kubectl describe pod`` shows it on the init container.

Standard library + the pure core (pydantic): never kopf, never torch.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Sequence

# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_LIMIT = 4096
SCREEN_LINES = 22


@dataclass(frozen=True)
class Problem:
    severity: str  # error | warning | info
    code: str
    where: str  # what the problem is about: "drafter $.sliding_window", "engine args", ...
    message: str

    def line(self) -> str:
        return f"{self.severity} {self.code} [{self.where}]: {self.message}"


@dataclass
class PreflightResult:
    problems: list[Problem] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def add(self, severity: str, code: str, where: str, message: str) -> None:
        self.problems.append(Problem(severity, code, where, message))

    def to_dict(self) -> dict:
        return {"ok": self.ok, "summary": self.summary, "problems": [asdict(p) for p in self.problems]}

    def message(self) -> str:
        """One screen: the verdict, then errors, then warnings; long lists are cut."""
        errs = [p for p in self.problems if p.severity == "error"]
        warns = [p for p in self.problems if p.severity == "warning"]
        if self.ok:
            head = f"specdeploy preflight OK ({len(warns)} warning{'s' if len(warns) != 1 else ''})"
            body = self.summary + [p.line() for p in warns]
        else:
            head = (f"specdeploy preflight FAILED: {len(errs)} error{'s' if len(errs) != 1 else ''}, "
                    f"{len(warns)} warning{'s' if len(warns) != 1 else ''}; the engine was not started")
            body = [p.line() for p in errs + warns] + self.summary
        lines = [head] + body
        if len(lines) > SCREEN_LINES:
            cut = len(lines) - (SCREEN_LINES - 1)
            lines = lines[: SCREEN_LINES - 1] + [f"... and {cut} more (run specdeploy-runtime preflight -o json)"]
        return "\n".join(lines)


def termination_text(text: str, limit: int = TERMINATION_LIMIT) -> str:
    """``text`` cut to what Kubernetes keeps, on a line boundary where possible."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    marker = "\n... (cut to fit the termination log)"
    cut = raw[: limit - len(marker.encode())].decode(errors="ignore")
    if "\n" in cut:
        cut = cut[: cut.rindex("\n")]
    return cut + marker


# ----------------------------------------------------------------- argv helpers


def _norm(flag: str) -> str:
    return flag.replace("_", "-") if flag.startswith("--") else flag


def flag_values(argv: Sequence[str], names: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag as written, value) for every occurrence of one of ``names`` in argv
    (``--flag value`` or ``--flag=value``; ``--a_b`` counts as ``--a-b``). None: no value."""
    wanted = {_norm(n) for n in names}
    out: list[tuple[str, str | None]] = []
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        name, eq, val = arg.partition("=")
        if _norm(name) not in wanted:
            continue
        if eq:
            out.append((name, val))
        elif i + 1 < len(argv):
            out.append((name, argv[i + 1]))
        else:
            out.append((name, None))
    return out


def _last(argv: Sequence[str], *names: str) -> tuple[str, str | None] | None:
    """The occurrence argparse would use (the last)."""
    found = flag_values(argv, names)
    return found[-1] if found else None


def _as_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# ----------------------------------------------------------------- reading


def read_config(path: str, role: str, res: PreflightResult) -> tuple[Any, str] | None:
    """(document, file path) of a mounted model's config.json, or None after reporting why."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        res.add("error", "ConfigNotFound", role, f"no config.json at {file}: the {role} volume is not mounted where "
                "the engine config expects it, or it is empty")
        return None
    except OSError as e:
        res.add("error", "ConfigUnreadable", role, f"cannot read {file}: {e.strerror}")
        return None
    try:
        return json.loads(raw), file
    except (ValueError, UnicodeDecodeError) as e:
        res.add("error", "ConfigInvalidJson", role, f"{file} is not valid JSON: {e}")
        return None


def load_engine_config(path: str, res: PreflightResult):
    import pydantic

    from specdeploy.core.engineconfig import EngineConfig

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        res.add("error", "EngineConfigNotFound", "engine config", f"{path} does not exist: mount the engine ConfigMap there")
        return None
    except (OSError, ValueError) as e:
        res.add("error", "EngineConfigInvalid", "engine config", f"{path} is not readable JSON: {e}")
        return None
    try:
        return EngineConfig.model_validate(doc)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(document)"
        res.add("error", "EngineConfigInvalid", "engine config", f"{path}: invalid at {where}: {first.get('msg')}")
        return None


# ----------------------------------------------------------------- the checks


def _check_digests(ec, target_doc, drafter_doc, files: dict[str, str], res: PreflightResult, strict: bool) -> None:
    from specdeploy.core.engineconfig import config_digest

    for role, ref, doc in (("target", ec.target, target_doc), ("drafter", ec.drafter, drafter_doc)):
        if ref is None:  # no drafter (mtp, ngram, suffix)
            continue
        got = config_digest(doc)
        if ref.config_digest is None:
            res.add("info", "ConfigDigestNotRecorded", role,
                    f"the engine config records no digest for the {role} config; cannot tell whether it changed")
        elif ref.config_digest != got:
            res.add("error" if strict else "warning", "ConfigDigestMismatch", role,
                    f"{files[role]} ({got[:19]}...) is not the config.json the operator checked ({ref.config_digest[:19]}...): "
                    f"the {role} files changed after the check (moved revision or re-populated volume). Pin "
                    f"spec.{role}.revision or let the operator re-check (it re-renders when the config changes)")


def check_transformers_view(drafter_doc, res: PreflightResult) -> None:
    """Where the image has transformers (the engines load drafter configs through it), build the drafter
    config with its own class and compare layer_types / sliding_window with the core's copy of its rules
    (``modelconfig.hf_view``): a disagreement means the checker judged other values than the engine will read."""
    from specdeploy.core.modelconfig import HF_SLIDING_RULES, hf_view

    if not isinstance(drafter_doc, dict) or drafter_doc.get("speculators_model_type"):
        return
    mt = drafter_doc.get("model_type")
    if mt not in HF_SLIDING_RULES:
        return
    try:
        import transformers
    except ImportError:
        return
    try:
        cfg = transformers.AutoConfig.for_model(mt, **{k: v for k, v in drafter_doc.items() if k != "model_type"})
    except Exception as e:  # noqa: BLE001 - the engine would fail to load it the same way
        res.add("error", "DrafterConfigRejectedByTransformers", "drafter",
                f"transformers {transformers.__version__} refuses the drafter config as {mt}: {str(e)[:200]}")
        return
    view = hf_view(drafter_doc, "$", mt)
    got_types = tuple(getattr(cfg, "layer_types", None) or ()) or None
    got_window = getattr(cfg, "sliding_window", None)
    want_window = view.sliding_window.value if view.sliding_window is not None else None
    if got_types != view.layer_types or got_window != want_window:
        res.add("error", "TransformersViewMismatch", "drafter",
                f"transformers {transformers.__version__} builds layer_types {list(got_types or [])} and sliding_window "
                f"{got_window}, the checker assumed {list(view.layer_types or [])} and {want_window}: the engine reads "
                "transformers' values; update specdeploy.core.modelconfig.hf_view for this transformers release")


def _check_plan(ec, d, res: PreflightResult) -> None:
    """What the engine config records vs what the mounted drafter implies."""
    from specdeploy.core import methods

    sp = ec.speculation
    if not methods.uses_dflash_path(sp.method):
        for name, want, got in (("numSpeculativeTokens", d.num_speculative_tokens, sp.num_speculative_tokens),
                                ("blockSize", d.block_size, sp.block_size), ("steps", d.steps, sp.steps),
                                ("topk", d.topk, sp.topk)):
            if want != got:
                res.add("error", "SpeculationPlanChanged", "engine config speculation",
                        f"{name} is {got} but the check of the mounted files derives {want}: re-check the deployment")
        return
    if list(sp.target_layer_ids) != list(d.target_layer_ids):
        res.add("error", "TargetLayerIdsChanged", "drafter target_layer_ids",
                f"the mounted drafter reads target layers {list(d.target_layer_ids)} but the operator checked "
                f"{list(sp.target_layer_ids)}: the engine maps the mounted ids (+1 for 'before layer i' capture) and a "
                "different list silently collapses acceptance; re-check the pair with the mounted files")
    if list(sp.layer_types) != list(d.layer_types):
        res.add("error", "LayerTypesChanged", "drafter layer_types",
                f"the mounted drafter has layer types {list(d.layer_types)} but the operator checked {list(sp.layer_types)}")
    if sp.drafter_window != d.drafter_window:
        res.add("error", "DrafterWindowChanged", "drafter sliding_window",
                f"the mounted drafter's sliding window is {d.drafter_window} but the operator checked {sp.drafter_window}")
    if sp.num_speculative_tokens != sp.block_size - 1:
        res.add("error", "SpeculativeTokensInconsistent", "engine config speculation",
                f"numSpeculativeTokens {sp.num_speculative_tokens} is not blockSize - 1 = {sp.block_size - 1}")


def _check_sglang_args(ec, d, row, info, argv: Sequence[str], where: str, res: PreflightResult) -> None:
    from specdeploy.core import methods

    f = row.flags
    method = ec.speculation.method
    want_algo = row.engine_method(method) or "?"
    algo = _last(argv, f["algorithm"])
    if algo is None or (algo[1] or "").upper() != want_algo:
        res.add("error", "AlgorithmFlagMismatch", where,
                f"{f['algorithm']} is {algo[1] if algo else 'missing'}; method {method} on SGLang {ec.engine_version} "
                f"needs {f['algorithm']} {want_algo}")
    draft_ref = (ec.drafter.model if ec.drafter is not None else ec.target.model if method == "mtp" else None)
    for key, ref, role in (("draft_model", draft_ref, "drafter" if ec.drafter is not None else "target (MTP)"),
                           ("model", ec.target.model, "target")):
        got = _last(argv, f[key])
        if ref is None:
            if got is not None:
                res.add("error", "ModelPathMismatch", where, f"{f[key]} is {got[1]} but method {method} has no drafter")
        elif got is None or got[1] != ref:
            res.add("error", "ModelPathMismatch", where,
                    f"{f[key]} is {got[1] if got else 'missing'} but the engine config's {role} is {ref}")
    if not methods.uses_dflash_path(method):
        _check_sglang_method_args(d, f, method, argv, where, res)
        return

    # block size: --speculative-num-draft-tokens (and the alias, when present) == block size
    nd = _last(argv, f["num_draft_tokens"])
    if nd is None:
        res.add("error", "BlockSizeFlagMissing", where,
                f"{f['num_draft_tokens']} is missing: SGLang would not draft blocks of {d.block_size}; "
                f"add {f['num_draft_tokens']} {d.block_size}")
    elif _as_int(nd[1]) != d.block_size:
        res.add("error", "BlockSizeFlagMismatch", where,
                f"{f['num_draft_tokens']} is {nd[1]} but the block size is {d.block_size}; render "
                f"{f['num_draft_tokens']} {d.block_size}")
    alias = _last(argv, "--speculative-dflash-block-size")
    if alias is not None and _as_int(alias[1]) != d.block_size:
        res.add("error", "BlockSizeFlagMismatch", where,
                f"--speculative-dflash-block-size {alias[1]} disagrees with the block size {d.block_size}")

    # window: the compact-cache flag this version parses, present exactly when the check (re-run on the
    # mounted files) derives one, with that value; absent when SGLang windows the sliding layers itself
    flag = f.get("draft_window")
    other_names = sorted({r.flags["draft_window"] for r in info.releases if "draft_window" in r.flags} - {flag})
    renamed = [x for x in flag_values(argv, other_names) if flag is None or _norm(x[0]) != _norm(flag)]
    if renamed:
        res.add("error", "DraftWindowFlagRenamed", where,
                f"{renamed[-1][0]} is not the window flag of SGLang {ec.engine_version}; it is {flag}")
    got = _last(argv, flag) if flag else None
    got_val = _as_int(got[1]) if got else None
    if got is not None and got_val is None:
        res.add("error", "DraftWindowFlagInvalid", where, f"{flag} {got[1]!r} is not an integer")
    elif d.draft_window is None and got is not None:
        why = (f"SGLang {ec.engine_version} windows the mounted drafter's sliding layers itself (window "
               f"{d.native_window})" if d.native_window else "the deployment asks for no compact cache")
        res.add("error", "DraftWindowFlagUnexpected", where,
                f"{flag} {got[1]} is set but {why}: the compact cache would also truncate every full-attention "
                "draft layer to that window. The operator renders it only for spec.speculation.draftWindow")
    elif d.draft_window is not None and got is None:
        res.add("error", "DraftWindowFlagMissing", where,
                f"{flag} is missing; the check of the mounted drafter derives {d.draft_window} "
                + (f"(SGLang {ec.engine_version} does not window the drafter's sliding layers itself)"
                   if d.drafter_window and not d.native_window else "(spec.speculation.draftWindow)"))
    elif d.draft_window is not None and got_val != d.draft_window:
        res.add("error", "DraftWindowFlagMismatch", where,
                f"{flag} is {got_val} but the check of the mounted drafter derives {d.draft_window}"
                + (f" (its sliding window is {d.drafter_window})" if d.drafter_window else ""))
    if d.max_model_len is not None and "max_model_len" in f:
        ctx = _last(argv, f["max_model_len"])
        if ctx is None or _as_int(ctx[1]) != d.max_model_len:
            res.add("error", "ContextLengthFlagMismatch", where,
                    f"{f['max_model_len']} is {ctx[1] if ctx else 'missing'} but spec.engine.maxModelLen is {d.max_model_len}")


def _check_sglang_method_args(d, f, method: str, argv: Sequence[str], where: str, res: PreflightResult) -> None:
    """Steps, top-k and draft tokens of the methods outside the DFlash path, as the check derived them."""
    want = [("num_steps", d.steps), ("eagle_topk", d.topk), ("num_draft_tokens", d.block_size)] if d.steps is not None \
        else [] if method in ("ngram", "suffix") else [("num_draft_tokens", d.block_size)]
    for key, val in want:
        got = _last(argv, f[key])
        if got is None or _as_int(got[1]) != val:
            res.add("error", "SpeculationFlagMismatch", where,
                    f"{f[key]} is {got[1] if got else 'missing'} but the check derives {val}")


def _check_vllm_args(ec, d, argv: Sequence[str], where: str, res: PreflightResult, row=None) -> None:
    if not argv or argv[0] != ec.target.model:
        res.add("error", "ModelPathMismatch", where,
                f"the first argument of `vllm serve` is {argv[0] if argv else 'missing'} but the target is {ec.target.model}")
    got = _last(argv, "--speculative-config", "-sc")
    if got is None or got[1] is None:
        res.add("error", "SpeculativeConfigMissing", where,
                "--speculative-config is missing: vLLM would serve without the drafter")
        return
    try:
        sc = json.loads(got[1])
        if not isinstance(sc, dict):
            raise ValueError("not an object")
    except ValueError as e:
        res.add("error", "SpeculativeConfigInvalid", where, f"--speculative-config is not a JSON object: {e}")
        return
    from specdeploy.core import methods

    method = ec.speculation.method
    want_method = (row.engine_method(method) if row is not None else None) or method
    if sc.get("method") != want_method:
        res.add("error", "SpeculativeConfigMismatch", where,
                f"--speculative-config method is {sc.get('method')!r}, not {want_method!r} (method {method})")
    want_model = ec.drafter.model if ec.drafter is not None else None
    if sc.get("model") != want_model:
        res.add("error", "ModelPathMismatch", where,
                f"--speculative-config model is {sc.get('model')!r} but the engine config's drafter is {want_model}"
                + ("" if ec.drafter is not None else f" (method {method} takes none)"))
    if methods.uses_dflash_path(method):
        want = d.block_size - 1
        if sc.get("num_speculative_tokens") != want:
            res.add("error", "BlockSizeFlagMismatch", where,
                    f"--speculative-config num_speculative_tokens is {sc.get('num_speculative_tokens')!r}; block size "
                    f"{d.block_size} needs {want}")
    elif method != "suffix" and sc.get("num_speculative_tokens") != d.num_speculative_tokens:
        res.add("error", "SpeculationFlagMismatch", where,
                f"--speculative-config num_speculative_tokens is {sc.get('num_speculative_tokens')!r}; the check "
                f"derives {d.num_speculative_tokens}")


def _check_env(ec, d, res: PreflightResult) -> None:
    for key, val in d.engine_env.items():
        if ec.env.get(key) != val:
            res.add("error", "MixedLayersEnvMissing", "engine env",
                    f"the mounted drafter mixes sliding and full attention layers: vLLM {ec.engine_version} needs "
                    f"{key}={val} (V2 model runner; NotImplementedError otherwise), the engine env has "
                    f"{key}={ec.env.get(key, '(unset)')}")


def _check_flag_snapshot(ec, argv: Sequence[str], where: str, res: PreflightResult) -> None:
    """Flags the recorded parser of this engine version would reject (when a snapshot exists)."""
    from specdeploy.core import flagdrift
    from specdeploy.core.engines import cpu_build

    build = cpu_build(ec.engine) if ec.gpu_profile == "cpu" else None
    try:
        problems = flagdrift.check_argv(build.snapshot if build else ec.engine, ec.engine_version, list(argv), ec.env)
    except LookupError:
        return
    for p in problems[:5]:
        res.add("error", "EngineFlagRejected", where, p)


def fetch_hub_configs(download_dir: str, res: PreflightResult, **models: tuple[str, str | None]) -> dict[str, str]:
    """Download config.json of hub models (``role=(repo id, revision)``) into ``download_dir/<role>``;
    returns role -> directory for the ones fetched (failures are reported in ``res``)."""
    from .hubfiles import HubFetchError, fetch_config

    out = {}
    for role, (repo_id, revision) in models.items():
        dest = os.path.join(download_dir, role)
        try:
            fetch_config(repo_id, revision, dest)
        except HubFetchError as e:
            res.add("error", "ConfigFetchFailed", role, f"{e}; the engine would fail the same way")
            continue
        out[role] = dest
    return out


def _check_baked(ec, drafter_doc, drafter_dir: str, dfile: str, expect: bool, res: PreflightResult) -> None:
    """A drafter baked into the image: BAKED.json's digest, the mounted config's and the engine config's agree."""
    from specdeploy.core.engineconfig import config_digest

    from .hubfiles import BAKED_FILE, read_baked

    base = drafter_dir if os.path.isdir(drafter_dir) else os.path.dirname(drafter_dir)
    try:
        baked = read_baked(base)
    except (OSError, ValueError) as e:
        res.add("error", "BakedManifestInvalid", "drafter", f"{os.path.join(base, BAKED_FILE)}: {e}")
        return
    if baked is None:
        if expect:
            res.add("error", "BakedDrafterMissing", "drafter",
                    f"the operator chose this image because its image table says it carries the drafter, but "
                    f"{os.path.join(base, BAKED_FILE)} does not exist: the image was built without DRAFTER_REPO; "
                    "fix the image table (core/engines.py) or set spec.engine.image")
        return
    got = config_digest(drafter_doc)
    want = baked.get("config_digest")
    if want != got:
        res.add("error", "BakedDigestMismatch", "drafter",
                f"{dfile} ({got[:19]}...) is not the config.json baked into the image ({str(want)[:19]}..., "
                f"{baked.get('repo')}@{str(baked.get('revision'))[:12]}): the image's drafter files were altered")
    if ec.drafter.config_digest is not None and want != ec.drafter.config_digest:
        res.add("error", "BakedDigestMismatch", "drafter",
                f"the image carries {baked.get('repo')}@{str(baked.get('revision'))[:12]} (config {str(want)[:19]}...) but the "
                f"operator checked a drafter config {ec.drafter.config_digest[:19]}...: the image table names the "
                "wrong image for this drafter revision")
    if ec.drafter.revision and baked.get("revision") and ec.drafter.revision != baked.get("revision"):
        res.add("error", "BakedRevisionMismatch", "drafter",
                f"spec.drafter.revision is {ec.drafter.revision} but the image carries revision {baked.get('revision')}")


def run_preflight(target_dir: str, drafter_dir: str | None, engine_config: str, *, strict_digest: bool = True,
                  expect_baked: bool = False, res: PreflightResult | None = None) -> PreflightResult:
    res = res if res is not None else PreflightResult()
    ec = load_engine_config(engine_config, res)
    t = read_config(target_dir, "target", res)
    dr = read_config(drafter_dir, "drafter", res) if drafter_dir is not None else (None, "")
    if ec is None or t is None or dr is None:
        return res
    (target_doc, tfile), (drafter_doc, dfile) = t, dr
    if (ec.drafter is None) != (drafter_dir is None):
        res.add("error", "DrafterPresenceMismatch", "drafter",
                f"the engine config {'has no' if ec.drafter is None else 'has a'} drafter (method "
                f"{ec.speculation.method}) but the preflight was {'given' if drafter_dir else 'not given'} one")
        return res
    _check_digests(ec, target_doc, drafter_doc, {"target": tfile, "drafter": dfile}, res, strict_digest)
    if drafter_dir is not None:
        _check_baked(ec, drafter_doc, drafter_dir, dfile, expect_baked, res)

    from specdeploy.core import engines as eng
    from specdeploy.core.checker import analyze

    check_transformers_view(drafter_doc, res)
    if ec.checker_options is None:
        res.add("error", "EngineConfigIncomplete", "engine config",
                "the engine config carries no checkerOptions (rendered by an older operator): the check "
                "cannot be re-run; upgrade the operator so that it re-renders the deployment")
        return res
    # the block size the args were rendered with, not the spec's request: a mounted drafter trained on a smaller
    # block than the engine will draft is BlockSizeAboveTrained
    analysis = analyze(drafter_doc, target_doc, replace(ec.checker_options, block_size=ec.speculation.block_size))
    for f in analysis.findings:
        src = {"drafter": dfile, "target": tfile}.get(f.source.value, "deployment")
        res.add(f.severity.value, f.code, f"{src} {f.path}" if f.source.value != "spec" else f.path, f.message)
    d = analysis.derived
    if d is None:
        return res
    info = eng.get_engine(ec.engine)
    row = info.release_for(ec.engine_version)
    _check_plan(ec, d, res)
    arg_lists = [("engine args", ec.args)] + ([("worker args", ec.worker_args)] if ec.worker_args else [])
    if row is not None:
        for where, argv in arg_lists:
            if ec.engine == "sglang":
                _check_sglang_args(ec, d, row, info, argv, where, res)
            else:
                _check_vllm_args(ec, d, argv, where, res, row)
            if ec.nodes == 1:
                _check_flag_snapshot(ec, argv, where, res)
    _check_env(ec, d, res)
    if list(ec.command) != list(info.entrypoint):
        res.add("warning", "EntrypointUnexpected", "engine command",
                f"command {ec.command} is not {info.display_name}'s entrypoint {list(info.entrypoint)}")

    if d.draft_window is not None:
        win = f"compact draft cache {row.flags.get('draft_window') if row else ''} {d.draft_window}".replace("  ", " ")
        if d.drafter_window:
            win = f"sliding window {d.drafter_window}; {win}"
    elif d.native_window:
        win = f"sliding window {d.native_window} applied by the engine (read from config.json)"
    else:
        win = f"sliding window {d.drafter_window} not applied (draftWindow off)" if d.drafter_window else "no sliding layers"
    res.summary = [
        f"engine {ec.engine} {ec.engine_version}; target {tfile}; drafter {dfile}",
        f"block {d.block_size}; {win}; target layers {list(d.target_layer_ids)}; "
        f"layers {''.join('S' if x == 'sliding_attention' else 'F' for x in d.layer_types)}"
        + (f"; env {', '.join(f'{k}={v}' for k, v in d.engine_env.items())}" if d.engine_env else ""),
    ]
    return res


def run_target_only(target_dir: str, engine_config: str, *, strict_digest: bool = True,
                    res: PreflightResult | None = None) -> PreflightResult:
    """The preflight of an engine pod with speculation off (a benchmark's baseline variant): the mounted or fetched
    target config is the one the operator checked, the argv carries no speculative flag (it serves the target
    alone), the release's parser accepts it, and the command is the engine's entrypoint."""
    res = res if res is not None else PreflightResult()
    ec = load_engine_config(engine_config, res)
    t = read_config(target_dir, "target", res)
    if ec is None or t is None:
        return res
    target_doc, tfile = t
    _check_digests(ec.model_copy(update={"drafter": None}), target_doc, None, {"target": tfile}, res, strict_digest)

    from specdeploy.core import engines as eng
    from specdeploy.core.render import strip_speculation_args

    info = eng.get_engine(ec.engine)
    arg_lists = [("engine args", ec.args)] + ([("worker args", ec.worker_args)] if ec.worker_args else [])
    for where, argv in arg_lists:
        try:
            bare = strip_speculation_args(ec.engine, ec.engine_version, list(argv))
        except ValueError as e:
            res.add("error", "EngineReleaseUnknown", where, str(e))
            continue
        extra = [a for a in argv if a.startswith("-") and a not in bare]
        if bare != list(argv):
            res.add("error", "SpeculationNotOff", where,
                    f"speculation is off for this pod (--no-speculation) but the argv carries {' '.join(extra[:4])}: "
                    "the engine would load a drafter the preflight did not check")
        if ec.nodes == 1:
            _check_flag_snapshot(ec, argv, where, res)
    if list(ec.command) != list(info.entrypoint):
        res.add("warning", "EntrypointUnexpected", "engine command",
                f"command {ec.command} is not {info.display_name}'s entrypoint {list(info.entrypoint)}")
    res.summary = [f"engine {ec.engine} {ec.engine_version}; target {tfile}; speculation off (no drafter)"]
    return res


def prefetch_hub_weights(hf_home: str, res: PreflightResult, **models: tuple[str, str | None]) -> None:
    """Download hub models' weights (``role=(repo id, revision)``) into the persistent hub cache at ``hf_home``,
    one pod at a time (a file lock per repository); a line per model goes to the summary."""
    from .hubfiles import HubFetchError, prefetch_weights

    for role, (repo_id, revision) in models.items():
        try:
            got = prefetch_weights(repo_id, revision, hf_home, log=lambda m: print(m, file=sys.stderr, flush=True))
        except HubFetchError as e:
            res.add("error", "WeightsFetchFailed", role, f"{e}; the engine would fail the same way")
            continue
        except OSError as e:
            res.add("error", "WeightsCacheUnwritable", role,
                    f"cannot write the hub cache {hf_home}: {e.strerror or e}; the claim or node path must be "
                    "writable by the runtime user (uid/gid 65532)")
            continue
        what = (f"{got['downloaded']} of {got['files']} files downloaded ({got['bytes'] / 1e6:.1f} MB)"
                if got["downloaded"] else f"all {got['files']} files already in the cache, none downloaded")
        res.summary.append(f"weights {role} {repo_id}@{got['commit'][:12]}: {what} ({hf_home})")
