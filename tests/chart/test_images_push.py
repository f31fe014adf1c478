"""``images/build.sh --push REGISTRY``: its arguments, the tags and pushes, and the Helm value set it prints,
with a stand-in container tool on PATH (specdeploy_dev.container_standin: logs every call, builds
nothing). The value set it prints installs the chart from the pushed operator image and lets engine pods
name the pushed runtime image; the NOTES warn only without it."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import yaml

from chart_helpers import CHART, run_helm
from specdeploy_dev.container_standin import container_calls, fake_container_tool
from testkit import ROOT

BUILD = ROOT / "images" / "build.sh"


def build(tmp_path, *args: str, **env_extra: str):
    log, env = fake_container_tool(tmp_path / "bin")
    p = subprocess.run(["bash", str(BUILD), *args], capture_output=True, text=True, timeout=120,
                       env={**env, **env_extra}, cwd=tmp_path)
    return p, container_calls(log), env


def value_set(stdout: str) -> list[str]:
    """The printed value set: the line of --set arguments, split as a shell would."""
    lines = [line for line in stdout.splitlines() if line.strip().startswith("--set image.repository=")]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0])


@pytest.mark.parametrize("args, message", [
    (["--push"], "--push needs a registry"),
    (["--push", ""], "--push needs a registry"),
    (["--push="], "--push needs a registry"),
    (["--push", "https://registry.example.com"], "is not a registry and path"),
    (["--push", "Registry.Example.com/Team"], "is not a registry and path"),
    (["--push", "registry.example.com/team:latest"], "is not a registry and path"),
    (["--push", "registry.example.com/team;rm -rf /"], "is not a registry and path"),
    (["--push", "registry.example.com", "sglang"], "unknown image sglang"),
    (["--pushh", "registry.example.com"], "unknown option --pushh"),
])
def test_bad_arguments_exit_2_before_any_build(tmp_path, args, message):
    p, calls, _ = build(tmp_path, *args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr
    assert calls == []


def test_push_tags_and_pushes_both_images_and_prints_the_value_set(tmp_path):
    p, calls, env = build(tmp_path, "--push", "registry.example.com:5000/team/")  # a trailing / is dropped
    assert p.returncode == 0, p.stdout + p.stderr
    version, vllm_cpu = env["FAKE_VERSION"], env["FAKE_VLLM_CPU_VERSION"]
    operator = f"registry.example.com:5000/team/specdeploy/operator:{version}"
    runtime = f"registry.example.com:5000/team/specdeploy/runtime:vllm-cpu-{vllm_cpu}"
    tags = [c for c in calls if c[0] in ("tag", "push")]
    assert tags == [["tag", f"ghcr.io/specdeploy/operator:{version}", operator], ["push", operator],
                    ["tag", f"ghcr.io/specdeploy/runtime:vllm-cpu-{vllm_cpu}", runtime], ["push", runtime]]
    # pushed after both were built and checked
    assert calls.index(["tag", f"ghcr.io/specdeploy/operator:{version}", operator]) > \
        max(i for i, c in enumerate(calls) if c[0] in ("build", "run"))
    assert value_set(p.stdout) == ["--set", "image.repository=registry.example.com:5000/team/specdeploy/operator",
                                   "--set", "policy.allowedImagePrefixes={registry.example.com:5000/team/specdeploy/runtime}"]


def test_push_of_one_image_and_no_push_without_the_flag(tmp_path):
    p, calls, env = build(tmp_path / "one", "--push", "localhost:5000", "operator")
    assert p.returncode == 0, p.stderr
    assert [c[0] for c in calls if c[0] in ("build", "tag", "push")] == ["build", "tag", "push"]
    assert calls[-1] == ["push", f"localhost:5000/specdeploy/operator:{env['FAKE_VERSION']}"]
    p, calls, _ = build(tmp_path / "none", "operator")
    assert p.returncode == 0, p.stderr
    assert [c for c in calls if c[0] in ("tag", "push")] == []
    assert "--set image.repository" not in p.stdout


def test_a_refused_push_exits_1_naming_the_login(tmp_path):
    p, calls, _ = build(tmp_path, "--push", "registry.example.com/team", FAKE_CONTAINER_PUSH_FAIL="registry.example.com")
    assert p.returncode == 1
    assert "log in first (docker login registry.example.com)" in p.stderr
    assert [c[0] for c in calls if c[0] in ("tag", "push")] == ["tag", "push"]  # stopped at the first


def test_the_printed_value_set_installs_the_pushed_image_and_silences_the_notes_warning(tmp_path):
    p, _, env = build(tmp_path, "--push", "registry.example.com/team")
    assert p.returncode == 0, p.stderr
    values = value_set(p.stdout)
    out = run_helm("helm4", "template", "specdeploy", str(CHART), "--namespace", "specdeploy-system", *values).stdout
    images = set(re.findall(r'image: "?([^"\s]+)"?', out))
    assert images == {f"registry.example.com/team/specdeploy/operator:{env['FAKE_VERSION']}"}, images
    assert "--allowed-image-prefix" in out and '"registry.example.com/team/specdeploy/runtime"' in out
    assert "image-not-published" not in out
    # with the default image the operator pod carries the fix, shown by `kubectl describe pod` beside its
    # ImagePullBackOff events
    pod = [d for d in yaml.safe_load_all(run_helm("helm4", "template", "specdeploy", str(CHART), "--namespace",
                                                  "specdeploy-system").stdout) if d and d["kind"] == "Deployment"]
    note = pod[0]["spec"]["template"]["metadata"]["annotations"]["specdeploy.io/image-not-published"]
    assert "ImagePullBackOff" in note and "bash images/build.sh --push REGISTRY" in note
    assert "--set image.repository=REGISTRY/specdeploy/operator" in note
    notes = run_helm("helm4", "install", "specdeploy", str(CHART), "--namespace", "specdeploy-system", "--dry-run=client",
                     *values).stdout
    default = run_helm("helm4", "install", "specdeploy", str(CHART), "--namespace", "specdeploy-system",
                       "--dry-run=client").stdout
    assert "does not publish" in default and "images/build.sh --push REGISTRY" in default
    assert "does not publish" not in notes
