"""The store's paths as text (``store/sqlite_files.py``: ``path_text``, ``parent_text``,
``absolute_text``) give exactly what pathlib gives, without loading it: a store opened by a
hook is named, checked and keyed (its URL) as before."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuum.errors import UsageError
from continuum.store import sqlite_file_from_url, sqlite_path_from_url
from continuum.store.sqlite_files import absolute_text, parent_text, path_text

# Pieces that matter to pathlib: separators (one, two, three), "." and "..", names with
# dots, spaces and non-ASCII, and a leading "-" (refused later by the store, not here).
PIECES = st.sampled_from(["/", "//", "///", ".", "..", "a", "b.db", "-x", " s ", "é", ".hidden"])
PATHS = st.lists(PIECES, max_size=8).map("".join)


@settings(max_examples=3000, deadline=None)
@given(PATHS)
def test_path_parent_and_absolute_equal_pathlib(text: str) -> None:
    assert path_text(text) == str(PurePosixPath(text))
    assert parent_text(text) == str(PurePosixPath(text).parent)
    assert absolute_text(text) == str(Path(text).absolute())
    assert path_text(Path(text)) == str(Path(text))  # a PathLike too


def test_edge_paths() -> None:
    for text in ["", "/", "//", "///", ".", "./", "..", "a/..", "//a//b/", "a/./b/.", "/./"]:
        assert path_text(text) == str(PurePosixPath(text)), text
        assert parent_text(text) == str(PurePosixPath(text).parent), text


def test_absolute_text_follows_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_text("x/../s.db") == str(Path("x/../s.db").absolute())
    assert absolute_text("s.db") == os.path.join(os.getcwd(), "s.db")


def _file_before(url: str) -> str:
    """What the store took a URL's file to be before it was text: ``str(Path(...))`` of
    the path, or of the part after ``sqlite://`` (the URL's other checks are unchanged)."""
    rest = url[len("sqlite://") :] if url.startswith("sqlite:///") else url
    return str(PurePosixPath(rest))


@given(PATHS.filter(lambda t: t.strip() != ""))
def test_a_store_url_names_the_same_file_as_before(text: str) -> None:
    url = text if not text.startswith("/") else "sqlite://" + text
    try:
        got = sqlite_file_from_url(url)
    except UsageError:  # refused by the URL checks, which did not change
        return
    assert got == _file_before(url)
    assert str(sqlite_path_from_url(url)) == _file_before(url)


def test_control_a_normalizer_that_resolves_dots_is_caught() -> None:
    """os.path.normpath folds ``..``; pathlib (and the store's key, its URL) does not."""
    text = "a/../b.db"
    assert os.path.normpath(text) != str(PurePosixPath(text))
    assert path_text(text) == str(PurePosixPath(text))


def test_bytes_are_refused_as_pathlib_refuses_them() -> None:
    with pytest.raises(TypeError):
        Path(b"a.db")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        path_text(b"a.db")  # type: ignore[arg-type]
