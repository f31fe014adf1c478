"""Issue 24 item 7: quantities bounded before arithmetic, revisions without '.' or '..' segments."""

from __future__ import annotations

import pytest

from specdeploy.api.validation import problems_message, validate
from specdeploy.core.render.objects import cpu_kv_cache_gib


def doc(**spec):
    d = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
         "spec": {"engine": {"name": "vllm", "version": "0.32.0"}, "target": {"model": "Qwen/Qwen3-0.6B"},
                  "drafter": {"model": "z-lab/Qwen3-0.6B-DFlash"}, "gpu": {"type": "cpu"}}}
    for k, v in spec.items():
        d["spec"][k] = {**d["spec"].get(k, {}), **v}
    return d


@pytest.mark.parametrize("field", ["memory", "cpu", "shmSize"])
def test_a_400_digit_quantity_is_a_field_error(field):
    cr, problems = validate(doc(pod={field: "9" * 400}))
    assert cr is None
    assert f"spec.pod.{field}" in problems_message(problems) and "FieldValueTooLong" in problems_message(problems)
    cr, _ = validate(doc(pod={field: "9" * 20 + "Gi"}))
    assert cr is not None


def test_the_kv_cache_figure_survives_any_quantity():
    assert cpu_kv_cache_gib("9" * 400) == 1 and cpu_kv_cache_gib("8Gi") == 4 and cpu_kv_cache_gib(None) == 1


@pytest.mark.parametrize("revision, ok", [
    ("main", True), ("release/v1.2", True), ("a..b", True), ("main/../../x", False), ("..", False),
    ("main/./x", False), ("main/..", False),
])
def test_revision_segments(revision, ok):
    cr, problems = validate(doc(target={"revision": revision}))
    assert (cr is not None) is ok, problems_message(problems)
    if not ok:
        assert "spec.target.revision" in problems_message(problems)
