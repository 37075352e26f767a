"""Admin access to an apiserver: the credentials, the kubeconfig files that carry them, and the client.

Both kinds of cluster (`e2e.controlplane.local`, `e2e.controlplane.external`)
reach their apiserver the same way once they know the credentials: raw HTTPS
requests for polling (a subprocess per probe would be slow) and the pinned
kubectl for everything a test would type by hand. Only where the credentials
come from differs: certificates the local control plane made, or a
kubeconfig someone handed us.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yaml import safe_load as yaml_load

from e2e.controlplane.errors import ApiError, ControlPlaneError, KubectlError

__all__ = ["AdminClient", "AdminCredentials", "write_kubeconfig"]


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    user: str,
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
) -> Path:
    """A kubeconfig with the credentials embedded, so the file works when copied elsewhere:
    a client certificate (``cert``/``key``), a bearer ``token``, or neither (e.g. through a proxy).

    Written as JSON, which is valid YAML for kubectl and client libraries and
    needs no YAML library here.
    """

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = b64(ca)
    credentials: dict[str, str] = {}
    if cert is not None and key is not None:
        credentials = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    if token:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "usher-e2e", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "usher-e2e", "context": {"cluster": "usher-e2e", "user": user}}],
        "current-context": "usher-e2e",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class AdminCredentials:
    """How to reach one apiserver as a cluster admin.

    ``ca_certificate`` verifies the apiserver's serving certificate; the admin
    authenticates with a client certificate (``client_certificate`` and
    ``client_key``), a bearer ``token``, or both.
    """

    server: str
    ca_certificate: Path
    client_certificate: Path | None = None
    client_key: Path | None = None
    token: str | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path, directory: Path) -> AdminCredentials:
        """The current context's credentials; embedded ``*-data`` is written to files in ``directory``
        (an SSL context loads certificates from files). Paths in the kubeconfig are taken as they are,
        relative to its directory. Exec plugins and auth providers are not supported."""
        config = yaml_load(kubeconfig.read_text())
        context_name = config.get("current-context")
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        directory.mkdir(parents=True, exist_ok=True)

        def file_of(entry: dict[str, Any], key: str, name: str) -> Path | None:
            if entry.get(f"{key}-data"):
                path = directory / name
                path.write_bytes(base64.b64decode(entry[f"{key}-data"]))
                path.chmod(0o600)
                return path
            if entry.get(key):
                return (kubeconfig.parent / str(entry[key])).resolve()
            return None

        ca = file_of(cluster, "certificate-authority", "ca.crt")
        if ca is None:
            raise ControlPlaneError(f"{kubeconfig}: the cluster has no certificate-authority(-data) to verify it by")
        return cls(
            server=str(cluster["server"]),
            ca_certificate=ca,
            client_certificate=file_of(user, "client-certificate", "client.crt"),
            client_key=file_of(user, "client-key", "client.key"),
            token=str(user["token"]) if user.get("token") else None,
        )

    def write_kubeconfig(self, path: Path, *, user: str = "admin") -> Path:
        """These credentials as a self-contained kubeconfig (for kubectl, helm, usher, the Python client)."""
        return write_kubeconfig(
            path, server=self.server, user=user, ca=self.ca_certificate,
            cert=self.client_certificate, key=self.client_key, token=self.token,
        )  # fmt: skip

    def ssl_context(self) -> ssl.SSLContext:
        """TLS that verifies the apiserver and, when the admin has one, presents the client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_certificate))
        if self.client_certificate is not None and self.client_key is not None:
            context.load_cert_chain(str(self.client_certificate), str(self.client_key))
        return context

    def headers(self) -> dict[str, str]:
        """HTTP headers that authenticate the admin (none when the client certificate does)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


class AdminClient:
    """Raw apiserver requests and the pinned kubectl, both as admin.

    ``kubeconfig`` must hold the same credentials (kubectl reads them from it).
    """

    def __init__(self, credentials: AdminCredentials, *, kubeconfig: Path, kubectl: Path, kubectl_cache: Path) -> None:
        self.credentials = credentials
        self.kubeconfig = kubeconfig
        self._kubectl = kubectl
        self._kubectl_cache = kubectl_cache
        self._ssl = credentials.ssl_context()
        url = urllib.parse.urlsplit(credentials.server)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or 443

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> Any:
        """One raw apiserver request; returns the decoded JSON (None when empty).

        Raises `ApiError` on HTTP status >= 400.
        """
        payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json", **self.credentials.headers()}
        if payload is not None:
            headers["Content-Type"] = content_type
        conn = http.client.HTTPSConnection(self._host, self._port, context=self._ssl, timeout=timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status >= 400:
            raise ApiError(response.status, method, path, data.decode("utf-8", "replace"))
        return json.loads(data) if data else None

    def get_or_none(self, path: str) -> Any:
        """GET that maps 404 to None."""
        try:
            return self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0) -> str:
        """Run kubectl with the admin kubeconfig; return stdout.

        Raises `KubectlError` carrying stderr when it exits non-zero, unless
        ``check`` is false (``kubectl auth can-i`` exits 1 for "no").
        """
        argv = [str(self._kubectl), f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self._kubectl_cache}", *args]
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(args, proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout
