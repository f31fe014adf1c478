"""What a running deployment's measurements decide (pure), one concern per module:

- ``canary``: canary rollouts: the revision, the analysis of the two tracks and the decision (``step``);
- ``baseline``: the acceptance baseline a deployment settled at, and the regression verdict against it;
- ``guard``: the speculation guard: where speculation stops paying, as the engine's own switch, and the
  monitor's crossover test.

The wing sits below ``core.render`` (which writes the revision and the guard into the objects) and beside
``core.checker`` (the import contract ``core-wings`` in pyproject.toml). Import from the modules: this package
re-exports nothing.
"""
