"""The one error vocabulary (core/errors.py, controller/errors.py): every exception class of the product derives
from SpecdeployError and says whether trying again can help; the controller maps it to kopf in one place.

A new exception class fails here until it has the base and a row in TABLE (retryable or permanent, and its delay).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import kopf
import pytest

from specdeploy.controller.errors import kopf_errors, to_kopf
from specdeploy.core.errors import Permanent, Retryable, SpecdeployError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"specdeploy": ROOT / "operator" / "specdeploy", "specdeploy_runtime": ROOT / "runtime" / "specdeploy_runtime"}
PER_INSTANCE = "per instance"

# class -> (retryable, delay) at class level; PER_INSTANCE marks a class whose instances answer for themselves
# (the constructor's default in the comment)
TABLE: dict[str, tuple[bool, float | None] | str] = {
    "specdeploy.core.errors.SpecdeployError": (False, None),
    "specdeploy.core.errors.Permanent": (False, None),
    "specdeploy.core.errors.Retryable": (True, None),
    # wrong input: the message names the field and the fix
    "specdeploy.benchreport.ReportError": (False, None),
    "specdeploy.cli.common.UsageError": (False, None),
    "specdeploy.cli.common.ArgumentError": (False, None),
    "specdeploy.cli.rollout.RolloutError": (False, None),
    "specdeploy.cli.bench.BenchInputError": (False, None),
    "specdeploy.cli.acceptance.InputError": (False, None),
    "specdeploy.core.bench.result.BenchResultError": (False, None),
    "specdeploy.core.render.objects.RenderError": (False, None),
    "specdeploy.core.render.objects.PolicyRefused": (False, None),
    "specdeploy.core.bench.plan.PlanError": (False, None),
    "specdeploy.core.bench.prompts.PromptError": (False, None),
    "specdeploy.core.cache.CacheError": (False, None),
    "specdeploy.core.bench.objects.BenchRefused": (False, None),
    "specdeploy.core.tuning.NotMoE": (False, None),
    "specdeploy.core.tuning.UnsupportedShape": (False, None),
    "specdeploy.core.safejson.JsonLimitError": (False, None),
    "specdeploy.controller.settings.SettingsError": (False, None),  # an unusable environment default: exit 2
    # the pod runtime: the process exits non-zero with the message; the kubelet or the Job is what retries
    "specdeploy_runtime.benchruns.BenchError": (False, None),
    "specdeploy_runtime.hubfiles.HubFetchError": (False, None),
    "specdeploy_runtime.tuning.NoGpu": (False, None),
    # not now: try again (None: the caller's backoff decides when)
    "specdeploy.controller.kube.KubeError": (True, None),  # every API error is retried with the reconciler's backoff
    "specdeploy.controller.kube.NotLeader": (True, None),
    "specdeploy.controller.admission.ConfigsUnavailable": (True, None),
    "specdeploy.controller.probe.ProbeError": (True, None),
    "specdeploy.controller.scrape.ScrapeRejected": (True, None),  # a failed scrape: the next tick tries again
    # per reason: ResolutionError(retryable=True, delay=None) by default, HubResolutionError(retryable=False)
    "specdeploy.controller.resolve.ResolutionError": PER_INSTANCE,
    "specdeploy.controller.hub.HubResolutionError": PER_INSTANCE,
}

# Exception classes that stay outside the vocabulary for now, each with its reason. An entry that no longer
# exists, or that derives from SpecdeployError, fails (stale): move it to TABLE.
ALLOWED_OUTSIDE: dict[str, str] = {
    "specdeploy.controller.benchstep._Stop":
        "control flow inside the pure step planner: raised by a stage, caught by plan_benchmark_step, never escapes",
}


def _product_modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        path = importlib.import_module(pkg).__path__
        names += [m.name for m in pkgutil.walk_packages(path, pkg + ".") if not m.name.endswith("__main__")]
    return names


def _exception_classes() -> dict[str, type]:
    found = {}
    for name in _product_modules():
        module = importlib.import_module(name)  # a module that cannot be imported fails here: nothing is skipped
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


CLASSES = _exception_classes()


def test_every_exception_class_of_the_product_derives_from_the_base():
    outside = sorted(q for q, c in CLASSES.items() if not issubclass(c, SpecdeployError) and q not in ALLOWED_OUTSIDE)
    assert not outside, f"exception classes without the SpecdeployError base (core/errors.py): {outside}"


def test_the_allow_list_is_not_stale():
    stale = sorted(q for q in ALLOWED_OUTSIDE if q not in CLASSES or issubclass(CLASSES[q], SpecdeployError))
    assert not stale, f"ALLOWED_OUTSIDE names classes that are gone or now on the base (move them to TABLE): {stale}"


def test_the_table_says_retryable_or_permanent_for_every_class():
    on_base = {q for q, c in CLASSES.items() if issubclass(c, SpecdeployError)}
    assert on_base == set(TABLE), (f"missing from TABLE: {sorted(on_base - set(TABLE))}; "
                                   f"in TABLE but not found: {sorted(set(TABLE) - on_base)}")
    for q, expected in TABLE.items():
        if expected == PER_INSTANCE:
            continue
        cls = CLASSES[q]
        assert (cls.retryable, cls.delay) == expected, q
        assert issubclass(cls, Retryable if cls.retryable else Permanent) or cls is SpecdeployError, (
            f"{q}: a class with one answer derives from {'Retryable' if cls.retryable else 'Permanent'}")


def test_no_exception_class_hides_where_the_import_scan_cannot_see_it():
    """Classes defined inside a function or a class derive from an exception too (AST)."""
    exception_names = {n for n, o in vars(builtins).items() if inspect.isclass(o) and issubclass(o, BaseException)}
    exception_names |= {c.__name__ for c in CLASSES.values()} | {"SpecdeployError", "Permanent", "Retryable"}
    nested = []
    for root in PACKAGES.values():
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            top = {id(n) for n in tree.body}
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and id(node) not in top:
                    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                    if bases & exception_names:
                        nested.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not nested, f"exception classes inside a function or class (define them at module level): {nested}"


def _bare(cls: type) -> SpecdeployError:
    return cls.__new__(cls)  # no constructor arguments needed: the class's own answer


@pytest.mark.parametrize("qualname", sorted(q for q, v in TABLE.items() if v != PER_INSTANCE))
def test_the_kopf_mapping_gives_the_matching_class_and_delay(qualname):
    retryable, delay = TABLE[qualname]
    err = to_kopf(_bare(CLASSES[qualname]))
    if retryable:
        assert type(err) is kopf.TemporaryError
        assert err.delay == (60 if delay is None else delay)  # None: kopf's own default
    else:
        assert type(err) is kopf.PermanentError


def test_a_per_instance_answer_wins_over_the_class():
    from specdeploy.controller.hub import HubResolutionError
    from specdeploy.controller.resolve import ResolutionError

    err = to_kopf(ResolutionError("InspectionPending", "the inspector Job runs", delay=5.0))
    assert type(err) is kopf.TemporaryError and err.delay == 5.0
    assert "InspectionPending: the inspector Job runs" in str(err)
    assert type(to_kopf(ResolutionError("ModelNotFound", "no such repo", retryable=False))) is kopf.PermanentError
    assert type(to_kopf(HubResolutionError("ModelNotFound", "no such repo"))) is kopf.PermanentError
    err = to_kopf(HubResolutionError("HubUnreachable", "timed out", retryable=True))
    assert type(err) is kopf.TemporaryError and err.delay == 60


def test_class_keywords_set_the_defaults():
    class Soon(Retryable, delay=7.5):
        pass

    class Later(Soon):
        pass

    assert (Soon.retryable, Soon.delay, Later.delay) == (True, 7.5, 7.5)
    assert (Permanent.retryable, Permanent.delay) == (False, None)
    e = Soon("x")
    e.delay = 1.0  # an instance may say its own
    assert to_kopf(e).delay == 1.0 and to_kopf(Soon("x")).delay == 7.5


def test_the_handler_decorator_maps_and_keeps_the_cause():
    class Wrong(Permanent):
        pass

    @kopf_errors
    async def handler(**_):
        raise Wrong("spec.x: use y")

    with pytest.raises(kopf.PermanentError, match=r"spec\.x: use y") as info:
        asyncio.run(handler())
    assert isinstance(info.value.__cause__, Wrong)

    @kopf_errors
    async def other(**_):
        raise KeyError("k")

    with pytest.raises(KeyError):  # not the vocabulary's: left to kopf's default
        asyncio.run(other())


def test_every_kopf_handler_wears_the_mapping():
    from specdeploy.controller import handlers

    registry = kopf.get_default_registry()
    mine = [h for h in [*registry._activities.get_all_handlers(), *registry._watching.get_all_handlers()]
            if getattr(h.fn, "__module__", "") == handlers.__name__]
    assert len(mine) > 10
    bare = [h.fn.__name__ for h in mine
            if h.fn.__name__ != "on_login" and getattr(h.fn, "__code__", None) is not kopf_errors(h.fn).__code__]
    assert not bare, f"kopf handlers without @kopf_errors (controller/errors.py): {bare}"
