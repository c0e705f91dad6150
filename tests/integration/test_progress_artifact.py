"""The run's progress artifact: updated from a thread of its own, on the real Prefect server."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterId

from flows import artifacts, progress

IDS: list[uuid.UUID] = []  # the artifacts of the runs of `reporting` (parameters are copies)


@flow
def reporting(done: list[int], fail: bool) -> None:
    """Report ``done`` of 4 batches inside the run's progress tracking; fail if asked."""
    with artifacts.track_progress("progress-test") as bar:
        IDS.append(bar.id)
        for batches in done:
            progress.report(batches, 4)
        if fail:
            raise RuntimeError("a batch failed")


@flow
def losing_its_artifact() -> None:
    """Report progress to an artifact the server does not know (deleted under the run)."""
    bar = artifacts.ProgressArtifact("progress-lost", "an artifact deleted under the run")
    bar.id = uuid.uuid4()
    bar(2, 4)
    bar.close()


def progress_of(artifact_id: uuid.UUID) -> Any:
    with get_client(sync_client=True) as client:
        [found] = client.read_artifacts(
            artifact_filter=ArtifactFilter(id=ArtifactFilterId(any_=[artifact_id]))
        )
    return found.data


def test_a_completed_run_ends_at_100_and_a_failed_one_where_it_stopped() -> None:
    IDS.clear()
    reporting([1], False)
    with pytest.raises(RuntimeError):
        reporting([1, 3], True)  # 3 of 4: sent when the block ends, if not yet
    assert [progress_of(i) for i in IDS] == [100.0, 75.0]


def test_an_update_that_fails_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="flows.artifacts"):
        losing_its_artifact()
    assert "could not update the progress artifact" in caplog.text
