"""Unit tests for tasks/common/config.py: defaults < TOML file < DOCFLOW_* env < overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tasks.common.config import IngestParams, resolve_params
from tasks.common.errors import ConfigError
from tests.conftest import REPO


def toml(tmp_path: Path, text: str, name: str = "docflow.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    params = resolve_params(environ={})
    assert params.chunk_size == 200
    assert params.chunk_overlap == 50
    assert params.length_unit == "model_tokens"
    assert params.data_dir == "data"
    assert params.source == "data/raw"
    assert params.include == [] and params.exclude == []
    assert params.include_hidden is False and params.strict is False
    assert params.model == "all-MiniLM-L6-v2"
    assert params.data_path == Path("data")
    assert params == IngestParams()


def test_default_environ_is_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCFLOW_CHUNK_SIZE", "321")
    assert resolve_params().chunk_size == 321
    assert resolve_params(environ={}).chunk_size == 200


# -- precedence -----------------------------------------------------------------------------

FILE = "chunk_size = 500\nchunk_overlap = 40\nsource = 'from/file'\ncollection = 'filecol'\n"
ENV = {"DOCFLOW_CHUNK_SIZE": "600", "DOCFLOW_SOURCE": "from/env"}
OVERRIDES = {"chunk_size": 700}


@pytest.mark.parametrize(
    ("use_file", "env", "overrides", "expected"),
    [
        pytest.param(False, {}, {}, (200, 50, "data/raw", "docflow"), id="defaults"),
        pytest.param(True, {}, {}, (500, 40, "from/file", "filecol"), id="file"),
        pytest.param(True, ENV, {}, (600, 40, "from/env", "filecol"), id="env-beats-file"),
        pytest.param(False, ENV, {}, (600, 50, "from/env", "docflow"), id="env-only"),
        pytest.param(True, ENV, OVERRIDES, (700, 40, "from/env", "filecol"), id="override-wins"),
        pytest.param(True, {}, OVERRIDES, (700, 40, "from/file", "filecol"), id="override-file"),
    ],
)
def test_precedence(
    tmp_path: Path,
    use_file: bool,
    env: dict[str, str],
    overrides: dict[str, Any],
    expected: tuple[int, int, str, str],
) -> None:
    config = toml(tmp_path, FILE) if use_file else None
    p = resolve_params(config, overrides, environ=env)
    assert (p.chunk_size, p.chunk_overlap, p.source, p.collection) == expected


def test_env_values_are_parsed_to_field_types() -> None:
    p = resolve_params(
        environ={
            "DOCFLOW_CHUNK_SIZE": "2048",
            "DOCFLOW_INCLUDE_HIDDEN": "true",
            "DOCFLOW_STRICT": "1",
            "DOCFLOW_DATA_DIR": "/var/docflow",
            "DOCFLOW_BATCH_BYTES": "1000",
        }
    )
    assert p.chunk_size == 2048
    assert p.include_hidden is True and p.strict is True
    assert p.data_dir == "/var/docflow"
    assert p.batch_bytes == 1000


def test_unrelated_env_vars_are_ignored() -> None:
    p = resolve_params(
        environ={"DOCFLOW_NO_SUCH_OPTION": "x", "CHUNK_SIZE": "5", "docflow_chunk_size": "5"}
    )
    assert p == IngestParams()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("**/*.md", ["**/*.md"]),
        ("**/*.md,**/*.txt", ["**/*.md", "**/*.txt"]),
        (" **/*.md , docs/**/*.rst ,", ["**/*.md", "docs/**/*.rst"]),
        ("a,,b", ["a", "b"]),
        ("", []),
    ],
)
def test_list_env_vars_are_comma_separated(raw: str, expected: list[str]) -> None:
    p = resolve_params(environ={"DOCFLOW_INCLUDE": raw, "DOCFLOW_EXCLUDE": raw})
    assert p.include == expected
    assert p.exclude == expected


def test_list_override_replaces_env_list() -> None:
    p = resolve_params(
        overrides={"include": ["only/*.md"]}, environ={"DOCFLOW_INCLUDE": "a/*.md,b/*.md"}
    )
    assert p.include == ["only/*.md"]


# -- TOML file ------------------------------------------------------------------------------


def test_ingest_table_in_toml(tmp_path: Path) -> None:
    config = toml(
        tmp_path,
        "[ingest]\n"
        "source = 'corpus'\n"
        "include = ['**/*.md', '**/*.txt']\n"
        "exclude = ['drafts/**']\n"
        "chunk-size = 256\n"  # kebab-case keys are accepted
        "chunk_overlap = 32\n"
        "include_hidden = true\n",
    )
    p = resolve_params(config, environ={})
    assert p.source == "corpus"
    assert p.include == ["**/*.md", "**/*.txt"]
    assert p.exclude == ["drafts/**"]
    assert (p.chunk_size, p.chunk_overlap, p.include_hidden) == (256, 32, True)


def test_top_level_keys_without_ingest_table(tmp_path: Path) -> None:
    config = toml(tmp_path, "data_dir = 'elsewhere'\nbatch_files = 8\n")
    p = resolve_params(config, environ={})
    assert (p.data_dir, p.batch_files) == ("elsewhere", 8)


def test_overrides_with_none_are_ignored(tmp_path: Path) -> None:
    config = toml(tmp_path, "[ingest]\nchunk_size = 300\n")
    p = resolve_params(
        config,
        {"chunk_size": None, "source": None, "include": None, "chunk_overlap": 10},
        environ={"DOCFLOW_SOURCE": "env/src"},
    )
    assert p.chunk_size == 300
    assert p.source == "env/src"
    assert p.include == []
    assert p.chunk_overlap == 10


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "env", "field"),
    [
        pytest.param({"chunk_size": 0}, {}, "chunk_size", id="size-zero"),
        pytest.param({}, {"DOCFLOW_CHUNK_SIZE": "big"}, "chunk_size", id="size-not-int"),
        pytest.param({"chunk_overlap": -1}, {}, "chunk_overlap", id="negative-overlap"),
        pytest.param(
            {"chunk_size": 100, "chunk_overlap": 200}, {}, "chunk_overlap", id="overlap-gt-size"
        ),
        pytest.param({"collection": "ab"}, {}, "collection", id="collection-too-short"),
        pytest.param({"collection": "a b"}, {}, "collection", id="collection-with-a-space"),
        pytest.param({}, {"DOCFLOW_COLLECTION": "x" * 488}, "collection", id="collection-long"),
        pytest.param({}, {"DOCFLOW_SPLITTER": "nonsense"}, "splitter", id="unknown-splitter"),
        pytest.param({"length_unit": "furlongs"}, {}, "length_unit", id="unknown-unit"),
        pytest.param({}, {"DOCFLOW_STRICT": "maybe"}, "strict", id="bool-not-bool"),
        pytest.param({"batch_files": 0}, {}, "batch_files", id="batch-files-zero"),
        pytest.param({"include": "**/*.md"}, {}, "include", id="include-not-list"),
        pytest.param({"chunk_sise": 10}, {}, "chunk_sise", id="unknown-field"),
        # a path of bytes that are not UTF-8, as Python decodes it from argv or os.listdir
        pytest.param({"source": "/srv/r\udce9pertoire"}, {}, "source", id="source-not-utf8"),
        pytest.param({}, {"DOCFLOW_DATA_DIR": "/srv/d\udce9"}, "data_dir", id="data-dir-not-utf8"),
    ],
)
def test_invalid_values_raise_config_error_naming_the_field(
    overrides: dict[str, Any], env: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_params(overrides=overrides, environ=env)
    message = str(info.value)
    assert field in message
    assert "\n" not in message


def test_invalid_value_in_toml_names_the_field(tmp_path: Path) -> None:
    config = toml(tmp_path, "[ingest]\nembed_batch_size = 'lots'\n")
    with pytest.raises(ConfigError, match="embed_batch_size") as info:
        resolve_params(config, environ={})
    assert "\n" not in str(info.value)
    assert str(info.value).endswith(f"(from config file {config})")


@pytest.mark.parametrize(
    ("file_text", "overrides", "env", "origin"),
    [
        pytest.param("", {}, {"DOCFLOW_CHUNK_SIZE": "abc"}, "DOCFLOW_CHUNK_SIZE", id="env"),
        # a loader option is given flat and validated as loaders.<name>
        pytest.param("", {}, {"DOCFLOW_WORKERS": "abc"}, "DOCFLOW_WORKERS", id="env-loader"),
        pytest.param("[ingest.loaders]\nworkers = 'x'\n", {}, {}, "config file", id="file-table"),
        pytest.param("chunk_sise = 3\n", {}, {}, "config file", id="file-unknown-key"),
        # the flag wins over the environment: the bad value is the flag's, named as usual
        pytest.param("", {"chunk_size": "abc"}, {"DOCFLOW_CHUNK_SIZE": "7"}, None, id="flag"),
    ],
)
def test_an_invalid_value_says_where_it_came_from(
    tmp_path: Path,
    file_text: str,
    overrides: dict[str, Any],
    env: dict[str, str],
    origin: str | None,
) -> None:
    """A bad value in a job's environment or a config file is named with its source."""
    config = toml(tmp_path, file_text) if file_text else None
    with pytest.raises(ConfigError) as info:
        resolve_params(config, overrides=overrides, environ=env)
    message = str(info.value)
    if origin is None:
        assert "(from " not in message
    else:
        assert message.endswith(")") and f"(from {origin}" in message


