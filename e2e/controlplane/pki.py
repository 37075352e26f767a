"""Certificates and keys of a local control plane, made with the openssl CLI.

Two CAs, as in a real cluster: one signs the apiserver's serving certificate
(and is the root CA published to pods), the other signs the client
certificates the apiserver accepts (admin, kcm, kwok, kube-scheduler). A key
pair signs and verifies ServiceAccount tokens. EC P-256 keys, because they
take no time to make.
"""

from __future__ import annotations

import secrets
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from e2e.controlplane.errors import ControlPlaneError

__all__ = ["Pki"]

_OPENSSL_CONFIG = "[req]\ndistinguished_name = dn\n[dn]\n"


@dataclass(frozen=True)
class Pki:
    """File paths of the control plane's keys and certificates.

    ``ca`` signs the serving certificate (and is the root CA published to
    pods), ``client_ca`` signs client certificates the apiserver accepts.
    ``sa_key``/``sa_pub`` sign and verify ServiceAccount tokens.
    """

    directory: Path
    ca_crt: Path
    ca_key: Path
    client_ca_crt: Path
    client_ca_key: Path
    serving_crt: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def generate(cls, directory: Path, *, kubernetes_service_ip: str) -> Pki:
        """Create all keys and certificates; the serving certificate is valid for loopback and the
        ``kubernetes`` Service (its names and ``kubernetes_service_ip``)."""
        if shutil.which("openssl") is None:
            raise ControlPlaneError("the `openssl` CLI is needed to make certificates (apt-get install openssl)")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "openssl.cnf").write_text(_OPENSSL_CONFIG)
        pki = cls(
            directory=directory,
            ca_crt=directory / "ca.crt",
            ca_key=directory / "ca.key",
            client_ca_crt=directory / "client-ca.crt",
            client_ca_key=directory / "client-ca.key",
            serving_crt=directory / "apiserver.crt",
            serving_key=directory / "apiserver.key",
            sa_key=directory / "sa.key",
            sa_pub=directory / "sa.pub",
        )
        pki._ca(pki.ca_key, pki.ca_crt, "usher-e2e-ca")
        pki._ca(pki.client_ca_key, pki.client_ca_crt, "usher-e2e-client-ca")
        sans = ",".join(
            [
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
                "IP:127.0.0.1",
                f"IP:{kubernetes_service_ip}",
            ]
        )
        pki._leaf(
            pki.serving_key, pki.serving_crt, "/CN=kube-apiserver", pki.ca_crt, pki.ca_key,
            usage="serverAuth", sans=sans,
        )  # fmt: skip
        pki._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(pki.sa_key))
        pki._openssl("pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
        return pki

    def client_cert(self, name: str, common_name: str, organization: str | None = None) -> tuple[Path, Path]:
        """Make a client certificate (CN = user, O = group) signed by the client CA."""
        key = self.directory / f"{name}.key"
        crt = self.directory / f"{name}.crt"
        subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
        self._leaf(key, crt, subject, self.client_ca_crt, self.client_ca_key, usage="clientAuth")
        return crt, key

    def _openssl(self, *args: str) -> None:
        proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ControlPlaneError(f"openssl {shlex.join(args)} failed: {proc.stderr.strip()}")

    def _ca(self, key: Path, crt: Path, common_name: str) -> None:
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
        self._openssl(
            "req", "-config", str(self.directory / "openssl.cnf"), "-x509", "-new", "-key", str(key),
            "-subj", f"/CN={common_name}", "-days", "3650",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out", str(crt),
        )  # fmt: skip

    def _leaf(
        self, key: Path, crt: Path, subject: str, ca_crt: Path, ca_key: Path, *, usage: str, sans: str | None = None
    ) -> None:
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
        extensions = [
            "-addext", "basicConstraints=critical,CA:FALSE",
            "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
            "-addext", f"extendedKeyUsage={usage}",
        ]  # fmt: skip
        if sans:
            extensions += ["-addext", f"subjectAltName={sans}"]
        self._openssl(
            "req", "-config", str(self.directory / "openssl.cnf"), "-x509", "-new", "-key", str(key),
            "-CA", str(ca_crt), "-CAkey", str(ca_key), "-set_serial", str(secrets.randbits(63)),
            "-subj", subject, "-days", "365", *extensions, "-out", str(crt),
        )  # fmt: skip
        key.chmod(0o600)
