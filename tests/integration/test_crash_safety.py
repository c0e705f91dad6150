"""Crash safety: a real ``kill -9`` at each step of a batch, then a rerun equals a fresh ingest.

Each crash is a subprocess killed at a named failpoint (tasks/common/failpoints.py) in the
middle of a ``--full-refresh`` over an edited corpus; the rerun must leave exactly what a
from-scratch ingest of the edited corpus stores (in the vector store and the lexical index,
see tests/index_state.py), and restoring the files must give back the original index.
Real Prefect (the session harness; subprocesses use its server), Chroma, model and files.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from flows.ingest import ingest
from tasks.common import failpoints, lifetime
from tasks.common.config import IngestParams
from tasks.common.tables import read_table
from tasks.split.factory import build_splitter
from tests.cli_subprocess import docflow
from tests.conftest import SAMPLE
from tests.index_state import manifest_ids, snapshot, warm_cache


def params(source: Path, data_dir: Path) -> IngestParams:
    return IngestParams(source=str(source), data_dir=str(data_dir), batch_files=3)


def edit(corpus: Path) -> str:
    """Edit the corpus as every scenario does; return the changed file's original text."""
    original = (corpus / "swarm-management.md").read_text(encoding="utf-8")
    (corpus / "swarm-management.md").write_text(
        original + "\n\nA late swarm note.\n", encoding="utf-8"
    )
    (corpus / "bee-diseases.md").unlink()
    shutil.copy(SAMPLE / "bee-diseases.md", corpus / "diseases.md")
    return original


@pytest.fixture(scope="module")
def edited_reference(
    tmp_path_factory: pytest.TempPathFactory, sample_template: tuple[Path, Path]
) -> dict[str, str]:
    """What a from-scratch ingest of the edited corpus stores (shared by every scenario).

    A new index over the sample's embedding cache: the snapshot compares ids and texts,
    which do not depend on where a vector came from.
    """
    root = tmp_path_factory.mktemp("edited")
    corpus = Path(shutil.copytree(SAMPLE, root / "src"))
    edit(corpus)
    warm_cache(root / "data", sample_template[1])
    ingest(params(corpus, root / "data"))
    return snapshot(root / "data")


@pytest.fixture(scope="module")
def reference(sample_template: tuple[Path, Path]) -> dict[str, str]:
    """What a from-scratch ingest of the unmodified sample corpus stores."""
    return snapshot(sample_template[1])


@pytest.mark.parametrize(
    "point",
    [
        "load:after-file@5",  # during load of the second batch
        "embed:after-encode@2",  # during embedding
        "store:before-upsert@2",  # during store, before anything of batch 2 is written
        "lexical:before-upsert@2",  # vectors written, the lexical index not yet
        "store:after-upsert@2",  # chunks written, stale not deleted, manifest not committed
        "manifest:before-commit@3",  # stale chunks deleted, manifest not committed
        "manifest:after-commit@2",  # between two batches
    ],
)
def test_kill_9_then_rerun_equals_from_scratch(
    point: str,
    ingested: tuple[Path, Path],
    reference: dict[str, str],
    edited_reference: dict[str, str],
) -> None:
    # after a first complete run, edits, so the crashed run has stale chunks to replace
    corpus, data_dir = ingested
    original = edit(corpus)

    # --full-refresh: every file is reprocessed, so the crash lands in the middle of the work
    args = ["ingest", "--source", str(corpus), "--data-dir", str(data_dir), "--full-refresh"]
    crashed = docflow(*args, env={"DOCFLOW_FAILPOINT": point, "DOCFLOW_BATCH_FILES": "3"})
    assert crashed.returncode == -9, crashed.stderr[-2000:]

    ingest(params(corpus, data_dir))  # the rerun finishes the job
    assert snapshot(data_dir) == edited_reference
    assert manifest_ids(data_dir) == set(edited_reference)
    # and restoring the edited files gives back exactly the reference index
    (corpus / "swarm-management.md").write_text(original, encoding="utf-8")
    (corpus / "diseases.md").rename(corpus / "bee-diseases.md")
    ingest(params(corpus, data_dir))
    assert snapshot(data_dir) == reference