def test_missing_config_file_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="not found") as info:
        resolve_params(missing, environ={})
    assert str(missing) in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "chunk_size = \n",
        "[ingest\nchunk_size = 1\n",
        "chunk_size = 1\nchunk_size = 2\n",
        "source = 'unterminated\n",
    ],
)
def test_invalid_toml_raises_config_error(tmp_path: Path, text: str) -> None:
    config = toml(tmp_path, text)
    with pytest.raises(ConfigError, match="not valid TOML") as info:
        resolve_params(config, environ={})
    assert str(config) in str(info.value)
    assert "\n" not in str(info.value)


def test_non_utf8_config_file_raises_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes("source = 'café'\n".encode("latin-1"))
    with pytest.raises(ConfigError):
        resolve_params(path, environ={})


def test_config_path_that_is_a_folder_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        resolve_params(tmp_path, environ={})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("chunk_sise = 3\n", "unknown setting 'chunk_sise' (did you mean 'chunk_size'?)"),
        ("pdf_mod = 'file'\n", "unknown setting 'pdf_mod' (did you mean 'pdf_mode'?)"),
        ("[ingest.loaders]\ncsv_delimeter = ';'\n", "did you mean 'csv_delimiter'?"),
        ("zzzz = 1\n", "unknown setting 'zzzz'"),
    ],
)
def test_an_unknown_setting_names_the_closest_known_one(
    tmp_path: Path, text: str, message: str
) -> None:
    from tasks.common.config import resolve_params

    config = tmp_path / "docflow.toml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        resolve_params(config, environ={})
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[injest]\nsource = 'docs'\n", "unknown table [injest] (did you mean [ingest]?)"),
        ("chunk_size = 500\n[ingest]\nsource = 'docs'\n", "'chunk_size' is above the [ingest]"),
        ("[ingest]\nsource = 'docs'\n[loaders]\npdf_mode = 'file'\n", "write [ingest.loaders]"),
        ("[ingest]\n[ingest.loader]\npdf_mode = 'file'\n", "unknown table [ingest.loader]"),
        ("[ingest]\nretrieval = 'dense'\n", "'retrieval' is a query setting: put it under [query]"),
        ("fusion = 'rrf'\n[query]\nretrieval = 'dense'\n", "'fusion' is above the [query]"),
    ],
)
def test_settings_where_no_command_reads_them_are_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    """They were skipped in silence: a typo ran on the defaults (another folder, collection)."""
    from tasks.common.config import resolve_params, resolve_query_params

    config = toml(tmp_path, text)
    for resolve in (resolve_params, resolve_query_params):
        with pytest.raises(ConfigError) as info:
            resolve(config, environ={})
        assert message in str(info.value) and "\n" not in str(info.value)


