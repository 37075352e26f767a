"""usher: a secondary Kubernetes scheduler with kube-scheduler's queue, plugins and metrics.

The package is layered; each layer imports only the layers below it, and
import-linter's layers contract (pyproject.toml) fails CI when one does not:

    __main__      the CLI: parses and validates every option before connecting
    app           the composition root: builds every adapter and run-time piece, names every task
    scheduling    the run-time pieces, one job per module: watch events in, the loop,
    explaining      the scheduling and binding cycles, Permit waits, failure reports
    adapters      kopf watches, the API dispatcher, binder, claim writer, metrics,
    config          leader election, HTTP; the KubeSchedulerConfiguration parser
    core          PURE: queue, cache, framework, plugins, DRA allocation (no kopf, no HTTP,
                    no Prometheus, no Kubernetes client)
"""

__version__ = "0.1.0"
