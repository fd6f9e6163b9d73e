"""The operator page in a real headless browser (Debian's chromium and chromedriver,
driven by Selenium) against a real ``continuum ui`` subprocess and a real SQLite store.

Covers issue 16 item 3: list runs, open a run, confirm, reconcile, decide (allow and
deny), each recorded exactly as the CLI records it (the same action replayed with the
CLI on a snapshot of the store writes the same event); every agent-supplied field
holds markup and terminal escapes and renders as inert text; the token never appears in
a URL or in the server's log. Screenshots go to ``test-artifacts/operator-page/``.

``make test`` installs chromium and sets ``CONTINUUM_REQUIRE_EXTRAS=1``: there a missing
browser fails these tests instead of skipping them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continuum.untrusted import quoted
from tests.e2e.operator_site import (
    CONFIRM,
    HOSTILE,
    INJECTIONS,
    OTHER_RUN,
    RULES_TOML,
    TOKENS,
    Seeded,
    Server,
    cli,
    events,
    seed,
    serving,
    snapshot,
    ui_command,
    write_tokens,
)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "operator-page"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _require_browser() -> None:
    missing = [
        name
        for name, found in (
            ("chromium", CHROMIUM),
            ("chromedriver", CHROMEDRIVER),
            ("selenium", importlib.util.find_spec("selenium")),
        )
        if not found
    ]
    if not missing:
        return
    why = (
        f"{', '.join(missing)} missing: apt-get install chromium chromium-driver and "
        "pip install -e '.[dev]' (make test does both)"
    )
    if os.environ.get("CONTINUUM_REQUIRE_EXTRAS") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Server, Seeded, Path]]:
    work = tmp_path / "work"
    (work / ".continuum").mkdir(parents=True)
    (work / ".continuum" / "approvals.toml").write_text(RULES_TOML)
    db = work / "store.db"
    seeded = seed(db)
    tokens = write_tokens(work / "tokens")
    with serving(ui_command(db, tokens), work, confirm=CONFIRM) as server:
        yield server, seeded, db


@pytest.fixture
def browser() -> Iterator[Any]:
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1400",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class Visit:
    """The browser with the URLs it has been at (none may hold a token)."""

    def __init__(self, driver: Any, server: Server, name: str) -> None:
        self.driver, self.server, self.name = driver, server, name
        self.urls: list[str] = []

    def get(self, url: str) -> None:
        self.driver.get(url)
        self.seen()

    def seen(self) -> None:
        self.urls.append(self.driver.current_url)
        self.no_alert_and_no_injected_elements()

    def shot(self, step: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.name}-{step}.png"
        self.driver.save_screenshot(str(path))
        return path

    def by(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def submit(self, button: Any) -> None:
        button.click()
        self.seen()

    def login(self, role: str) -> None:
        self.get(self.server.url)
        self.by("#token").send_keys(TOKENS[role])
        self.submit(self.by("#login"))
        assert "signed in: role " + role in self.by("header").text

    def no_alert_and_no_injected_elements(self) -> None:
        from selenium.common.exceptions import NoAlertPresentException

        with pytest.raises(NoAlertPresentException):
            _ = self.driver.switch_to.alert.text
        # The page has no script and no image of its own: any would be injected markup.
        assert self.all("script") == [] and self.all("img") == [] and self.all("b b") == []
        assert self.all("[onmouseover]") == [] and self.all("[onerror]") == []

    def tokens_never_shown(self) -> None:
        for token in (*TOKENS.values(), CONFIRM):
            assert all(token not in url for url in self.urls), self.urls
            assert token not in self.server.log()
            assert token not in self.driver.page_source


def _open_run(v: Visit, seeded: Seeded) -> None:
    links = [a for a in v.all("#runs a") if quoted(seeded.run_id) in a.text]
    assert len(links) == 1
    v.submit(links[0])
    assert "run?id=" in v.driver.current_url


def test_lists_runs_and_shows_every_agent_field_as_text(
    site: tuple[Server, Seeded, Path], browser: Any
) -> None:
    """contract §5 (what a person vouches for is shown as recorded, escaped)."""
    server, seeded, _ = site
    v = Visit(browser, server, "list")
    v.login("approve")
    table = v.by("#runs").text
    assert quoted(seeded.run_id) in table and quoted(OTHER_RUN) in table
    assert quoted("goal: " + HOSTILE) in table
    assert "request_human" in table  # the hostile run waits for people
    v.shot("runs")
    _open_run(v, seeded)
    page = v.by("main").text
    for shown in (
        quoted("goal: " + HOSTILE),
        quoted(HOSTILE),
        quoted("found " + HOSTILE),
        quoted("timeout " + HOSTILE),
        quoted('send_<img src=x onerror=alert(4)>:mail:<script>alert(5)</script>"'),
        quoted("send_<img src=x onerror=alert(4)>"),
    ):
        assert shown in page, shown
    for raw in (INJECTIONS[0], INJECTIONS[3]):
        assert raw in page  # markup is visible as text...
    assert '\\" onmouseover=alert(3) x=\\"' in page  # quotes escaped, as on a terminal
    assert "\x1b" not in page and "\u202e" not in page  # ...controls as visible escapes
    assert "\\x1b[2K" in page and "\\u202e" in page
    assert "verified through sequence" in v.by("#chain").text
    assert "2/4 completed" in v.by("#progress").text
    assert len(v.all(".approval form")) == 2 and len(v.all(".action form")) == 1
    v.shot("run")
    v.tokens_never_shown()


def _replay(db: Path, tmp: Path, run_id: str, *args: str) -> list[dict[str, Any]]:
    """The CLI doing the same on a snapshot of the store (as a person's own script,
    ``--yes``): the run's events afterwards."""
    copy = snapshot(db, tmp / "cli-replay.db")
    done = cli(copy, *args, "--yes", cwd=tmp)
    assert done.returncode in (0, 20), done.stderr
    return events(copy, run_id)


