"""The ``specdeploy-runtime`` command (pod side).

Reads the engine config document the operator rendered (``/etc/specdeploy/engine-config.json``).
Imports nothing heavy for ``--help``; torch only where kernels live.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Sequence

PROG = "specdeploy-runtime"
DEFAULT_ENGINE_CONFIG = "/etc/specdeploy/engine-config.json"


def _load_engine_config(path: str):
    import pydantic

    from specdeploy.core.engineconfig import EngineConfig

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise SystemExit(f"{PROG}: error: engine config not found: {path}")
    except json.JSONDecodeError as e:
        raise SystemExit(f"{PROG}: error: {path} is not valid JSON: line {e.lineno}: {e.msg}")
    try:
        return EngineConfig.model_validate(doc)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise SystemExit(f"{PROG}: error: {path}: invalid engine config at {where or '(document)'}: {first.get('msg')}")


def cmd_show(args: argparse.Namespace) -> int:
    ec = _load_engine_config(args.engine_config)
    if args.output == "json":
        print(ec.to_json(), end="")
        return 0
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(ec.env.items()))
    print(f"engine: {ec.engine} {ec.engine_version}; speculation: {ec.speculation.method}, block {ec.speculation.block_size}, "
          f"draft window {ec.speculation.draft_window}")
    print(f"command: {env} {shlex.join(ec.command + ec.args)}".strip())
    if ec.worker_args:
        print(f"workers: {env} {shlex.join(ec.command + ec.worker_args)}".strip())
    return 0


# The pod's terminationMessagePath (Kubernetes' default). A runner that is not a container runtime
# (specdeploy dev kubelet runs containers as local processes) names the file in this variable.
TERMINATION_LOG = os.environ.get("SPECDEPLOY_TERMINATION_LOG") or "/dev/termination-log"
# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_LIMIT = 4096


def cmd_inspect(args: argparse.Namespace) -> int:
    """Read config.json from a mounted model and report it in the termination message
    (gzip + base64, so real configs fit in 4 KiB); the operator reads it from the pod status."""
    import base64
    import gzip
    import os

    from specdeploy.core.engineconfig import config_digest

    path = os.path.join(args.path, "config.json") if os.path.isdir(args.path) else args.path

    def report(text: str, code: int) -> int:
        try:
            with open(args.termination_log, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            pass
        print(text, file=sys.stderr if code else sys.stdout)
        return code

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        doc = json.loads(raw)
    except FileNotFoundError:
        return report(f"config.json not found at {path}", 1)
    except (ValueError, UnicodeDecodeError) as e:
        return report(f"{path} is not valid JSON: {e}", 1)
    except OSError as e:
        return report(f"cannot read {path}: {e.strerror}", 1)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    envelope = json.dumps({"digest": config_digest(doc), "gz": base64.b64encode(gzip.compress(canonical, 9)).decode()})
    if len(envelope) > TERMINATION_LIMIT:
        return report(f"{path} is too large to report ({len(envelope)} bytes compressed); use configFrom.configMapKeyRef", 1)
    return report(envelope, 0)


def _write_termination(path: str, text: str) -> None:
    from .preflight import termination_text

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(termination_text(text))
    except OSError:
        pass


def cmd_preflight(args: argparse.Namespace) -> int:
    from .preflight import PreflightResult, fetch_hub_configs, prefetch_hub_weights, run_preflight, run_target_only

    if args.no_speculation and (args.drafter_dir is not None or args.drafter_model is not None or args.expect_baked):
        raise SystemExit(f"{PROG} preflight: error: --no-speculation checks the target alone: drop --drafter-dir, "
                         "--drafter-model and --expect-baked")
    for role in ("target", "drafter"):
        if role == "drafter" and args.no_speculation:
            continue
        given = (getattr(args, f"{role}_dir") is not None) + (getattr(args, f"{role}_model") is not None)
        if given > 1 or (given == 0 and role == "target"):
            raise SystemExit(f"{PROG} preflight: error: give exactly one of --{role}-dir (mounted model) and "
                             f"--{role}-model (hub repo id: config.json is downloaded)"
                             + ("; neither for a method without drafter (mtp, ngram, suffix)" if role == "drafter" else ""))
    res = PreflightResult()
    hub = {role: (getattr(args, f"{role}_model"), getattr(args, f"{role}_revision"))
           for role in ("target", "drafter") if getattr(args, f"{role}_model")}
    dirs = fetch_hub_configs(args.download_dir, res, **hub) if hub else {}
    if len(dirs) == len(hub) and args.no_speculation:
        res = run_target_only(args.target_dir or dirs["target"], args.engine_config,
                              strict_digest=not args.allow_digest_mismatch, res=res)
    elif len(dirs) == len(hub):
        res = run_preflight(args.target_dir or dirs["target"], args.drafter_dir or dirs.get("drafter"), args.engine_config,
                            strict_digest=not args.allow_digest_mismatch, expect_baked=args.expect_baked, res=res)
    if args.weights_cache and hub and res.ok:
        # only after the check passed: a refused pair downloads nothing
        prefetch_hub_weights(args.weights_cache, res, **hub)
    text = res.message()
    _write_termination(args.termination_log, text)
    if args.output == "json":
        print(json.dumps(res.to_dict(), indent=2, sort_keys=True))
    else:
        print(text, file=sys.stdout if res.ok else sys.stderr)
    return 0 if res.ok else 1


def cmd_tune(args: argparse.Namespace) -> int:
    """Run the engine's own fused-MoE tuner for this node's GPU and the target's expert shape, and
    install the file where the engine reads it (--out-dir) and/or report it (termination log)."""
    import os
    import subprocess
    import tempfile

    from . import tuning

    def fail(code: int, text: str) -> int:
        _write_plain(args.termination_log, text)
        print(f"{PROG} tune: {text}", file=sys.stderr)
        return code

    if (args.target_dir is None) == (args.target_model is None):
        raise SystemExit(f"{PROG} tune: error: give exactly one of --target-dir and --target-model")
    work = tempfile.mkdtemp(prefix="specdeploy-tune-", dir=args.work_dir)
    model_dir = args.target_dir
    if args.target_model:
        from .hubfiles import HubFetchError, fetch_config

        model_dir = os.path.join(work, "model")
        try:
            fetch_config(args.target_model, args.target_revision, model_dir)
        except HubFetchError as e:
            return fail(1, str(e))
    cfg = os.path.join(model_dir, "config.json") if os.path.isdir(model_dir) else model_dir
    try:
        with open(cfg, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as e:
        return fail(1, f"cannot read {cfg}: {e}")
    try:
        shape = tuning.moe_shape(doc, args.engine, args.tp, dtype=args.dtype,
                                 shared_expert_fusion=not args.disable_shared_experts_fusion)
    except tuning.NotMoE as e:
        return fail(3, f"{e} (nothing to do)")
    except tuning.UnsupportedShape as e:
        return fail(3, str(e))
    try:
        device, count, triton_version = tuning.detect_gpu()
    except tuning.NoGpu as e:
        return fail(2, f"no GPU: {e}")
    if args.gpu_device_name and tuning.device_file_name(args.engine, device) != args.gpu_device_name:
        return fail(1, f"this node's GPU is {device!r} but the deployment's profile expects {args.gpu_device_name}: "
                       "the tuned file would be named for another GPU; check the Job's nodeSelector")
    name = tuning.config_file_name(args.engine, shape, device)
    rel = tuning.relative_path(args.engine, name, triton_version if args.engine == "sglang" else None)
    out = os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)
    try:
        argv = tuning.tuning_command(args.engine, os.path.dirname(cfg), args.tp, out, dtype=shape.dtype,
                                     script=args.script, batch_sizes=args.batch_sizes,
                                     disable_shared_experts_fusion=args.disable_shared_experts_fusion)
    except tuning.UnsupportedShape as e:
        return fail(3, str(e))
    if not os.path.exists(argv[1]):
        return fail(1, f"the {args.engine} tuning script {argv[1]} is not in this image (images/runtime/{args.engine}/Dockerfile adds it)")
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return fail(1, f"the {args.engine} tuning script distributes batch sizes over the GPUs with ray, which is not "
                       "installed in this image (pip install ray)")
    print(f"{PROG} tune: {device} x{count}, triton {triton_version}: {shlex.join(argv)}", flush=True)
    proc = subprocess.run(argv, cwd=out)
    if proc.returncode != 0:
        return fail(1, f"the {args.engine} tuner exited {proc.returncode}")
    try:
        content = tuning.collect_results(args.engine, out, name)
    except RuntimeError as e:
        return fail(1, str(e))
    if args.out_dir:
        dest = os.path.join(args.out_dir, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as fh:
            fh.write(content)
        print(f"{PROG} tune: wrote {dest}")
    env = tuning.encode_envelope(args.engine, tuning.device_file_name(args.engine, device), triton_version,
                                 {rel: content}, key=args.key)
    if len(env.encode()) > tuning.TERMINATION_LIMIT:
        if not args.out_dir:
            return fail(1, f"the tuned file is {len(content)} bytes and does not fit the 4 KiB termination message "
                           "compressed; use spec.tuning.storage: pvc")
        env = json.dumps({"kind": tuning.ENVELOPE_KIND, "key": args.key, "written": [rel]})
    _write_plain(args.termination_log, env)
    return 0


def cmd_install_tuned(args: argparse.Namespace) -> int:
    from . import tuning

    try:
        done = tuning.install_from_configmap(args.src, args.dest)
    except (OSError, ValueError) as e:
        text = f"tuned kernels from {args.src} could not be installed: {e}"
        _write_plain(args.termination_log, text)
        print(f"{PROG} install-tuned: {text}", file=sys.stderr)
        return 1
    print(f"{PROG} install-tuned: " + (", ".join(done) if done else "no tuned kernels yet (the engine uses its defaults)"))
    return 0


def cmd_bake_drafter(args: argparse.Namespace) -> int:
    import os

    from .hubfiles import HubFetchError, bake_drafter

    if not args.repo:
        os.makedirs(args.out, exist_ok=True)
        print(f"{PROG} bake-drafter: no DRAFTER_REPO: no drafter baked")
        return 0
    try:
        baked = bake_drafter(args.repo, args.revision or "", args.out, expect_digest=args.expect_digest or None)
    except HubFetchError as e:
        print(f"{PROG} bake-drafter: error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(baked, sort_keys=True))
    return 0


def _write_plain(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text[:4096])
    except OSError:
        pass


def cmd_launch(args: argparse.Namespace) -> int:
    import os

    from .launch import build_exec, exec_engine

    ec = _load_engine_config(args.engine_config)
    try:
        argv, env = build_exec(ec, args.role, os.environ)
    except ValueError as e:
        raise SystemExit(f"{PROG}: error: {e}")
    if args.dry_run:
        print(" ".join([*(f"{k}={shlex.quote(v)}" for k, v in sorted(ec.env.items())), shlex.join(argv)]))
        return 0
    return exec_engine(argv, env)


def _layers(text: str) -> tuple[str, ...]:
    names = {"sliding": "sliding_attention", "sliding_attention": "sliding_attention", "s": "sliding_attention",
             "full": "full_attention", "full_attention": "full_attention", "f": "full_attention"}
    out = []
    for part in text.split(","):
        key = part.strip().lower()
        if key not in names:
            raise argparse.ArgumentTypeError(f"layer type {part!r}: use sliding or full (comma separated)")
        out.append(names[key])
    if not out:
        raise argparse.ArgumentTypeError("give at least one layer type")
    return tuple(out)


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


def _int_list(text: str) -> tuple[int, ...]:
    return tuple(_positive(x.strip()) for x in text.split(",") if x.strip())


def _torch_setup(args: argparse.Namespace) -> None:
    import torch

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"{PROG}: error: --device cuda: torch {torch.__version__} sees no CUDA device")


def cmd_verify_window(args: argparse.Namespace) -> int:
    from .verify import VerifyOptions, format_report, run_verify

    _torch_setup(args)
    if args.block > args.window and not args.drafter:  # --drafter: the block size is the drafter's
        raise SystemExit(f"{PROG}: error: --block {args.block} exceeds --window {args.window}")
    if bool(args.drafter) != bool(args.target):
        raise SystemExit(f"{PROG}: error: --drafter and --target go together (a trained drafter and the target feeding it)")
    layers = args.layers
    if layers is None and not args.drafter:
        layers = ("sliding_attention",) * 4 + ("full_attention",)
    opts = VerifyOptions(context=args.context, window=args.window, block=args.block, layers=layers,
                         keep=args.keep, device=args.device, tolerance=args.tolerance, seed=args.seed,
                         fault=args.fault, causal=args.causal, drafter_dir=args.drafter, target_dir=args.target)
    report = run_verify(opts)
    if args.output == "json":
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_report(report))
    return 0 if report["ok"] else 1


def cmd_bench_window(args: argparse.Namespace) -> int:
    from .bench import BenchOptions, format_bench, run_bench

    if args.threads is None and args.device == "cpu":
        args.threads = 1  # steady figures on a shared machine; raise it on a dedicated host
    _torch_setup(args)
    opts = BenchOptions(contexts=args.contexts, window=args.window, keep=args.keep, block=args.block, layers=args.layers,
                        device=args.device, dtype=args.dtype, repeats=args.repeats, warmup=args.warmup, impl=args.impl,
                        intermediate_size=args.intermediate_size)
    report = run_bench(opts)
    if args.output == "json":
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_bench(report))
    return 0


def cmd_train_tiny_drafter(args: argparse.Namespace) -> int:
    """A development tool: the training lives in the development rig (``specdeploy_dev.tinytrain``, the
    specdeploy-dev distribution), which the runtime never imports and no image contains; handed over
    by name when the command runs."""
    import importlib

    try:
        rig = importlib.import_module("specdeploy_dev.cli")
    except ModuleNotFoundError as e:
        if e.name not in ("specdeploy_dev", "specdeploy_dev.cli"):
            raise
        raise SystemExit(f"{PROG} train-tiny-drafter: error: this is a development tool: it needs the development "
                         "rig, the specdeploy-dev distribution (pip install -e operator/dev from the repository; bash "
                         ".ci/setup installs it), which the runtime images do not contain")
    return rig.cmd_train_tiny_drafter(args)


def cmd_bench_client(args: argparse.Namespace) -> int:
    from .benchclient import main as bench_main

    return bench_main(args.plan, workdir=args.work_dir)


def _add_pod_commands(sub) -> None:
    """The commands of the engine pod: show-config, inspect-config, preflight, launch."""
    s = sub.add_parser("show-config", help="validate the rendered engine config and print the engine command line")
    s.add_argument("--engine-config", default=DEFAULT_ENGINE_CONFIG, metavar="FILE")
    s.add_argument("--output", "-o", choices=["text", "json"], default="text")
    s.set_defaults(func=cmd_show)
    i = sub.add_parser("inspect-config", help="report a mounted model's config.json in the termination message")
    i.add_argument("--path", required=True, help="model directory (or config.json) inside the pod")
    i.add_argument("--termination-log", default=TERMINATION_LOG, metavar="FILE")
    i.set_defaults(func=cmd_inspect)

    pf = sub.add_parser("preflight", help="check the rendered engine command against the mounted config.json files",
                        description="Re-run the drafter/target check on the config.json files mounted in the pod and "
                                    "check the engine command the operator rendered against them. Exit 1 on any error; "
                                    "the message also goes to the termination log.")
    pf.add_argument("--target-dir", metavar="DIR", help="mounted target model (directory or config.json)")
    pf.add_argument("--drafter-dir", metavar="DIR", help="mounted drafter model (directory or config.json)")
    pf.add_argument("--target-model", metavar="REPO", help="hub target: download only its config.json (HF_ENDPOINT, HF_TOKEN)")
    pf.add_argument("--target-revision", metavar="REV", help="revision of --target-model (default: main)")
    pf.add_argument("--drafter-model", metavar="REPO", help="hub drafter: download only its config.json")
    pf.add_argument("--drafter-revision", metavar="REV", help="revision of --drafter-model (default: main)")
    pf.add_argument("--download-dir", default="/var/run/specdeploy/configs", metavar="DIR",
                    help="where hub config.json files go (an emptyDir in the pod)")
    pf.add_argument("--weights-cache", metavar="HF_HOME",
                    help="a persistent hub cache (spec.cache): after the check passes, download the hub models' "
                    "weights into HF_HOME/hub, one pod at a time (a file lock per repository); files already there "
                    "are not downloaded again")
    pf.add_argument("--expect-baked", action="store_true",
                    help="the drafter is baked into the image: require its BAKED.json and check its digest")
    pf.add_argument("--no-speculation", action="store_true",
                    help="speculation is off in this pod (a benchmark's baseline variant): check the target alone and "
                    "that the engine argv carries no speculative flag")
    pf.add_argument("--engine-config", default=DEFAULT_ENGINE_CONFIG, metavar="FILE")
    pf.add_argument("--termination-log", default=TERMINATION_LOG, metavar="FILE")
    pf.add_argument("--allow-digest-mismatch", action="store_true",
                    help="report mounted configs that differ from the checked ones as a warning, not an error")
    pf.add_argument("--output", "-o", choices=["text", "json"], default="text")
    pf.set_defaults(func=cmd_preflight)

    la = sub.add_parser("launch", help="exec the engine with the rendered exec-form command (no shell)",
                        description="Replace this process with the engine: command + args from the engine config, "
                                    "env = inherited env + the engine env. Signals reach the engine directly and its "
                                    "exit code is the container's.")
    la.add_argument("--engine-config", default=DEFAULT_ENGINE_CONFIG, metavar="FILE")
    la.add_argument("--role", choices=["auto", "leader", "worker"], default="auto",
                    help="multi-node: worker args on LeaderWorkerSet workers (auto: from LWS_WORKER_INDEX)")
    la.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    la.set_defaults(func=cmd_launch)


def _add_image_and_tuning_commands(sub) -> None:
    """The tuning Job's and the image build's commands: tune, install-tuned, bake-drafter."""
    tu = sub.add_parser("tune", help="tune the fused-MoE kernel for this node's GPU and the target's expert shape",
                        description="Run the engine's own fused-MoE tuner (a GPU is required: exit 2 without one) for "
                                    "the target's expert shape (E routed experts, N = expert intermediate size / TP) "
                                    "and install the result under the engine's naming "
                                    "(E=..,N=..,device_name=..[,dtype=..].json) in --out-dir, laid out as the "
                                    "engine reads it ($SGLANG_MOE_CONFIG_DIR/configs/triton_X_Y_Z/ or "
                                    "$VLLM_TUNED_CONFIG_FOLDER/). The result also goes to the termination log "
                                    "(gzip + base64) for the operator. Exit 3: nothing to tune (dense or non-Triton MoE).")
    tu.add_argument("--engine", required=True, choices=["sglang", "vllm"])
    tu.add_argument("--tp", type=_positive, required=True, help="tensor-parallel size of the deployment")
    tu.add_argument("--target-dir", metavar="DIR", help="mounted target model (directory or config.json)")
    tu.add_argument("--target-model", metavar="REPO", help="hub target: only its config.json is downloaded")
    tu.add_argument("--target-revision", metavar="REV")
    tu.add_argument("--dtype", default=None, help="override the quantization suffix (fp8_w8a8, int4_w4a16, ...)")
    tu.add_argument("--gpu-device-name", default=None, metavar="NAME",
                    help="expected device name in file form (GPU profile), e.g. NVIDIA_B300_SXM6_AC")
    tu.add_argument("--disable-shared-experts-fusion", action="store_true", help="SGLang: tune without the fused shared expert")
    tu.add_argument("--batch-sizes", type=_int_list, default=(), metavar="LIST", help="token counts (default: the tuner's)")
    tu.add_argument("--script", default=None, help="the engine's tuning script (default: the image's copy)")
    tu.add_argument("--out-dir", default=None, metavar="DIR", help="install the file here in the engine's layout")
    tu.add_argument("--key", default=None, help="tuning key the operator gave the Job (echoed in the result)")
    tu.add_argument("--work-dir", default=None, metavar="DIR", help="scratch directory (default: $TMPDIR)")
    tu.add_argument("--termination-log", default=TERMINATION_LOG, metavar="FILE")
    tu.set_defaults(func=cmd_tune)

    it = sub.add_parser("install-tuned", help="lay a mounted tuned-kernels ConfigMap out in the engine's directory layout")
    it.add_argument("--src", required=True, metavar="DIR", help="the mounted ConfigMap (manifest.json + kernel-*.json)")
    it.add_argument("--dest", required=True, metavar="DIR", help="the directory the engine's env var names")
    it.add_argument("--termination-log", default=TERMINATION_LOG, metavar="FILE")
    it.set_defaults(func=cmd_install_tuned)

    bd = sub.add_parser("bake-drafter", help="image build: download a drafter at a pinned commit and write BAKED.json")
    bd.add_argument("--repo", default="", help="hub repo id (empty: bake nothing)")
    bd.add_argument("--revision", default="", help="40-hex commit")
    bd.add_argument("--out", default="/opt/specdeploy/drafter", metavar="DIR")
    bd.add_argument("--expect-digest", default="", help="fail unless config.json has this digest (the image label)")
    bd.set_defaults(func=cmd_bake_drafter)


def _add_window_commands(sub) -> None:
    """The windowed draft cache's proof and bench: verify-window, bench-window."""
    def model_args(a: argparse.ArgumentParser, *, window_help: str) -> None:
        a.add_argument("--window", type=_positive, default=2048, help=window_help)
        a.add_argument("--block", type=_positive, default=16, help="draft block size B (default 16)")
        a.add_argument("--layers", type=_layers, default=("sliding_attention",) * 4 + ("full_attention",),
                       metavar="KINDS", help="comma-separated layer kinds, e.g. sliding,sliding,sliding,sliding,full (default)")
        a.add_argument("--keep", type=_positive, default=None, metavar="R", help="tokens the compact cache keeps")
        a.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        a.add_argument("--threads", type=_positive, default=None, help="CPU threads for torch (default: torch's)")
        a.add_argument("--output", "-o", choices=["text", "json"], default="text")

    vw = sub.add_parser("verify-window", help="prove the windowed draft cache is exact on sliding layers",
                        description="(a) keys older than p - w + 1 get attention weight exactly 0.0 on sliding layers; "
                                    "(b) a compact cache keeping r >= w - 1 tokens equals the full cache plus mask "
                                    "(fp32, max |diff| <= tolerance); (c) reports the deviation on full-attention layers. "
                                    "Exit 0 only when (a) and (b) hold.")
    vw.add_argument("--context", type=_positive, default=8192, metavar="L", help="context tokens (default 8192)")
    model_args(vw, window_help="sliding window w (default 2048)")
    vw.add_argument("--tolerance", type=float, default=1e-5)
    vw.add_argument("--seed", type=int, default=0)
    vw.add_argument("--causal", action="store_true", help="full-attention layers are causal (dflash_config.causal)")
    vw.add_argument("--fault", choices=["none", "no-window", "off-by-one", "narrow", "finite-bias", "short-cache"],
                    default="none", help="self-test: inject a deliberate bug; the verifier must then fail")
    vw.add_argument("--drafter", metavar="DIR", default=None,
                    help="real weights: a trained drafter directory (config.json + model.safetensors, e.g. "
                         "train-tiny-drafter's tiny/lang-dflash); its layers become --layers (default: all sliding) "
                         "with --window, fed by --target's layer outputs over the target's greedy output")
    vw.add_argument("--target", metavar="DIR", default=None, help="the target directory feeding --drafter")
    vw.set_defaults(func=cmd_verify_window, keep=None, layers=None)

    bw = sub.add_parser("bench-window", help="draft-step time and KV bytes, compact vs full draft cache",
                        description="Median draft-step time (KV injection of B tokens + the block forward) and KV bytes "
                                    "for the full cache and the compact cache, with the memory-bandwidth floor.")
    bw.add_argument("--contexts", type=_int_list, default=(2048, 8192, 32768), metavar="LIST",
                    help="context lengths (default 2048,8192,32768)")
    model_args(bw, window_help="sliding window w; the compact cache keeps w tokens unless --keep (default 2048)")
    bw.set_defaults(threads=None)  # on CPU: 1 unless --threads (OpenMP threads stall when cores are shared)
    bw.add_argument("--repeats", type=_positive, default=20, help="timed draft steps per point (median reported)")
    bw.add_argument("--warmup", type=int, default=3)
    bw.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    bw.add_argument("--impl", choices=["sdpa", "eager"], default="sdpa", help="attention kernel (default: fused SDPA)")
    bw.add_argument("--intermediate-size", type=int, default=0, help="add a gated MLP of this width to every layer")
    bw.set_defaults(func=cmd_bench_window)


