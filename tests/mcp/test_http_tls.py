"""TLS for ``continuum-mcp --transport streamable-http``: a real server with certificates
made here (the ``cryptography`` package, which the MCP SDK already depends on).

- Off loopback with TLS (bound on 0.0.0.0): the official client, TLS 1.3 and trusting
  the server's CA, works in both eras; a TLS 1.2-only client, a plaintext client and a
  client that does not trust the certificate are refused.
- ``--tls-client-ca``: no client certificate, or one from another CA, is refused; one
  signed by that CA works.
- Start-up: a missing certificate, a key others may read, a key that does not match,
  an encrypted key, a CA file that is not PEM: one line, exit 1, nothing served.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.mcp.conftest import BOUND, MODES, structured
from tests.mcp.http_site import (
    TOKENS,
    HttpSite,
    http_client,
    initialize_body,
    official_client,
    refused_in_process,
)

pytestmark = pytest.mark.anyio

# --- certificates ------------------------------------------------------------------


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: bytes | None = None) -> Path:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    path.chmod(0o600)
    return path


def issue(
    directory: Path,
    name: str,
    *,
    ca: tuple[Issued, ec.EllipticCurvePrivateKey] | None = None,
    is_ca: bool = False,
    server: bool = False,
) -> tuple[Issued, ec.EllipticCurvePrivateKey]:
    """A key and certificate, self-signed (``ca`` None) or signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    issuer_name = _name(name)
    signer = key
    if ca is not None:
        issuer_name = x509.load_pem_x509_certificate(ca[0].cert.read_bytes()).subject
        signer = ca[1]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    cert = builder.sign(signer, hashes.SHA256())
    cert_path = directory / f"{name}.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issued(cert_path, _write_key(key, directory / f"{name}.key")), key


@dataclass(frozen=True)
class Pki:
    server_ca: Issued
    server: Issued
    client_ca: Issued
    client: Issued
    stranger: Issued  # a client certificate from no CA the server knows


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    server_ca = issue(d, "server-ca", is_ca=True)
    client_ca = issue(d, "client-ca", is_ca=True)
    return Pki(
        server_ca[0],
        issue(d, "server", ca=server_ca, server=True)[0],
        client_ca[0],
        issue(d, "client", ca=client_ca)[0],
        issue(d, "stranger")[0],
    )


def client_context(
    pki: Pki,
    *,
    maximum: ssl.TLSVersion | None = None,
    cert: Issued | None = None,
    trust: bool = True,
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.server_ca.cert) if trust else None)
    if maximum is not None:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.maximum_version = maximum
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return context


