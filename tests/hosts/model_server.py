"""A local HTTP server that answers a real host's model requests from a script.

One wire module per protocol (``wire_anthropic.py``, ``wire_gemini.py``, ...) turns a
request into a ``Turn`` and a ``Reply`` into that protocol's answer (JSON, or a
server-sent event stream). The server itself knows no protocol: it reads the request,
logs it in ``Model.requests`` (path, JSON body and arrival time, for tests that look at
what the host sent: the tools it offered, the briefing in its context; for the host
benchmark) and writes what the wire gave.

Only 127.0.0.1, an ephemeral port, no network.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from tests.hosts.script import Model


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or None


@dataclass
class Response:
    status: int = 200
    json: Any = None
    events: list[tuple[str | None, Any]] | None = None  # server-sent events: (event, data)
    headers: dict[str, str] = field(default_factory=dict)


class Wire(Protocol):
    def answer(self, request: Request, model: Model) -> Response: ...


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the request log is Model.requests

    def _serve(self) -> None:
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = None
        request = Request(
            self.command,
            split.path,
            parse_qs(split.query),
            {k.lower(): v for k, v in self.headers.items()},
            body,
        )
        model = self.server.model
        with model.lock:
            model.requests.append(
                {"method": self.command, "path": split.path, "body": body, "at": time.monotonic()}
            )
        try:
            response = self.server.wire.answer(request, model)
        except Exception as e:  # a harness bug: say so to the host and to the test
            with model.lock:
                model.problems.append(f"{type(e).__name__}: {e} (path {split.path})")
            response = Response(500, json={"error": {"message": f"harness: {e}"}})
        self._write(response)

    do_GET = do_POST = _serve

    def _write(self, response: Response) -> None:
        self.send_response(response.status)
        for k, v in response.headers.items():
            self.send_header(k, v)
        if response.events is not None:
            chunks = []
            for event, data in response.events:
                text = data if isinstance(data, str) else json.dumps(data)
                chunks.append((f"event: {event}\n" if event else "") + f"data: {text}\n\n")
            body = "".join(chunks).encode()
            self.send_header("Content-Type", "text/event-stream")
        else:
            body = json.dumps(response.json if response.json is not None else {}).encode()
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        # The host may be killed while it reads: that is what some tests do.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, wire: Wire, model: Model) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.wire = wire
        self.model = model


@contextmanager
def serve(wire: Wire, model: Model) -> Iterator[str]:
    """Serve ``model`` over ``wire`` on 127.0.0.1; yields the base URL (no trailing /)."""
    server = _Server(wire, model)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
