"""Integration fixtures: one temporary Prefect server (test harness) for the whole session.

Set PREFECT_API_URL to run against an already running server instead (saves ~10 s).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def prefect_server() -> Iterator[None]:
    """Start Prefect's test harness once per session, unless a server is configured."""
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything under tests/integration as integration (and slow)."""
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)
