"""The chart's weight-cache values reach the operator as flags, and the operator's CLI turns them into
the tenancy policy the renderer reads (the node paths an administrator listed, the default cache)."""

from __future__ import annotations

import pytest

from chart_helpers import arg_value, container, render, run_helm, values_file, CHART
from specdeploy import cli
from specdeploy.cli import operator as operator_cli
from specdeploy.core.policy import TenancyPolicy


def policy_from(args: list[str]) -> TenancyPolicy:
    ns = cli.build_parser().parse_args(args)
    return operator_cli._policy_args(ns)


def test_default_chart_sets_no_cache_flags():
    args = container(render())["args"]
    assert "--cache-node-path" not in args and "--default-cache" not in args
    p = policy_from(args)
    assert p.cache_node_paths == () and p.default_cache is None


def test_node_paths_and_default_reach_the_policy():
    args = container(render({"cache": {"default": "nodePath/nvme",
                                       "nodePaths": {"nvme": "/mnt/nvme/hf", "ssd": "/data/hf"}}}))["args"]
    assert sorted(arg_value(args, "--cache-node-path")) == ["nvme=/mnt/nvme/hf", "ssd=/data/hf"]
    p = policy_from(args)
    assert dict(p.cache_node_paths) == {"nvme": "/mnt/nvme/hf", "ssd": "/data/hf"}
    assert p.default_cache == ("nodePath", "nvme")
    assert policy_from(container(render({"cache": {"default": "pvc/hf-cache"}}))["args"]).default_cache == ("pvc", "hf-cache")


def test_node_paths_bound_to_namespaces_reach_the_policy():
    """The structured shape {path, namespaces} binds a node path; the plain path keeps its meaning (every namespace)."""
    args = container(render({"cache": {"default": "nodePath/nvme", "nodePaths": {
        "nvme": {"path": "/mnt/nvme/hf", "namespaces": ["team-a", "team-b"]}, "ssd": "/data/hf",
        "none": {"path": "/data/none", "namespaces": []}}}}))["args"]
    assert sorted(arg_value(args, "--cache-node-path")) == ["none=/data/none", "nvme=/mnt/nvme/hf", "ssd=/data/hf"]
    assert sorted(arg_value(args, "--cache-node-path-namespaces")) == ["none=", "nvme=team-a,team-b"]
    p = policy_from(args)
    assert p.node_path_namespaces("nvme") == ("team-a", "team-b") and p.node_path_namespaces("ssd") is None
    assert p.node_path_allowed("nvme", "team-b") and not p.node_path_allowed("nvme", "team-c")
    assert p.node_path_allowed("ssd", "team-c") and not p.node_path_allowed("none", "team-a")


@pytest.mark.parametrize("values", [{"cache": {"default": "/etc"}}, {"cache": {"default": "hostPath/x"}},
                                    {"cache": {"nodePaths": {"nvme": "relative"}}},
                                    {"cache": {"nodePaths": {"Bad_Name": "/x"}}},
                                    {"cache": {"nodePaths": {"nvme": {"path": "/x"}}}},
                                    {"cache": {"nodePaths": {"nvme": {"path": "/x", "namespaces": ["Team_A"]}}}},
                                    {"cache": {"nodePaths": {"nvme": {"path": "x", "namespaces": ["a"]}}}}])
def test_schema_refuses_bad_cache_values(values):
    p = run_helm("helm3", "template", "x", str(CHART), "-f", values_file(values), check=False)
    assert p.returncode != 0 and "cache" in p.stderr


@pytest.mark.parametrize("flags,message", [
    (["--cache-node-path", "nvme"], "expected NAME=PATH"),
    (["--cache-node-path", "nvme=relative/dir"], "PATH must be an absolute directory"),
    (["--cache-node-path", "nvme=/"], "PATH must be an absolute directory"),
    (["--cache-node-path", "nvme=/mnt/../etc"], "PATH must be an absolute directory"),
    (["--default-cache", "nodePath/nvme"], "no --cache-node-path named 'nvme'"),
    (["--default-cache", "hostPath//etc"], "expected emptyDir, pvc/CLAIM or nodePath/NAME"),
])
def test_bad_operator_flags_are_one_line(flags, message):
    with pytest.raises(cli.UsageError) as e:
        policy_from(["operator", "run", *flags])
    assert message in str(e.value)
