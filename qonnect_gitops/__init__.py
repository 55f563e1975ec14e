"""qonnect-gitops: QoS-aware GitOps placement across many Kubernetes and K3s clusters."""

__version__ = "0.1.0"
API_VERSION = "qonnect.io/v1alpha1"
