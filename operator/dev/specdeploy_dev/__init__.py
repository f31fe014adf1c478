"""Development and test infrastructure: the embedded Kubernetes API server stand-in and its benchmark."""
