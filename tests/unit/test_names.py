"""Unit tests for tasks/common/names.py: which collection names docflow takes (checked
against a real Chroma), and the names and files it derives from them."""

from __future__ import annotations

import re
from pathlib import Path

import chromadb
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.cli import cli
from tasks.common.config import IngestParams
from tasks.common.names import (
    MAX_NAME,
    NAME_PATTERN,
    check_collection_name,
    file_name,
    is_version_of,
    logical_name,
    version_name,
)
from tasks.common.runs import new_run_id
from tasks.index.lexical import database_name
from tasks.index.lock import collection_lock, lock_path


@pytest.fixture(scope="module")
def chroma() -> chromadb.ClientAPI:
    return chromadb.EphemeralClient()


def chroma_takes(client: chromadb.ClientAPI, name: str) -> bool:
    try:
        client.create_collection(name)
    except Exception:  # noqa: BLE001 - whatever Chroma raises for a name it refuses
        return False
    client.delete_collection(name)
    return True


@settings(max_examples=40, deadline=None)
@given(name=st.from_regex(NAME_PATTERN, fullmatch=True))
def test_chroma_takes_every_name_we_take_and_its_rebuild_versions(
    chroma: chromadb.ClientAPI, name: str
) -> None:
    try:
        check_collection_name(name)
    except ValueError:
        return  # refused by a rule past the pattern ("..", an IP address): tested below
    assert chroma_takes(chroma, name)
    assert chroma_takes(chroma, version_name(name, new_run_id()))


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("ab", "3-487 characters"),
        ("a b", "a-z A-Z 0-9 . _ -"),
        ("-abc", "letter or digit at each end"),
        ("abc.", "letter or digit at each end"),
        ("über", "a-z A-Z 0-9"),
        ("a" * (MAX_NAME + 1), "3-487 characters"),
        ("a..b", "two dots"),
        ("10.0.0.1", "IP address"),
    ],
)
def test_names_chroma_refuses_are_refused_in_one_line(
    chroma: chromadb.ClientAPI, name: str, problem: str
) -> None:
    with pytest.raises(ValueError, match="is not a collection name") as info:
        check_collection_name(name)
    assert problem in str(info.value) and "\n" not in str(info.value)
    if len(name) <= MAX_NAME:
        assert not chroma_takes(chroma, name)
    else:  # Chroma takes 488-512 characters, but not the versions reingest makes of them
        assert not chroma_takes(chroma, version_name(name, new_run_id()))


def test_a_long_name_is_shown_shortened() -> None:
    with pytest.raises(ValueError) as info:
        check_collection_name("c" * 600)
    assert "(600 characters)" in str(info.value) and len(str(info.value)) < 200


def test_a_name_that_looks_like_a_rebuild_version_is_refused() -> None:
    """``clear docs`` would drop it as a version of ``docs``."""
    taken = version_name("docs", "20240501T101112-0a1b2c")
    assert is_version_of("docs", taken)
    with pytest.raises(ValueError, match="versions reingest builds"):
        check_collection_name(taken)
    assert check_collection_name("docs--v2") == "docs--v2"


def test_versions_fold_back_into_their_name() -> None:
    name = "my.docs"
    version = version_name(name, "20240501T101112-0a1b2c")
    assert logical_name(version) == logical_name(name) == name
    assert is_version_of(name, version) and is_version_of(name, name)
    assert not is_version_of("my", version) and not is_version_of(name, version + "0")
    assert not is_version_of("myXdocs", version)


def test_long_names_get_short_distinct_file_names() -> None:
    first, second = "a" * MAX_NAME, "a" * (MAX_NAME - 1) + "b"
    assert file_name("docs", ".lock") == "docs.lock"
    assert len(file_name(first, ".lock")) <= 255
    assert file_name(first, ".lock") != file_name(second, ".lock")
    assert database_name(version_name(first, "20240501T101112-0a1b2c")).endswith(".sqlite")


def test_the_longest_name_can_be_locked(data_dir: Path) -> None:
    """A name over ~250 characters failed every run: its lock file's name was too long."""
    name = "c" * MAX_NAME
    with collection_lock(data_dir, name, timeout=0):
        assert lock_path(data_dir, name).is_file()


@pytest.mark.parametrize("command", [["ingest"], ["clear", "--yes"], ["restore"]])
def test_a_bad_name_is_a_usage_error_before_anything_is_written(
    tmp_path: Path, command: list[str]
) -> None:
    data_dir = tmp_path / "data"
    args = [*command, "--data-dir", str(data_dir), "--collection", "my docs"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "'my docs' is not a collection name" in result.output
    assert not data_dir.exists()


def test_the_prefect_form_checks_the_same_pattern() -> None:
    """The UI's run form refuses a name as it is typed (JSON Schema patterns are unanchored)."""
    pattern = IngestParams.model_json_schema()["properties"]["collection"]["pattern"]
    assert re.search(pattern, "handbook-2024.v1")
    for bad in ("my docs", "ab", "x" * (MAX_NAME + 1), "-docs"):
        assert not re.search(pattern, bad), bad
