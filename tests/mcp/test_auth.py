"""Authorization policy: allowlist and token loading, decisions, denial text, caller identity."""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
from mcp import Client
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    CallToolRequestParams,
    CallToolResult,
    Implementation,
    InitializeRequestParams,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

from continuum.errors import UsageError
from continuum.serving.auth import (
    POLICY_FILE,
    Caller,
    ClientLog,
    Policy,
    caller_from_context,
    caller_identity,
    connecting_client,
    load_policy,
    log_denial,
    logged_name,
)
from continuum.serving.secrets import MIN_CONFIRM_TOKEN_CHARS, MIN_CONFIRM_TOKEN_DISTINCT, Secret
from continuum.store.confirm_attempts import ConfirmAttempt
from tests.mcp.request_meta import request_meta

TOOL = "continuum_record_progress"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def write_policy(cwd: Path, content: str | bytes) -> Path:
    path = cwd / POLICY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def refused(env: dict[str, str], cwd: Path) -> UsageError:
    with pytest.raises(UsageError) as caught:
        load_policy(env, cwd)
    return caught.value


# --- the allowlist ---------------------------------------------------------------


def test_allowlist_names_are_split_on_commas_and_newlines_and_keep_their_inner_spaces(
    tmp_path: Path,
) -> None:
    # Spaces used to separate names too, so Kilo Code (whose client calls itself
    # "Kilo Code") could never be allowed: "Kilo Code" became "Kilo" and "Code".
    policy = load_policy(
        {"CONTINUUM_MCP_MUTATING_CLIENTS": " claude-code, Kilo Code ,,\n x \r\ngemini-cli,"},
        tmp_path,
    )
    assert policy.allow == {"claude-code", "Kilo Code", "x", "gemini-cli"}
    assert policy.allow_source == "CONTINUUM_MCP_MUTATING_CLIENTS"
    assert not policy.read_only


def test_alias_variable_sets_the_allowlist_too(tmp_path: Path) -> None:
    policy = load_policy({"CONTINUUM_MCP_ALLOW": "claude-code"}, tmp_path)
    assert (policy.allow, policy.allow_source) == ({"claude-code"}, "CONTINUUM_MCP_ALLOW")


def test_both_allow_variables_naming_the_same_clients_are_accepted(tmp_path: Path) -> None:
    env = {"CONTINUUM_MCP_MUTATING_CLIENTS": "a,b", "CONTINUUM_MCP_ALLOW": "b, a\n"}
    assert load_policy(env, tmp_path).allow == {"a", "b"}


def test_both_allow_variables_naming_different_clients_are_refused(tmp_path: Path) -> None:
    env = {"CONTINUUM_MCP_MUTATING_CLIENTS": "a", "CONTINUUM_MCP_ALLOW": "b"}
    assert refused(env, tmp_path).code == "mcp.bad_policy"


@pytest.mark.parametrize(
    "content", ['{"allow": ["claude-code", "kilo"]}', '["claude-code", "kilo"]']
)
def test_policy_file_grants_in_object_and_list_form(tmp_path: Path, content: str) -> None:
    path = write_policy(tmp_path, content)
    policy = load_policy({}, tmp_path)
    assert (policy.allow, policy.allow_source) == ({"claude-code", "kilo"}, str(path))


def test_environment_wins_over_the_policy_file_even_when_empty(tmp_path: Path) -> None:
    write_policy(tmp_path, '{"allow": ["from-file"]}')
    assert load_policy({"CONTINUUM_MCP_ALLOW": "from-env"}, tmp_path).allow == {"from-env"}
    assert load_policy({"CONTINUUM_MCP_MUTATING_CLIENTS": ""}, tmp_path).read_only


def test_no_allowlist_makes_the_server_read_only(tmp_path: Path) -> None:
    policy = load_policy({}, tmp_path)
    assert policy.read_only and policy.allow_source is None
    decision = policy.authorize(TOOL, Caller("claude-code"))
    assert not decision.allowed and decision.code == "auth.read_only"
    assert "CONTINUUM_MCP_MUTATING_CLIENTS" in decision.remedy


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("{not json", id="bad-json"),
        pytest.param(b"\xff\xfe[]", id="not-utf8"),
        pytest.param("42", id="number"),
        pytest.param('"claude-code"', id="string"),
        pytest.param("{}", id="no-allow-key"),
        pytest.param('{"allow": "claude-code"}', id="allow-not-list"),
        pytest.param('{"allow": [], "deny": []}', id="unknown-key"),
        pytest.param('{"allow": ["a", 1]}', id="non-string-name"),
        pytest.param('["a", ""]', id="empty-name"),
        pytest.param('{"allow": ["  "]}', id="blank-name"),
    ],
)
def test_malformed_policy_file_is_refused(tmp_path: Path, content: str | bytes) -> None:
    write_policy(tmp_path, content)
    error = refused({}, tmp_path)
    assert error.code == "mcp.bad_policy"
    assert "\n" not in error.message and error.hint