@pytest.mark.parametrize("point", ["lexical:before-upsert@2", "store:after-upsert@2"])
def test_kill_9_with_the_store_in_its_process_then_rerun_equals_from_scratch(
    point: str,
    ingested: tuple[Path, Path],
    reference: dict[str, str],
    edited_reference: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same crashes with the embedded store in its child (the crashed run and the rerun).

    The run dies after the child wrote the batch's vectors and before the manifest
    committed them; the child ends with it (tasks/index/store_process.py).
    """
    monkeypatch.setenv("DOCFLOW_STORE_PROCESS", "1")  # the default on 4 cores or more
    test_kill_9_then_rerun_equals_from_scratch(point, ingested, reference, edited_reference)


def test_a_sigterm_is_recorded_as_terminated_and_the_rerun_converges(
    ingested: tuple[Path, Path], edited_reference: dict[str, str]
) -> None:
    """A stop from outside (``docker stop``, a pod's eviction) mid-batch: the run records why
    (it said ``TerminationSignal``) and the command exits 143 as a normal exit (it died by
    the signal: its workers not stopped, ``multiprocessing`` warning of leaked semaphores,
    no ``--json`` object); the next run converges."""
    corpus, data_dir = ingested
    edit(corpus)
    args = ["ingest", "--source", str(corpus), "--data-dir", str(data_dir), "--full-refresh"]
    env = {"DOCFLOW_FAILPOINT": "store:after-upsert=term@2", "DOCFLOW_BATCH_FILES": "3"}
    stopped = docflow(*args, "--json", env=env)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert "stopped: terminated (SIGTERM: stopped from outside); " in stopped.stderr
    assert "leaked" not in stopped.stderr, stopped.stderr[-2000:]
    assert json.loads(stopped.stdout) == {
        "error": "terminated (SIGTERM: stopped from outside)",
        "exit_code": 143,
    }
    last = max(read_table(data_dir, "runs").to_pylist(), key=lambda r: r["run_id"])
    assert (last["status"], last["error"]) == (
        "failed",
        "terminated (SIGTERM: stopped from outside)",
    )
    ingest(params(corpus, data_dir))
    assert snapshot(data_dir) == edited_reference


def test_a_failing_run_does_not_wait_for_the_rest_of_an_embedding_in_flight(
    tmp_path: Path,
) -> None:
    """A run that stops (here a store that fails; a Ctrl-C or SIGTERM alike) waits for the
    tasks running in its threads: a batch's embedding, a minute on a CPU, held a Ctrl-C
    that long. Now the embedding in flight gives up before its next forward pass."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.md").write_text("# First\n\nOne short note about hives.\n")
    (source / "b.md").write_text(
        "\n\n".join(f"Paragraph {i} on frames, brood and varroa counts." for i in range(40))
    )
    passes: list[int] = []
    stop_seen: list[bool] = []
    second_batch_began = threading.Event()

    def forward_pass() -> None:
        passes.append(1)
        if len(passes) == 2:  # the first batch (a.md) needs one pass: this is b.md's first
            second_batch_began.set()
        elif len(passes) == 3:  # b.md's second: go on once the run is stopping
            stop = lifetime.stop_event()  # None: the embedding cannot see its run stop
            stop_seen.append(stop is not None and stop.wait(120))

    def failing_store() -> None:  # the first batch's store, while b.md embeds
        assert second_batch_began.wait(120)
        raise failpoints.FailpointError("the store failed")

    run = IngestParams(
        source=str(source), data_dir=str(tmp_path / "data"), batch_files=1,
        chunk_size=20, chunk_overlap=0, embed_batch_size=1, workers=0,
    )  # fmt: skip
    with (
        failpoints.on("embed:forward", forward_pass),
        failpoints.on("store:before-upsert", failing_store),
        pytest.raises(failpoints.FailpointError),
    ):
        ingest(run)
    needed = len(build_splitter(run).split_spans((source / "b.md").read_text()))
    assert needed >= 30  # one forward pass each (embed_batch_size=1)
    assert stop_seen == [True]
    assert len(passes) == 3, f"b.md's embedding ran {len(passes) - 1} of {needed} passes"
