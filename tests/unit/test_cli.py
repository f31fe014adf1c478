"""The console scripts as real processes: exit codes, output shapes, one-line errors, no tracebacks."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit import DELETE, EXAMPLES, FIXTURES, PAIRS, ROOT, pair, run_cli, set_path

EXAMPLE = EXAMPLES / "qwen3.6-27b-b300-vllm"
EXAMPLE_CR = str(EXAMPLE / "speculativedeployment.yaml")


def files(name: str) -> tuple[str, str]:
    d, t = PAIRS[name]
    return str(FIXTURES / d), str(FIXTURES / t)


def assert_usage_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, nothing on stdout, one error line on stderr, no traceback."""
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout
    assert p.stdout == ""
    err_lines = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(err_lines) == 1, p.stderr
    for n in needles:
        assert n in err_lines[0], (n, p.stderr)


# ----------------------------------------------------------------- check: real pairs


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_check_real_pair_files(name):
    d, t = files(name)
    p = run_cli("check", "--drafter", d, "--target", t)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("OK: ")
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_check_real_pair_directories(name, tmp_path):
    d, t = pair(name)
    (tmp_path / "drafter").mkdir()
    (tmp_path / "target").mkdir()
    (tmp_path / "drafter" / "config.json").write_text(json.dumps(d))
    (tmp_path / "target" / "config.json").write_text(json.dumps(t))
    p = run_cli("check", "--drafter", str(tmp_path / "drafter"), "--target", str(tmp_path / "target"))
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_check_real_pair_with_engine(engine):
    d, t = files("qwen3.6-27b")
    p = run_cli("check", "--drafter", d, "--target", t, "--engine", engine, "-o", "json")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["ok"] is True
    if engine == "vllm":
        assert doc["derived"]["engineEnv"] == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    else:  # SGLang >= 0.5.14 windows the sliding layers itself: no compact cache
        assert doc["derived"]["draftWindow"] is None and doc["derived"]["nativeWindow"] == 2048


def test_check_kimi_on_one_rtx_fails_on_memory():
    d, t = files("kimi-k2.6")
    p = run_cli("check", "--drafter", d, "--target", t, "--gpu", "rtx-pro-6000", "--gpu-count", "1")
    assert p.returncode == 1
    assert "WeightsExceedGpuMemory" in p.stdout and "--gpu-count" in p.stdout and "spec.gpu.count" not in p.stdout
    p = run_cli("check", "--drafter", d, "--target", t, "--gpu", "rtx-pro-6000", "--gpu-count", "8")
    assert p.returncode == 0, p.stdout


# ----------------------------------------------------------------- check: the definition-of-done mutations


_set = set_path
_DEL = DELETE
MUTATIONS = [
    ("drop-ids", ("dflash_config", "target_layer_ids"), _DEL, "TargetLayerIdsMissing", "$.dflash_config.target_layer_ids"),
    ("id-out-of-range", ("dflash_config", "target_layer_ids", 4), 64, "TargetLayerOutOfRange",
     "$.dflash_config.target_layer_ids[4]"),
    ("hidden-size", ("hidden_size",), 4096, "HiddenSizeMismatch", "$.hidden_size"),
    ("mask-token", ("dflash_config", "mask_token_id"), 248320, "MaskTokenOutOfRange", "$.dflash_config.mask_token_id"),
    ("layer-types", ("layer_types",), ["sliding_attention"] * 4, "LayerTypesLengthMismatch", "$.layer_types"),
    ("no-window", ("sliding_window",), None, "SlidingWindowMissing", "$.sliding_window"),
    ("window-below-block", ("sliding_window",), 8, "DraftWindowBelowBlockSize", "$.sliding_window"),
    ("wrong-type", ("num_hidden_layers",), "5", "InvalidFieldType", "$.num_hidden_layers"),
]


