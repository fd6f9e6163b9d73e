"""The Python API explains itself (issue 12, item 3): ``help()`` on every public name says
what it does, returns and raises; the error codes docstrings name are real; docstrings
point into the repository (``references/``), never at a document outside it; return
values carry enums (``InterceptStatus``, ``Mode``, ``EventType``) that still serialize to
the same strings; ``with Continuum.open(...)`` closes the store; a key is not prefixed
twice."""

from __future__ import annotations

import inspect
import json
import os
import pydoc
import re
from pathlib import Path
from typing import Any

import pytest

import continuum
from continuum import (
    Continuum,
    Event,
    EventType,
    InterceptResult,
    InterceptStatus,
    Mode,
    Recovery,
)
from continuum.eventlog.event_model import seal
from continuum.ledger.gate import GUIDANCE

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "continuum"
CODE = re.compile(r"``((?:usage|store|not_found|integrity|ledger)\.[a-z_.]*[a-z_])``")


def public_objects() -> dict[str, Any]:
    return {n: getattr(continuum, n) for n in continuum.__all__ if n != "__version__"}


def own_members(cls: type) -> dict[str, Any]:
    """Public methods and properties a class defines itself (not pydantic's or object's)."""
    out = {}
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if inspect.isfunction(func):
            out[name] = func
    return out


def raised_codes() -> set[str]:
    """Every error code the source can raise: ``code="..."`` arguments and class codes."""
    codes: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        codes |= set(re.findall(r'\bcode\s*=\s*"([a-z_]+\.[a-z_.]+)"', text))
    return codes


def test_every_public_name_and_its_own_methods_have_docstrings() -> None:
    missing = []
    for name, obj in public_objects().items():
        doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
        if not (doc or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            missing += [
                f"{name}.{m}" for m, f in own_members(obj).items() if not (f.__doc__ or "").strip()
            ]
    assert missing == []


@pytest.mark.parametrize(
    "method",
    [
        "open",
        "start_run",
        "append",
        "events",
        "record_progress",
        "intercept",
        "complete",
        "fail",
        "reconcile",
        "compensate",
        "declare_dependencies",
        "checkpoint",
        "verify",
        "anchor",
        "resume",
        "confirm",
        "verify_contract",
        "validate",
    ],
)
def test_facade_methods_say_what_they_return_and_raise(method: str) -> None:
    doc = inspect.getdoc(getattr(Continuum, method)) or ""
    assert re.search(r"\b[Rr]eturns?\b", doc) or "->" in doc or method in ("open",), doc
    assert "Raises" in doc or "raises" in doc or "raised" in doc, f"{method}: {doc}"
    assert CODE.search(doc), f"{method} names no error code: {doc}"


def test_error_codes_named_in_docstrings_are_codes_the_source_raises() -> None:
    real = raised_codes()
    assert {"usage.run_exists", "ledger.owner_alive"} <= real  # the collector works
    named: dict[str, set[str]] = {}
    objects = list(public_objects().values())
    for obj in objects:
        docs = [obj.__doc__ or ""]
        if inspect.isclass(obj):
            docs += [f.__doc__ or "" for f in own_members(obj).values()]
        for doc in docs:
            for code in CODE.findall(doc):
                named.setdefault(code, set()).add(getattr(obj, "__name__", str(obj)))
    assert named, "no docstring names an error code"
    # a class-level code such as ``ledger.owner_alive`` counts as raised; prefixes such
    # as ``store.*`` are written with a star and do not match the pattern
    unknown = {c: sorted(where) for c, where in named.items() if c not in real}
    assert unknown == {}
    # control: a code nothing raises is caught by the same comparison
    assert set(CODE.findall("raises ``usage.no_such_code``")) - real == {"usage.no_such_code"}


# help()'s renderer without terminal bold; typeshed's pydoc stub does not declare it.
PLAIN_TEXT: pydoc.TextDoc = pydoc.plaintext  # type: ignore[attr-defined]


def test_help_renders_the_facade_with_an_example_and_the_error_tree() -> None:
    text = pydoc.render_doc(Continuum, renderer=PLAIN_TEXT)
    assert "with Continuum.open(" in text and "ContinuumError" in text
    assert "references/api.md" in text
    for name in ("InterceptResult", "Recovery", "InterceptStatus", "Event"):
        body = pydoc.render_doc(getattr(continuum, name), renderer=PLAIN_TEXT)
        assert "references/" in body, name


def test_no_docstring_or_comment_in_src_cites_a_document_outside_the_repository() -> None:
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in SRC.rglob("*.py")
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bSPEC\b|\.\./shared", line)
    ]
    assert hits == []
    # and every references/X.md a source file names exists
    named = {
        m
        for p in SRC.rglob("*.py")
        for m in re.findall(r"references/([a-z_-]+\.md)", p.read_text(encoding="utf-8"))
    }
    assert named and all((ROOT / "references" / n).is_file() for n in named), named


def test_the_return_types_are_exported_where_help_finds_them() -> None:
    from continuum.runtime.results import ActionsPage, CheckpointInfo, ConfirmResult
    from continuum.state.records import ActionRecord
    from continuum.state.validation import ValidationReport
    from continuum.store import RunInfo

    for cls in (
        ActionRecord,
        ActionsPage,
        CheckpointInfo,
        ConfirmResult,
        RunInfo,
        ValidationReport,
        InterceptStatus,
    ):
        assert getattr(continuum, cls.__name__) is cls
    hints = inspect.signature(Continuum.intercept).return_annotation
    assert hints in ("InterceptResult", InterceptResult)


# -- enums that still serialize to the same strings --------------------------------------


