"""Date-partitioned sources: template parsing, partition scopes, date ranges."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tasks.common.config import IngestParams
from tasks.common.errors import ConfigError
from tasks.discover.files import classify, discover, in_scope
from tasks.discover.partitions import partition_dates, partition_params, split_template
from tasks.index.manifest import FileState

DAY = dt.date(2024, 1, 2)


@pytest.mark.parametrize(
    ("template", "prefix", "part"),
    [
        ("landing/{date:%Y-%m-%d}/", "landing", "{date:%Y-%m-%d}"),
        ("a/b/day={date:%Y%m%d}", "a/b", "day={date:%Y%m%d}"),
        ("/srv/in/{date:%Y}/{date:%m}/{date:%d}/", "/srv/in", "{date:%Y}/{date:%m}/{date:%d}"),
        ("/{date:%Y-%m-%d}", "/", "{date:%Y-%m-%d}"),
        ("{date:%Y-%m-%d}", ".", "{date:%Y-%m-%d}"),
    ],
)
def test_split_template(template: str, prefix: str, part: str) -> None:
    assert split_template(template) == (prefix, part)


def test_a_template_needs_a_date_field() -> None:
    with pytest.raises(ConfigError, match="date"):
        split_template("landing/{day}/")
    with pytest.raises(ValueError, match="date"):
        IngestParams(source_template="landing/static/")


def test_partition_params_scope_root_and_globs() -> None:
    params = IngestParams(
        source_template="landing/{date:%Y-%m-%d}/",
        include=["**/*.md"],
        exclude=["!keep/**", "tmp/**"],
    )
    p = partition_params(params, DAY)
    assert p.source == "landing" and p.partition_date == DAY
    assert p.include == ["2024-01-02/**/*.md"]
    assert p.exclude == ["!2024-01-02/keep/**", "2024-01-02/tmp/**"]
    assert p.content_fingerprint() == params.content_fingerprint()  # same chunks either way


def test_default_includes_are_scoped_too() -> None:
    p = partition_params(IngestParams(source_template="in/{date:%Y-%m-%d}"), DAY)
    assert p.include and all(g.startswith("2024-01-02/**/") for g in p.include)


def test_every_partition_when_no_day() -> None:
    p = partition_params(IngestParams(source_template="in/day={date:%Y-%m-%d}/x"), None)
    assert p.source == "in" and p.include[0].startswith("day=*/x/")


def test_without_template_params_are_unchanged() -> None:
    params = IngestParams(source="docs")
    assert partition_params(params, DAY) is params


def _refs(root: Path, params: IngestParams) -> list[str]:
    return [f.source for f in discover(root, params.include, params.exclude)]


def test_partitions_with_the_same_file_names_do_not_collide(tmp_path: Path) -> None:
    for day in ("2024-01-01", "2024-01-02"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "notes.md").write_text(f"# {day}\n", encoding="utf-8")
    template = str(tmp_path / "{date:%Y-%m-%d}")
    one = partition_params(IngestParams(source_template=template), dt.date(2024, 1, 1))
    two = partition_params(IngestParams(source_template=template), DAY)
    assert _refs(tmp_path, one) == ["2024-01-01/notes.md"]
    assert _refs(tmp_path, two) == ["2024-01-02/notes.md"]

    # partition two's run does not delete partition one's file (out of its scope)
    state = FileState("2024-01-01/notes.md", str(tmp_path), "x", "f", "done", None, (), (), "r1")
    known = {state.source: state}
    files = discover(tmp_path, two.include, two.exclude)
    changes = classify(
        files, known, str(tmp_path), "f", lambda s: in_scope(s, two.include, two.exclude, False)
    )
    assert changes.deleted == [] and changes.new == 1


def test_partition_dates() -> None:
    assert partition_dates(dt.date(2024, 2, 28), dt.date(2024, 3, 1)) == [
        dt.date(2024, 2, 28),
        dt.date(2024, 2, 29),
        dt.date(2024, 3, 1),
    ]
    with pytest.raises(ConfigError, match="before"):
        partition_dates(DAY, dt.date(2024, 1, 1))
    with pytest.raises(ConfigError, match="at most"):
        partition_dates(dt.date(2000, 1, 1), dt.date(2024, 1, 1))
