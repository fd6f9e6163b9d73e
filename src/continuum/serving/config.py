"""What an HTTP server of continuum is configured with, checked whole before it binds: the
listen address (TLS required off loopback), the TLS 1.3 context, the token file and the
person's confirm token. One implementation, so ``continuum-mcp --transport streamable-http``
and ``continuum ui`` refuse and accept exactly the same set-ups.

Imports the leaves and the rest of ``serving``."""

from __future__ import annotations

import ipaddress
import os
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from continuum.errors import UsageError
from continuum.serving.secrets import (
    ALLOW_ALIAS_ENV,
    ALLOW_ENV,
    CLIENT_TOKENS_ENV,
    TOKEN_ENV,
    Secret,
    check_confirm_token_strength,
    load_confirm_token,
)
from continuum.serving.tokens import (
    TokenTable,
    check_confirm_token_apart,
    load_token_file,
)

MCP_PATH = "/mcp"


STDIO_GATE_VARIABLES = (ALLOW_ENV, ALLOW_ALIAS_ENV, TOKEN_ENV, CLIENT_TOKENS_ENV)


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return _is_loopback(self.host)

    def url(self, port: int, tls: bool) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if tls else 'http'}://{host}:{port}{MCP_PATH}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bad_setting(code: str, message: str, hint: str) -> UsageError:
    return UsageError(message, code=code, hint=hint)


def parse_listen(text: str) -> Listen:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); the host an IP address or ``localhost``."""
    hint = "write --listen HOST:PORT, e.g. 127.0.0.1:8765, 0.0.0.0:8765 or [::1]:8765"
    host, colon, port_text = text.rpartition(":")
    if not colon or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise bad_setting("mcp.bad_listen", f"--listen {text!r} is not HOST:PORT", hint)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise bad_setting(
            "mcp.bad_listen",
            f"--listen {text!r}: an IPv6 address needs brackets",
            "write it as [ADDRESS]:PORT, e.g. [::1]:8765",
        )
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise bad_setting(
                "mcp.bad_listen",
                f"--listen {text!r}: {host!r} is not an IP address",
                "give an IP address to bind (or localhost); " + hint,
            ) from None
    return Listen(host, int(port_text))


def _readable_file(path: Path, flag: str) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise bad_setting(
            "mcp.bad_tls", f"{flag} {path}: no such file", "give the path of an existing PEM file"
        ) from None
    except OSError as e:
        raise bad_setting(
            "mcp.bad_tls",
            f"{flag} {path}: cannot be read ({e.strerror})",
            "check the path and its permissions",
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise bad_setting("mcp.bad_tls", f"{flag} {path}: not a regular file", "give a PEM file")
    if not os.access(path, os.R_OK):
        raise bad_setting(
            "mcp.bad_tls",
            f"{flag} {path}: this user may not read it",
            "make it readable by the user that runs the server",
        )


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    raise _EncryptedKey  # never prompt on a terminal: a server has nobody to type it


def tls_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server context: TLS 1.3 at least, this certificate and key, and with
    ``client_ca`` client certificates signed by it required."""
    _readable_file(cert, "--tls-cert")
    _readable_file(key, "--tls-key")
    if key.stat().st_mode & 0o007:
        raise bad_setting(
            "mcp.bad_tls",
            f"--tls-key {key}: the private key is readable or writable by others",
            f"run `chmod 600 {key}` (or 640 with a group such as ssl-cert)",
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        context.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKey:
        raise bad_setting(
            "mcp.bad_tls",
            f"--tls-key {key}: the key is encrypted",
            "give an unencrypted key file, readable only by the server's user "
            "(openssl pkey -in KEY -out PLAIN.key)",
        ) from None
    except (ssl.SSLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or str(e)
        raise bad_setting(
            "mcp.bad_tls",
            f"--tls-cert {cert} / --tls-key {key}: they do not load as a "
            f"certificate and its key ({reason})",
            "give a PEM certificate and the PEM private key that belongs to it",
        ) from None
    if client_ca is not None:
        _readable_file(client_ca, "--tls-client-ca")
        try:
            context.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or str(e)
            raise bad_setting(
                "mcp.bad_tls",
                f"--tls-client-ca {client_ca}: does not load as PEM CA certificates ({reason})",
                "give the PEM certificate(s) of the CA that signs client certificates",
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass(frozen=True)
class HttpConfig:
    """Everything the HTTP transport loads at start-up (no secrets are shown)."""

    listen: Listen
    tokens: TokenTable
    tls: ssl.SSLContext | None
    client_certificates: bool
    confirm_token: Secret | None
    max_body: int
    max_in_flight: int

    def describe(self) -> dict[str, Any]:
        return {
            "transport": "streamable-http",
            "listen": f"{self.listen.host}:{self.listen.port}",
            "loopback": self.listen.loopback,
            "tls": self.tls is not None,
            "tls_minimum": "TLSv1.3" if self.tls is not None else None,
            "client_certificates": self.client_certificates,
            "confirm_over_mcp": self.confirm_token is not None,
            "max_message_bytes": self.max_body,
            "max_in_flight": self.max_in_flight,
            **self.tokens.describe(),
        }


def load_http_config(
    *,
    listen: str,
    token_file: str,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    max_body: int,
    max_in_flight: int,
    env: Mapping[str, str],
) -> HttpConfig:
    """Check and load what serving over HTTP needs; ``UsageError`` on the first problem."""
    where = parse_listen(listen)
    if tls_cert is None and not where.loopback:
        raise bad_setting(
            "mcp.tls_required",
            f"--listen {listen} is not a loopback address and TLS "
            "is off: tokens and results would cross the network in plaintext",
            "give --tls-cert and --tls-key (see references/operators.md), or listen on 127.0.0.1",
        )
    present = [name for name in STDIO_GATE_VARIABLES if env.get(name) is not None]
    if present:
        raise bad_setting(
            "mcp.stdio_setting_over_http",
            f"{present[0]} is set, but over HTTP the "
            "bearer token's role decides who may call what (the allowlist and "
            "_meta.authToken are stdio settings)",
            f"unset {', '.join(present)} for this server and give roles in --token-file instead",
        )
    tokens = load_token_file(token_file)
    confirm = load_confirm_token(env)
    check_confirm_token_apart(tokens, confirm)
    check_confirm_token_strength(confirm)  # after reuse: a reused token is named as such
    tls = (
        tls_context(Path(tls_cert), Path(tls_key), Path(tls_client_ca) if tls_client_ca else None)
        if tls_cert is not None and tls_key is not None
        else None
    )
    return HttpConfig(
        where, tokens, tls, tls_client_ca is not None, confirm, max_body, max_in_flight
    )