def tls_args(pki: Pki, client_ca: bool = False) -> list[str]:
    args = ["--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key)]
    return args + (["--tls-client-ca", str(pki.client_ca.cert)] if client_ca else [])


def handshake(port: int, context: ssl.SSLContext) -> str:
    """A TLS connection and one HTTP request without a token: the negotiated version, once
    the server answered (401: TLS passed, the bearer check is next). In TLS 1.3 a refused
    client certificate shows only here, after the handshake."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=BOUND) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = tls.recv(64)
        assert answer.startswith(b"HTTP/1.1 401"), answer
        return str(tls.version())


def refused(fn: Callable[[], object]) -> str:
    """How the server refused the connection ``fn`` makes (it must not answer)."""
    try:
        fn()
    except AssertionError as e:  # connected, but no HTTP answer came back
        assert "b''" in str(e), e
        return "closed without an answer"
    except (ssl.SSLError, OSError) as e:
        return type(e).__name__
    raise AssertionError("the server answered a connection it should have refused")


@pytest.fixture
def http_site(tmp_path: Path) -> HttpSite:
    return HttpSite.make(tmp_path)


# --- serving -----------------------------------------------------------------------


async def test_off_loopback_tls_13_serves_and_refuses_tls_12_plaintext_and_untrusted(
    http_site: HttpSite, pki: Pki
) -> None:
    async with http_site.serve(*tls_args(pki), listen="0.0.0.0:0") as server:
        assert server.url.startswith("https://0.0.0.0:")
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with anyio.fail_after(BOUND):
            for mode in MODES:
                async with official_client(
                    url, TOKENS["read"], mode, verify=client_context(pki)
                ) as client:
                    answer = structured(await client.call_tool("continuum_resume", {}))
                    assert answer["mode"] == "no_active_run"
            # Control: the same client allowed TLS 1.2 *or* 1.3 gets through, on 1.3.
            version = await anyio.to_thread.run_sync(
                handshake, port, client_context(pki, maximum=ssl.TLSVersion.TLSv1_3)
            )
            too_old = await anyio.to_thread.run_sync(
                refused,
                lambda: handshake(port, client_context(pki, maximum=ssl.TLSVersion.TLSv1_2)),
            )
            untrusted = await anyio.to_thread.run_sync(
                refused, lambda: handshake(port, client_context(pki, trust=False))
            )
            async with http_client(TOKENS["read"]) as plain:
                with pytest.raises(Exception):  # noqa: B017 - any failure: no HTTP answer
                    await plain.post(url.replace("https://", "http://"), json=initialize_body())
    assert version == "TLSv1.3"
    assert too_old.startswith("SSL"), too_old  # the server ends the handshake
    assert untrusted == "SSLCertVerificationError"


async def test_client_certificates_are_required_with_a_client_ca(
    http_site: HttpSite, pki: Pki
) -> None:
    async with http_site.serve(*tls_args(pki, client_ca=True)) as server:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        with anyio.fail_after(BOUND):
            none = await anyio.to_thread.run_sync(
                refused, lambda: handshake(port, client_context(pki))
            )
            stranger = await anyio.to_thread.run_sync(
                refused, lambda: handshake(port, client_context(pki, cert=pki.stranger))
            )
            version = await anyio.to_thread.run_sync(
                handshake, port, client_context(pki, cert=pki.client)
            )
            async with official_client(
                server.url, TOKENS["read"], "auto", verify=client_context(pki, cert=pki.client)
            ) as client:
                assert structured(await client.call_tool("continuum_resume", {}))
    assert version == "TLSv1.3"
    assert none and stranger, (none, stranger)  # refused (an alert or a closed connection)


# --- start-up refusals -------------------------------------------------------------


@pytest.fixture
def broken(tmp_path: Path, pki: Pki) -> dict[str, list[str]]:
    """Flag sets that must each refuse start-up: name -> the TLS flags."""
    d = tmp_path / "broken"
    d.mkdir()
    open_key = d / "open.key"
    open_key.write_bytes(pki.server.key.read_bytes())
    open_key.chmod(0o644)
    other, other_key = issue(d, "other", server=True)
    locked = _write_key(other_key, d / "locked.key", password=b"secret-password")
    not_pem = d / "ca.txt"
    not_pem.write_text("not a certificate\n")
    cert, key = str(pki.server.cert), str(pki.server.key)
    return {
        "missing certificate": ["--tls-cert", str(d / "nope.pem"), "--tls-key", key],
        "key open to others": ["--tls-cert", cert, "--tls-key", str(open_key)],
        "key of another certificate": ["--tls-cert", cert, "--tls-key", str(other.key)],
        "encrypted key": ["--tls-cert", str(other.cert), "--tls-key", str(locked)],
        "client CA not PEM": [
            "--tls-cert",
            cert,
            "--tls-key",
            key,
            "--tls-client-ca",
            str(not_pem),
        ],
        "certificate is a directory": ["--tls-cert", str(d), "--tls-key", key],
    }


EXPECTED = {
    "missing certificate": "no such file",
    "key open to others": "readable or writable by others",
    "key of another certificate": "do not load as a certificate and its key",
    "encrypted key": "the key is encrypted",
    "client CA not PEM": "does not load as PEM CA",
    "certificate is a directory": "not a regular file",
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_tls_files_are_refused_at_start_in_one_line(
    http_site: HttpSite,
    broken: dict[str, list[str]],
    case: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    line = refused_in_process(
        http_site,
        [
            "--transport",
            "streamable-http",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            str(http_site.token_file),
            *broken[case],
        ],
        capsys,
        monkeypatch,
    )
    assert "[mcp.bad_tls]" in line and EXPECTED[case] in line, line