def test_the_documented_layouts_still_read(tmp_path: Path) -> None:
    from tasks.common.config import resolve_params, resolve_query_params

    tables = (
        "[ingest]\nchunk_size = 300\n[ingest.loaders]\npdf_mode = 'file'\n[query]\nfusion = 'rrf'\n"
    )
    flat = "chunk_size = 300\npdf_mode = 'file'\n[query]\nfusion = 'rrf'\n"
    for text in (tables, flat):
        params = resolve_params(toml(tmp_path, text), environ={})
        assert (params.chunk_size, params.loaders.pdf_mode) == (300, "file")
        assert resolve_query_params(toml(tmp_path, text), environ={}).fusion == "rrf"


def test_a_backfill_range_error_is_one_plain_line() -> None:
    from tasks.common.config import BackfillParams, validated

    with pytest.raises(ConfigError) as info:
        validated(
            BackfillParams,
            {"start": "2024-01-05", "end": "2024-01-01", "ingest": {"source_template": "x/{date}"}},
        )
    assert str(info.value) == "end 2024-01-01 is before start 2024-01-05"


def test_cli_choices_are_the_settings_own() -> None:
    """The CLI lists backends and rankings without importing their modules: same values."""
    from flows.cli import EMBED_BACKENDS, FUSIONS, RETRIEVALS
    from tasks.embed.backends import BACKENDS
    from tasks.retrieval import FUSIONS as KNOWN_FUSIONS
    from tasks.retrieval import RETRIEVALS as KNOWN_RETRIEVALS

    assert EMBED_BACKENDS == BACKENDS
    assert RETRIEVALS == KNOWN_RETRIEVALS
    assert FUSIONS == tuple(KNOWN_FUSIONS)


