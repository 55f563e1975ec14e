"""The resource agent: fetch its cluster branch, apply it, prune, report health.

One concern per module, in the spirit of Argo CD's gitops-engine:

* ``source``    narrow fetch of ``cluster/<name>`` and parsing of its manifests and trailers
* ``kube``      the Kubernetes REST calls (discovery, apply, get, delete) with retry/backoff
* ``diff``      normalising objects for comparison (dry-run result vs live)
* ``sync``      staged server-side apply with dry-run first
* ``drift``     heal or report objects that differ from the applied head
* ``inventory`` the ``qonnect-inventory`` ConfigMap
* ``prune``     prune guards and deletion of what left the branch
* ``health``    one small function per kind, rolled up per component
* ``capacity``  node capacity from Nodes and Pods
* ``prometheus`` latency and traffic from a Prometheus query API
* ``report``    reporting to the leads
* ``metrics``   Prometheus text metrics and the push webhook
* ``agent``     the loop tying the steps together

The agent imports only ``model``, ``gitstore``, ``logs`` and the kubernetes client.
"""

from qonnect_gitops.agent.config import AgentConfig

__all__ = ["AgentConfig"]
