"""Incremental runs, zero-downtime reingest, restore, clear and the lock.

Real Prefect (the session harness; subprocesses use its server), real Chroma, the real
all-MiniLM-L6-v2 model and real files in temp dirs. Tests that go on from a first complete
run start from a copy of one (the ``ingested`` fixture). Crashes: test_crash_safety.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

from flows.cli import main
from flows.ingest import ingest
from flows.query import query
from flows.rebuild import reingest
from tasks.common import failpoints
from tasks.common.config import IngestParams
from tasks.common.errors import ConfigError
from tasks.common.tables import read_table
from tasks.embed.cache import EmbeddingCache
from tasks.index.admin import versions
from tasks.index.lexical import physical_names
from tasks.index.lock import collection_lock
from tasks.index.manifest import serving_collection
from tasks.index.store import ChromaStore
from tests.conftest import REPO
from tests.index_state import manifest_ids, snapshot, warm_cache


def params(source: Path, data_dir: Path, **kw: object) -> IngestParams:
    return IngestParams(source=str(source), data_dir=str(data_dir), batch_files=3, **kw)  # type: ignore[arg-type]


def test_unchanged_rerun_loads_splits_and_embeds_nothing(ingested: tuple[Path, Path]) -> None:
    corpus, data_dir = ingested
    [first] = read_table(data_dir, "runs").to_pylist()  # the first complete run's record
    parts_before = read_table(data_dir, "documents").num_rows
    second = ingest(params(corpus, data_dir))
    assert first["files_new"] == 12 and first["chunks_embedded"] == first["chunks_written"] > 0
    assert (second["files_unchanged"], second["files_new"], second["files_changed"]) == (12, 0, 0)
    assert second["documents"] == second["chunks_written"] == second["chunks_embedded"] == 0
    assert second["chunks_from_cache"] == second["chunks_deleted"] == 0
    assert read_table(data_dir, "documents").num_rows == parts_before  # nothing loaded
    assert read_table(data_dir, "runs").num_rows == 2


def test_edit_delete_add_equals_from_scratch(ingested: tuple[Path, Path], tmp_path: Path) -> None:
    corpus, data_dir = ingested
    (corpus / "queen-rearing.md").write_text(
        (corpus / "queen-rearing.md").read_text(encoding="utf-8").replace("queen", "Queen", 3)
        + "\n\n## Notes\n\nMark the queen before the first inspection.\n",
        encoding="utf-8",
    )
    (corpus / "letter-to-neighbours.txt").unlink()
    (corpus / "seasons" / "autumn.md").write_text(
        "# Autumn\n\nReduce entrances and fit mouse guards in October.\n", encoding="utf-8"
    )
    summary = ingest(params(corpus, data_dir))
    assert (summary["files_new"], summary["files_changed"], summary["files_deleted"]) == (1, 1, 1)
    assert summary["files_unchanged"] == 10 and summary["chunks_deleted"] > 0
    assert summary["chunks_from_cache"] > 0  # unchanged chunks of the edited file

    fresh = tmp_path / "fresh"
    warm_cache(fresh, data_dir)  # the reference: a new index, its vectors from the cache
    ingest(params(corpus, fresh))
    assert snapshot(data_dir) == snapshot(fresh)
    assert manifest_ids(data_dir) == set(snapshot(data_dir))


def _files_of(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_a_dry_run_lists_what_the_run_then_does_and_changes_nothing(
    ingested: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, data_dir = ingested
    (corpus / "queen-rearing.md").write_text("# Queens\n\nMark the queen.\n", encoding="utf-8")
    (corpus / "letter-to-neighbours.txt").unlink()
    (corpus / "seasons" / "autumn.md").write_text("# Autumn\n\nMouse guards.\n", encoding="utf-8")
    before = _files_of(data_dir)
    args = ["ingest", "--source", str(corpus), "--data-dir", str(data_dir), "--json"]
    assert main([*args, "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert _files_of(data_dir) == before  # nothing written, not even a lock or a run record
    assert {r["source"]: r["why"] for r in plan["process"]} == {
        "queen-rearing.md": "changed",
        "seasons/autumn.md": "new",
    }
    assert plan["delete"] == ["letter-to-neighbours.txt"] and plan["files_unchanged"] == 10

    assert main(args) == 0  # the run does what the dry run said
    summary = json.loads(capsys.readouterr().out)
    counts = ["files_seen", "files_new", "files_changed", "files_unchanged", "files_deleted"]
    assert {k: summary[k] for k in counts} == {k: plan[k] for k in counts}
    assert main([*args, "--dry-run"]) == 0  # and then there is nothing left to do
    again = json.loads(capsys.readouterr().out)
    assert again["process"] == again["delete"] == [] and again["files_unchanged"] == 12


def test_a_dry_run_on_a_new_data_dir_creates_nothing_and_strict_counts_its_warnings(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "new-data"
    args = ["ingest", "--dry-run", "--source", str(corpus), "--data-dir", str(data_dir)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("planned 12 files: 12 new, 0 changed")
    assert len([line for line in lines if line.startswith("  new ")]) == 12
    assert not data_dir.exists()
    assert main([*args, "--include", "**/*.md", "--include", "*.docx", "--strict"]) == 3
    assert "  warning   --include '*.docx' matched no file" in capsys.readouterr().out
    # a file over the size limit is known to fail before anything is read
    assert main([*args, "--max-file-size", "100", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["process"]
    big = [r for r in rows if r["bytes"] > 100]
    assert big and all(r["error"].startswith("file too large: ") for r in big)
    assert all("error" not in r for r in rows if r["bytes"] <= 100)
    assert main([*args, "--max-file-size", "100"]) == 0
    fails = [line for line in capsys.readouterr().out.splitlines() if "(will fail: " in line]
    assert len(fails) == len(big)


def test_a_file_whose_name_is_not_utf8_is_ingested_skipped_and_deleted(
    ingested: tuple[Path, Path],
) -> None:
    """A Latin-1 file name (bytes ``r\\xe9colte``) used to fail the whole run."""
    corpus, data_dir = ingested
    path = corpus / os.fsdecode(b"r\xe9colte.txt")
    try:
        path.write_text("The honey harvest starts once the frames are capped.\n", encoding="utf-8")
    except (OSError, UnicodeError) as exc:  # a file system that only takes UTF-8 names
        pytest.skip(f"cannot create a file whose name is not UTF-8 here: {exc}")
    added = ingest(params(corpus, data_dir))
    assert (added["files_new"], added["files_failed"], added["status"]) == (1, 0, "completed")
    [hit] = query("When does the honey harvest start?", data_dir, "docflow", k=1)
    assert hit.source == "r\\xe9colte.txt" and "frames are capped" in hit.text
    again = ingest(params(corpus, data_dir))
    assert (again["files_unchanged"], again["files_new"], again["files_changed"]) == (13, 0, 0)
    path.unlink()
    gone = ingest(params(corpus, data_dir))
    assert gone["files_deleted"] == 1 and gone["chunks_deleted"] == 1
    assert "r\\xe9colte.txt" not in {m["source"] for m in _metadatas(data_dir)}


def test_a_data_dir_inside_the_source_folder_is_never_read(
    corpus: Path, sample_template: tuple[Path, Path]
) -> None:
    """Its cache, store and tables used to be ingested (failed: '.db', '.bin'...) every run."""
    data_dir = corpus / "state"
    warm_cache(data_dir, sample_template[1])  # the run's vectors from the cache
    first = ingest(params(corpus, data_dir, include=["**/*"]))
    assert (first["files_seen"], first["files_failed"], first["status"]) == (12, 0, "completed")
    again = ingest(params(corpus, data_dir, include=["**/*"]))
    assert (again["files_seen"], again["files_unchanged"], again["files_failed"]) == (12, 12, 0)


def test_an_empty_source_folder_deletes_nothing(ingested: tuple[Path, Path]) -> None:
    """An unmounted share is an empty mount point: read as "all deleted", it emptied the index."""
    corpus, data_dir = ingested
    stored = len(_metadatas(data_dir))
    keep = (corpus / "bee-diseases.md").read_bytes()
    for entry in list(corpus.iterdir()):
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    summary = ingest(params(corpus, data_dir))
    assert summary["warnings"] == [
        f"source folder {corpus} is empty (a share not mounted?): nothing to ingest, nothing "
        "deleted; docflow clear empties a collection"
    ]
    assert (summary["files_deleted"], summary["chunks_deleted"]) == (0, 0)
    assert len(_metadatas(data_dir)) == stored
    (corpus / "bee-diseases.md").write_bytes(keep)  # a folder with files: deletions as ever
    assert ingest(params(corpus, data_dir))["files_deleted"] == 11
    left = len(_metadatas(data_dir))  # the chunks of bee-diseases.md
    for entry in list(corpus.iterdir()):
        entry.unlink()
    # a reingest would build an empty version and switch to it: refused before it starts
    with pytest.raises(ConfigError, match=f"cannot reingest: source folder {corpus} is empty"):
        reingest(params(corpus, data_dir))
    assert len(_metadatas(data_dir)) == left > 0  # what the last ingest left is still served


def test_a_moved_source_folder_deletes_what_the_move_lost(
    corpus: Path, sample_template: tuple[Path, Path], tmp_path: Path
) -> None:
    """A folder renamed, a share mounted elsewhere: rows name the old folder, and deletions
    are scoped to a run's folder, so a file deleted meanwhile stayed in the index for good."""
    data_dir = tmp_path / "data"
    warm_cache(data_dir, sample_template[1])  # the runs' vectors from the cache
    ingest(params(corpus, data_dir))
    moved = corpus.rename(tmp_path / "moved")
    (moved / "letter-to-neighbours.txt").unlink()
    summary = ingest(params(moved, data_dir))
    assert summary["warnings"] == [
        f"source folder {corpus.resolve()} is gone and its files are under {moved.resolve()} "
        "now: the ones not here are deleted"
    ]
    assert (summary["files_unchanged"], summary["files_deleted"]) == (11, 1)
    assert summary["documents"] == summary["chunks_written"] == 0  # nothing read again
    fresh = tmp_path / "fresh"
    warm_cache(fresh, data_dir)
    ingest(params(moved, fresh))
    assert snapshot(data_dir) == snapshot(fresh)
    (moved / "bee-diseases.md").unlink()  # the rows are the new folder's now
    assert ingest(params(moved, data_dir))["files_deleted"] == 1
    assert "bee-diseases.md" not in {m["source"] for m in _metadatas(data_dir)}


