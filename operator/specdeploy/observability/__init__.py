"""Observability sources: Prometheus rules and the Grafana dashboard, built in Python.

`specdeploy generate` writes them to charts/specdeploy/files/ (prometheus-rules.yaml,
dashboards/*.json); the metric names come from specdeploy.core.acceptance.
"""
