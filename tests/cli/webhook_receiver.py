"""A webhook receiver for the outbox tests, run as its own process.

Usage: webhook_receiver.py LOG PORT [--fail N] [--slow N] [--slow-seconds S]
                           [--max-body BYTES] [--keep-bodies]

Listens on 127.0.0.1:PORT (0: any free port) and prints the port once it listens. Each
POST is appended to LOG (one JSON line, fsynced before the answer) with the delivery id
of its header and of its body and what it was answered: the first N requests get HTTP
500, the next N (``--slow``) are answered only after S seconds (longer than the
deliverer's timeout, so the deliverer sees a timeout although the receiver got them),
and every later one 200. A receiver deduplicates on the delivery id; this one records
everything, so the test can count duplicates. ``--max-body`` makes it refuse a body
larger than BYTES with 413, as many receivers do (it is recorded, answer 413);
``--keep-bodies`` records each body's text too (``body``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("log")
parser.add_argument("port", type=int)
parser.add_argument("--fail", type=int, default=0)
parser.add_argument("--slow", type=int, default=0)
parser.add_argument("--slow-seconds", type=float, default=3.0)
parser.add_argument("--max-body", type=int, default=0)
parser.add_argument("--keep-bodies", action="store_true")
args = parser.parse_args()

lock = threading.Lock()
seen = [0]


def record(entry: dict[str, object]) -> None:
    with lock, open(args.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with lock:
            seen[0] += 1
            n = seen[0]
        if args.max_body and len(body) > args.max_body:
            answer = 413
        elif n <= args.fail:
            answer = 500
        elif n <= args.fail + args.slow:
            answer = -1  # slow: the deliverer gives up first
        else:
            answer = 200
        parsed = json.loads(body)
        extra = {"body": body.decode("ascii", "replace")} if args.keep_bodies else {}
        record(
            {
                **extra,
                "size": len(body),
                "n": n,
                "pid": os.getpid(),
                "header": self.headers.get("X-Continuum-Delivery"),
                "idempotency_key": self.headers.get("Idempotency-Key"),
                "body_id": parsed.get("delivery_id"),
                "kind": parsed.get("kind"),
                "sha256": hashlib.sha256(body).hexdigest(),
                "answer": answer,
                "ascii": body.isascii(),
            }
        )
        if answer == -1:
            time.sleep(args.slow_seconds)  # the behaviour under test: a receiver too slow
            answer = 200
        self.send_response(answer)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *a: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