def test_a_name_with_spaces_in_the_policy_file_is_one_name(tmp_path: Path) -> None:
    write_policy(tmp_path, '{"allow": ["Kilo Code", "Ünïcode client ✓"]}')
    policy = load_policy({}, tmp_path)
    assert policy.allow == {"Kilo Code", "Ünïcode client ✓"}
    assert policy.authorize(TOOL, Caller("Kilo Code")).allowed
    assert not policy.authorize(TOOL, Caller("Kilo")).allowed


UNSAFE_NAMES = [
    pytest.param("Kilo\u202eCode", id="bidi-override"),
    pytest.param("claude\u200b-code", id="zero-width-space"),
    pytest.param("claude-code\x1b[2J", id="escape"),
    pytest.param("tab\tname", id="tab"),
    pytest.param("a" * 201, id="too-long"),
]


@pytest.mark.parametrize("variable", ["CONTINUUM_MCP_MUTATING_CLIENTS", "CONTINUUM_MCP_ALLOW"])
@pytest.mark.parametrize("name", UNSAFE_NAMES)
def test_an_unsafe_name_in_the_allow_variable_is_refused_in_one_line(
    tmp_path: Path, variable: str, name: str
) -> None:
    error = refused({variable: f"claude-code, {name}"}, tmp_path)
    assert error.code == "mcp.bad_policy"
    assert variable in error.message and error.hint
    assert "\n" not in error.message and "\x1b" not in error.message
    assert "\u202e" not in error.message and "\u200b" not in error.message


@pytest.mark.parametrize("name", [*UNSAFE_NAMES, pytest.param(" padded ", id="padded")])
def test_an_unsafe_name_in_the_policy_file_is_refused_in_one_line(
    tmp_path: Path, name: str
) -> None:
    path = write_policy(tmp_path, json.dumps({"allow": ["claude-code", name]}))
    error = refused({}, tmp_path)
    assert error.code == "mcp.bad_policy"
    assert str(path) in error.message and "entry 1" in error.message
    assert "\n" not in error.message and "\x1b" not in error.message


def test_policy_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / POLICY_FILE).mkdir(parents=True)
    assert refused({}, tmp_path).code == "mcp.bad_policy"


# --- token settings -----------------------------------------------------------------

SECRET = "s3cr3t-value-XYZ"
CONFIRM = "the-humans-own-confirm-token-7Qx9"  # 33 characters: strong enough to start


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"CONTINUUM_MCP_TOKEN": ""}, id="empty-shared"),
        pytest.param({"CONTINUUM_MCP_TOKEN": "   "}, id="blank-shared"),
        pytest.param({"CONTINUUM_MCP_CONFIRM_TOKEN": ""}, id="empty-confirm"),
        pytest.param({"CONTINUUM_MCP_CLIENT_TOKENS": " , "}, id="empty-pairs"),
        pytest.param({"CONTINUUM_MCP_CLIENT_TOKENS": f"a:{SECRET},b{SECRET}"}, id="no-colon"),
        pytest.param({"CONTINUUM_MCP_CLIENT_TOKENS": "a:"}, id="empty-secret"),
        pytest.param({"CONTINUUM_MCP_CLIENT_TOKENS": f":{SECRET}"}, id="empty-name"),
        pytest.param(
            {"CONTINUUM_MCP_CLIENT_TOKENS": f"a:{SECRET},a:{SECRET}2"}, id="duplicate-name"
        ),
        pytest.param(
            {"CONTINUUM_MCP_TOKEN": SECRET, "CONTINUUM_MCP_CLIENT_TOKENS": "a:other"},
            id="both-kinds",
        ),
    ],
)
def test_malformed_token_setting_is_refused_without_revealing_a_secret(
    tmp_path: Path, env: dict[str, str]
) -> None:
    error = refused(env, tmp_path)
    assert error.code == "mcp.bad_token_setting"
    shown = json.dumps(error.to_dict()) + str(error)
    assert SECRET not in shown and "\n" not in error.message