def test_query_settings_from_the_query_table_env_and_flags(tmp_path: Path) -> None:
    from tasks.common.config import resolve_query_params

    config = tmp_path / "docflow.toml"
    config.write_text(
        'chunk_size = 300\n[query]\nfusion = "rrf"\nstop-words = false\n', encoding="utf-8"
    )
    got = resolve_query_params(config, {"dense_weight": 0.7}, {"DOCFLOW_RETRIEVAL": "dense"})
    assert (got.retrieval, got.dense_weight, got.fusion, got.stop_words) == (
        "dense",
        0.7,
        "rrf",
        False,
    )
    flat = tmp_path / "flat.toml"  # no [query] table: its query keys count, others are ingest's
    flat.write_text('chunk_size = 300\nfusion = "zscore"\n', encoding="utf-8")
    assert resolve_query_params(flat, environ={}).fusion == "zscore"


def test_unknown_keys_of_the_query_table_are_refused_with_a_suggestion(tmp_path: Path) -> None:
    from tasks.common.config import resolve_query_params

    config = tmp_path / "docflow.toml"
    config.write_text("[query]\ndense_wieght = 0.2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        resolve_query_params(config, environ={})
    assert str(info.value) == (
        f"unknown setting 'dense_wieght' (did you mean 'dense_weight'?) (from config file {config})"
    )


def test_a_path_that_is_not_utf8_is_named_printably() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_params(overrides={"source": "/srv/r\udce9pertoire"}, environ={})
    assert "/srv/r\\xe9pertoire is not valid UTF-8" in str(info.value)
    str(info.value).encode("utf-8")  # the message itself can be printed and logged


def test_an_unknown_docflow_variable_is_named_with_the_closest_setting() -> None:
    """A typo in a job's environment was ignored in silence (the run wrote the defaults)."""
    from tasks.common.config import unknown_env

    env = {
        "DOCFLOW_COLLECTON": "prod",
        "DOCFLOW_COLLECTION": "prod",
        "DOCFLOW_PDF_MODE": "file",  # a loader option
        "DOCFLOW_FUSION": "rrf",  # a query setting
        "DOCFLOW_LLM_BASE_URL": "http://127.0.0.1:1",
        "DOCFLOW_BENCH_SKIP": "x",
        "HOME": "/root",
    }
    assert unknown_env(env) == [
        "DOCFLOW_COLLECTON is not a setting docflow reads (did you mean DOCFLOW_COLLECTION?): "
        "ignored"
    ]


def test_every_docflow_variable_the_code_reads_is_known() -> None:
    """The list of variables read outside the settings stays true as code and docs change."""
    from tasks.common.config import unknown_env

    used = set()
    paths = [
        p
        for f in ("tasks", "flows", "deployments", "tests/benchmarks")
        for p in (REPO / f).rglob("*.py")
    ]
    for path in [*paths, REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        if path.name == "config.py":  # the list itself, and its example of a typo
            continue
        used |= set(re.findall(r"DOCFLOW_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text("utf-8")))
    used.discard("DOCFLOW_COLLECTON")  # docs/configuration.md's example of a typo
    assert len(used) > 10
    assert unknown_env(dict.fromkeys(used, "")) == []


def test_the_cli_warns_of_an_unknown_variable(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from flows.cli import cli

    env = {"DOCFLOW_RETREIVAL": "dense"}
    result = CliRunner().invoke(cli, ["query", "bees", "--data-dir", str(tmp_path)], env=env)
    assert "docflow: warning: DOCFLOW_RETREIVAL is not a setting docflow reads" in result.output
    assert "did you mean DOCFLOW_RETRIEVAL?" in result.output


def test_a_leading_dot_slash_in_a_glob_is_dropped() -> None:
    """``--include './**/*.md'`` matched no file: globs are relative to the source."""
    params = resolve_params(
        overrides={
            "include": ["./**/*.md", "././docs/*.txt"],
            "exclude": ["!./keep.md", "./drafts/**"],
        },
        environ={},
    )
    assert params.include == ["**/*.md", "docs/*.txt"]
    assert params.exclude == ["!keep.md", "drafts/**"]
