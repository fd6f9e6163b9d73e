"""Review fixes for the outbox, on every backend: a webhook's secrets never reach a name, a
log line, an error or `continuum outbox` output; a bad port is a configuration error (or a
recorded delivery failure), never a raw ValueError; and a deliverer whose claim lapsed
cannot overwrite what the deliverer that took over recorded (compare and set).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from continuum.cli.main import run as cli_run
from continuum.errors import UsageError
from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.ledger.outbox import (
    NotifyConfig,
    Webhook,
    deliver_due,
    load_notify,
    parse_notify,
    post,
)
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.types import Origin
from tests.contract.conftest import StoreFactory

RUN = "pay_run"
RULES = ApprovalRules(
    rules=parse_rules('[[approval]]\naction_type = "wire_money"\n', "approvals.toml")
)
TOKEN_PATH = "/services/T0/B0/PATHTOKEN77"
TOKEN_QUERY = "token=QUERYTOKEN88"
SIGNING = "SIGNINGSECRET99"


def waiting(store: Storage) -> Continuum:
    """A run with one approval waiting: one notification in the outbox."""
    cx = Continuum(store, origin=Origin.EXTERNAL_AGENT, approvals=RULES)
    cx.start_run(RUN, "pay")
    assert cx.intercept(RUN, "wire_money", {"amount": 1}).status == "awaiting_approval"
    assert len(cx.outbox()) == 1
    return cx


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- secrets ---------------------------------------------------------------------------------


def test_a_default_webhook_name_never_holds_the_urls_path_or_query() -> None:
    url = f"https://hooks.example.com{TOKEN_PATH}?{TOKEN_QUERY}"
    (hook,), _ = parse_notify(f'[[webhook]]\nurl = "{url}"\n', "notify.toml")
    assert hook.name.startswith("https://hooks.example.com/")
    for secret in ("PATHTOKEN77", "QUERYTOKEN88"):
        assert secret not in hook.name and secret not in repr(hook)
    # two receivers on one host still get different names
    (other,), _ = parse_notify('[[webhook]]\nurl = "https://hooks.example.com/x"\n', "n.toml")
    assert other.name != hook.name


@pytest.mark.parametrize(
    "line,leak",
    [
        ('url = "https://bob:PASSWORD55@hooks.example.com/x"', "PASSWORD55"),
        ('url = "https://hooks.example.com/x"\nsecret_env = "sk_live/SECRET66=="', "SECRET66"),
        ('url = "https://hooks.example.com/x"\nsecret = "SECRET44"', "SECRET44"),
    ],
)
def test_a_secret_written_into_the_settings_is_refused_without_being_echoed(
    line: str, leak: str
) -> None:
    with pytest.raises(UsageError) as e:
        parse_notify(f"[[webhook]]\n{line}\n", "notify.toml")
    assert e.value.code == "outbox.bad_config"
    assert leak not in e.value.message and leak not in (e.value.hint or "")
    assert leak not in repr(e.value) and leak not in str(e.value)


def test_delivery_errors_logs_and_outbox_output_hold_no_secret(
    store_factory: StoreFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """contract §10 (stdout is the JSON contract, logs on stderr): a failing delivery to a
    webhook whose URL holds a token, signed with a secret from the environment."""
    waiting(store_factory.open())
    port = closed_port()
    (tmp_path / ".continuum").mkdir()
    (tmp_path / ".continuum" / "notify.toml").write_text(
        f'[[webhook]]\nurl = "http://127.0.0.1:{port}{TOKEN_PATH}?{TOKEN_QUERY}"\n'
        f'secret_env = "HOOK_SIGNING_KEY"\n\n[delivery]\nmax_attempts = 1\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOOK_SIGNING_KEY", SIGNING)
    capsys.readouterr()
    deliver = cli_run(["--db", store_factory.url, "--json", "outbox", "deliver"])
    out, err = capsys.readouterr()
    listed = cli_run(["--db", store_factory.url, "--json", "outbox"])
    out2, err2 = capsys.readouterr()
    assert deliver == 20 and listed == 20  # it failed, and says so
    report = json.loads(out)
    assert report["delivery"]["failed"] == 1 and report["delivery"]["errors"]
    assert json.loads(out2)["notifications"][0]["last_error"]
    for text in (out, err, out2, err2):
        for secret in ("PATHTOKEN77", "QUERYTOKEN88", SIGNING):
            assert secret not in text


# -- a bad port ------------------------------------------------------------------------------


def test_a_bad_port_in_the_settings_is_a_config_error_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "notify.toml"
    for port in ("99999", "0", "http"):
        path.write_text(f'[[webhook]]\nurl = "http://127.0.0.1:{port}/"\n', encoding="utf-8")
        with pytest.raises(UsageError) as e:
            load_notify([str(path)])
        assert e.value.code == "outbox.bad_config" and "port" in e.value.message
        assert e.value.hint
    path.write_text('[[webhook]]\nurl = "http://127.0.0.1:8080/"\n', encoding="utf-8")
    assert load_notify([str(path)]).webhooks[0].name.startswith("http://127.0.0.1:8080/")


def test_a_bad_port_in_a_webhook_made_in_code_is_a_recorded_delivery_failure(
    store_factory: StoreFactory,
) -> None:
    cx = waiting(store_factory.open())
    hook = Webhook(name="ops", url="http://127.0.0.1:99999/")
    row = cx.outbox()[0]
    problem = post(hook, row, timeout=1.0, attempt=1)
    assert problem is not None and "outbox.bad_config" in problem
    report = deliver_due(cx.store, NotifyConfig(webhooks=(hook,)))
    assert (report.claimed, report.retrying) == (1, 1)
    after = cx.outbox()[0]
    assert (after.status, after.attempts) == ("pending", 1)
    assert after.last_error and "outbox.bad_config" in after.last_error


# -- a lapsed claim cannot overwrite the deliverer that took over --------------------------------


def test_a_deliverer_whose_claim_lapsed_does_not_overwrite_the_one_that_took_over(
    store_factory: StoreFactory,
) -> None:
    cx = waiting(store_factory.open())
    config = NotifyConfig(webhooks=(Webhook(name="ops", url="http://127.0.0.1:9/"),))
    lease = 2 * config.policy.timeout_seconds + 1.0
    t0 = cx.outbox()[0].next_attempt + 1.0
    other = store_factory.open()  # the second deliverer: another handle, as another process
    took_over: list[Any] = []

    def slow_then_failing(webhook: Webhook, row: Any, **_: Any) -> str:
        # While the first deliverer is stuck in its request, its claim lapses and the
        # second one claims the notification, delivers it and records that.
        took_over.append(
            deliver_due(other, config, clock=lambda: t0 + lease + 5.0, sender=lambda *a, **k: None)
        )
        return "TimeoutError: timed out"

    late = deliver_due(cx.store, config, clock=lambda: t0, sender=slow_then_failing)
    assert took_over[0].delivered == 1
    row = cx.outbox()[0]
    assert (row.status, row.attempts, row.delivered_to) == ("delivered", 1, ["ops"])
    assert row.last_error is None and row.delivered_at is not None
    assert (late.lost, late.retrying, late.delivered) == (1, 0, 0)
    assert any("claim lapsed" in e for e in late.errors)


def test_a_deliverer_whose_claim_holds_records_its_result(store_factory: StoreFactory) -> None:
    """Negative control for the compare and set: the claim holder's result is recorded."""
    cx = waiting(store_factory.open())
    config = NotifyConfig(webhooks=(Webhook(name="ops", url="http://127.0.0.1:9/"),))
    t0 = cx.outbox()[0].next_attempt + 1.0
    report = deliver_due(
        cx.store, config, clock=lambda: t0, sender=lambda *a, **k: "HTTP 500 Internal Server Error"
    )
    assert (report.lost, report.retrying) == (0, 1)
    row = cx.outbox()[0]
    assert (row.status, row.attempts, row.last_error) == (
        "pending",
        1,
        "ops: HTTP 500 Internal Server Error",
    )
