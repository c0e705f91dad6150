"""Incremental runs, crash safety, zero-downtime reingest, restore, clear and the lock.

Real Prefect (the session harness; subprocesses use its server), real Chroma, the real
all-MiniLM-L6-v2 model and real files in temp dirs. Crashes are real ``kill -9``s at named
failpoints (tasks/failpoints.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

from flows.cli import main
from flows.ingest import ingest
from flows.query import query
from flows.rebuild import reingest
from tasks import failpoints
from tasks.admin import versions
from tasks.cache import EmbeddingCache
from tasks.config import IngestParams
from tasks.index import record_text
from tasks.lexical import LexicalIndex, database_path, physical_names
from tasks.manifest import Manifest, serving_collection
from tasks.store import ChromaStore
from tasks.tables import read_table
from tests.cli_subprocess import docflow
from tests.conftest import REPO, SAMPLE


def snapshot(data_dir: Path, collection: str = "docflow") -> dict[str, str]:
    """Return {chunk id: text} of the serving collection.

    Also checks its lexical index holds exactly the same chunks, each indexed as the text
    the model read (so every scenario below checks both indexes).
    """
    physical = serving_collection(data_dir, collection)
    store = ChromaStore.open(data_dir, physical)
    got = store.collection().get(include=["documents", "metadatas"])
    with LexicalIndex(database_path(data_dir, physical), readonly=True) as words:
        sql = "SELECT c.chunk_id, t.body FROM chunks c JOIN terms t ON t.rowid = c.id"
        bodies = dict(words.db.execute(sql).fetchall())
    expected = {
        cid: record_text(text, meta)
        for cid, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    }
    assert bodies == expected, "the lexical index differs from the vector store"
    return dict(zip(got["ids"], got["documents"] or [], strict=True))


def manifest_ids(data_dir: Path, collection: str = "docflow") -> set[str]:
    with Manifest.open(data_dir) as m:
        return m.live_chunk_ids(m.physical(collection))


def params(source: Path, data_dir: Path, **kw: object) -> IngestParams:
    return IngestParams(source=str(source), data_dir=str(data_dir), batch_files=3, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What a from-scratch ingest of the unmodified sample corpus stores."""
    data_dir = tmp_path_factory.mktemp("reference") / "data"
    ingest(params(SAMPLE, data_dir))
    return snapshot(data_dir)


