"""The simulated API server's CA and serving certificate: a stock TLS client that trusts only the
CA completes a handshake for the loopback address and for the host it was issued for, and
refuses any other name."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509

from remediator.sim.kube.api.tls import issue


def handshake(chain: bytes, key: bytes, ca: bytes, name: str, tmp_path: Path) -> None:
    (tmp_path / "chain.pem").write_bytes(chain)
    (tmp_path / "key.pem").write_bytes(key)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "chain.pem", tmp_path / "key.pem")
    client_context = ssl.create_default_context(cadata=ca.decode())
    server_end, client_end = socket.socketpair()
    server_end.settimeout(10)
    client_end.settimeout(10)

    def serve() -> None:
        try:
            with server_context.wrap_socket(server_end, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            return

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(client_end, server_hostname=name) as tls:
            tls.sendall(b"x")
    finally:
        thread.join(timeout=10)


def test_the_ca_verifies_the_server_for_its_names(tmp_path: Path) -> None:
    cert = issue("10.1.2.3")
    leaf = x509.load_pem_x509_certificate(cert.cert_pem)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "10.1.2.3",
    }
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    for name in ("127.0.0.1", "localhost", "10.1.2.3"):
        handshake(cert.cert_pem, cert.key_pem, cert.ca_pem, name, tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(cert.cert_pem, cert.key_pem, cert.ca_pem, "10.9.9.9", tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):  # another run's CA
        handshake(cert.cert_pem, cert.key_pem, issue("127.0.0.1").ca_pem, "127.0.0.1", tmp_path)