@pytest.mark.parametrize(
    "env",
    [
        pytest.param(
            {"CONTINUUM_MCP_TOKEN": SECRET, "CONTINUUM_MCP_CONFIRM_TOKEN": SECRET},
            id="confirm=shared",
        ),
        pytest.param(
            {
                "CONTINUUM_MCP_CLIENT_TOKENS": f"a:x1, b:{SECRET}",
                "CONTINUUM_MCP_CONFIRM_TOKEN": SECRET,
            },
            id="confirm=client",
        ),
        pytest.param(
            {"CONTINUUM_MCP_CLIENT_TOKENS": f"a:{SECRET}\nb:{SECRET}"}, id="two-clients-one-secret"
        ),
    ],
)
def test_a_secret_used_twice_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    error = refused(env, tmp_path)
    assert error.code == "mcp.secret_reused"
    assert SECRET not in json.dumps(error.to_dict()) + str(error)


def test_loaded_policy_shows_no_secret_in_repr_or_description(tmp_path: Path) -> None:
    env = {
        "CONTINUUM_MCP_MUTATING_CLIENTS": "a",
        "CONTINUUM_MCP_CLIENT_TOKENS": f"a:{SECRET}",
        "CONTINUUM_MCP_CONFIRM_TOKEN": CONFIRM,
    }
    policy = load_policy(env, tmp_path)
    shown = repr(policy) + json.dumps(policy.describe())
    assert SECRET not in shown and CONFIRM not in shown
    assert policy.describe()["auth"] == "client_tokens" and policy.describe()["confirm_over_mcp"]


# --- decisions ------------------------------------------------------------------------


def test_listed_caller_is_allowed_without_tokens_when_none_are_configured() -> None:
    decision = Policy(allow=frozenset({"claude-code"}), allow_source="X").authorize(
        TOOL, Caller("claude-code")
    )
    assert decision.allowed


def test_unlisted_caller_is_denied_and_told_which_setting_grants_access() -> None:
    policy = Policy(allow=frozenset({"claude-code"}), allow_source="CONTINUUM_MCP_MUTATING_CLIENTS")
    decision = policy.authorize(TOOL, Caller("gemini-cli"))
    assert (decision.allowed, decision.code) == (False, "auth.not_allowed")
    assert "'gemini-cli'" in decision.remedy and "CONTINUUM_MCP_MUTATING_CLIENTS" in decision.remedy


def test_caller_without_a_name_is_denied() -> None:
    decision = Policy(allow=frozenset({"claude-code"}), allow_source="X").authorize(
        TOOL, Caller(None)
    )
    assert decision.code == "auth.no_name"
    assert "(no name declared)" in decision.text()


def test_shared_token_is_required_and_checked() -> None:
    policy = Policy(allow=frozenset({"a"}), allow_source="X", shared_token=Secret(SECRET))
    assert policy.authorize(TOOL, Caller("a")).code == "auth.token_missing"
    assert policy.authorize(TOOL, Caller("a", auth_token="wrong")).code == "auth.token_mismatch"
    assert policy.authorize(TOOL, Caller("a", auth_token=SECRET)).allowed


def test_token_comparison_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    policy = Policy(allow=frozenset({"a"}), allow_source="X", shared_token=Secret(SECRET))
    assert policy.authorize(TOOL, Caller("a", auth_token=SECRET)).allowed
    assert seen == [(SECRET.encode(), SECRET.encode())]


def test_non_ascii_secrets_compare_without_error() -> None:
    policy = Policy(allow=frozenset({"a"}), allow_source="X", shared_token=Secret("pässwörd-✓"))
    assert policy.authorize(TOOL, Caller("a", auth_token="pässwörd-✓")).allowed
    assert not policy.authorize(TOOL, Caller("a", auth_token="passwort")).allowed


def test_per_client_tokens_are_bound_to_their_names(tmp_path: Path) -> None:
    env = {
        "CONTINUUM_MCP_MUTATING_CLIENTS": "a, b, c",
        "CONTINUUM_MCP_CLIENT_TOKENS": "a:sa, b:sb:with:colons",
    }
    policy = load_policy(env, tmp_path)
    assert policy.authorize(TOOL, Caller("a", auth_token="sa")).allowed
    assert policy.authorize(TOOL, Caller("b", auth_token="sb:with:colons")).allowed
    assert (
        policy.authorize(TOOL, Caller("a", auth_token="sb:with:colons")).code
        == "auth.token_mismatch"
    )
    no_binding = policy.authorize(TOOL, Caller("c", auth_token="sa"))
    assert no_binding.code == "auth.no_token_for_client" and "'c:<secret>'" in no_binding.remedy


