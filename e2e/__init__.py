"""End-to-end harness for usher: a real local control plane (etcd, kube-apiserver, kube-controller-manager, kwok)."""
