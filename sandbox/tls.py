"""The sandbox speaks TLS, as every real API server does: client-go (so kubectl and helm)
never sends a bearer token over plain ``http://``.

On first start, a throwaway certificate authority and a serving certificate for
``127.0.0.1``, ``::1`` and ``localhost`` (and the ``--host`` given) are made with the
``cryptography`` package and kept beside the state file, so a restarted sandbox keeps the
CA its kubeconfig names; the kubeconfig carries the CA as ``certificate-authority-data``.
Elliptic-curve keys (P-256): as good as RSA for this, and made in a millisecond.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=365)
BASE_HOSTS = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class Certificates:
    ca_pem: bytes
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        """What a client that trusts this sandbox's CA uses (tests, readiness checks)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _unspecified(host: str) -> bool:
    """A listen-on-every-address host names no host: clients use one of the base names."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host == ""


def certificates(directory: Path, host: str) -> Certificates:
    """The CA and serving certificate in ``directory``, made on first use (or when the
    serving certificate does not name ``host``)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, cert_file, key_file = (
        directory / "ca.crt",
        directory / "apiserver.crt",
        directory / "apiserver.key",
    )
    hosts = BASE_HOSTS if _unspecified(host) else (*BASE_HOSTS, host)
    if ca_file.exists() and cert_file.exists() and key_file.exists():
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        named = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if set(_san(hosts)) <= set(named) and cert.not_valid_after_utc > dt.datetime.now(dt.UTC):
            return Certificates(ca_file.read_bytes(), cert_file, key_file)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)  # clocks differ a little
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("sandbox-ca"))
        .issuer_name(_name("sandbox-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    serving = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALID_FOR)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    ca_file.write_bytes(ca_pem)
    cert_file.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(_pem_key(key))
    key_file.chmod(0o600)
    return Certificates(ca_pem, cert_file, key_file)
