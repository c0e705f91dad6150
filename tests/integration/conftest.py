"""Integration fixtures: one temporary Prefect server (test harness) for the whole session.

Set PREFECT_API_URL to run against an already running server instead (saves ~10 s).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE


@pytest.fixture(autouse=True, scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Start Prefect's test harness once per session, unless a server is configured.

    It starts on a copy of the migrated database ``make test`` makes, where there is one.
    Its database, migrated and still empty, is kept for the servers tests start themselves
    (tests/servers.py, ``migrated_database``).
    """
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    from prefect.testing.utilities import prefect_test_harness

    from tests.servers import harness_on_pristine_database, keep_migrated_database

    with harness_on_pristine_database(), prefect_test_harness(server_startup_timeout=120):
        keep_migrated_database(tmp_path_factory.mktemp("prefect-migrated") / "prefect.db")
        yield


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A writable copy of the sample corpus (12 files)."""
    return Path(shutil.copytree(SAMPLE, tmp_path / "src"))


@pytest.fixture(scope="session")
def sample_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One complete real-model ingest of the sample corpus: its source folder and data dir."""
    from flows.ingest import ingest
    from tasks.common.config import IngestParams

    root = tmp_path_factory.mktemp("template")
    source, data_dir = root / "src", root / "data"
    shutil.copytree(SAMPLE, source)
    ingest(IngestParams(source=str(source), data_dir=str(data_dir), batch_files=3))
    return source, data_dir


@pytest.fixture(scope="session")
def sample_index(sample_template: tuple[Path, Path]) -> Path:
    """A data dir holding the README's sample corpus (data/raw) as collection 'docflow'.

    The session's one real-model ingest of it (the template), shared by every test that
    only reads it (queries, inspect): a test that writes makes its own copy.
    """
    return sample_template[1]


@pytest.fixture
def ingested(sample_template: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A corpus and a data dir right after a first complete run over it, to go on from.

    The state a real first ``ingest`` leaves (the session's template, copied), for tests
    whose subject is what happens next: their first run costs a copy, not an ingest. The
    corpus is the template's own folder, reset to the sample's files, because the manifest
    records which folder its files came from (deletions are scoped to it); tests of one
    worker run one at a time, so they never share it at once.
    """
    source, data_dir = sample_template
    shutil.rmtree(source)
    shutil.copytree(SAMPLE, source)
    mine = tmp_path / "data"
    shutil.copytree(data_dir, mine)
    return source, mine


@pytest.fixture
def warm_data_dir(sample_template: tuple[Path, Path], tmp_path: Path) -> Path:
    """A new data dir holding only the sample corpus's embedding cache (from the template).

    For a test whose first run ingests the sample corpus into a new data dir and whose
    subject is not the vectors (locks, logs, tables, failures): the run is the same run,
    only its vectors come from the cache instead of the model (the suite's time).
    """
    from tests.index_state import warm_cache

    path = tmp_path / "warm-data"
    warm_cache(path, sample_template[1])
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything under tests/integration as integration (and slow)."""
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)
