"""``Continuum(path)`` (instead of ``Continuum.open(path)``) is refused with what to do,
not an AttributeError from deep inside, and creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from continuum import Continuum
from continuum.errors import UsageError


@pytest.mark.parametrize("kind", [str, Path, lambda p: str(p).encode()])
def test_a_path_instead_of_a_store_is_refused_with_the_way_to_open_it(
    tmp_path: Path, kind: object
) -> None:
    db = tmp_path / "agent.db"
    with pytest.raises(UsageError) as caught:
        Continuum(kind(db))  # type: ignore[operator]
    assert caught.value.code == "usage.not_a_store"
    assert caught.value.fields["given"] == str(db)
    assert "Continuum.open" in caught.value.hint
    assert not db.exists()


def test_a_postgresql_url_given_instead_loses_its_password() -> None:
    with pytest.raises(UsageError) as caught:
        Continuum("postgresql://agent:s3cret@db.example/agents")  # type: ignore[arg-type]
    assert "s3cret" not in str(caught.value) and "s3cret" not in str(caught.value.fields)
    assert caught.value.fields["given"] == "postgresql://agent@db.example/agents"


def test_an_open_store_is_still_taken(tmp_path: Path) -> None:
    with Continuum.open(str(tmp_path / "agent.db")) as cx:
        again = Continuum(cx.store)
        again.start_run("r1", "goal")
        assert [r.run_id for r in cx.runs()] == ["r1"]


def test_a_pathlib_path_opens_a_store_as_its_text_does(tmp_path: Path) -> None:
    """``Continuum.open(Path(...))`` and ``open_store(Path(...))`` (an AttributeError
    from deep inside, before) open the file the path names."""
    from continuum.store import open_store

    db = tmp_path / "agent.db"
    with Continuum.open(db) as cx:
        cx.start_run("r1", "goal")
        assert cx.store.url == f"sqlite://{db}"
    store = open_store(db, create=False)
    try:
        assert store.url == f"sqlite://{db}"
    finally:
        store.close()


def test_a_store_named_by_bytes_is_refused_with_what_to_give(tmp_path: Path) -> None:
    from continuum.store import open_store

    db = tmp_path / "agent.db"
    for opener in (Continuum.open, open_store):
        with pytest.raises(UsageError) as caught:
            opener(str(db).encode())  # type: ignore[arg-type]
        assert caught.value.code == "store.bad_url" and "pathlib.Path" in caught.value.hint
    assert not db.exists()
