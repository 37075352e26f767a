"""Run one container of a rendered pod spec with podman, as a kubelet would run it on a node.

Where no node runs pods, this is the closest the harness gets to the chart's Deployment: the
container's image, args and env (``fieldRef`` filled in), the pod's and the container's
securityContext (user and group, supplemental fsGroup, read-only root filesystem with nothing
writable but the volumes, dropped capabilities, no new privileges, the runtime's default seccomp
profile), its volumes from host directories (a ConfigMap's files, an emptyDir), and the projected
ServiceAccount token a kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount, with the
``KUBERNETES_SERVICE_HOST``/``PORT`` a kubelet sets. The container uses the host's network, since
the local apiserver listens on loopback only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SERVICE_ACCOUNT_DIR", "podman_run_argv", "security_args", "service_account_dir"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def service_account_dir(directory: Path, *, token: str, ca_certificate: bytes, namespace: str) -> Path:
    """The files of a projected ServiceAccount volume (token, ca.crt, namespace), readable by any uid."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in {"token": token.encode(), "ca.crt": ca_certificate, "namespace": namespace.encode()}.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o644)
    directory.chmod(0o755)
    return directory


def _env(container: Mapping[str, Any], field_values: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for variable in container.get("env") or []:
        if "value" in variable:
            value = str(variable["value"])
        else:
            path = variable["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in field_values:
                raise ValueError(f"no value for the fieldRef {path} of {variable['name']}")
            value = field_values[path]
        args += ["--env", f"{variable['name']}={value}"]
    return args


def security_args(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    """podman's flags for the pod's and the container's securityContext (the container's wins)."""
    context = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    args: list[str] = []
    if "runAsUser" in context:
        args += ["--user", f"{context['runAsUser']}:{context.get('runAsGroup', context['runAsUser'])}"]
    if "fsGroup" in (pod.get("securityContext") or {}):
        args += ["--group-add", str(pod["securityContext"]["fsGroup"])]
    if context.get("readOnlyRootFilesystem"):
        # podman's --read-only adds writable tmpfs mounts on /tmp, /run and /var/tmp; a kubelet does not.
        args += ["--read-only", "--read-only-tmpfs=false"]
    if context.get("privileged"):
        raise ValueError("a privileged container is not what the chart asks for")
    capabilities = context.get("capabilities") or {}
    args += [arg for cap in capabilities.get("drop") or [] for arg in ("--cap-drop", cap)]
    args += [arg for cap in capabilities.get("add") or [] for arg in ("--cap-add", cap)]
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    seccomp = (context.get("seccompProfile") or {}).get("type")
    if seccomp not in (None, "RuntimeDefault"):
        raise ValueError(f"seccomp profile {seccomp} is not translated")
    return args


def podman_run_argv(
    pod: Mapping[str, Any],
    *,
    name: str,
    image: str,
    volumes: Mapping[str, Path],
    service_account: Path,
    apiserver_port: int,
    field_values: Mapping[str, str],
) -> list[str]:
    """``podman run`` arguments (after ``run``) for the pod's first container.

    ``volumes`` maps each of the pod's volume names to a host directory with its files (an emptyDir
    is a fresh empty directory); ``service_account`` holds the projected token's files.
    """
    [container] = pod["containers"]
    # --passwd=false: podman would add the --user's uid to the image's /etc/passwd, a kubelet does not.
    args = ["--name", name, "--network", "host", "--pull", "never", "--passwd=false"]
    args += security_args(pod, container)
    known = {volume["name"] for volume in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in known or mount["name"] not in volumes:
            raise ValueError(f"no host directory for the volume {mount['name']}")
        mode = "ro" if mount.get("readOnly") else "rw"
        args += ["--volume", f"{volumes[mount['name']]}:{mount['mountPath']}:{mode}"]
    if pod.get("automountServiceAccountToken", True):
        args += ["--volume", f"{service_account}:{SERVICE_ACCOUNT_DIR}:ro"]
        args += ["--env", "KUBERNETES_SERVICE_HOST=127.0.0.1", "--env", f"KUBERNETES_SERVICE_PORT={apiserver_port}"]
    args += _env(container, field_values)
    if container.get("command"):
        args += ["--entrypoint", container["command"][0]]
    args.append(image)
    args += [*container.get("command", [])[1:], *container.get("args", [])]
    return args
