"""Shared test fixtures: paths to the real corpora, temp data dirs, small corpora."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from flows.env import apply_defaults

apply_defaults()  # offline model loading, no telemetry, quiet Prefect, the SQLite server batches
# Tests wait for what runs send in the background (logs, events): ship and persist them
# sooner than a production server need (these reach the test servers through the env too).
os.environ.setdefault("PREFECT_LOGGING_TO_API_BATCH_INTERVAL", "0.5")
os.environ.setdefault("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL", "0.5")

# Property tests draw new examples on every run at a desk (that is how they find bugs). CI
# (`.ci/run` sets HYPOTHESIS_PROFILE=ci) draws the same ones every run, so a red build is
# about the change it tests, and prints the blob that replays a failure.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPORA = SHARED / "corpora"
EVAL = SHARED / "eval" / "chunking"
SAMPLE = REPO / "data" / "raw"


def shared_path(*parts: str) -> Path:
    """Return a path under ../shared/corpora, skipping the test if ../shared is absent."""
    path = CORPORA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"../shared is absent here ({path} not found); the real corpora live there")
    return path


def copy_sqlite(source: Path, dest: Path) -> None:
    """Copy the SQLite database ``source`` to ``dest``, consistent while others write it.

    SQLite's backup API, not a file copy: it sees the WAL beside the file and a writer's
    open transaction.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    src, copy = sqlite3.connect(source), sqlite3.connect(dest)
    try:
        src.backup(copy)
    finally:
        src.close()
        copy.close()


def corpus_files(folder: str, patterns: tuple[str, ...]) -> list[Path]:
    """Return the files of a ../shared/corpora folder (bad/ excluded), or [] if absent."""
    root = CORPORA / folder
    if not root.exists():
        return []
    return sorted(
        p
        for pattern in patterns
        for p in root.rglob(pattern)
        if "bad" not in p.relative_to(root).parts
    )


@pytest.fixture(scope="session", autouse=True)
def no_flow_heartbeats() -> Iterator[None]:
    """Flows the tests call run as the command line runs them: no Prefect heartbeats.

    What ``docflow`` does unless ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` is set
    (flows/runtime.py, ``heartbeats_when_asked``); each flow run would otherwise end 0-1 s
    late (a fifth of test_incremental's time). No test's subject is Prefect's heartbeat.
    """
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Return an empty data dir for one test."""
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    """Write a small corpus (Markdown, text, a hidden file, a nested folder) and return it."""
    root = tmp_path / "corpus"
    (root / "guides" / "deep").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "intro.md").write_text(
        "# Lighthouses\n\nA lighthouse guides ships at night with a rotating lamp.\n\n"
        "## Fresnel lens\n\nThe Fresnel lens focuses the lamp into a strong beam.\n",
        encoding="utf-8",
    )
    (root / "guides" / "keeper.txt").write_text(
        "The keeper trimmed the wick every evening and logged the weather.\n", encoding="utf-8"
    )
    (root / "guides" / "deep" / "fog.md").write_text(
        "# Fog signals\n\nIn fog, a diaphone horn sounds every thirty seconds.\n", encoding="utf-8"
    )
    (root / ".hidden" / "secret.md").write_text("# Secret\n\nnot for the index\n", encoding="utf-8")
    (root / ".dotfile.txt").write_text("hidden text\n", encoding="utf-8")
    (root / "notes.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    return root
