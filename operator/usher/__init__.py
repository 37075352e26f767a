"""usher: a secondary Kubernetes scheduler with kube-scheduler's queue, plugins and metrics."""

__version__ = "0.1.0"