def test_a_client_token_name_may_hold_spaces_and_is_split_at_the_first_colon(
    tmp_path: Path,
) -> None:
    env = {
        "CONTINUUM_MCP_MUTATING_CLIENTS": "Kilo Code, b",
        "CONTINUUM_MCP_CLIENT_TOKENS": f" Kilo Code : {SECRET} ,\nb:x:y",
    }
    policy = load_policy(env, tmp_path)
    assert sorted(policy.client_tokens) == ["Kilo Code", "b"]
    assert policy.authorize(TOOL, Caller("Kilo Code", auth_token=SECRET)).allowed
    assert policy.authorize(TOOL, Caller("b", auth_token="x:y")).allowed


def test_an_unsafe_client_token_name_is_refused_without_revealing_the_secret(
    tmp_path: Path,
) -> None:
    env = {"CONTINUUM_MCP_CLIENT_TOKENS": f"Kilo\u202eCode:{SECRET}"}
    error = refused(env, tmp_path)
    assert error.code == "mcp.bad_token_setting" and "entry 1" in error.message
    assert SECRET not in json.dumps(error.to_dict()) + str(error)


def test_confirm_is_refused_unless_the_confirm_token_is_configured_and_presented() -> None:
    base: dict[str, Any] = {"allow": frozenset({"a"}), "allow_source": "X"}
    disabled = Policy(**base).authorize(
        "continuum_confirm", Caller("a"), confirm=True, run_id="run_42"
    )
    assert disabled.code == "auth.confirm_disabled"
    assert "continuum confirm run_42" in disabled.remedy
    policy = Policy(**base, confirm_token=Secret(SECRET))
    assert (
        policy.authorize("continuum_confirm", Caller("a"), confirm=True).code
        == "auth.confirm_token_missing"
    )
    wrong = policy.authorize("continuum_confirm", Caller("a", confirm_token="nope"), confirm=True)
    assert (
        wrong.code == "auth.confirm_token_mismatch" and "continuum confirm <run_id>" in wrong.remedy
    )
    assert policy.authorize(
        "continuum_confirm", Caller("a", confirm_token=SECRET), confirm=True
    ).allowed


def test_the_confirm_remedy_says_a_person_runs_it_at_a_terminal_and_an_agent_must_not() -> None:
    # The text is the contract here: an agent with a shell reads it and must not
    # conclude that it may run `continuum confirm` itself.
    decision = Policy(allow=frozenset({"a"}), allow_source="X").authorize(
        "continuum_confirm", Caller("a"), confirm=True, run_id="run_42"
    )
    assert "a person must run `continuum confirm run_42` at a terminal" in decision.remedy
    assert "an agent must not run it itself" in decision.remedy
    assert "ask a human" not in decision.text()


def test_confirm_token_does_not_bypass_the_allowlist_or_the_auth_token() -> None:
    policy = Policy(
        allow=frozenset({"a"}),
        allow_source="X",
        shared_token=Secret("auth"),
        confirm_token=Secret(SECRET),
    )
    assert policy.authorize(
        "continuum_confirm", Caller("b", confirm_token=SECRET), confirm=True
    ).code == ("auth.not_allowed")
    assert policy.authorize(
        "continuum_confirm", Caller("a", confirm_token=SECRET), confirm=True
    ).code == ("auth.token_missing")