@pytest.mark.parametrize("label, path, value, code, jpath", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_check_mutation_exits_1_with_path(label, path, value, code, jpath, tmp_config):
    d, t = pair("qwen3.6-27b")
    _set(d, path, value)
    dp = tmp_config(d, "drafter.json")
    tp = tmp_config(t, "target.json")
    p = run_cli("check", "--drafter", dp, "--target", tp)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert p.stdout.startswith("INCOMPATIBLE")
    assert code in p.stdout and jpath in p.stdout
    [line] = [ln for ln in p.stdout.splitlines() if code in ln and jpath in ln]
    assert line.startswith("error")
    # and the same in JSON
    p = run_cli("check", "--drafter", dp, "--target", tp, "--output", "json")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert doc["ok"] is False
    assert {"severity": "error", "code": code, "path": jpath}.items() <= next(
        f for f in doc["findings"] if f["code"] == code and f["path"] == jpath).items()


def test_check_gpu_count_tensor_parallel(tmp_config):
    # (draftWindow has no check flag; the render path carries it: see test_render_spec_window_below_block.)
    d, t = pair("qwen3-8b")
    p = run_cli("check", "--drafter", tmp_config(d, "d.json"), "--target", tmp_config(t, "t.json"), "--gpu-count", "3")
    assert p.returncode == 1
    assert "TensorParallelHeadsIndivisible" in p.stdout


def test_check_json_shape():
    d, t = files("qwen3.6-27b")
    p = run_cli("check", "--drafter", d, "--target", t, "--engine", "sglang", "--engine-version", "0.5.19", "-o", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert isinstance(doc["ok"], bool) and doc["ok"]
    assert isinstance(doc["findings"], list) and doc["findings"]
    for f in doc["findings"]:
        assert {"severity", "code", "path", "message", "source"} <= set(f)
        assert f["severity"] in ("error", "warning", "info")
    assert any(f["code"] == "EngineVersionUnverified" and f["path"] == "spec.engine.version" for f in doc["findings"])


def test_check_json_errors_first(tmp_config):
    d, t = pair("qwen3.6-27b")
    d["hidden_size"] = 1024
    d["vocab_size"] = 1000
    p = run_cli("check", "--drafter", tmp_config(d, "d.json"), "--target", tmp_config(t, "t.json"), "-o", "json")
    doc = json.loads(p.stdout)
    sev = [f["severity"] for f in doc["findings"]]
    assert sev == sorted(sev, key=["error", "warning", "info"].index)
    assert doc["ok"] is False and p.returncode == 1


# ----------------------------------------------------------------- check: unusable input


def test_check_missing_file():
    _, t = files("qwen3-8b")
    p = run_cli("check", "--drafter", "/nonexistent/config.json", "--target", t)
    assert_usage_error(p, "not found", "/nonexistent/config.json")


def test_check_directory_without_config(tmp_path):
    _, t = files("qwen3-8b")
    p = run_cli("check", "--drafter", str(tmp_path), "--target", t)
    assert_usage_error(p, "config.json")


@pytest.mark.parametrize("text", ['{"a":', "", "not json", "{'single': 1}", "[1, 2,]"])
def test_check_invalid_json(text, tmp_config):
    _, t = files("qwen3-8b")
    p = run_cli("check", "--drafter", tmp_config(text, "bad.json"), "--target", t)
    assert_usage_error(p, "not valid JSON")


def test_check_not_utf8(tmp_path):
    _, t = files("qwen3-8b")
    bad = tmp_path / "x.json"
    bad.write_bytes(b"\xff\xfe\x00{")
    p = run_cli("check", "--drafter", str(bad), "--target", t)
    assert_usage_error(p)


@pytest.mark.parametrize("args, needle", [
    (["--gpu", "a100"], "a100"),
    (["--gpu-count", "0"], "--gpu-count"),
    (["--engine", "tgi"], "tgi"),
    (["--method", "medusa"], "medusa"),
])
def test_check_bad_flag_values(args, needle):
    d, t = files("qwen3-8b")
    p = run_cli("check", "--drafter", d, "--target", t, *args)
    assert_usage_error(p, needle)


@pytest.mark.parametrize("doc,kind", [("[1, 2]", "a JSON list"), ('"config"', "a JSON string"), ("null", "null")])
def test_check_non_object_config_is_unusable_input(doc, kind, tmp_config):
    _, t = files("qwen3-8b")
    p = run_cli("check", "--drafter", tmp_config(doc, "d.json"), "--target", t)
    assert_usage_error(p, f"is {kind}, not an object", "--drafter")


@pytest.mark.parametrize("text", ["{\"num_hidden_layers\": " + "1" * 5000 + "}", "[" * 100000 + "]" * 100000],
                         ids=["int-5000-digits", "nested-100000"])
def test_check_pathological_json_is_a_usage_error(text, tmp_config):
    _, t = files("qwen3-8b")
    p = run_cli("check", "--drafter", tmp_config(text, "d.json"), "--target", t)
    assert_usage_error(p)


# ----------------------------------------------------------------- render


def test_render_example_yaml():
    p = run_cli("render", "-f", EXAMPLE_CR, "--drafter-config", str(EXAMPLE / "drafter.config.json"),
                "--target-config", str(EXAMPLE / "target.config.json"))
    assert p.returncode == 0, p.stderr
    docs = list(yaml.safe_load_all(p.stdout))
    kinds = [d["kind"] for d in docs]
    assert "Deployment" in kinds and "ConfigMap" in kinds
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    sc = json.loads(c["args"][c["args"].index("--speculative-config") + 1])
    assert sc["method"] == "dflash" and sc["num_speculative_tokens"] == 15
    assert {"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "1"} in c["env"]
    assert dep["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-B300-SXM6-AC"


def test_render_example_json_and_directories(tmp_path):
    for role in ("drafter", "target"):
        (tmp_path / role).mkdir()
        (tmp_path / role / "config.json").write_text((EXAMPLE / f"{role}.config.json").read_text())
    p = run_cli("render", "-f", EXAMPLE_CR, "--drafter-config", str(tmp_path / "drafter"),
                "--target-config", str(tmp_path / "target"), "-o", "json", "--pod-monitor")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["kind"] == "List"
    assert {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "PodMonitor"} <= {i["kind"] for i in doc["items"]}


def test_render_from_stdin():
    p = run_cli("render", "-f", "-", "--drafter-config", str(EXAMPLE / "drafter.config.json"),
                "--target-config", str(EXAMPLE / "target.config.json"), stdin=open(EXAMPLE_CR).read())
    assert p.returncode == 0, p.stderr
    assert "kind: Deployment" in p.stdout


def test_render_incompatible_drafter(tmp_config):
    d, _ = pair("qwen3.6-27b")
    d["dflash_config"]["target_layer_ids"][4] = 64
    p = run_cli("render", "-f", EXAMPLE_CR, "--drafter-config", tmp_config(d, "d.json"),
                "--target-config", str(EXAMPLE / "target.config.json"))
    assert p.returncode == 1
    assert p.stdout == ""
    assert "$.dflash_config.target_layer_ids[4]" in p.stderr
    assert "TargetLayerOutOfRange" in p.stderr
    assert "Traceback" not in p.stderr


def test_render_spec_window_below_block(tmp_path):
    cr = yaml.safe_load(open(EXAMPLE_CR))
    cr["spec"]["engine"] = {"name": "sglang", "version": "0.5.23"}
    cr["spec"]["speculation"] = {"draftWindow": 8}
    f = tmp_path / "cr.yaml"
    f.write_text(yaml.safe_dump(cr))
    p = run_cli("render", "-f", str(f), "--drafter-config", str(EXAMPLE / "drafter.config.json"),
                "--target-config", str(EXAMPLE / "target.config.json"))
    assert p.returncode == 1 and p.stdout == ""
    assert "DraftWindowBelowBlockSize" in p.stderr and "spec.speculation.draftWindow" in p.stderr


@pytest.mark.parametrize("edit, path", [
    (lambda cr: cr["spec"]["gpu"].__setitem__("bogus", 3), "spec.gpu.bogus"),
    (lambda cr: cr["spec"]["engine"].__setitem__("name", "tgi"), "spec.engine.name"),
    (lambda cr: cr["spec"]["target"].__setitem__("model", "--model-path"), "spec.target.model"),
    (lambda cr: cr["spec"]["drafter"].__setitem__("model", "../../etc"), "spec.drafter.model"),
    (lambda cr: cr["spec"]["gpu"].__setitem__("type", "a100"), "spec.gpu.type"),
    (lambda cr: cr["spec"].__setitem__("speculation", {"blockSize": "sixteen"}), "spec.speculation.blockSize"),
], ids=["unknown-field", "bad-engine", "flag-as-model", "dotdot-model", "bad-gpu", "bad-block"])
def test_render_invalid_cr(edit, path, tmp_path):
    cr = yaml.safe_load(open(EXAMPLE_CR))
    edit(cr)
    f = tmp_path / "cr.yaml"
    f.write_text(yaml.safe_dump(cr))
    p = run_cli("render", "-f", str(f), "--drafter-config", str(EXAMPLE / "drafter.config.json"),
                "--target-config", str(EXAMPLE / "target.config.json"))
    assert_usage_error(p, path)


@pytest.mark.parametrize("content, needle", [
    ("a: [1,\n", "not valid YAML"),
    ("kind: ConfigMap\n", "exactly one SpeculativeDeployment"),
    ("", "exactly one SpeculativeDeployment"),
])
def test_render_unusable_yaml(content, needle, tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text(content)
    p = run_cli("render", "-f", str(f), "--drafter-config", str(EXAMPLE / "drafter.config.json"),
                "--target-config", str(EXAMPLE / "target.config.json"))
    assert_usage_error(p, needle)


def test_render_missing_cr_file():
    p = run_cli("render", "-f", "/nonexistent.yaml", "--drafter-config", str(EXAMPLE / "drafter.config.json"),
                "--target-config", str(EXAMPLE / "target.config.json"))
    assert_usage_error(p, "/nonexistent.yaml")


def test_render_missing_config():
    p = run_cli("render", "-f", EXAMPLE_CR, "--drafter-config", "/nonexistent/d.json",
                "--target-config", str(EXAMPLE / "target.config.json"))
    assert_usage_error(p, "/nonexistent/d.json")


# ----------------------------------------------------------------- render -k, configFrom from the manifests


def _explicit_render(*extra: str) -> str:
    p = run_cli("render", "-f", EXAMPLE_CR, "--drafter-config", str(EXAMPLE / "drafter.config.json"),
                "--target-config", str(EXAMPLE / "target.config.json"), *extra)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_render_kustomization_resolves_config_from_its_configmaps():
    """Issue 27: `render -k DIR` reads the kustomization kubectl apply -k takes and the configs from its ConfigMaps."""
    p = run_cli("render", "-k", str(EXAMPLE))
    assert p.returncode == 0, p.stderr
    assert p.stdout == _explicit_render()
    # Kimi ships its tokenizer as repository code: render applies the default policy (issue 24), so it is allowed
    # here as an administrator would allow it
    p = run_cli("render", "-k", str(EXAMPLES / "kimi-k2.6-rtx-pro-6000-sglang"), "-o", "json",
                "--allow-trust-remote-code-model", "moonshotai")
    assert p.returncode == 0, p.stderr
    assert "sglang" in p.stdout


def test_render_file_with_configmaps_resolves_config_from(tmp_path):
    t = (EXAMPLE / "target.config.json").read_text()
    d = (EXAMPLE / "drafter.config.json").read_text()
    cms = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qwen36-27b-target-config"},
            "data": {"config.json": t}},
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qwen36-27b-drafter-config"},
            "binaryData": {"config.json": base64.b64encode(d.encode()).decode()}}]
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all([*cms, yaml.safe_load(open(EXAMPLE_CR))]))
    p = run_cli("render", "-f", str(f))
    assert p.returncode == 0, p.stderr
    assert p.stdout == _explicit_render()
    p = run_cli("render", "-f", "-", stdin=f.read_text())
    assert p.returncode == 0 and p.stdout == _explicit_render()
    # a flag still wins over the ConfigMap
    p = run_cli("render", "-f", str(f), "--drafter-config", str(EXAMPLES / "mistakes" / "qwen3.6-ids-plus-one.drafter.json"))
    assert p.returncode == 1 and "TargetLayerIdsShifted" in p.stderr


@pytest.mark.parametrize("edit, needles", [
    (lambda docs: docs.pop(0), ["ConfigMap qwen36-27b-target-config", "does not hold", "--target-config"]),
    (lambda docs: docs[0].update(data={"other.json": "{}"}), ["key config.json", "is missing"]),
    (lambda docs: docs[0].update(data={"config.json": "{nope"}), ["key config.json", "not valid JSON"]),
    (lambda docs: docs[0].update(data={"config.json": "[1]"}), ["not a JSON object"]),
    (lambda docs: docs[-1]["spec"]["target"].pop("configFrom"), ["spec.target has no configFrom", "the hub",
                                                                  "--target-config"]),
])
def test_render_config_from_problems_are_one_line(edit, needles, tmp_path):
    docs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qwen36-27b-target-config"},
             "data": {"config.json": (EXAMPLE / "target.config.json").read_text()}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qwen36-27b-drafter-config"},
             "data": {"config.json": (EXAMPLE / "drafter.config.json").read_text()}},
            yaml.safe_load(open(EXAMPLE_CR))]
    edit(docs)
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    assert_usage_error(run_cli("render", "-f", str(f)), *needles)


