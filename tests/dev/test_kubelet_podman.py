"""The dev kubelet's container mode, pure half: pod -> ``podman run`` argv (no podman needed)."""

from __future__ import annotations

import json

import pytest

from specdeploy_dev import kubelet_podman as kpm
from specdeploy_dev import kubelet_pods as kp

UID = "0f4b7c1e-2222-4444-8888-123456789abc"


def pod(**spec) -> dict:
    return {"metadata": {"name": "p", "namespace": "default", "uid": UID}, "spec": spec}


def engine(**over) -> dict:
    c = {"name": "engine", "image": "ghcr.io/specdeploy/runtime:vllm-cpu-0.32.0", "command": ["vllm", "serve"],
         "args": ["tiny/target", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "$(MODEL)"],
         "ports": [{"containerPort": 8000}]}
    c.update(over)
    return c


def argv(p: dict, c: dict, *, env=None, mounts=(), port_map=None, image_user="65532:65532") -> list[str]:
    return kpm.podman_run_argv(p, c, env=env or {"MODEL": "m"}, mounts=list(mounts), pod_ip="127.0.0.5",
                               port_map=port_map or {}, termination_log="/k/term", image_user=image_user,
                               root_label="/k")


def flag_values(a: list[str], flag: str) -> list[str]:
    return [a[i + 1] for i, x in enumerate(a[:a.index("--")]) if x == flag]


def test_command_args_env_and_the_image_last():
    a = argv(pod(), engine())
    assert a[:3] == ["podman", "run", "--rm"] and "--pull=never" in a and "--network=host" in a
    image_at = a.index("--")
    assert a[image_at + 1] == "ghcr.io/specdeploy/runtime:vllm-cpu-0.32.0"
    # command replaces the entrypoint; args (the CMD) follow the image; $(VAR) expanded; wildcard host -> pod IP
    assert json.loads(flag_values(a, "--entrypoint")[0]) == ["vllm", "serve"]
    assert a[image_at + 2:] == ["tiny/target", "--host", "127.0.0.5", "--port", "8000", "--served-model-name", "m"]
    assert flag_values(a, "--env") == ["MODEL=m"]
    assert flag_values(a, "--name") == [f"sdk-{UID}-engine"]
    assert f"{kpm.LABEL_POD}={UID}" in flag_values(a, "--label")


def test_a_taken_port_is_remapped_and_no_command_keeps_the_entrypoint():
    c = engine(command=None, args=["--port=8000"])
    a = argv(pod(), c, port_map={8000: 41234})
    assert "--entrypoint" not in a and a[-1] == "--port=41234"
    assert argv(pod(), engine(args=None))[-1] == "ghcr.io/specdeploy/runtime:vllm-cpu-0.32.0"


def test_the_hardened_security_context():
    sc = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "readOnlyRootFilesystem": True,
          "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
          "seccompProfile": {"type": "RuntimeDefault"}}
    a = argv(pod(), engine(securityContext=sc))
    assert flag_values(a, "--user") == ["65532:65532"]
    assert "--read-only" in a and "--read-only-tmpfs=false" in a  # no writable tmpfs Kubernetes would not add
    assert flag_values(a, "--cap-drop") == ["ALL"] and not flag_values(a, "--cap-add")
    assert flag_values(a, "--security-opt") == ["no-new-privileges"]  # RuntimeDefault: podman's default profile
    assert "--privileged" not in a


def test_pod_security_context_is_the_default_and_the_container_wins():
    p = pod(securityContext={"runAsUser": 1000, "runAsGroup": 2000, "supplementalGroups": [3000],
                             "seccompProfile": {"type": "Unconfined"}})
    a = argv(p, engine(securityContext={"runAsUser": 1001, "capabilities": {"add": ["net_bind_service"]}}))
    assert flag_values(a, "--user") == ["1001:2000"] and flag_values(a, "--group-add") == ["3000"]
    assert flag_values(a, "--security-opt") == ["seccomp=unconfined"]
    assert flag_values(a, "--cap-add") == ["NET_BIND_SERVICE"]
    # nothing set: the image's user, no hardening flags
    plain = argv(pod(), engine())
    assert not flag_values(plain, "--user") and "--read-only" not in plain and not flag_values(plain, "--security-opt")


@pytest.mark.parametrize("sc, image_user, message", [
    ({"runAsNonRoot": True}, "", "image will run as root"),
    ({"runAsNonRoot": True}, "0:0", "image will run as root"),
    ({"runAsNonRoot": True}, "specdeploy", "non-numeric user (specdeploy)"),
    ({"runAsNonRoot": True, "runAsUser": 0}, "65532", "runAsUser breaks non-root policy"),
    ({"seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"}}, "", "seccompProfile type 'Localhost'"),
    ({"capabilities": {"add": ["SYS_ADMIN; rm"]}}, "", "is not a capability name"),
    ({"runAsUser": "root"}, "", "runAsUser 'root' is not a number"),
])
def test_refused_security_contexts_say_why(sc, image_user, message):
    with pytest.raises(kp.PodConfigError) as e:
        argv(pod(), engine(securityContext=sc), image_user=image_user)
    assert message in e.value.message and e.value.reason == "CreateContainerConfigError"