def test_confirm_records_what_the_cli_records(
    site: tuple[Server, Seeded, Path], browser: Any, tmp_path: Path
) -> None:
    """contract §5: a person confirms exactly the sequence and hash shown, origin human."""
    server, seeded, db = site
    v = Visit(browser, server, "confirm")
    v.login("approve")
    _open_run(v, seeded)
    shown_seq = int(v.by("#confirm-form input[name=through_sequence]").get_attribute("value"))
    before = events(db, seeded.run_id)
    assert shown_seq == len(before)
    expected = _replay(db, tmp_path, seeded.run_id, "confirm", seeded.run_id)[len(before) :]
    v.by("#confirm-form input[name=confirm_token]").send_keys(CONFIRM)
    v.submit(v.by("#confirm"))
    assert f"through sequence {shown_seq}" in v.by(".msg").text
    v.shot("done")
    after = events(db, seeded.run_id)[len(before) :]
    assert [e["type"] for e in after] == ["review_confirmed"]
    assert _without_times(after) == _without_times(expected) and after[0]["source"] == "human"
    assert _channels(after) == [{"channel": "page", "role": "approve"}]
    assert _channels(expected) == [{"channel": "script"}]
    assert after[0]["payload"]["through_sequence"] == shown_seq
    v.tokens_never_shown()


def test_reconcile_records_what_the_cli_records(
    site: tuple[Server, Seeded, Path], browser: Any, tmp_path: Path
) -> None:
    """contract §7: only a person settles an unknown effect (origin human)."""
    server, seeded, db = site
    v = Visit(browser, server, "reconcile")
    v.login("approve")
    _open_run(v, seeded)
    before = events(db, seeded.run_id)
    note = "checked the mail log <script>alert(6)</script>"
    expected = _replay(
        db,
        tmp_path,
        seeded.run_id,
        "reconcile",
        seeded.run_id,
        seeded.unknown_action,
        "--not-occurred",
        "--note",
        note,
    )[len(before) :]
    form = v.by(f"#reconcile-{seeded.unknown_action}")
    form.find_element("css selector", "input[value=no]").click()
    form.find_element("css selector", "input[name=note]").send_keys(note)
    form.find_element("css selector", "input[name=confirm_token]").send_keys(CONFIRM)
    v.shot("filled")
    v.submit(form.find_element("css selector", "button"))
    assert "is now" in v.by(".msg").text
    after = events(db, seeded.run_id)[len(before) :]
    assert [e["type"] for e in after] == ["action_reconciled"]
    assert _without_times(after) == _without_times(expected)
    assert _channels(after) == [{"channel": "page", "role": "approve"}]
    assert after[0]["source"] == "human"
    assert v.all(".action form") == []  # nothing unresolved is left
    v.shot("done")
    v.tokens_never_shown()


def _without_times(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events without their times and without ``via`` (how the decision was given:
    the page's ``{"channel": "page", "role": ...}``, the CLI's ``{"channel": "script"}``),
    which ``_channels`` checks on its own."""
    return [
        {
            **e,
            "payload": {
                k: x for k, x in e["payload"].items() if not k.endswith("_at") and k != "via"
            },
        }
        for e in found
    ]


def _channels(found: list[dict[str, Any]]) -> list[Any]:
    return [e["payload"].get("via") for e in found]


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_decide_records_what_the_cli_records(
    site: tuple[Server, Seeded, Path], browser: Any, tmp_path: Path, decision: str
) -> None:
    """Issue 16 item 2: a person's decision, bound to the call shown, origin human."""
    server, seeded, db = site
    v = Visit(browser, server, f"decide-{decision}")
    v.login("approve")
    _open_run(v, seeded)
    approval = seeded.approvals[0]
    before = events(db, seeded.run_id)
    reason = f"{decision}: checked <img src=x onerror=alert(7)>"
    expected = _replay(
        db, tmp_path, seeded.run_id, "decide", approval, f"--{decision}", "--reason", reason
    )[len(before) :]
    form = v.by(f"#decide-{approval}")
    form.find_element("css selector", "input[name=reason]").send_keys(reason)
    form.find_element("css selector", "input[name=confirm_token]").send_keys(CONFIRM)
    v.submit(form.find_element("css selector", f"button[value={decision}]"))
    assert "recorded as human" in v.by(".msg").text
    v.shot("done")
    after = events(db, seeded.run_id)[len(before) :]
    assert [e["type"] for e in after] == [
        f"approval_{'granted' if decision == 'allow' else 'denied'}"
    ]
    assert _without_times(after) == _without_times(expected) and after[0]["source"] == "human"
    assert _channels(after)[-1] == {"channel": "page", "role": "approve"}
    assert len(v.all(".approval form")) == 1  # the other approval still waits
    v.tokens_never_shown()


def test_read_role_sees_the_run_without_any_button(
    site: tuple[Server, Seeded, Path], browser: Any
) -> None:
    server, seeded, db = site
    v = Visit(browser, server, "read")
    v.login("read")
    _open_run(v, seeded)
    assert quoted("goal: " + HOSTILE) in v.by("main").text
    assert v.all("main form") == [] and "may read only" in v.by("main").text
    v.shot("run")
    v.tokens_never_shown()
