"""The control plane's certificates, as kubeadm (or envtest) would make them, but small.

One CA signs everything: the API server's serving certificate, the client certificates of
the admin (``O=system:masters``) and of the API server towards kubelets, and the webhook
servers' serving certificate (127.0.0.1). The service-account signing key is a separate RSA
pair. Everything is made once into ``directory`` and kept, so a restart (same ``--state``)
keeps the CA its kubeconfig names and the tokens it signed.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=365)
API_SERVER_NAMES = (
    "127.0.0.1",
    "::1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Pki:
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def ca_file(self) -> Path:
        return self.path("ca.crt")

    @property
    def ca_pem(self) -> bytes:
        return self.ca_file.read_bytes()


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _usage(*, sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=sign,
        crl_sign=sign,
        encipher_only=False,
        decipher_only=False,
    )


def make_pki(directory: Path) -> Pki:
    """The certificates in ``directory``, made on first use."""
    pki = Pki(directory)
    if (directory / "complete").exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)  # clocks differ a little
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("gpu-portal-local-ca"))
        .issuer_name(_name("gpu-portal-local-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.ca_file, ca.public_bytes(serialization.Encoding.PEM))

    def issue(
        name: str, subject: x509.Name, usage: x509.ObjectIdentifier, hosts: tuple[str, ...] = ()
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            builder = builder.add_extension(_san(hosts), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write(pki.path(f"{name}.crt"), cert.public_bytes(serialization.Encoding.PEM))
        _write(pki.path(f"{name}.key"), _pem(key), private=True)

    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    issue("apiserver", _name("kube-apiserver"), server, API_SERVER_NAMES)
    issue("admin", _name("gpu-portal-admin", "system:masters"), client)
    issue(
        "apiserver-kubelet-client", _name("kube-apiserver-kubelet-client", "system:masters"), client
    )
    issue("webhooks", _name("local-webhooks"), server, ("127.0.0.1", "localhost"))
    issue("kubelet", _name("local-kubelet"), server, ("127.0.0.1", "localhost"))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(pki.path("sa.key"), _pem(sa_key), private=True)
    _write(
        pki.path("sa.pub"),
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    (directory / "complete").touch()
    return pki
