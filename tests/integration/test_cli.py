"""The docflow CLI: exit codes, one-line errors, the JSON summary, query and inspect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import main
from tasks.common.tables import read_table
from tasks.index.store import ChromaStore
from tests.conftest import REPO
from tests.servers import migrated_database

SUMMARY_KEYS = {
    "run_id",
    "files_seen",
    "files_new",
    "files_changed",
    "files_unchanged",
    "files_deleted",
    "files_failed",
    "chunks_written",
    "chunks_embedded",
    "chunks_from_cache",
    "chunks_deleted",
    "collection",
    "seconds",
    "failures",
}


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_json_summary_and_query(
    capsys: pytest.CaptureFixture[str], tiny_corpus: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    code, out, _ = run_cli(
        capsys, "ingest", "--source", str(tiny_corpus), "--data-dir", data, "--json"
    )
    assert code == 0
    summary = json.loads(out)  # exactly one JSON object on stdout
    assert SUMMARY_KEYS <= set(summary)
    # hidden files are skipped; the default includes take .md, .txt and .csv
    assert summary["files_seen"] == 4 and summary["files_failed"] == 0
    assert summary["chunks_written"] == read_table(Path(data), "chunks").num_rows
    assert ChromaStore.open(Path(data), "docflow").count() == summary["chunks_written"]

    code, out, _ = run_cli(
        capsys, "query", "what sound warns ships in fog?", "-k", "2", "--data-dir", data, "--json"
    )
    assert code == 0
    result = json.loads(out)
    assert [r["rank"] for r in result["results"]] == [1, 2]
    assert result["results"][0]["source"] == "guides/deep/fog.md"

    code, out, _ = run_cli(capsys, "inspect", "--data-dir", data, "--json")
    info = json.loads(out)
    assert code == 0 and info["collection"]["count"] == summary["chunks_written"]
    assert info["tables"]["chunks"]["rows"] == summary["chunks_written"]


def test_include_exclude_and_strict(
    capsys: pytest.CaptureFixture[str], tiny_corpus: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    (tiny_corpus / "blob.bin").write_bytes(b"\x00\x01")
    args = [
        "ingest",
        "--source",
        str(tiny_corpus),
        "--data-dir",
        data,
        "--json",
        "--include",
        "**/*.md",
        "--include",
        "**/*.bin",
        "--exclude",
        "guides/deep/**",
    ]
    code, out, _ = run_cli(capsys, *args)
    summary = json.loads(out)
    assert code == 0  # a failed file is listed, not fatal
    assert summary["files_seen"] == 2
    assert summary["failures"] == [{"source": "blob.bin", "error": "unsupported file type '.bin'"}]
    code, out, _ = run_cli(capsys, *args, "--strict")
    assert code == 3 and json.loads(out)["files_failed"] == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["ingest", "--source", "/no/such/folder"], "source folder not found: /no/such/folder"),
        (
            ["ingest", "--source", "README.md"],
            "source README.md is a file, not a folder: to ingest it alone, give --source . "
            "--include 'README.md'",
        ),
        (["ingest", "--chunk-size", "ten"], "Invalid value for '--chunk-size'"),
        (["ingest", "--no-such-flag"], "No such option"),
        (
            ["ingest", "--chunk-size", "10", "--chunk-overlap", "20"],
            "chunk_overlap (20) must not exceed",
        ),
        (["query", "x", "-k", "0"], "Invalid value for '-k'"),
        (["bogus"], "No such command"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docflow: error: ") and message in lines[0]


def test_query_without_index_is_a_usage_error_that_says_to_ingest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli(capsys, "query", "anything", "--data-dir", str(empty))
    assert code == 2
    assert "collection 'docflow' not found" in err and "none yet: run docflow ingest" in err
    assert list(empty.iterdir()) == []  # a query creates nothing, not even chroma/


def test_console_script_end_to_end(tiny_corpus: Path, tmp_path: Path) -> None:
    """The installed ``docflow`` entry point, as a user runs it (own temporary Prefect server).

    Its ``PREFECT_HOME`` holds a migrated database, as after ``make install``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    migrated_database(tmp_path / "prefect-home" / "prefect.db")
    exe = Path(sys.executable).with_name("docflow")
    proc = subprocess.run(
        [
            str(exe),
            "ingest",
            "--source",
            str(tiny_corpus),
            "--data-dir",
            str(tmp_path / "data"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["files_seen"] == 4  # .md, .txt and notes.csv
    proc = subprocess.run(
        [sys.executable, "-m", "flows", "query", "lamp beam", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[0].startswith("score = hybrid") and "intro.md" in lines[1]
