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


def test_an_in_process_operator_is_configured_by_constructing_its_settings(tmp_path, monkeypatch):
    """Issue 39: what the operator runs with is one object (controller/settings.py), handed to kopf's memo; the
    start-up handler builds every running part from it and keeps them on ``memo.operator`` (no module global, no
    environment). An API server that is not there is fine: nothing here waits for it."""
    import asyncio
    import os

    from specdeploy.controller import webhooks
    from specdeploy.controller.benchmark import BenchDeadlines
    from specdeploy.controller.reconciler import Settings
    from specdeploy.controller.settings import OperatorSettings
    from specdeploy.core.policy import TenancyPolicy
    from specdeploy_dev.harness import free_port

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                          "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                          "users: [{name: u, user: {token: t}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    monkeypatch.setattr(webhooks, "settle_gc", lambda: None)  # the test process's collector is left alone
    settings = OperatorSettings(
        namespaces=("models",), kubeconfig=str(kubeconfig), identity="replica-t", acceptance_interval=5,
        watch_timeout=120, inspect_deadline=42, reconciler=Settings(workers=1, policy=TenancyPolicy(pvcs=("models",))),
        webhook=webhooks.WebhookSettings(port=free_port(), addr="127.0.0.1"), bench=BenchDeadlines(poll_seconds=1))
    memo = kopf.Memo(settings=settings, operator=handlers.Operator(settings))
    before = dict(os.environ)
    kopf_settings = kopf.OperatorSettings()

    async def main():
        await handlers.on_startup(settings=kopf_settings, memo=memo)
        op = memo.operator
        try:
            ctl = op.controller
            assert ctl.settings is settings.reconciler and ctl.running
            assert ctl.benchmark_controller.deadlines is settings.bench
            assert ctl.benchmark_controller.policy is settings.policy
            assert ctl.resolver.inspect_deadline == 42
            assert ctl.monitor is not None and ctl.monitor.interval == 5 and ctl.monitor.policy is settings.policy
            assert op.webhook is not None and op.webhook.policy is settings.policy
            assert op.webhook.settings is settings.webhook and op.elector is None and op.health is None
            assert op.identity == "replica-t" and op.sync.namespaces == ["models"]
            assert kopf_settings.watching.server_timeout == 120
            copy = kopf.Memo(**memo)  # kopf hands each object's handlers a shallow copy: the same parts
            assert handlers.operator_of(copy).controller is ctl
        finally:
            await handlers.on_cleanup(memo=memo)
        assert not op.controller.running

    asyncio.run(main())
    assert dict(os.environ) == before
