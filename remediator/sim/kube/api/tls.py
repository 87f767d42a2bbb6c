"""The simulated API server's TLS: a CA made for this run and a server certificate it signs for
the loopback address, as a real apiserver's cluster CA and serving certificate. Stock kubectl
sends a bearer token only over TLS, so RBAC can hold it to a ServiceAccount's roles only when
the server speaks TLS and the kubeconfig carries the CA (`certificate-authority-data`)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = timedelta(days=365)
# Clocks of clients on the same machine may lag the server's by a little.
BACKDATE = timedelta(minutes=5)


@dataclass(frozen=True)
class ServingCert:
    ca_pem: bytes  # what clients trust
    cert_pem: bytes  # the server's certificate, then the CA's (the chain it presents)
    key_pem: bytes  # the server's private key (unencrypted PKCS#8)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def issue(host: str, now: datetime | None = None) -> ServingCert:
    """A fresh CA and a serving certificate for `host` (an IP address or a DNS name), plus
    127.0.0.1 and localhost. P-256 keys: each start makes two, so they must be quick."""
    start = (now or datetime.now(UTC)) - BACKDATE
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = _name("remediator-sim-ca")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + VALID_FOR)
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
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_alt_names(host)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return ServingCert(_pem(ca), _pem(cert) + _pem(ca), key_pem)


def _alt_names(host: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        names.append(x509.DNSName(host))
        return names
    if not address.is_unspecified and str(address) != "127.0.0.1":
        names.append(x509.IPAddress(address))
    return names
