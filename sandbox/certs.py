"""Self-signed PKI for the sandbox control plane, made with openssl.

One CA signs the apiserver's serving certificate, the apiserver's client
certificate for kubelets, and the kubelets' serving certificate. The service-account
key pair signs tokens. All files are created once per run directory.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_SERVER_SANS = (
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
    "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1"
)


@dataclass(frozen=True)
class Pki:
    dir: Path

    ca_crt = property(lambda self: self.dir / "ca.crt")
    ca_key = property(lambda self: self.dir / "ca.key")
    apiserver_crt = property(lambda self: self.dir / "apiserver.crt")
    apiserver_key = property(lambda self: self.dir / "apiserver.key")
    kubelet_client_crt = property(lambda self: self.dir / "apiserver-kubelet-client.crt")
    kubelet_client_key = property(lambda self: self.dir / "apiserver-kubelet-client.key")
    kubelet_crt = property(lambda self: self.dir / "kubelet.crt")
    kubelet_key = property(lambda self: self.dir / "kubelet.key")
    sa_key = property(lambda self: self.dir / "sa.key")
    sa_pub = property(lambda self: self.dir / "sa.pub")


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def self_signed(key: Path, crt: Path, subject: str, *, days: int, san: str = "") -> None:
    """A new RSA key and a certificate for it signed by itself (a CA, or a lone server
    with `san` as its subjectAltName)."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        str(days),
        "-keyout",
        str(key),
        "-out",
        str(crt),
        "-subj",
        subject,
        *(("-addext", f"subjectAltName={san}") if san else ()),
    )


def _signed_cert(pki: Pki, name: str, subject: str, ext: str) -> None:
    key, csr, crt = (pki.dir / f"{name}.{s}" for s in ("key", "csr", "crt"))
    ext_file = pki.dir / f"{name}.ext"
    ext_file.write_text(ext)
    _openssl(
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-subj",
        subject,
        "-out",
        str(csr),
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(pki.ca_crt),
        "-CAkey",
        str(pki.ca_key),
        "-CAcreateserial",
        "-days",
        "3650",
        "-out",
        str(crt),
        "-extfile",
        str(ext_file),
    )
    csr.unlink()
    ext_file.unlink()


def ensure_pki(directory: Path) -> Pki:
    """Create the CA, certificates and service-account keys unless they exist."""
    pki = Pki(directory)
    if pki.sa_pub.exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    self_signed(pki.ca_key, pki.ca_crt, "/CN=handoff-sandbox-ca", days=3650)
    server_ext = f"subjectAltName={_SERVER_SANS}\nextendedKeyUsage=serverAuth\n"
    _signed_cert(pki, "apiserver", "/CN=kube-apiserver", server_ext)
    _signed_cert(
        pki,
        "apiserver-kubelet-client",
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
        "extendedKeyUsage=clientAuth\n",
    )
    _signed_cert(
        pki,
        "kubelet",
        "/CN=handoff-sandbox-kubelet",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    _openssl("genrsa", "-out", str(pki.sa_key), "2048")
    _openssl("rsa", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
    return pki
