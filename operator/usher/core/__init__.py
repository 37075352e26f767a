"""The pure core of usher: queue, cache, framework, plugins and the scheduling cycle.

Pure: nothing here performs I/O or imports kopf, the Kubernetes client,
aiohttp or prometheus_client (enforced by import-linter). Adapters feed it
plain dicts as the API server serves them and carry its decisions out.
"""
