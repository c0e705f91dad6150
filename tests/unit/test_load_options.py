"""Loader options: flat keys from flags, env and config land in ``IngestParams.loaders``."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from flows.cli import cli
from tasks.common.config import IngestParams, LoaderOptions, resolve_params
from tasks.common.errors import ConfigError
from tasks.discover.files import discover


def test_defaults() -> None:
    options = IngestParams().loaders
    assert options == LoaderOptions()
    assert (options.pdf_mode, options.max_file_size, options.workers) == ("page", 100_000_000, None)
    assert options.process_count() == len(os.sched_getaffinity(0))  # one per core
    assert LoaderOptions(workers=0).process_count() == 0
    assert IngestParams().sample_size is None


def test_cli_style_overrides_land_in_loaders() -> None:
    params = resolve_params(
        overrides={"pdf_mode": "file", "max_file_size": 1000, "sample_size": 5}, environ={}
    )
    assert (params.loaders.pdf_mode, params.loaders.max_file_size) == ("file", 1000)
    assert params.sample_size == 5


def test_env_and_config_file(tmp_path: Path) -> None:
    config = tmp_path / "docflow.toml"
    config.write_text(
        '[ingest]\npdf_mode = "file"\n\n[ingest.loaders]\ncsv_content_columns = ["body"]\n'
        "timeout_s = 5\n",
        encoding="utf-8",
    )
    env = {"DOCFLOW_JSON_CONTENT_FIELD": "text", "DOCFLOW_CSV_METADATA_COLUMNS": "id,author"}
    loaders = resolve_params(config, environ=env).loaders
    assert loaders.pdf_mode == "file" and loaders.timeout_s == 5
    assert loaders.csv_content_columns == ["body"]
    assert loaders.json_content_field == "text"
    assert loaders.csv_metadata_columns == ["id", "author"]


def test_flat_key_beats_nested_one() -> None:
    params = IngestParams.model_validate({"loaders": {"pdf_mode": "page"}, "pdf_mode": "file"})
    assert params.loaders.pdf_mode == "file"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pdf_mode": "pages"}, "invalid loaders.pdf_mode"),
        ({"max_file_size": 0}, "invalid loaders.max_file_size"),
        ({"sample_size": 0}, "invalid sample_size"),
        ({"loaders": {"nope": 1}}, "unknown setting 'loaders.nope'"),
    ],
)
def test_bad_options_are_config_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}"):
        resolve_params(overrides=overrides, environ={})


def test_fingerprint_ignores_run_only_loader_options() -> None:
    base = IngestParams().content_fingerprint()
    run_only = IngestParams(loaders=LoaderOptions(timeout_s=5, workers=2, max_file_size=10))
    assert run_only.content_fingerprint() == base
    assert IngestParams(loaders=LoaderOptions(pdf_mode="file")).content_fingerprint() != base


@pytest.mark.parametrize("flag", ["--max-file-size", "--sample-size", "--pdf-mode"])
def test_cli_has_the_loader_flags(flag: str) -> None:
    options = {
        o for p in cli.commands["ingest"].params if isinstance(p, click.Option) for o in p.opts
    }
    assert flag in options


def test_sample_size_takes_the_first_files_in_order(tmp_path: Path) -> None:
    for name in ("c.txt", "a.txt", "b/z.txt", "b/a.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    everything = [f.source for f in discover(tmp_path, ["**/*.txt"])]
    assert everything == ["a.txt", "b/a.txt", "b/z.txt", "c.txt"]
    assert [f.source for f in discover(tmp_path, ["**/*.txt"], sample_size=2)] == everything[:2]


def test_default_includes_match_extensions_in_any_case(tmp_path: Path) -> None:
    from tasks.load import default_includes

    for name in ("a.TXT", "b.Md", "c.pdf", "d.unknown", "e.TXt"):
        (tmp_path / name).write_text("x")
    found = [f.source for f in discover(tmp_path, default_includes())]
    assert found == ["a.TXT", "b.Md", "c.pdf", "e.TXt"]
