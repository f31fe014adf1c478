"""The operator's kopf settings rest on facts about its own handlers: checked here."""
import kopf

from specdeploy.controller import handlers


def _registry() -> kopf.OperatorRegistry:
    return kopf.get_default_registry()


def test_only_event_handlers_so_no_diff_base_is_needed():
    # EventsOnlyDiffBase skips kopf's per-event deep copy of every body; that is only right while no
    # handler detects changes (on.create/update/delete/field/resume) or spawns daemons/timers.
    reg = _registry()
    assert list(reg._changing.get_all_handlers()) == []
    assert list(reg._spawning.get_all_handlers()) == []
    assert len(list(reg._watching.get_all_handlers())) >= 10


def test_events_only_diff_base_keeps_nothing():
    store = handlers.EventsOnlyDiffBase()
    body = kopf.Body({"metadata": {"name": "x", "annotations": {"kopf.zalando.org/last-handled-configuration": "{}"}},
                      "spec": {"a": 1}})
    assert store.build(body=body) == {} and store.fetch(body=body) is None
    patch = kopf.Patch()
    store.store(body=body, patch=patch, essence={"spec": {"a": 1}})
    assert not patch  # nothing written to the object


def test_settings_idle_workers_exit_soon_and_nothing_is_posted_or_diffed():
    settings = kopf.OperatorSettings()
    assert settings.queueing.idle_timeout == 5.0  # kopf's default: an idle worker holds its last body 5 s
    handlers.configure(settings)
    assert settings.queueing.idle_timeout == handlers.WORKER_IDLE_SECONDS <= 1.0
    assert settings.posting.enabled is False
    assert isinstance(settings.persistence.diffbase_storage, handlers.EventsOnlyDiffBase)
    assert settings.peering.standalone is True
