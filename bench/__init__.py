"""usher's benchmark harness: scheduler_perf-shaped workloads, side by side with kube-scheduler.

Every run gets a fresh local control plane (e2e/controlplane/) with the
apiserver's request limits lifted as scheduler_perf lifts them, so usher,
kube-scheduler and the bind limit meet exactly the same API server. See
bench/README.md for how to run it and bench/RESULTS.md for the numbers.
"""