def _kustomization_with_a_patch(tmp_path) -> Path:
    k = tmp_path / "overlay"
    k.mkdir()
    (k / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [str(Path("..") / "base")],
        "patches": [{"target": {"kind": "SpeculativeDeployment"},
                     "patch": "- op: replace\n  path: /spec/replicas\n  value: 3\n"}]}))
    base = tmp_path / "base"
    base.mkdir()
    for f in ("speculativedeployment.yaml", "kustomization.yaml", "target.config.json", "drafter.config.json"):
        (base / f).write_text((EXAMPLE / f).read_text())
    return k


def test_render_kustomization_beyond_the_subset_needs_kubectl(tmp_path):
    k = _kustomization_with_a_patch(tmp_path)
    p = run_cli("render", "-k", str(k), env={"PATH": str(tmp_path)})  # no kubectl on this PATH
    assert_usage_error(p, "patches", "install kubectl", "kubectl kustomize")
    # nested plain kustomizations are read in-process
    (k / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["../base"]}))
    p = run_cli("render", "-k", str(k), env={"PATH": str(tmp_path)})
    assert p.returncode == 0 and p.stdout == _explicit_render(), p.stderr
    assert_usage_error(run_cli("render", "-k", str(tmp_path)), "no kustomization.yaml")


@pytest.mark.skipif(not shutil.which("kubectl"), reason="needs kubectl (kubectl kustomize)")
def test_render_kustomization_with_a_patch_is_built_by_kubectl(tmp_path):
    k = _kustomization_with_a_patch(tmp_path)
    p = run_cli("render", "-k", str(k))
    assert p.returncode == 0, p.stderr
    [dep] = [d for d in yaml.safe_load_all(p.stdout) if d["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 3  # the patch applied: kubectl kustomize built it
    # the in-process reader and kubectl kustomize agree on the examples
    built = subprocess.run(["kubectl", "kustomize", str(EXAMPLE)], capture_output=True, text=True, check=True).stdout
    assert run_cli("render", "-f", "-", stdin=built).stdout == run_cli("render", "-k", str(EXAMPLE)).stdout


# ----------------------------------------------------------------- crd, help, runtime


def test_crd():
    p = run_cli("crd", "--kind", "SpeculativeDeployment")
    assert p.returncode == 0, p.stderr
    crd = yaml.safe_load(p.stdout)
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "speculativedeployments.specdeploy.io"
    assert crd["spec"]["group"] == "specdeploy.io"
    assert any(v["name"] == "v1alpha1" for v in crd["spec"]["versions"])


def test_crd_prints_every_crd_as_in_crds():
    from specdeploy.api.crd import BENCH_CRD_FILE, CRD_FILE

    p = run_cli("crd")
    assert p.returncode == 0, p.stderr
    docs = list(yaml.safe_load_all(p.stdout))
    assert [d["metadata"]["name"] for d in docs] == ["speculativedeployments.specdeploy.io",
                                                     "speculativebenchmarks.specdeploy.io"]
    assert docs == [yaml.safe_load((ROOT / "crds" / f).read_text()) for f in (CRD_FILE, BENCH_CRD_FILE)]
    one = run_cli("crd", "--kind", "SpeculativeBenchmark")
    assert [d["spec"]["names"]["kind"] for d in yaml.safe_load_all(one.stdout)] == ["SpeculativeBenchmark"]
    assert run_cli("crd", "--kind", "Nope").returncode == 2


@pytest.mark.parametrize("prog", ["specdeploy", "specdeploy-runtime"])
def test_help(prog):
    p = run_cli("--help", prog=prog)
    assert p.returncode == 0, p.stderr
    assert "usage:" in p.stdout and prog in p.stdout


@pytest.mark.parametrize("sub", ["check", "render"])
def test_subcommand_help(sub):
    p = run_cli(sub, "--help")
    assert p.returncode == 0 and "usage:" in p.stdout


def _rendered_engine_config(tmp_path, cr_path: str = EXAMPLE_CR, d=None, t=None) -> str:
    p = run_cli("render", "-f", cr_path, "--drafter-config", d or str(EXAMPLE / "drafter.config.json"),
                "--target-config", t or str(EXAMPLE / "target.config.json"), "-o", "json",
                "--allow-trust-remote-code-model", "moonshotai")  # the Kimi example's, as its comment says
    assert p.returncode == 0, p.stderr
    [cm] = [i for i in json.loads(p.stdout)["items"] if i["kind"] == "ConfigMap"]
    f = tmp_path / "engine-config.json"
    f.write_text(cm["data"]["engine-config.json"])
    return str(f)


def test_runtime_show_config_vllm(tmp_path):
    f = _rendered_engine_config(tmp_path)
    p = run_cli("show-config", "--engine-config", f, prog="specdeploy-runtime")
    assert p.returncode == 0, p.stderr
    [cmd] = [ln for ln in p.stdout.splitlines() if ln.startswith("command:")]
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in cmd
    assert "vllm serve Qwen/Qwen3.6-27B" in cmd
    assert "--speculative-config" in cmd and '"num_speculative_tokens":15' in cmd


def test_runtime_show_config_sglang(tmp_path):
    cr = yaml.safe_load(open(EXAMPLES / "kimi-k2.6-rtx-pro-6000-sglang" / "speculativedeployment.yaml"))
    f = tmp_path / "cr.yaml"
    f.write_text(yaml.safe_dump(cr))
    ex = EXAMPLES / "kimi-k2.6-rtx-pro-6000-sglang"
    ec = _rendered_engine_config(tmp_path, str(f), str(ex / "drafter.config.json"), str(ex / "target.config.json"))
    p = run_cli("show-config", "--engine-config", ec, prog="specdeploy-runtime")
    assert p.returncode == 0, p.stderr
    assert "python3 -m sglang.launch_server" in p.stdout
    assert "--speculative-algorithm DFLASH" in p.stdout
    assert "--speculative-num-draft-tokens 8" in p.stdout
    p = run_cli("show-config", "--engine-config", ec, "-o", "json", prog="specdeploy-runtime")
    assert json.loads(p.stdout)["engine"] == "sglang"


def test_runtime_show_config_missing_file():
    p = run_cli("show-config", "--engine-config", "/nonexistent.json", prog="specdeploy-runtime")
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and "not found" in p.stderr


def test_runtime_show_config_invalid(tmp_path):
    f = tmp_path / "ec.json"
    f.write_text(json.dumps({"engine": "tgi"}))
    p = run_cli("show-config", "--engine-config", str(f), prog="specdeploy-runtime")
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and "invalid engine config" in p.stderr


# ----------------------------------------------------------------- import weight


HEAVY = "('pydantic','yaml','kopf','kubernetes','torch')"


@pytest.mark.parametrize("module", ["specdeploy.cli", "specdeploy_runtime.cli"])
def test_help_path_imports_nothing_heavy(module):
    code = (f"import sys, {module} as c; c.build_parser(); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


@pytest.mark.parametrize("flag", ["--metrics-port", "--health-port", "--webhook-port"])
def test_operator_run_on_a_busy_port_says_so_in_one_line(flag, tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        extra = ["--webhook"] if flag == "--webhook-port" else []
        ports = {"--metrics-port": "0", "--health-port": "0", flag: port}
        p = run_cli("operator", "run", "--namespace", "x", "--kubeconfig", str(tmp_path / "none"),
                    "--bind-address", "127.0.0.1", "--metrics-bind-address", "127.0.0.1", *extra,
                    *[a for k, v in ports.items() for a in (k, v)])
    assert_usage_error(p, f"{flag} {port} on 127.0.0.1: in use", f"pass another {flag}")


def test_every_object_printing_command_takes_o_yaml():
    """-o json|yaml wherever a command prints a document: the YAML is the JSON document."""
    from specdeploy.cli import build_parser

    d, t = files("qwen3-8b")
    as_json = json.loads(run_cli("check", "--drafter", d, "--target", t, "-o", "json").stdout)
    assert yaml.safe_load(run_cli("check", "--drafter", d, "--target", t, "-o", "yaml").stdout) == as_json
    parser = build_parser()

    def outputs(p, path=()):
        import argparse

        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    yield from outputs(sp, (*path, name))
            elif "--output" in a.option_strings:
                yield " ".join(path), set(a.choices)

    seen = dict(outputs(parser))
    assert {"check", "render", "acceptance", "bench report", "rollout status", "rollout promote"} <= set(seen)
    assert all({"json", "yaml"} <= choices for choices in seen.values()), seen