# --- the confirm token's strength and its attempt limit (issue 30) ----------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("7391", "shorter than 32", id="four-digits"),
        pytest.param(secrets.token_urlsafe(32)[:31], "shorter than 32", id="31-characters"),
        pytest.param("abcdefg" * 5, "fewer than 8 different", id="7-distinct"),
        pytest.param("a" * 64, "fewer than 8 different", id="one-character"),
        pytest.param("passwordpasswordpasswordpassword", "fewer than 8 different", id="a-word-x4"),
    ],
)
def test_a_weak_confirm_token_is_refused_at_load_naming_the_variable_never_the_value(
    tmp_path: Path, value: str, problem: str
) -> None:
    error = refused({"CONTINUUM_MCP_CONFIRM_TOKEN": value}, tmp_path)
    assert error.code == "mcp.weak_confirm_token"
    assert error.message.startswith("CONTINUUM_MCP_CONFIRM_TOKEN ") and problem in error.message
    assert "continuum confirm-token new" in error.hint
    shown = json.dumps(error.to_dict()) + str(error)
    assert value not in shown and str(len(value)) not in error.message.replace("32", "")
    assert "\n" not in error.message


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("x" * 24 + "01234567", id="32-characters-9-distinct"),
        pytest.param(secrets.token_urlsafe(32), id="generated-256-bits"),
        pytest.param(secrets.token_hex(16), id="openssl-rand-hex-16"),
        pytest.param("correct horse battery staple 1234", id="a-passphrase"),
    ],
)
def test_a_confirm_token_of_the_documented_strength_loads(tmp_path: Path, value: str) -> None:
    # The control of the test above: the rule refuses what it says and nothing more.
    policy = load_policy({"CONTINUUM_MCP_CONFIRM_TOKEN": value}, tmp_path)
    assert policy.confirm_token is not None and policy.confirm_token.matches(value)
    assert MIN_CONFIRM_TOKEN_CHARS == 32 and MIN_CONFIRM_TOKEN_DISTINCT == 8


def test_a_short_confirm_token_that_reuses_a_secret_is_named_as_reused(tmp_path: Path) -> None:
    env = {"CONTINUUM_MCP_TOKEN": SECRET, "CONTINUUM_MCP_CONFIRM_TOKEN": SECRET}
    assert refused(env, tmp_path).code == "mcp.secret_reused"  # the graver of the two


@dataclass
class FakeLimit:
    """A ``ConfirmLimit`` answering ``outcome`` (or raising ``error``), recording each
    attempt and what ``matches`` said, as the store's counter would call it."""

    outcome: ConfirmAttempt = ConfirmAttempt("accepted")
    error: Exception | None = None
    seen: list[tuple[str | None, bool, str | None]] = field(default_factory=list)

    def attempt(
        self, run_id: str | None, matches: Callable[[], bool], caller: str | None
    ) -> ConfirmAttempt:
        self.seen.append((run_id, matches(), caller))
        if self.error is not None:
            raise self.error
        return self.outcome


def limited(limit: FakeLimit, **extra: Any) -> Policy:
    return Policy(
        allow=frozenset({"a"}),
        allow_source="X",
        confirm_token=Secret(CONFIRM),
        confirm_limit=limit,
        **extra,
    )


def test_a_presented_confirm_token_is_compared_only_through_the_limit() -> None:
    limit = FakeLimit(ConfirmAttempt("rejected", failures=1))
    policy = limited(limit)
    wrong = policy.authorize(
        "continuum_confirm", Caller("a", confirm_token="guess"), confirm=True, run_id="r1"
    )
    assert wrong.code == "auth.confirm_token_mismatch" and "1 wrong in a row" in wrong.reason
    limit.outcome = ConfirmAttempt("accepted")
    right = policy.authorize(
        "continuum_confirm", Caller("a", confirm_token=CONFIRM), confirm=True, run_id="r1"
    )
    assert right.allowed
    # The limit got the run, whether the token matched (from the policy's own compare)
    # and the caller; never the token itself.
    assert limit.seen == [("r1", False, "a"), ("r1", True, "a")]


def test_the_limit_is_not_consulted_before_the_allowlist_the_auth_token_and_a_token() -> None:
    limit = FakeLimit()
    policy = limited(limit, shared_token=Secret(SECRET))
    for caller in (
        Caller("intruder", auth_token=SECRET, confirm_token=CONFIRM),
        Caller("a", confirm_token=CONFIRM),  # no auth token
        Caller("a", auth_token=SECRET),  # no confirm token: nothing to count
    ):
        assert not policy.authorize("continuum_confirm", caller, confirm=True, run_id="r1").allowed
    assert limit.seen == []  # so an unlisted client cannot lock the token out
    assert policy.authorize(  # control: a call that gets that far is counted
        "continuum_confirm",
        Caller("a", auth_token=SECRET, confirm_token=CONFIRM),
        confirm=True,
        run_id="r1",
    ).allowed
    assert len(limit.seen) == 1


