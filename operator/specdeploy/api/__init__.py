"""The SpeculativeDeployment API (specdeploy.io/v1alpha1): pydantic models, the single source."""
