"""Credentials for the API server, shared by kopf (watching) and the async client (writing).

A kubeconfig path wins; without one, in-cluster service-account credentials
are used, then ``$KUBECONFIG`` / ``~/.kube/config``. Both libraries load the
same source with their own loaders, so token refresh keeps working.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import kopf
import kubernetes.aio.client
import kubernetes.aio.config
import kubernetes.client
import kubernetes.config


class CredentialsError(RuntimeError):
    """No usable credentials: the message says what was tried."""


@dataclass(frozen=True, slots=True)
class Connection:
    """Credentials for one cluster: the async client's and kopf's configuration, and where they came from."""

    sync_config: kubernetes.client.Configuration
    async_config: kubernetes.aio.client.Configuration
    source: str


async def connect(kubeconfig: str | None) -> Connection:
    """Load credentials once, for both clients."""
    sync_config = kubernetes.client.Configuration()
    async_config = kubernetes.aio.client.Configuration()
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise CredentialsError(f"--kubeconfig {kubeconfig}: no such file")
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=sync_config)
        await kubernetes.aio.config.load_kube_config(config_file=kubeconfig, client_configuration=async_config)
        source = kubeconfig
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=sync_config)
        kubernetes.aio.config.load_incluster_config(client_configuration=async_config)
        source = "in-cluster service account"
    else:
        path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        if not os.path.exists(path):
            raise CredentialsError(
                "no credentials: pass --kubeconfig, set KUBECONFIG, or run in a pod with a service account"
            )
        kubernetes.config.load_kube_config(config_file=path, client_configuration=sync_config)
        await kubernetes.aio.config.load_kube_config(config_file=path, client_configuration=async_config)
        source = path
    async_config.connection_pool_maxsize = 64
    if not any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
        # aiohttp's trust_env re-reads ~/.netrc on every request: 3 % of usher's CPU under load.
        async_config.client_session_kwargs = {"trust_env": False}
    return Connection(sync_config=sync_config, async_config=async_config, source=source)


def kopf_connection_info(config: kubernetes.client.Configuration) -> kopf.ConnectionInfo:
    """What kopf's login handler returns, from the loaded client configuration."""
    header: str | None = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix(
        "authorization"
    )
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    kwargs: dict[str, Any] = {
        "server": config.host,
        "ca_path": config.ssl_ca_cert,
        "insecure": not config.verify_ssl,
        "scheme": scheme,
        "token": token,
        "certificate_path": config.cert_file,
        "private_key_path": config.key_file,
        "username": config.username or None,
        "password": config.password or None,
    }
    return kopf.ConnectionInfo(**kwargs)