def test_run_as_non_root_passes_with_a_numeric_non_root_image_user():
    a = argv(pod(), engine(securityContext={"runAsNonRoot": True}), image_user="65532:65532")
    assert not flag_values(a, "--user")


def test_resource_limits():
    a = argv(pod(), engine(resources={"limits": {"cpu": "1500m", "memory": "4Gi"}, "requests": {"cpu": "100m"}}))
    assert flag_values(a, "--cpus") == ["1.5"] and flag_values(a, "--memory") == [str(4 * 2**30)]
    with pytest.raises(kp.PodConfigError, match="resources.limits.memory 'lots'"):
        argv(pod(), engine(resources={"limits": {"memory": "lots"}}))


def test_volumes_become_bind_mounts_read_only_where_kubernetes_makes_them_so():
    vols = {"cache": kp.VolumeDir("cache", "emptyDir", "/k/v/cache"), "cfg": kp.VolumeDir("cfg", "configMap", "/k/v/cfg"),
            "pvc": kp.VolumeDir("pvc", "persistentVolumeClaim", "/k/pvc/default/c")}
    c = engine(volumeMounts=[{"name": "cache", "mountPath": "/var/cache/huggingface"},
                             {"name": "cfg", "mountPath": "/etc/cfg"},
                             {"name": "pvc", "mountPath": "/data", "subPath": "models", "readOnly": True}])
    mounts = kpm.plan_mounts(c, vols)
    a = argv(pod(), c, mounts=mounts)
    assert flag_values(a, "-v") == ["/k/v/cache:/var/cache/huggingface:rw", "/k/v/cfg:/etc/cfg:ro",
                                    "/k/pvc/default/c/models:/data:ro", "/k/term:/dev/termination-log:rw"]
    with pytest.raises(kp.PodConfigError, match="must be an absolute path"):
        kpm.plan_mounts(engine(volumeMounts=[{"name": "cache", "mountPath": "/a:/b"}]), vols)
    with pytest.raises(kp.PodConfigError, match="subPath"):
        kpm.plan_mounts(engine(volumeMounts=[{"name": "cache", "mountPath": "/a", "subPath": "../x"}]), vols)
    with pytest.raises(kp.PodConfigError, match="no such volume"):
        kpm.plan_mounts(engine(volumeMounts=[{"name": "nope", "mountPath": "/a"}]), vols)


def test_termination_message_path_and_working_dir():
    a = argv(pod(), engine(terminationMessagePath="/tmp/msg", workingDir="/work"))
    assert "/k/term:/tmp/msg:rw" in flag_values(a, "-v") and flag_values(a, "--workdir") == ["/work"]


def test_an_image_that_looks_like_a_flag_is_refused():
    with pytest.raises(kp.PodConfigError, match="not an image reference"):
        argv(pod(), engine(image="--privileged"))


def test_env_goes_in_the_env_file_and_only_what_it_cannot_carry_on_the_command_line():
    env = {"MODEL": "m", "HF_TOKEN": "hf_secret value=1 'q\"", "PEM": "-----BEGIN\nX\n-----END", "CR": "a\rb",
           "#NOTE": "x", "SP ACE": "y", "EMPTY": ""}
    text, rest = kpm.split_env(env)
    assert text == "MODEL=m\nHF_TOKEN=hf_secret value=1 'q\"\nEMPTY=\n"
    assert rest == {"PEM": "-----BEGIN\nX\n-----END", "CR": "a\rb", "#NOTE": "x", "SP ACE": "y"}
    a = kpm.podman_run_argv(pod(), engine(), env=env, mounts=[], pod_ip="127.0.0.5", port_map={},
                            termination_log="/k/term", image_user="65532:65532", root_label="/k", env_file="/k/env")
    assert flag_values(a, "--env-file") == ["/k/env"]
    assert sorted(flag_values(a, "--env")) == sorted(f"{k}={v}" for k, v in rest.items())
    assert not any("hf_secret" in x for x in a)
    # $(VAR) expansion still sees every variable, wherever it is passed
    assert a[-1] == "m"
    # without an env file (the harness's operator container) every variable is on the command line
    assert sorted(flag_values(argv(pod(), engine(), env={"A": "1", "B": "2"}), "--env")) == ["A=1", "B=2"]