@pytest.mark.parametrize(
    ("outcome", "code", "said"),
    [
        (ConfirmAttempt("waiting", 5, 4.2), "auth.confirm_backoff", "for another 5 s"),
        (ConfirmAttempt("locked", 10, 0.0, True), "auth.confirm_locked", "locked for this store"),
        (ConfirmAttempt("no_run"), "auth.confirm_run_not_found", "not in this store"),
        (ConfirmAttempt("rejected", 10, 0.0, True), "auth.confirm_token_mismatch", "now locked"),
    ],
)
def test_each_refusal_of_the_limit_is_a_denial_sending_the_agent_to_a_person(
    outcome: ConfirmAttempt, code: str, said: str
) -> None:
    decision = limited(FakeLimit(outcome)).authorize(
        "continuum_confirm", Caller("a", confirm_token=CONFIRM), confirm=True, run_id="run_42"
    )
    assert (decision.allowed, decision.code) == (False, code)
    assert said in decision.reason
    assert "a person must run `continuum confirm run_42` at a terminal" in decision.remedy
    # The agent is never told how to unlock: that is a person's step.
    assert "unlock" not in decision.text() and CONFIRM not in decision.text()


def test_a_store_that_cannot_count_the_attempt_refuses_it() -> None:
    from continuum.errors import StoreError

    limit = FakeLimit(error=StoreError("down", code="store.unavailable", hint="h"))
    decision = limited(limit).authorize(
        "continuum_confirm", Caller("a", confirm_token=CONFIRM), confirm=True, run_id="r1"
    )
    assert (decision.allowed, decision.code) == (False, "auth.confirm_unavailable")
    assert "store.unavailable" in decision.reason and CONFIRM not in decision.text()


def _every_denial() -> list[tuple[Policy, Caller, bool]]:
    allow: dict[str, Any] = {
        "allow": frozenset({"agent"}),
        "allow_source": "CONTINUUM_MCP_MUTATING_CLIENTS",
    }
    tokens = Policy(**allow, shared_token=Secret(SECRET), confirm_token=Secret(SECRET + "-c"))
    return [
        (Policy(), Caller("agent", auth_token=SECRET), False),
        (Policy(**allow), Caller(None, auth_token=SECRET), False),
        (Policy(**allow), Caller("intruder", auth_token=SECRET), False),
        (tokens, Caller("agent"), False),
        (tokens, Caller("agent", auth_token=SECRET[::-1]), False),
        (Policy(**allow), Caller("agent", confirm_token=SECRET), True),
        (tokens, Caller("agent", auth_token=SECRET, confirm_token=SECRET), True),
    ]


@pytest.mark.parametrize(("policy", "caller", "confirm"), _every_denial())
def test_denial_text_names_tool_caller_reason_and_remedy_and_never_a_secret(
    policy: Policy, caller: Caller, confirm: bool
) -> None:
    decision = policy.authorize(TOOL, caller, confirm=confirm, run_id="run_7")
    assert not decision.allowed
    text = decision.text()
    assert TOOL in text
    assert (repr(caller.name) if caller.name else "(no name declared)") in text
    assert f"Reason: {decision.reason}" in text and f"Remedy: {decision.remedy}" in text
    assert decision.reason and decision.remedy
    assert SECRET not in text and SECRET[::-1] not in text
    assert SECRET not in json.dumps(decision.as_dict()) + repr(decision) + repr(caller)


def test_a_denial_is_still_returned_when_logging_fails(tmp_path: Path) -> None:
    closed = (tmp_path / "log.txt").open("w")
    closed.close()
    saved = structlog.get_config()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=closed))
    try:
        log_denial(Policy().authorize(TOOL, Caller("a")))  # must not raise
    finally:
        structlog.configure(**saved)


def test_denial_log_carries_no_secret() -> None:
    policy = Policy(allow=frozenset({"a"}), allow_source="X", shared_token=Secret(SECRET))
    decision = policy.authorize(TOOL, Caller("a", auth_token="wrong-" + SECRET))
    with structlog.testing.capture_logs() as logs:
        log_denial(decision)
    assert logs[0]["event"] == "mcp.call_denied" and logs[0]["code"] == "auth.token_mismatch"
    assert logs[0]["tool"] == TOOL and logs[0]["caller"] == "a"
    assert SECRET not in json.dumps(logs)


HUGE_NAME = "x" * 100_000 + "-tail"


def test_a_huge_client_name_is_truncated_in_the_denial_log_and_the_denial_text() -> None:
    decision = Policy(allow=frozenset({"a"}), allow_source="X").authorize(TOOL, Caller(HUGE_NAME))
    with structlog.testing.capture_logs() as logs:
        log_denial(decision)
    assert len(json.dumps(logs)) < 2_000  # was one 100 KB line per denied call
    assert logs[0]["caller"] == "x" * 200 + f"... ({len(HUGE_NAME)} characters)"
    assert len(decision.text()) < 1_000 and "-tail" not in decision.text()