def test_unchanged_rerun_loads_splits_and_embeds_nothing(corpus: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = ingest(params(corpus, data_dir))
    parts_before = read_table(data_dir, "documents").num_rows
    second = ingest(params(corpus, data_dir))
    assert first["files_new"] == 12 and first["chunks_embedded"] == first["chunks_written"] > 0
    assert (second["files_unchanged"], second["files_new"], second["files_changed"]) == (12, 0, 0)
    assert second["documents"] == second["chunks_written"] == second["chunks_embedded"] == 0
    assert second["chunks_from_cache"] == second["chunks_deleted"] == 0
    assert read_table(data_dir, "documents").num_rows == parts_before  # nothing loaded
    assert read_table(data_dir, "runs").num_rows == 2


def test_edit_delete_add_equals_from_scratch(corpus: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ingest(params(corpus, data_dir))
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
    ingest(params(corpus, fresh))
    assert snapshot(data_dir) == snapshot(fresh)
    assert manifest_ids(data_dir) == set(snapshot(data_dir))


def test_splitter_change_resplits_every_file(corpus: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ingest(params(corpus, data_dir))
    summary = ingest(params(corpus, data_dir, chunk_size=600, chunk_overlap=50))
    assert summary["files_changed"] == 12 and summary["chunks_deleted"] > 0
    fresh = tmp_path / "fresh"
    ingest(params(corpus, fresh, chunk_size=600, chunk_overlap=50))
    assert snapshot(data_dir) == snapshot(fresh)
    meta = ChromaStore.open(data_dir, "docflow").metadata()
    assert (
        meta["content_fingerprint"]
        == params(corpus, data_dir, chunk_size=600, chunk_overlap=50).content_fingerprint()
    )


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
    point: str, corpus: Path, tmp_path: Path, reference: dict[str, str]
) -> None:
    data_dir = tmp_path / "data"
    # a first complete run, then edits, so the crashed run has stale chunks to replace
    ingest(params(corpus, data_dir))
    original = (corpus / "swarm-management.md").read_text(encoding="utf-8")
    (corpus / "swarm-management.md").write_text(
        original + "\n\nA late swarm note.\n", encoding="utf-8"
    )
    (corpus / "bee-diseases.md").unlink()
    shutil.copy(SAMPLE / "bee-diseases.md", corpus / "diseases.md")

    # --full-refresh: every file is reprocessed, so the crash lands in the middle of the work
    args = ["ingest", "--source", str(corpus), "--data-dir", str(data_dir), "--full-refresh"]
    crashed = docflow(*args, env={"DOCFLOW_FAILPOINT": point, "DOCFLOW_BATCH_FILES": "3"})
    assert crashed.returncode == -9, crashed.stderr[-2000:]

    ingest(params(corpus, data_dir))  # the rerun finishes the job
    fresh = tmp_path / "fresh"
    ingest(params(corpus, fresh))
    assert snapshot(data_dir) == snapshot(fresh)
    assert manifest_ids(data_dir) == set(snapshot(data_dir))
    # and restoring the edited files gives back exactly the reference index
    (corpus / "swarm-management.md").write_text(original, encoding="utf-8")
    (corpus / "diseases.md").rename(corpus / "bee-diseases.md")
    ingest(params(corpus, data_dir))
    assert snapshot(data_dir) == reference


def test_failed_reingest_keeps_serving_the_old_version(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    ingest(params(corpus, data_dir))
    before = snapshot(data_dir)
    question = "Below what air temperature do the bees huddle together?"
    answer = [h.chunk_id for h in query(question, data_dir, "docflow", k=3)]

    monkeypatch.setenv("DOCFLOW_FAILPOINT", "embed:after-encode=raise@2")
    from tasks import failpoints

    monkeypatch.setattr(failpoints, "_hits", failpoints.Counter())
    with pytest.raises(failpoints.FailpointError):
        reingest(params(corpus, data_dir))
    monkeypatch.delenv("DOCFLOW_FAILPOINT")

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
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tasks.embed import register_encoder
    from tests.fake_encoder import HashEncoder

    register_encoder("hash-test-64", lambda: HashEncoder(64))
    data_dir = tmp_path / "data"
    ingest(params(corpus, data_dir))
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


def test_restore_rebuilds_the_store_from_tables(corpus: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ingest(params(corpus, data_dir))
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
    corpus: Path, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    ingest(params(corpus, data_dir))
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
    scheme: str, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
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
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 not really")  # one file fails to load
    monkeypatch.setattr(failpoints, "_hits", Counter())
    monkeypatch.setenv(failpoints.ENV, "store:before-upsert=raise@2")  # in the second batch
    state = ingest(params(corpus, tmp_path / "data", collection="Failing.Run"), return_state=True)
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
    assert summary["chunks_written"] > 0  # the first batch was stored before the failure
    failures = _rows(arts["ingest-failures-failing-run"].data)
    assert [f["source"] for f in failures] == ["broken.pdf"] and failures[0]["error"]
    assert "ingest-chunk-sizes-failing-run" in arts


def _rows(data: object) -> list[dict[str, str]]:
    rows = json.loads(data) if isinstance(data, str) else data
    assert isinstance(rows, list)
    return rows


def test_clear_asks_and_keeps_cache(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    ingest(params(corpus, data_dir))
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


def test_concurrent_ingests_do_not_interleave(corpus: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    args = ["ingest", "--source", str(corpus), "--data-dir", str(data_dir), "--json"]
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "DOCFLOW_BATCH_FILES": "2",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "flows", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-1500:] for _, e in outs]
    summaries = [json.loads(o) for o, _ in outs]
    assert sorted(s["files_new"] for s in summaries) == [0, 12]  # the second saw the first's work
    assert any("is locked by pid" in e and "waiting" in e for _, e in outs)
    runs = sorted(read_table(data_dir, "runs").to_pylist(), key=lambda r: r["started_at"])
    import datetime as dt

    first_end = dt.datetime.fromisoformat(runs[0]["started_at"]) + dt.timedelta(
        seconds=runs[0]["seconds"]
    )
    assert dt.datetime.fromisoformat(runs[1]["started_at"]) >= first_end
    fresh = tmp_path / "fresh"
    ingest(params(corpus, fresh))
    assert snapshot(data_dir) == snapshot(fresh)
