"""The ``k8s-job`` backend: Kubernetes Jobs through the official client (:mod:`.launcher`,
:mod:`.client`), their manifests validated before anything is sent (:mod:`.manifests`)."""

from .launcher import K8sBackend

__all__ = ["K8sBackend"]
