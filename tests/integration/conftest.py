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
def prefect_server() -> Iterator[None]:
    """Start Prefect's test harness once per session, unless a server is configured."""
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir holding the README's sample corpus (data/raw) as collection 'docflow'.

    One ingest with the real model, shared by every test that only reads it (queries,
    inspect): a test that writes makes its own copy.
    """
    from flows.ingest import ingest
    from tasks.config import IngestParams

    data_dir = tmp_path_factory.mktemp("sample") / "data"
    summary = ingest(IngestParams(source=str(SAMPLE), data_dir=str(data_dir)))
    assert summary["files_seen"] == 12 and summary["files_failed"] == 0
    assert summary["chunks_written"] > 50
    return data_dir


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A writable copy of the sample corpus (12 files)."""
    return Path(shutil.copytree(SAMPLE, tmp_path / "src"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything under tests/integration as integration (and slow)."""
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)
