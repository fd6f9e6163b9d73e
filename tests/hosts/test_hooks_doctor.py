"""`continuum hooks doctor` says whether the real host will run the hooks (issue 29, item 7).

Codex ignores a project's hooks until the project and each hook are trusted, and
`codex exec` neither asks nor warns about the hooks: the gate is silently absent. Gemini
CLI refuses to start in a folder it does not trust. Each doctor verdict is checked
against what the real binary then did.
"""

from __future__ import annotations

from pathlib import Path

from tests.hosts.conftest import make_project
from tests.hosts.host_codex import Codex
from tests.hosts.host_gemini import GeminiCli
from tests.hosts.scenarios import duplicates, register_send, setup_send
from tests.hosts.test_hooks_gate import SHELL_TOOLS


def doctor(p, client: str) -> tuple[int, dict]:
    done = p.continuum(
        "--json", "hooks", "doctor", "--client", client, "--dir", str(p.dir), check=False
    )
    import json

    return done.returncode, json.loads(done.stdout)


def failing(report: dict) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["ok"]}


def test_codex_untrusted_hooks_do_not_run_and_doctor_says_so_then_trusted_they_gate(
    tmp_path: Path,
) -> None:
    p = make_project(Codex(trust_hooks=False), tmp_path)
    setup_send(p)
    register_send(p, SHELL_TOOLS)
    p.install_hooks()
    s1 = p.session([[p.host.shell("./send INV-001")], [p.host.shell("./send INV-001")]])
    assert s1.code == 0, s1.describe()
    # What doctor warns about, on the real binary: the hooks were skipped without a word.
    assert duplicates(p.outbox()) == {"INV-001": 2}, s1.describe()
    assert p.actions() == []
    code, report = doctor(p, "codex")
    assert code == 20 and failing(report) == {"hooks trusted"}, report

    p.host = Codex()  # a person trusted the hooks in Codex's hook review
    s2 = p.session([[p.host.shell("./send INV-002")], [p.host.shell("./send INV-002")]])
    assert s2.code == 0, s2.describe()
    assert p.outbox().count("INV-002") == 1 and "already happened" in s2.model.results()[-1].text
    code, report = doctor(p, "codex")
    assert code == 0 and report["will_run"], report

    # An edit of the hooks (another run) makes them untrusted again, and doctor sees it.
    p.continuum("hooks", "install", "--client", "codex", "--run", "other")
    code, report = doctor(p, "codex")
    assert code == 20 and "hooks trusted" in failing(report), report


def test_gemini_in_an_untrusted_folder_refuses_to_start_and_doctor_says_so(tmp_path: Path) -> None:
    p = make_project(GeminiCli(trust_folder=False), tmp_path)
    setup_send(p)
    register_send(p, SHELL_TOOLS)
    p.install_hooks()
    code, report = doctor(p, "gemini")
    assert code == 20 and failing(report) == {"folder trusted"}, report
    s = p.session([[p.host.shell("./send INV-001")]])
    assert s.code == 55 and p.outbox() == [], s.describe()

    p.host = GeminiCli()
    assert p.session([[p.host.shell("./send INV-001")]]).code == 0
    code, report = doctor(p, "gemini")
    assert code == 0, report
    assert p.outbox() == ["INV-001"]


def test_doctor_for_claude_code_and_kilo_checks_the_hooks_and_the_registry(tmp_path: Path) -> None:
    from tests.hosts.hosts_all import CLAUDE, KILO

    for host in (CLAUDE, KILO):
        p = make_project(host, tmp_path / host.name)
        code, report = doctor(p, host.hooks_client or "")
        assert code == 20 and {"hook settings", "plugin"} & failing(report), report
        setup_send(p)
        register_send(p, SHELL_TOOLS)
        p.install_hooks()
        code, report = doctor(p, host.hooks_client or "")
        assert code == 0, report
        (p.dir / ".continuum" / "effects.toml").write_text("", encoding="utf-8")
        code, report = doctor(p, host.hooks_client or "")
        assert code == 20 and failing(report) == {"registry accepted"}, report
