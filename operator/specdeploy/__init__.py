"""specdeploy: a Kubernetes operator for speculative-decoding deployments (DFlash, DFlash2, DSpark and EAGLE-3
drafters, MTP, n-gram).

The package is split by what it may import:

- ``specdeploy.core`` and ``specdeploy.api``: the pure core (pydantic and the standard
  library only). Shared by the operator, the admission webhook, the CLI and the pod runtime.
- ``specdeploy.cli``: the ``specdeploy`` command; imports heavy parts lazily per subcommand.
"""

__version__ = "0.1.0"

API_GROUP = "specdeploy.io"
API_VERSION = "v1alpha1"
KIND = "SpeculativeDeployment"
PLURAL = "speculativedeployments"
SINGULAR = "speculativedeployment"
SHORT_NAMES = ("specdeploy",)
