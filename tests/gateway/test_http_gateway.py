"""`continuum gateway http` with real parts (issue 23, items 3 and 5): a real upstream HTTP
server in a subprocess (endpoints that succeed, fail 4xx, fail 5xx, hang past the
gateway's timeout, die mid-request, answer with something that is not HTTP) and the
gateway as a real subprocess (`python -m continuum gateway http ...`).

Every upstream call is appended to a file before it is answered, so "the upstream was
called once" is counted, not assumed. Negative control each time it matters: the same
retry, crash or race sent straight to the upstream repeats the effect.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import shlex
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from continuum.runtime.facade import Continuum
from continuum.types import ActionStatus

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
RUN = "gw"
START_DEADLINE_S = 60  # a loaded machine starts a Python process slowly
PAY_TIMEOUT_S = 3  # /slow hangs past it; every other endpoint answers at once

# The upstream: every request is appended to CALLS ("METHOD PATH KEY") before it is
# answered. /charges 201 (?delay=S first), /bad 400, /boom 500, /slow hangs, /die exits
# the process mid-request, /garbage answers bytes that are not HTTP; GET /items 200.
UPSTREAM = r"""
import json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

calls, port = sys.argv[1], int(sys.argv[2])
lock = threading.Lock()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, status, doc, extra=()):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        key = self.headers.get("Idempotency-Key")
        with lock:
            with open(calls, "a") as f:
                f.write(f"{self.command} {url.path} {key}\n")
                f.flush()
                n = sum(1 for _ in open(calls))
        query = parse_qs(url.query)
        if "delay" in query:
            time.sleep(float(query["delay"][0]))
        if url.path == "/bad":
            return self.answer(400, {"error": "card declined"})
        if url.path == "/boom":
            return self.answer(500, {"error": "internal"})
        if url.path == "/slow":
            time.sleep(60)
        if url.path == "/die":
            os._exit(3)
        if url.path == "/garbage":
            self.wfile.write(b"THIS IS NOT HTTP\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True
            return
        if self.command == "GET":
            return self.answer(
                200,
                {"path": self.path, "header": self.headers.get("X-Custom"),
                 "proxy_auth": self.headers.get("Proxy-Authorization"),
                 "body": body.decode()},
                [("X-Upstream", "yes")],
            )
        self.answer(201, {"id": f"ch_{n}", "body": body.decode()}, [("Location", f"/c/{n}")])

    do_GET = do_POST = do_PUT = do_DELETE = handle_any

server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""

RULES = """\
[[upstream]]
name = "pay"
url = "http://127.0.0.1:{pay}"
timeout = {timeout}

[[upstream]]
name = "fragile"
url = "http://127.0.0.1:{fragile}"
timeout = 10

[[effect]]
upstream = "pay"
method = "POST"
path = "/(charges|bad|boom|slow|garbage)"
action_type = "charge"

[[effect]]
upstream = "pay"
method = "POST|PUT"
path = "/orders/(?P<order>[^/]+)/pay"
action_type = "pay_order"
key = "{{order}}:{{amount}}"

[[effect]]
upstream = "fragile"
path = "/die"
action_type = "charge_fragile"
"""


@dataclass
class Upstream:
    calls: Path
    port: int = 0
    proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        if self.proc is not None:  # a restart: the last one is gone
            self.stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", UPSTREAM, str(self.calls), str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(_line_within(self.proc.stdout, START_DEADLINE_S))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(timeout=30)
            _close_pipes(self.proc)

    def count(self, key: str) -> int:
        if not self.calls.exists():
            return 0
        return sum(1 for line in self.calls.read_text().splitlines() if line.endswith(f" {key}"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Gateway:
    proc: subprocess.Popen[str]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc.wait(timeout=30)
        _close_pipes(self.proc)


def _close_pipes(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _line_within(stream: object, seconds: float, *, pattern: str | None = None) -> str:
    """The first line of ``stream`` (containing ``pattern``), read within ``seconds``."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        with suppress(ValueError, OSError):  # closed by stop() once the process is gone
            for line in stream:  # type: ignore[attr-defined]
                lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + seconds
    seen: list[str] = []
    while True:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        assert line is not None, f"ended before the expected line: {seen}"
        seen.append(line)
        if pattern is None or pattern in line:
            return line.strip()


def start_gateway(rules: Path, db: Path, env: dict[str, str] | None = None, *extra: str) -> Gateway:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "continuum",
            "gateway",
            "http",
            "--listen",
            "127.0.0.1:0",
            "--rules",
            str(rules),
            "--db",
            str(db),
            "--run",
            RUN,
            *extra,
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    line = _line_within(proc.stderr, START_DEADLINE_S, pattern="serving at")
    port = int(line.split("://127.0.0.1:", 1)[1].split("/", 1)[0])
    return Gateway(proc, port)


@dataclass
class World:
    pay: Upstream
    fragile: Upstream
    rules: Path
    db: Path
    gateway: Gateway
    tmp: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("gateway_http")
    pay, fragile = Upstream(tmp / "pay.calls"), Upstream(tmp / "fragile.calls")
    pay.start()
    fragile.start()
    rules = tmp / "rules.toml"
    rules.write_text(RULES.format(pay=pay.port, fragile=fragile.port, timeout=PAY_TIMEOUT_S))
    gateway = start_gateway(rules, tmp / "gw.db")
    try:
        yield World(pay, fragile, rules, tmp / "gw.db", gateway, tmp)
    finally:
        gateway.stop()
        pay.stop()
        fragile.stop()


def post(
    base: str,
    path: str,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    **kw: object,
) -> httpx2.Response:
    sent = {**({"Idempotency-Key": key} if key else {}), **(headers or {})}
    return httpx2.post(f"{base}{path}", headers=sent, timeout=60, **kw)  # type: ignore[arg-type]


def error(response: httpx2.Response) -> dict[str, Any]:
    doc = response.json()
    assert doc["ok"] is False, doc
    found: dict[str, Any] = doc["error"]
    return found


def action_status(db: Path, key: str) -> ActionStatus:
    with Continuum.open(str(db), create=False) as cx:
        found = [a for a in cx.actions(RUN) if a.action_key.endswith(f":{key}")]
    assert len(found) == 1, found
    return found[0].status


# -- forwarded once, then answered from the ledger ---------------------------------------


def test_an_effect_is_forwarded_once_and_its_repeat_is_answered_from_the_ledger(
    world: World,
) -> None:
    first = post(world.gateway.url, "/pay/charges", "k-once", json={"amount": 5})
    assert first.status_code == 201, first.text
    assert first.headers["continuum-recorded"] == "completed"
    assert "continuum-replayed" not in first.headers
    again = post(world.gateway.url, "/pay/charges", "k-once", json={"amount": 5})
    assert again.status_code == 201
    assert again.headers["continuum-replayed"] == "true"
    assert again.json() == first.json() and again.headers["location"] == first.headers["location"]
    assert world.pay.count("k-once") == 1  # upstream was called once
    assert action_status(world.db, "k-once") == ActionStatus.COMPLETED
    # Negative control: the same repeat straight to the upstream performs it again.
    post(world.pay.url, "/charges", "k-once", json={"amount": 5})
    assert world.pay.count("k-once") == 2


def test_a_key_template_names_the_effect_from_the_path_and_the_json_body(world: World) -> None:
    first = post(world.gateway.url, "/pay/orders/o-7/pay", json={"amount": 5})
    assert first.status_code == 201, first.text
    again = post(world.gateway.url, "/pay/orders/o-7/pay", json={"amount": 5})
    assert again.headers["continuum-replayed"] == "true"
    other = post(world.gateway.url, "/pay/orders/o-7/pay", json={"amount": 6})
    assert "continuum-replayed" not in other.headers  # another amount, another effect
    assert action_status(world.db, "o-7:5") == ActionStatus.COMPLETED


def test_a_4xx_is_a_certain_failure_so_a_retry_is_forwarded(world: World) -> None:
    first = post(world.gateway.url, "/pay/bad", "k-4xx")
    assert first.status_code == 400 and first.headers["continuum-recorded"] == "failed"
    assert action_status(world.db, "k-4xx") == ActionStatus.FAILED
    retry = post(world.gateway.url, "/pay/bad", "k-4xx")
    assert retry.status_code == 400
    assert world.pay.count("k-4xx") == 2  # a certain failure may run again


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/boom", 500, None),
        ("/slow", 504, "gateway.upstream_timeout"),
        ("/garbage", 502, "gateway.bad_upstream_response"),
    ],
)
def test_a_5xx_timeout_or_invalid_reply_is_unknown_and_a_retry_is_refused(
    world: World, path: str, status: int, code: str | None
) -> None:
    key = f"k-{path[1:]}"
    first = post(world.gateway.url, f"/pay{path}", key)
    assert first.status_code == status, first.text
    if code is not None:
        assert error(first)["code"] == code and error(first)["recorded"] == "unknown"
    else:
        assert first.headers["continuum-recorded"] == "unknown"
    assert action_status(world.db, key) == ActionStatus.UNKNOWN
    retry = post(world.gateway.url, f"/pay{path}", key)
    assert retry.status_code == 409
    refused = error(retry)
    assert refused["code"] == "gateway.unknown" and "reconcile" in str(refused["command"])
    assert world.pay.count(key) == 1  # not called again
    # Negative control: the same retry straight to the upstream repeats it.
    if path != "/slow":
        with suppress(httpx2.HTTPError):  # /garbage answers no HTTP to a direct call either
            post(world.pay.url, path, key)
        assert world.pay.count(key) == 2


def test_an_upstream_that_dies_mid_request_leaves_it_unknown_even_after_it_is_back(
    world: World,
) -> None:
    first = post(world.gateway.url, "/fragile/die", "k-die")
    assert first.status_code == 502, first.text
    assert error(first)["code"] == "gateway.upstream_lost"
    assert world.fragile.proc is not None and world.fragile.proc.wait(timeout=30) == 3
    world.fragile.start()  # the same port again
    retry = post(world.gateway.url, "/fragile/die", "k-die")
    assert retry.status_code == 409 and error(retry)["code"] == "gateway.unknown"
    assert world.fragile.count("k-die") == 1
    # Negative control: straight to the upstream, the retry runs (and kills it again).
    with pytest.raises(httpx2.HTTPError):
        post(world.fragile.url, "/die", "k-die")
    assert world.fragile.count("k-die") == 2


# -- the gateway killed between forward and record ---------------------------------------


def test_a_gateway_killed_between_forward_and_record_leaves_it_unknown_for_a_fresh_one(
    world: World, tmp_path: Path
) -> None:
    db = tmp_path / "crash.db"
    doomed = start_gateway(world.rules, db, {"CONTINUUM_FAULTS": "gateway_http_after_forward"})
    with pytest.raises(httpx2.HTTPError):  # the connection dies with the gateway
        post(doomed.url, "/pay/charges", "k-crash")
    assert doomed.proc.wait(timeout=30) == 86  # faults.FAULT_EXIT_CODE
    doomed.stop()
    assert world.pay.count("k-crash") == 1  # the effect happened; nothing recorded it
    fresh = start_gateway(world.rules, db)
    try:
        retry = post(fresh.url, "/pay/charges", "k-crash")
        assert retry.status_code == 409, retry.text
        assert error(retry)["status"] == "unknown"
        assert world.pay.count("k-crash") == 1
    finally:
        fresh.stop()
    # Negative control: an agent retrying straight to the upstream repeats the charge.
    post(world.pay.url, "/charges", "k-crash")
    assert world.pay.count("k-crash") == 2


# -- two agents, two gateways, one store --------------------------------------------------


def _race(urls: list[str], path: str, key: str, n: int) -> list[httpx2.Response | Exception]:
    barrier = threading.Barrier(n)
    out: list[httpx2.Response | Exception] = [Exception("not run")] * n

    def fire(i: int) -> None:
        barrier.wait(timeout=60)
        try:
            out[i] = post(urls[i % len(urls)], path, key)
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def test_two_gateways_on_one_store_forward_each_key_once(world: World) -> None:
    second = start_gateway(world.rules, world.db)
    try:
        answers = _race([world.gateway.url, second.url], "/pay/charges?delay=0.3", "k-race", n=8)
    finally:
        second.stop()
    responses = [a for a in answers if isinstance(a, httpx2.Response)]
    assert len(responses) == 8, answers
    forwarded = [r for r in responses if r.headers.get("continuum-recorded") == "completed"]
    assert len(forwarded) == 1, [(r.status_code, r.text) for r in responses]
    for r in responses:
        assert (
            r in forwarded
            or r.headers.get("continuum-replayed") == "true"
            or (r.status_code == 409 and error(r)["code"] == "gateway.in_progress")
        ), r.text
    assert world.pay.count("k-race") == 1
    # Negative control: the same race straight to the upstream performs it every time.
    _race([world.pay.url], "/charges?delay=0.3", "k-race-direct", n=8)
    assert world.pay.count("k-race-direct") == 8


# -- what is refused, what passes ----------------------------------------------------------


def test_requests_no_rule_names_pass_through_untouched(world: World) -> None:
    r = httpx2.get(f"{world.gateway.url}/pay/items?x=1&y=2", headers={"X-Custom": "v"}, timeout=60)
    assert r.status_code == 200 and r.headers["x-upstream"] == "yes"
    assert r.json() == {"path": "/items?x=1&y=2", "header": "v", "proxy_auth": None, "body": ""}
    note = post(world.gateway.url, "/pay/notes", json={"n": 1})  # POST, but no rule: no key
    assert note.status_code == 201 and "continuum-action" not in note.headers


def test_an_undeclared_upstream_is_refused(world: World) -> None:
    r = httpx2.get(f"{world.gateway.url}/evil/steal", timeout=60)
    assert r.status_code == 403 and error(r)["code"] == "gateway.unknown_upstream"


def test_an_effect_without_a_key_is_refused_428_and_not_forwarded(world: World) -> None:
    calls = world.pay.calls
    before = calls.read_text().count("/charges None") if calls.exists() else 0  # alone: none
    r = post(world.gateway.url, "/pay/charges", json={"amount": 1})
    assert r.status_code == 428
    refused = error(r)
    assert refused["code"] == "gateway.key_required" and "Idempotency-Key" in refused["hint"]
    templated = post(world.gateway.url, "/pay/orders/o-9/pay", json={"currency": "EUR"})
    assert templated.status_code == 428 and error(templated)["missing"] == "'amount'"
    assert (calls.read_text().count("/charges None") if calls.exists() else 0) == before


def test_a_path_the_upstream_could_read_otherwise_is_refused(world: World) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", world.gateway.port, timeout=60)
    try:
        conn.request("POST", "/pay/notes/../charges", body=b"{}")
        response = conn.getresponse()
        assert response.status == 400
        assert json.loads(response.read())["error"]["code"] == "gateway.ambiguous_path"
    finally:
        conn.close()


def test_while_the_store_is_unusable_effects_are_refused_and_other_requests_pass(
    world: World, tmp_path: Path
) -> None:
    db = tmp_path / "not-yet" / "gw.db"  # its directory is missing: the store cannot open
    gateway = start_gateway(world.rules, db)
    try:
        refused = post(gateway.url, "/pay/charges", "k-closed")
        assert refused.status_code == 503 and error(refused)["code"] == "gateway.store_unusable"
        assert world.pay.count("k-closed") == 0  # fail closed: not forwarded
        assert httpx2.get(f"{gateway.url}/pay/items", timeout=60).status_code == 200
        db.parent.mkdir()  # the store becomes usable: the gateway opens it on its own
        deadline = time.monotonic() + 30
        while (r := post(gateway.url, "/pay/charges", "k-closed")).status_code == 503:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)  # polling a condition the test changed, bounded
        assert r.status_code == 201 and world.pay.count("k-closed") == 1
    finally:
        gateway.stop()


def _person_runs(command: str, choice: str, cwd: Path) -> None:
    """Run the `continuum reconcile` command a refusal gave, as a person would."""
    words = shlex.split(command.replace("--occurred|--not-occurred", f"{choice} --yes"))
    assert words[0] == "continuum"
    done = subprocess.run(
        [sys.executable, "-m", "continuum", *words[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert done.returncode == 0, done


def test_the_command_an_unknown_refusal_gives_settles_it_for_the_gateway(world: World) -> None:
    post(world.gateway.url, "/pay/boom", "k-settle")
    refused = error(post(world.gateway.url, "/pay/boom", "k-settle"))
    _person_runs(str(refused["command"]), "--not-occurred", world.tmp)
    again = post(world.gateway.url, "/pay/boom", "k-settle")  # forwarded once more
    assert again.status_code == 500 and world.pay.count("k-settle") == 2
    refused = error(post(world.gateway.url, "/pay/boom", "k-settle"))
    _person_runs(str(refused["command"]), "--occurred", world.tmp)
    done = post(world.gateway.url, "/pay/boom", "k-settle")
    assert done.status_code == 200 and done.headers["continuum-replayed"] == "true"
    assert done.json()["replayed"] is True and world.pay.count("k-settle") == 2


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (mode 0600), self-signed: the one
    scripts/bench_http.py serves with (scripts/certificates.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("certificates", SCRIPTS / "certificates.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cert, key = module.self_signed(directory, "gateway")
    return Path(cert), Path(key)


def test_the_gateway_serves_tls_1_3_with_the_serving_checks(world: World, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    gateway = start_gateway(
        world.rules, tmp_path / "tls.db", None, "--tls-cert", str(cert), "--tls-key", str(key)
    )
    try:
        context = ssl.create_default_context(cafile=str(cert))
        with httpx2.Client(verify=context, timeout=60) as client:
            url = f"https://127.0.0.1:{gateway.port}"
            assert client.get(f"{url}/pay/items").status_code == 200
            first = client.post(f"{url}/pay/charges", headers={"Idempotency-Key": "k-tls"})
            again = client.post(f"{url}/pay/charges", headers={"Idempotency-Key": "k-tls"})
        assert first.status_code == 201 and again.headers["continuum-replayed"] == "true"
        assert world.pay.count("k-tls") == 1
    finally:
        gateway.stop()


def test_with_a_token_file_every_request_needs_a_token_and_effects_a_submit_one(
    world: World, tmp_path: Path
) -> None:
    submit, read = "gw-submit-token-0123456789abcdef", "gw-read-token-0123456789abcdefgh"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"submit {submit}\nread {read}\n", encoding="utf-8")
    tokens.chmod(0o600)
    gateway = start_gateway(world.rules, tmp_path / "tok.db", None, "--token-file", str(tokens))
    try:
        base = gateway.url

        def bearer(token: str) -> dict[str, str]:
            return {"Proxy-Authorization": f"Bearer {token}"}

        none = httpx2.get(f"{base}/pay/items", timeout=60)
        wrong = httpx2.get(f"{base}/pay/items", headers=bearer("x" * 32), timeout=60)
        reading = httpx2.get(f"{base}/pay/items", headers=bearer(read), timeout=60)
        read_effect = post(base, "/pay/charges", "k-tok-1", headers=bearer(read))
        effect = post(base, "/pay/charges", "k-tok-1", headers=bearer(submit))
        bare_effect = post(base, "/pay/charges", "k-tok-2")
    finally:
        gateway.stop()
    assert none.status_code == 407 and error(none)["code"] == "gateway.auth_required"
    assert none.headers["proxy-authenticate"].startswith("Bearer")
    assert wrong.status_code == 407 and error(wrong)["code"] == "gateway.auth_bad_token"
    assert reading.status_code == 200 and reading.json()["proxy_auth"] is None  # not forwarded
    assert read_effect.status_code == 403 and error(read_effect)["code"] == "gateway.role"
    assert effect.status_code == 201
    assert bare_effect.status_code == 407
    assert world.pay.count("k-tok-1") == 1 and world.pay.count("k-tok-2") == 0
    for secret in (submit, read):
        assert secret not in json.dumps([none.json(), wrong.json(), read_effect.json()])


def test_off_loopback_the_gateway_needs_a_token_file(world: World, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    out = subprocess.run(
        [
            *(sys.executable, "-m", "continuum", "--json", "gateway", "http"),
            *("--listen", "0.0.0.0:0", "--rules", str(world.rules)),
            *("--db", str(tmp_path / "x.db"), "--tls-cert", str(cert), "--tls-key", str(key)),
        ],
        capture_output=True,
        text=True,
        timeout=START_DEADLINE_S,
        check=False,
    )
    assert out.returncode != 0
    assert json.loads(out.stdout)["error"]["code"] == "gateway.token_file_required"
    assert not (tmp_path / "x.db").exists()
