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
