"""specdeploy-runtime: what runs in the engine pod. Shares the pure core; never imports kopf."""