def test_logged_name_keeps_short_names_and_cuts_long_ones_saying_how_long() -> None:
    assert logged_name(None) is None
    assert logged_name("Kilo Code") == "Kilo Code"
    assert logged_name("y" * 200) == "y" * 200
    assert logged_name("y" * 201) == "y" * 200 + "... (201 characters)"


@pytest.mark.parametrize(
    ("method", "params", "meta", "expected"),
    [
        ("initialize", {"clientInfo": {"name": "Kilo Code"}}, None, ("handshake", "Kilo Code")),
        ("initialize", {"clientInfo": {"name": 7}}, None, ("handshake", None)),
        ("tools/call", {"name": "t"}, None, (None, None)),
        (
            "tools/call",
            {},
            {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_INFO_META_KEY: {"name": "gemini"}},
            ("2026-07-28", "gemini"),
        ),
        ("tools/list", {}, {PROTOCOL_VERSION_META_KEY: "2026-07-28"}, ("2026-07-28", None)),
    ],
)
def test_connecting_client_reads_the_name_each_era_declares(
    method: str, params: dict[str, Any], meta: dict[str, Any] | None, expected: tuple[Any, Any]
) -> None:
    assert connecting_client(method, params, meta) == expected


@pytest.fixture(autouse=True)
def structlog_configured() -> None:
    """continuum configures structlog at the first line written; done before a test's
    ``capture_logs`` takes structlog over, so that first line does not undo it."""
    from continuum import log

    log._configure_default()


@pytest.fixture
def info_level() -> Iterator[None]:
    """Lines at info are written (the default level, warning, drops them before structlog)."""
    from continuum import log

    before = log._wanted or "warning"
    log.configure("info")
    log._configure_default()  # applied now, before capture_logs takes structlog over
    try:
        yield
    finally:
        log.configure(before)


@pytest.mark.usefixtures("info_level")
def test_client_log_warns_once_about_an_unlisted_client_and_says_how_to_allow_it() -> None:
    policy = Policy(allow=frozenset({"Kilo Code"}), allow_source="CONTINUUM_MCP_MUTATING_CLIENTS")
    clients = ClientLog(policy)
    with structlog.testing.capture_logs() as logs:
        clients.saw("Kilo", "2026-07-28")
        clients.saw("Kilo", "2026-07-28")  # the same name again: not logged again
        clients.saw("Kilo Code", "2026-07-28")
        clients.saw(HUGE_NAME, "handshake")
    assert [(e["log_level"], e["event"], e["mutating"]) for e in logs] == [
        ("warning", "mcp.client_connected", "denied"),
        ("info", "mcp.client_connected", "allowed"),
        ("warning", "mcp.client_connected", "denied"),
    ]
    assert logs[0]["client"] == "Kilo" and "not on the allowlist" in logs[0]["message"]
    assert "mutating tools will be denied" in logs[0]["message"]
    assert "CONTINUUM_MCP_MUTATING_CLIENTS" in logs[0]["message"]
    assert "on the allowlist" in logs[1]["message"]
    assert len(json.dumps(logs[2])) < 2_000 and logs[2]["client"].endswith("characters)")


def test_client_log_on_a_read_only_server_says_which_variable_grants_access() -> None:
    with structlog.testing.capture_logs() as logs:
        ClientLog(Policy()).saw("claude-code", "handshake")
    assert logs[0]["log_level"] == "warning" and logs[0]["code"] == "auth.read_only"
    assert "CONTINUUM_MCP_MUTATING_CLIENTS" in logs[0]["message"]


@pytest.mark.usefixtures("info_level")
def test_client_log_remembers_a_bounded_number_of_names() -> None:
    clients = ClientLog(Policy(), max_names=3)
    with structlog.testing.capture_logs() as logs:
        for n in range(1_000):
            clients.saw(f"name-{n}", "2026-07-28")
    assert [e["event"] for e in logs] == ["mcp.client_connected"] * 3 + [
        "mcp.client_names_not_logged"
    ]
    assert len(clients._seen) == 3


