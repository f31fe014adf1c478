"""The operator: kopf handlers, API I/O, config resolution, status."""