def _metadatas(data_dir: Path) -> list[dict[str, object]]:
    store = ChromaStore.open(data_dir, serving_collection(data_dir, "docflow"))
    return list(store.collection().get(include=["metadatas"])["metadatas"] or [])


def test_splitter_change_resplits_every_file(ingested: tuple[Path, Path], tmp_path: Path) -> None:
    corpus, data_dir = ingested
    summary = ingest(params(corpus, data_dir, chunk_size=600, chunk_overlap=50))
    assert summary["files_changed"] == 12 and summary["chunks_deleted"] > 0
    fresh = tmp_path / "fresh"
    warm_cache(fresh, data_dir)
    ingest(params(corpus, fresh, chunk_size=600, chunk_overlap=50))
    assert snapshot(data_dir) == snapshot(fresh)
    meta = ChromaStore.open(data_dir, "docflow").metadata()
    assert (
        meta["content_fingerprint"]
        == params(corpus, data_dir, chunk_size=600, chunk_overlap=50).content_fingerprint()
    )


def test_failed_reingest_keeps_serving_the_old_version(
    ingested: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    corpus, data_dir = ingested
    before = snapshot(data_dir)
    question = "Below what air temperature do the bees huddle together?"
    answer = [h.chunk_id for h in query(question, data_dir, "docflow", k=3)]

    monkeypatch.setenv("DOCFLOW_FAILPOINT", "embed:after-encode=raise@2")
    from tasks.common import failpoints

    monkeypatch.setattr(failpoints, "_hits", failpoints.Counter())
    with pytest.raises(failpoints.FailpointError):
        reingest(params(corpus, data_dir))
    monkeypatch.delenv("DOCFLOW_FAILPOINT")
    assert (
        "stopped: FailpointError: failpoint embed:after-encode reached; the serving version "
        "still answers, and the next reingest starts clean"
    ) in caplog.text

    assert serving_collection(data_dir, "docflow") == "docflow"
    assert snapshot(data_dir) == before
    assert [h.chunk_id for h in query(question, data_dir, "docflow", k=3)] == answer
    assert len(versions(data_dir, "docflow")) == 2  # the half-built version is still there
    assert physical_names(data_dir) == versions(data_dir, "docflow")  # its words beside it

    summary = reingest(params(corpus, data_dir))  # the next one starts clean
    assert (
        summary["chunks_embedded"] == 0
        and summary["chunks_from_cache"] == summary["chunks_written"]
    )
    serving = serving_collection(data_dir, "docflow")
    assert serving != "docflow" and versions(data_dir, "docflow") == [serving]
    assert physical_names(data_dir) == [serving]  # switched with the vectors, old one dropped
    assert snapshot(data_dir) == before


def test_model_change_is_refused_then_reingest_switches(
    ingested: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from tasks.embed.model import register_encoder
    from tests.fake_encoder import HashEncoder

    register_encoder("hash-test-64", lambda: HashEncoder(64))
    corpus, data_dir = ingested
    code = main(
        ["ingest", "--source", str(corpus), "--data-dir", str(data_dir), "--model", "hash-test-64"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "holds vectors of model 'all-MiniLM-L6-v2'" in err and "run docflow reingest" in err
    summary = reingest(params(corpus, data_dir, model="hash-test-64"))
    assert summary["chunks_written"] > 0
    meta = ChromaStore.open(data_dir, serving_collection(data_dir, "docflow")).metadata()
    assert (meta["embedding_model"], meta["dimension"]) == ("hash-test-64", 64)


def test_restore_rebuilds_the_store_from_tables(
    ingested: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus, data_dir = ingested
    (corpus / "queen-rearing.md").write_text(
        "# Queens\n\nA short replacement text.\n", encoding="utf-8"
    )
    ingest(params(corpus, data_dir))  # tables now hold two versions of that file
    before = snapshot(data_dir)
    shutil.rmtree(data_dir / "cache")  # no vector may be recomputed: there is no cache to use
    ChromaStore.open(data_dir, "docflow").drop()  # the store is lost
    result_code = main(["restore", "--data-dir", str(data_dir), "--json"])
    assert result_code == 0
    assert snapshot(data_dir) == before
    assert not (data_dir / "cache").exists()


def test_restore_without_manifest_or_cache_rebuilds_from_the_tables_alone(
    ingested: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus, data_dir = ingested
    (corpus / "queen-rearing.md").write_text("# Queens\n\nA short replacement.\n", encoding="utf-8")
    (corpus / "letter-to-neighbours.txt").unlink()
    ingest(params(corpus, data_dir))  # one changed, one deleted: recorded by the runs table
    before = snapshot(data_dir)
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (data_dir / name).unlink(missing_ok=True)
    shutil.rmtree(data_dir / "cache")

    assert main(["restore", "--data-dir", str(data_dir), "--json"]) == 0

    assert snapshot(data_dir) == before
    assert not (data_dir / "cache").exists()  # nothing was embedded
    assert manifest_ids(data_dir) == set(before)
    rerun = ingest(params(corpus, data_dir))  # the rebuilt manifest knows every file
    assert (rerun["files_unchanged"], rerun["chunks_embedded"], rerun["files_deleted"]) == (
        11,
        0,
        0,
    )
    assert snapshot(data_dir) == before


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_tables_on_an_fsspec_url_ingest_inspect_and_restore(
    scheme: str,
    corpus: Path,
    tmp_path: Path,
    warm_data_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data_dir = warm_data_dir
    url = (
        f"file://{tmp_path / 'shared' / 'docflow-tables'}"
        if scheme == "file"
        else f"memory://docflow-it-{tmp_path.name}/tables"
    )
    summary = ingest(params(corpus, data_dir, tables_url=url))
    assert not (data_dir / "tables").exists()  # every part went to the URL
    if scheme == "file":
        assert len(list((tmp_path / "shared").rglob("part-*.parquet"))) > 3
    chunks = read_table(data_dir, "chunks")  # the data dir remembers where its tables are
    assert chunks.num_rows == summary["chunks_written"] > 0
    assert main(["inspect", "--data-dir", str(data_dir), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tables"]["chunks"]["rows"] == chunks.num_rows and info["tables_url"]
    assert info["tables"]["runs"]["parts"] == 1

    before = snapshot(data_dir)
    ChromaStore.open(data_dir, serving_collection(data_dir, "docflow")).drop()
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (data_dir / name).unlink(missing_ok=True)
    shutil.rmtree(data_dir / "cache")
    assert main(["restore", "--data-dir", str(data_dir), "--tables-url", url, "--json"]) == 0
    assert snapshot(data_dir) == before
    assert not (data_dir / "tables").exists()


def test_a_failed_run_publishes_its_artifacts_as_failed(
    corpus: Path, warm_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 not really")  # one file fails to load
    monkeypatch.setattr(failpoints, "_hits", Counter())
    # in the last of five batches: the planner puts a file of a type of its own mid-run
    # (tasks/discover/batches.py), so the failed file's batch was stored before
    monkeypatch.setenv(failpoints.ENV, "store:before-upsert=raise@5")
    state = ingest(params(corpus, warm_data_dir, collection="Failing.Run"), return_state=True)
    assert state.is_failed()
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
            )
        )
    arts = {a.key: a for a in found}
    assert {"ingest-summary-failing-run", "ingest-failures-failing-run"} <= set(arts)
    summary = {r["field"]: r["value"] for r in _rows(arts["ingest-summary-failing-run"].data)}
    assert summary["status"] == "failed"
    assert "FailpointError" in summary["error"] and "store:before-upsert" in summary["error"]
    assert summary["chunks_written"] > 0  # four batches were stored before the failure
    failures = _rows(arts["ingest-failures-failing-run"].data)
    assert [f["source"] for f in failures] == ["broken.pdf"] and failures[0]["error"]
    assert "ingest-chunk-sizes-failing-run" in arts


def test_each_store_task_run_is_linked_to_the_runs_that_made_its_batch(
    corpus: Path, warm_data_dir: Path
) -> None:
    """The store is handed its batch's futures once they have given their results (no server
    call on the store's chain): Prefect links it to the load, split and embed runs that made
    its batch (the run's graph in the UI), one each. (Handed the results instead, Prefect
    links by the identity of their fields, and an empty tuple is every task's result.)"""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.objects import TaskRunResult

    state = ingest(params(corpus, warm_data_dir), return_state=True)  # 4 batches of 3 files
    assert state.is_completed()
    run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
    deadline = time.monotonic() + 30
    while True:  # task runs reach the server as events, a little after the run
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs(flow_run_filter=run, limit=200)
        stage = {t.id: t.name.rsplit("-", 1)[0] for t in runs}
        stores = [t for t in runs if stage[t.id] == "store"]
        if len(stores) >= 3 and all(t.state and t.state.is_final() for t in runs):
            break
        assert time.monotonic() < deadline, sorted(stage.values())
        time.sleep(0.5)
    made = []
    for store in stores:
        inputs = {
            name: [stage[i.id] for i in found if isinstance(i, TaskRunResult)]
            for name, found in store.task_inputs.items()
            if name in ("documents", "chunks", "embeddings")
        }
        assert inputs == {"documents": ["load"], "chunks": ["split"], "embeddings": ["embed"]}
        made.extend(i.id for name in inputs for i in store.task_inputs[name])
    assert len(set(made)) == len(made)  # each store its own batch's runs


def _rows(data: object) -> list[dict[str, str]]:
    rows = json.loads(data) if isinstance(data, str) else data
    assert isinstance(rows, list)
    return rows


def test_clear_asks_and_keeps_cache(
    ingested: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, data_dir = ingested
    assert main(["clear", "--data-dir", str(data_dir)]) == 2  # no terminal to confirm on
    assert "needs --yes" in capsys.readouterr().err
    assert snapshot(data_dir)
    assert main(["clear", "--yes", "--data-dir", str(data_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["collections"] == ["docflow"]
    assert not ChromaStore.open(data_dir, "docflow").exists()
    assert physical_names(data_dir) == []  # the lexical index went with it
    assert read_table(data_dir, "chunks").num_rows == 0 and manifest_ids(data_dir) == set()
    cache = EmbeddingCache.open(data_dir)
    assert cache.get("all-MiniLM-L6-v2", ["x"]) == [None]
    assert cache.db.execute("select count(*) from vectors").fetchone()[0] > 0
    cache.close()
    summary = ingest(params(corpus, data_dir))  # a re-ingest after clear embeds nothing
    assert summary["chunks_embedded"] == 0 and summary["chunks_from_cache"] > 0
    assert main(["clear", "--yes", "--drop-cache", "--data-dir", str(data_dir)]) == 0
    assert not (data_dir / "cache").exists()


def test_concurrent_ingests_do_not_interleave(
    corpus: Path, warm_data_dir: Path, sample_index: Path, tmp_path: Path
) -> None:
    """Two ingests of one collection at once: one waits for the other, and sees its work.

    The test holds the collection's lock until both runs say they are waiting, so that the
    two are really at the lock together: on a warm cache the first run could otherwise end
    before the second one reaches it.
    """
    data_dir = warm_data_dir
    args = ["ingest", "--source", str(corpus), "--data-dir", str(data_dir), "--json"]
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "DOCFLOW_BATCH_FILES": "2",
    }
    logs = [tmp_path / f"ingest-{n}.log" for n in range(2)]
    waiting = f"is locked by pid {os.getpid()}"
    with collection_lock(data_dir, IngestParams().collection, timeout=5):
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "flows", *args],
                stdout=subprocess.PIPE,
                stderr=log.open("w"),
                text=True,
                env=env,
                cwd=REPO,
            )
            for log in logs
        ]
        deadline = time.monotonic() + 180
        while not all(waiting in log.read_text() for log in logs):
            assert all(p.poll() is None for p in procs), [log.read_text()[-1500:] for log in logs]
            assert time.monotonic() < deadline, "the runs never reached the lock"
            time.sleep(0.2)
    stdouts = [p.communicate(timeout=600)[0] for p in procs]
    outs = [(out, log.read_text()) for out, log in zip(stdouts, logs, strict=True)]
    assert [p.returncode for p in procs] == [0, 0], [e[-1500:] for _, e in outs]
    summaries = [json.loads(o) for o, _ in outs]
    assert sorted(s["files_new"] for s in summaries) == [0, 12]  # the second saw the first's work
    runs = sorted(read_table(data_dir, "runs").to_pylist(), key=lambda r: r["started_at"])
    import datetime as dt

    first_end = dt.datetime.fromisoformat(runs[0]["started_at"]) + dt.timedelta(
        seconds=runs[0]["seconds"]
    )
    assert dt.datetime.fromisoformat(runs[1]["started_at"]) >= first_end
    assert snapshot(data_dir) == snapshot(sample_index)  # a from-scratch ingest of the same


def test_a_run_opens_its_store_files_once_for_all_its_batches(
    corpus: Path, warm_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store tasks of a run share one open index and manifest (tasks/index/held.py);
    the run closes them before it ends, leaving no WAL journal behind."""
    from tasks.index import held, sync

    opened: list[object] = []
    committed: list[object] = []
    real_open, real_commit = held._open, sync.commit_batch

    def counted_open(*args: Any) -> Any:
        opened.append(args)
        return real_open(*args)

    def counted_commit(*args: Any) -> Any:
        committed.append(args)
        return real_commit(*args)

    monkeypatch.setattr(held, "_open", counted_open)
    monkeypatch.setattr(sync, "commit_batch", counted_commit)

    summary = ingest(params(corpus, warm_data_dir))  # 4 batches of 3 files

    assert summary["status"] == "completed" and summary["chunks_written"] > 0
    assert len(committed) == 4 and len(opened) == 1
    journals = [*warm_data_dir.glob("state.db-wal"), *warm_data_dir.glob("lexical/*-wal")]
    assert journals == []
