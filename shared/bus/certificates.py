"""A private certificate authority and a server certificate for the NATS server's TLS.

Why generate them: TLS needs a CA the clients trust and a server certificate whose names match
the host the clients dial (``nats`` inside compose, ``127.0.0.1``/``localhost`` on one machine).
Sites with their own PKI point ``HYLO_NATS_TLS_CA`` and the server's tls block at theirs instead;
``hylo bus credentials --tls`` gives everyone else a working setup in one step. Keys are ECDSA
P-256 (small, fast, accepted by Go's and OpenSSL's TLS stacks); files with keys are written 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: default names of the server certificate: compose's three NATS nodes and the local machine
DEFAULT_HOSTS = ("nats", "nats-2", "nats-3", "localhost", "127.0.0.1")


@dataclass(frozen=True)
class TlsFiles:
    """Where the CA certificate and the server's certificate and key were written."""

    ca: Path
    server_cert: Path
    server_key: Path


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def _name(common: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Hylo"),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def _alt_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _load_ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    cert_path, key_path = folder / "ca.pem", folder / "ca-key.pem"
    if not (cert_path.is_file() and key_path.is_file()):
        return None
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path}: not an EC private key")
    return x509.load_pem_x509_certificate(cert_path.read_bytes()), key


def _new_ca(folder: Path, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("Hylo bus CA"))
        .issuer_name(_name("Hylo bus CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .sign(key, hashes.SHA256())
    )
    (folder / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        folder / "ca-key.pem",
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return cert, key


def write_server_tls(
    folder: Path, hosts: tuple[str, ...] = DEFAULT_HOSTS, days: int = 825, new_ca: bool = False
) -> TlsFiles:
    """Write (or keep) the CA in ``folder`` and a new server certificate for ``hosts`` signed by it.

    An existing CA is kept unless ``new_ca``: re-issuing the server certificate (new host names, a
    coming expiry) then needs no change on any client."""
    folder.mkdir(parents=True, exist_ok=True)
    loaded = None if new_ca else _load_ca(folder)
    ca_cert, ca_key = loaded if loaded is not None else _new_ca(folder, days=3650)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # client auth too: in a NATS cluster each node dials the others' routes with this certificate
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(
        ca=folder / "ca.pem", server_cert=folder / "server-cert.pem", server_key=folder / "server-key.pem"
    )
    files.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.server_key,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return files
