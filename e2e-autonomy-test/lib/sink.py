"""A tiny HTTP "invoice service" on 127.0.0.1 for the hidden-side-effect variant.

Usage: sink.py JOURNAL

Binds an ephemeral port on 127.0.0.1, prints its base URL as the first line on stdout,
then serves until SIGTERM or SIGINT:
  POST /invoices/<id>   body = the invoice line; answers 201 {"receipt": "rcpt-N"}
  GET  /invoices/<id>   200 {"invoice", "receipts"} if it was ever received, else 404
  GET  /invoices        every request received, in order
Like a real mail or billing API it accepts duplicates: a second POST of an invoice is a
second send. Every accepted request is appended to JOURNAL (one JSON line, flushed and
fsynced before the answer), which the scorer reads after the run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

MAX_BODY = 64 * 1024


class Sink(HTTPServer):
    def __init__(self, journal: Path) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.journal = journal.open("a", encoding="utf-8")
        self.received: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def record(self, invoice: str, body: str) -> dict[str, Any]:
        with self.lock:
            row = {
                "n": len(self.received) + 1,
                "invoice": invoice,
                "body": body,
                "receipt": f"rcpt-{len(self.received) + 1}",
            }
            self.journal.write(json.dumps(row) + "\n")
            self.journal.flush()
            os.fsync(self.journal.fileno())
            self.received.append(row)
            return row


class Handler(BaseHTTPRequestHandler):
    server: Sink

    def _answer(self, code: int, data: Any) -> None:
        body = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _invoice(self) -> str | None:
        parts = self.path.strip("/").split("/")
        return parts[1] if len(parts) == 2 and parts[0] == "invoices" and parts[1] else None

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        invoice = self._invoice()
        length = int(self.headers.get("Content-Length") or 0)
        if invoice is None or not 0 < length <= MAX_BODY:
            self._answer(400, {"error": "POST /invoices/<id> with the invoice line as body"})
            return
        row = self.server.record(invoice, self.rfile.read(length).decode("utf-8", "replace"))
        self._answer(201, {"receipt": row["receipt"]})

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/invoices":
            self._answer(200, {"received": self.server.received})
            return
        invoice = self._invoice()
        receipts = [r["receipt"] for r in self.server.received if r["invoice"] == invoice]
        if invoice is None or not receipts:
            self._answer(404, {"error": f"no invoice {invoice} received"})
            return
        self._answer(200, {"invoice": invoice, "receipts": receipts})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        sys.stderr.write("sink: " + (format % args) + "\n")


def main() -> int:
    sink = Sink(Path(sys.argv[1]))

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=sink.shutdown).start()  # shutdown() waits for serve_forever

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"http://127.0.0.1:{sink.server_address[1]}", flush=True)
    sink.serve_forever()
    sink.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
