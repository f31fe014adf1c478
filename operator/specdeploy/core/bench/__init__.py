"""SpeculativeBenchmark (pure): the plan, its objects and the client's result, one concern per module.

- ``plan``: the variants and points of a benchmark, the client's plan document (``plan_benchmark``);
- ``objects``: a benchmark's objects variant after variant, through the tenancy gate (``render_benchmark``,
  ``plan_for``);
- ``render``: one variant's ConfigMap, Deployment and Service, the client Job and its ConfigMap;
- ``prompts``: bundled and ConfigMap request sets, seeded prompts cut to exact token counts;
- ``result``: the client's result line, found, bounded and validated;
- ``costs``: the hidden costs of a point from the engines' own /metrics;
- ``reco``: the recommendation over the variants' results.

The wing sits above ``core.render`` and ``core.checker`` (the import contract ``core-wings`` in pyproject.toml);
the pod's bench client (``specdeploy_runtime``) imports ``prompts``, ``costs`` and ``result`` only. Import from the
modules: this package re-exports nothing.
"""
