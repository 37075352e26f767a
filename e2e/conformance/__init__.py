"""Kubernetes' own sig-scheduling e2e specs, run against usher and kube-scheduler.

- ``suite/main_test.go``: the test main of ``e2e.test`` (sig-scheduling and DRA specs)
  (``bash e2e/build-binaries.sh e2e-test``).
- ``cluster.py``: the harness, a local control plane made to look like a small
  real cluster; the only module that imports ``e2e.controlplane``.
- ``run.py``: ``python -m e2e.conformance.run --scheduler usher|kube-scheduler|both``.
- ``expected_failures.py``: specs usher cannot pass yet, each with the missing
  feature; the list only shrinks.
"""