def _add_tiny_and_bench_commands(sub) -> None:
    """The tiny trained pair and the benchmark's client Job: train-tiny-drafter, bench-client."""
    tt = sub.add_parser("train-tiny-drafter", help="train the tiny language target and distil a DFlash or EAGLE-3 drafter from it (CPU, minutes)",
                        description="Write DIR/tiny/lang-target (a 6-layer Qwen3 trained on a seeded synthetic language), "
                                    "DIR/tiny/lang-dflash (a 1-layer DFlash drafter, block 4, target_layer_ids [1, 3], "
                                    "distilled from the target's greedy output) and DIR/tiny/lang-dflash-shifted (the same "
                                    "weights, ids [2, 4]) next to `specdeploy dev tiny-models DIR`, with DIR/tiny-trained.json "
                                    "(losses, seconds, offline replay of greedy speculative decoding). With --method eagle3: "
                                    "DIR/tiny/lang-eagle3 (a 1-layer EAGLE-3 head, LlamaForCausalLMEagle3, "
                                    "eagle_aux_hidden_state_layer_ids [1, 3, 5], a 64-token draft vocabulary with d2t, trained on the "
                                    "same target's greedy output), DIR/tiny/lang-eagle3-shifted (ids [2, 4, 6]), "
                                    "DIR/tiny/lang-eagle3-shifted-down (ids [0, 2, 4]) and DIR/tiny-trained-eagle3.json. Fixed step budgets and "
                                    "seeds: the same inputs give the same bytes; the output is cached under "
                                    "$SPECDEPLOY_CACHE (default ~/.cache/specdeploy)/tiny-trained/<input digest>/.")
    tt.add_argument("directory", metavar="DIR", help="models directory (what the hub stand-in serves)")
    tt.add_argument("--method", choices=["dflash", "eagle3"], default="dflash", help="the drafter to train (default dflash)")
    tt.add_argument("--seed", type=int, default=0)
    tt.add_argument("--drafter-seed", type=int, default=None,
                    help="another drafter of the same target (the target still comes from --seed): its own initial "
                         "weights, data and batches; repositories and manifest named -seedN (tiny/lang-dflash-seedN)")
    tt.add_argument("--threads", type=_positive, default=1, help="torch CPU threads (part of the cache key; default 1)")
    tt.add_argument("--target-steps", type=_positive, default=None, help="target training steps (default 300)")
    tt.add_argument("--drafter-steps", type=_positive, default=None, help="drafter training steps (default 300)")
    tt.add_argument("--no-cache", action="store_true", help="train even when the cache holds this output")
    tt.add_argument("--output", "-o", choices=["text", "json"], default="text")
    tt.set_defaults(func=cmd_train_tiny_drafter)

    bc = sub.add_parser("bench-client", help="run one variant's points of a SpeculativeBenchmark (the client Job)",
                        description="For each point of the plan: prompts of exactly `context` tokens, a scrape of the "
                                    "engine's /metrics, the engine's own benchmark client (vllm bench serve, python -m "
                                    "sglang.bench_serving) or ours, another scrape. The last stdout line is "
                                    "SPECDEPLOY_BENCH_RESULT + JSON (tokens/s, TTFT/ITL percentiles, acceptance from "
                                    "the counters' increase, sha256 of each greedy output). Exit 1 on a bad plan or an "
                                    "engine that does not answer (no result line).")
    bc.add_argument("--plan", default="/etc/specdeploy/bench/plan.json", metavar="FILE",
                    help="the plan the operator wrote (default /etc/specdeploy/bench/plan.json)")
    bc.add_argument("--work-dir", default=None, metavar="DIR", help="scratch directory (default: $TMPDIR)")
    bc.set_defaults(func=cmd_bench_client)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="specdeploy pod runtime: check, launch and verify the rendered engine config.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    _add_pod_commands(sub)
    _add_image_and_tuning_commands(sub)
    _add_window_commands(sub)
    _add_tiny_and_bench_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