@pytest.fixture
def cx(tmp_path: Path) -> Any:
    with Continuum.open(str(tmp_path / "api.db")) as cx:
        yield cx


def test_intercept_status_is_an_enum_and_serializes_to_its_string(cx: Continuum) -> None:
    cx.start_run("r1", "g")
    first = cx.intercept("r1", "send", {"n": 1}, key="k1")
    assert first.status is InterceptStatus.STARTED and first.proceed
    assert first.model_dump(mode="json")["status"] == "started"
    assert json.loads(first.model_dump_json())["status"] == "started"
    assert first.status == "started"  # a StrEnum: string comparisons keep working
    cx.complete("r1", first.action_key)
    again = cx.intercept("r1", "send", {"n": 1}, key="k1")
    assert again.status is InterceptStatus.COMPLETED and not again.proceed
    renamed = cx.intercept("r1", "mail", {"to": "a", "n": 2})
    cx.complete("r1", renamed.action_key)
    suspect = cx.intercept("r1", "mail", {"recipient": "a", "count": 2})
    assert suspect.status is InterceptStatus.POSSIBLE_DUPLICATE
    # the ledger's statuses and the enum are the same set: every status has guidance
    assert set(GUIDANCE) == {s.value for s in InterceptStatus}
    with pytest.raises(ValueError):
        InterceptResult(**{**first.model_dump(), "status": "perhaps"})


def test_recovery_mode_is_a_mode_and_no_active_run_stays_a_string(cx: Continuum) -> None:
    none = cx.resume()
    assert none.mode == "no_active_run" and not isinstance(none.mode, Mode)
    cx.start_run("r1", "g")
    r = cx.intercept("r1", "send", {"n": 1}, key="k1")
    assert r.proceed
    rec = cx.resume("r1")
    assert rec.mode is Mode.WAIT  # our own process performs it
    assert rec.model_dump(mode="json")["mode"] == "wait"
    assert rec.contract is not None and rec.contract["verdict"] == "wait"
    with pytest.raises(ValueError):
        Recovery(**{**rec.model_dump(), "mode": "carry_on"})


def test_event_type_is_the_enum_when_known_on_every_path_and_hashes_do_not_change(
    cx: Continuum,
) -> None:
    cx.start_run("r1", "g")
    appended = cx.append("r1", EventType.WORK_COMPLETED, {"doc": 1})
    custom = cx.append("r1", "my_team.note", {"text": "x"})
    by_string = cx.append("r1", "finding_added", {"finding_id": "f1", "text": "t"})
    assert appended.type is EventType.WORK_COMPLETED  # CoreTx.append
    assert by_string.type is EventType.FINDING_ADDED  # a known type given as a string
    assert type(custom.type) is str and custom.type == "my_team.note"
    read = cx.events("r1")  # event_from_raw
    assert [e.type for e in read][:2] == [EventType.RUN_STARTED, EventType.WORK_COMPLETED]
    assert read[0].type is EventType.RUN_STARTED and type(read[2].type) is str
    validated = Event.model_validate(read[1].model_dump(mode="json"))  # imports, JSON
    assert validated.type is EventType.WORK_COMPLETED
    assert validated.model_dump(mode="json")["type"] == "work_completed"
    for e in read:
        assert e.computed_hash() == e.hash  # the enum hashes as its string
    sealed = seal(
        event_id="e1",
        run_id="r",
        sequence=1,
        type="run_started",
        timestamp="t",
        payload={},
        causer_event_id=None,
        source=continuum.Origin.HUMAN,
        prev_hash=None,
    )
    plain = seal(
        event_id="e1",
        run_id="r",
        sequence=1,
        type=EventType.RUN_STARTED,
        timestamp="t",
        payload={},
        causer_event_id=None,
        source=continuum.Origin.HUMAN,
        prev_hash=None,
    )
    assert sealed.type is EventType.RUN_STARTED and sealed.hash == plain.hash
    assert cx.verify("r1").ok


# -- the context manager, and keys -----------------------------------------------------------


def open_fds_on(path: Path) -> int:
    fds = Path("/proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            if os.readlink(fd).startswith(str(path)):
                count += 1
        except OSError:
            continue
    return count


def test_with_continuum_open_closes_the_store_on_exit(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"
    with Continuum.open(str(db)) as cx:
        cx.start_run("r1", "g")
        assert open_fds_on(db) > 0  # control: the store is open inside the block
    assert open_fds_on(db) == 0
    with pytest.raises(RuntimeError), Continuum.open(str(db)) as cx:
        cx.runs()
        raise RuntimeError("boom")
    assert open_fds_on(db) == 0  # closed on an exception too, which propagates


def test_a_key_that_repeats_the_action_type_is_not_prefixed_twice(cx: Continuum) -> None:
    cx.start_run("r1", "g")
    prefixed = cx.intercept("r1", "upload", {"f": "a.csv"}, key="upload:a.csv")
    assert prefixed.action_key == "upload:a.csv"
    cx.complete("r1", prefixed.action_key)
    bare = cx.intercept("r1", "upload", {"f": "a.csv"}, key="a.csv")
    assert (bare.action_id, bare.status) == (prefixed.action_id, InterceptStatus.COMPLETED)
    # only a leading copy of this very type is dropped
    other = cx.intercept("r1", "send", None, key="upload:a.csv")
    assert other.action_key == "send:upload:a.csv"
    cx.complete("r1", other.action_key)
    listed = {a.action_key for a in cx.actions("r1")}
    assert listed == {"upload:a.csv", "send:upload:a.csv"}
    assert not any(k.startswith("upload:upload:") for k in listed)