def test_verdicts_tell_what_a_host_sending_no_token_would_be_told() -> None:
    policy = Policy(allow=frozenset({"Kilo Code"}), allow_source="X", shared_token=Secret(SECRET))
    verdicts = policy.verdicts("Kilo Code")
    assert verdicts["mutating"].code == "auth.token_missing"
    assert verdicts["confirm"].code == "auth.token_missing"
    open_policy = Policy(allow=frozenset({"Kilo Code"}), allow_source="X")
    assert open_policy.verdicts("Kilo Code")["mutating"].allowed
    assert open_policy.verdicts("Kilo Code")["confirm"].code == "auth.confirm_disabled"
    assert open_policy.verdicts("Kilo")["mutating"].code == "auth.not_allowed"


# --- caller identity, on real SDK objects -----------------------------------------------


def initialize_params(name: str, meta: dict[str, Any] | None = None) -> InitializeRequestParams:
    raw: dict[str, Any] = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": name, "version": "1"},
    }
    if meta is not None:
        raw["_meta"] = meta
    return InitializeRequestParams.model_validate(raw, by_name=False)


def test_handshake_caller_is_named_by_initialize_and_its_meta_carries_the_tokens() -> None:
    params = initialize_params("claude-code", {"authToken": "t-init", "confirmToken": "c-init"})
    caller = caller_identity(params, None)
    assert (caller.name, caller.era, caller.auth_token, caller.confirm_token) == (
        "claude-code",
        "handshake",
        "t-init",
        "c-init",
    )


def test_call_meta_tokens_win_over_initialize_meta_tokens() -> None:
    params = initialize_params("claude-code", {"authToken": "t-init", "confirmToken": "c-init"})
    caller = caller_identity(params, {"authToken": "t-call"})
    assert (caller.auth_token, caller.confirm_token) == ("t-call", "c-init")


def test_envelope_caller_is_named_by_the_request_client_info() -> None:
    meta = {
        PROTOCOL_VERSION_META_KEY: "2026-07-28",
        CLIENT_INFO_META_KEY: {"name": "gemini-cli", "version": "1"},
        "authToken": "t",
        "confirmToken": "c",
    }
    caller = caller_identity(None, meta)
    assert (caller.name, caller.era, caller.auth_token, caller.confirm_token) == (
        "gemini-cli",
        "2026-07-28",
        "t",
        "c",
    )


def test_envelope_without_client_info_has_no_name_even_after_a_handshake() -> None:
    caller = caller_identity(
        initialize_params("claude-code"), {PROTOCOL_VERSION_META_KEY: "2026-07-28"}
    )
    assert (caller.name, caller.era) == (None, "2026-07-28")


def test_empty_names_and_non_string_tokens_count_as_absent() -> None:
    caller = caller_identity(initialize_params(""), {"authToken": 123, "confirmToken": ""})
    assert (caller.name, caller.auth_token, caller.confirm_token) == (None, None, None)
    assert caller_identity(None, None) == Caller(None)


def _whoami(caller: Caller) -> dict[str, Any]:
    return {
        "name": caller.name,
        "era": caller.era,
        "auth": caller.auth_token,
        "confirm": caller.confirm_token,
    }


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "era"), [("legacy", "handshake"), ("auto", "2026-07-28")])
async def test_a_tool_reads_its_caller_from_the_mcpserver_context_in_both_eras(
    mode: str, era: str
) -> None:
    server = MCPServer("whoami")

    @server.tool()
    async def whoami(ctx: Context) -> dict[str, Any]:
        return _whoami(caller_from_context(ctx))

    info = Implementation(name="claude-code", version="1")
    async with Client(server, client_info=info, mode=mode) as client:
        result = await client.call_tool(
            "whoami", {}, meta=request_meta({"authToken": "t", "confirmToken": "c"})
        )
    assert result.structured_content == {
        "name": "claude-code",
        "era": era,
        "auth": "t",
        "confirm": "c",
    }


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "era"), [("legacy", "handshake"), ("auto", "2026-07-28")])
async def test_a_lowlevel_handler_reads_its_caller_from_the_request_context(
    mode: str, era: str
) -> None:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="whoami", input_schema={"type": "object"})])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        found = _whoami(caller_from_context(ctx))
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(found))], structured_content=found
        )

    server = Server("whoami-lowlevel", on_list_tools=list_tools, on_call_tool=call_tool)
    async with Client(
        server, client_info=Implementation(name="kilo", version="1"), mode=mode
    ) as client:
        result = await client.call_tool("whoami", {}, meta=request_meta({"authToken": "t"}))
    assert result.structured_content == {"name": "kilo", "era": era, "auth": "t", "confirm": None}
