"""The pure core of usher: queue, cache, framework, plugins and the scheduling cycle.

Pure: nothing here performs I/O or imports kopf, the Kubernetes client,
aiohttp or prometheus_client (enforced by import-linter). Adapters feed it
plain dicts as the API server serves them and carry its decisions out.

Layered, each layer importing only those below it (import-linter's core
layers contract in pyproject.toml):

    handling | cycle       watch events in; one pod's PreFilter..Score
    plugins                one package per plugin; registry.py lists the in-tree ones
    framework              extension-point protocols, profiles, names, the builder, the runtime
    queue | cache | dra    scheduling queue; NodeInfo + assumed pods; DRA state and allocator
    hints                  what plugins register for cluster events (QueueingHint, PreQueueingHint)
    events | selectors     ClusterEvent and update splitting; label/node selectors, tolerations
    types                  PodInfo, keys, Status/Code/Cause
    resources | clock      quantities and pod requests; the injected clock
"""
