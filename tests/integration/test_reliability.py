"""The index never silently disagrees with the sources: torn reads, lost or damaged state.

Each scenario damages a real data dir (real SQLite, Chroma, files, the real model), runs
docflow, and compares both indexes (vectors and lexical) with a from-scratch ingest of the
final tree. CLI errors are checked as the user sees them: a subprocess, its exit code, one
``docflow: error:`` line naming the path, no traceback.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from flows.ingest import ingest
from flows.rebuild import reingest
from tasks.common import failpoints
from tasks.common.config import IngestParams
from tasks.common.tables import read_table
from tasks.index.manifest import Manifest, serving_collection
from tasks.index.store import ChromaStore
from tests.cli_subprocess import docflow, in_process, one_error_line
from tests.index_state import snapshot, warm_cache

TORN = "swarm-management.md"


def params(source: Path, data_dir: Path, **kw: object) -> IngestParams:
    return IngestParams(source=str(source), data_dir=str(data_dir), batch_files=4, **kw)  # type: ignore[arg-type]


def from_scratch(corpus: Path, tmp_path: Path, warm_from: Path) -> dict[str, str]:
    """Snapshot a from-scratch ingest of ``corpus`` (on ``warm_from``'s embedding cache)."""
    fresh = tmp_path / "fresh"
    warm_cache(fresh, warm_from)
    ingest(params(corpus, fresh))
    return snapshot(fresh)


# --- 1. a file read mid-rewrite -------------------------------------------------------------


def test_a_file_read_mid_rewrite_is_indexed_as_read_then_read_again(
    corpus: Path, warm_data_dir: Path, sample_index: Path
) -> None:
    """Planning hashes the whole file; the loader then reads it half-rewritten (a hook)."""
    data_dir = warm_data_dir
    torn = corpus / TORN
    full = torn.read_bytes()
    half = full[: len(full) // 2]

    def rewrite_in_progress() -> None:  # before the first read of the run: truncate, half
        if torn.read_bytes() == full:
            torn.write_bytes(half)

    with failpoints.on("load:before-read", rewrite_in_progress):
        first = ingest(params(corpus, data_dir, workers=0))  # in-process loading: the hook
    torn.write_bytes(full)  # the writer finishes: the same bytes planning hashed

    assert first["files_changed_during_run"] == 1
    assert any(TORN in w and "changed while the run read it" in w for w in first["warnings"])
    with Manifest.open(data_dir) as m:
        row = m.files("docflow")[TORN]
    assert row.sha256 == hashlib.sha256(half).hexdigest()  # what was indexed, not what was planned

    second = ingest(params(corpus, data_dir))
    assert (second["files_changed"], second["files_unchanged"]) == (1, 11)
    assert second["files_changed_during_run"] == 0
    assert snapshot(data_dir) == snapshot(sample_index)  # from scratch: the same files


# --- 2. manifest lost ---------------------------------------------------------------------


def _lose_manifest(data_dir: Path) -> None:
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (data_dir / name).unlink(missing_ok=True)


def test_lost_manifest_is_rebuilt_from_the_tables_so_deleted_files_leave(
    ingested: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus, data_dir = ingested
    _lose_manifest(data_dir)
    (corpus / "letter-to-neighbours.txt").unlink()

    summary = ingest(params(corpus, data_dir))

    assert any("the manifest had no rows" in w for w in summary["warnings"])
    assert (summary["files_deleted"], summary["files_new"]) == (1, 0)
    assert summary["chunks_deleted"] > 0
    assert snapshot(data_dir) == from_scratch(corpus, tmp_path, data_dir)


def test_lost_manifest_and_tables_make_the_run_refuse_in_one_line(
    ingested: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus, data_dir = ingested
    before = snapshot(data_dir)
    _lose_manifest(data_dir)
    shutil.rmtree(data_dir / "tables")

    proc = docflow("ingest", "--source", str(corpus), "--data-dir", str(data_dir))

    assert proc.returncode == 1
    one_error_line(proc, "state.db", "docflow restore", "docflow reingest")
    assert snapshot(data_dir) == before  # nothing was written


# --- 3. Chroma data lost or stray ---------------------------------------------------------


def test_lost_chroma_folder_is_reindexed_without_embedding(
    ingested: tuple[Path, Path], sample_index: Path
) -> None:
    corpus, data_dir = ingested
    shutil.rmtree(data_dir / "chroma")

    summary = ingest(params(corpus, data_dir))

    assert any("the store lacks" in w and "12 files" in w for w in summary["warnings"])
    assert summary["chunks_written"] == len(snapshot(sample_index))
    assert summary["chunks_embedded"] == 0  # every vector from the embedding cache
    assert snapshot(data_dir) == snapshot(sample_index)  # from scratch: the same files


def test_a_damaged_chroma_store_names_its_cure_and_restore_rebuilds_it(
    ingested: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The error said only "file is not a database"; restore, the cure, failed the same way."""
    corpus, data_dir = ingested
    before = snapshot(data_dir)
    (data_dir / "chroma" / "chroma.sqlite3").write_bytes(b"overwritten " * 1000)
    base = ["--data-dir", str(data_dir)]
    proc = in_process(capsys, "ingest", "--source", str(corpus), *base)
    assert proc.returncode == 1
    one_error_line(proc, "damaged: move", "aside, then docflow restore")
    (data_dir / "chroma").rename(data_dir / "chroma.damaged")
    proc = in_process(capsys, "restore", *base)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert snapshot(data_dir) == before


def test_a_damaged_embedding_cache_is_set_aside_and_the_run_goes_on(
    ingested: tuple[Path, Path], sample_index: Path
) -> None:
    """It is only a cache: the run failed, and its message said to drop the collection."""
    corpus, data_dir = ingested
    _garbage(data_dir / "cache" / "embeddings.db")
    (corpus / "drones.md").write_text("# Drones\n\nDrones leave the hive to mate.\n", "utf-8")
    summary = ingest(params(corpus, data_dir))
    assert summary["status"] == "completed" and summary["chunks_embedded"] == 1
    assert any("the embedding cache was damaged: moved to" in w for w in summary["warnings"])
    assert len(list((data_dir / "cache").glob("embeddings.db.corrupt-*"))) == 1
    (corpus / "drones.md").unlink()
    ingest(params(corpus, data_dir))
    assert snapshot(data_dir) == snapshot(sample_index)


def test_chunks_no_file_claims_are_deleted(ingested: tuple[Path, Path], sample_index: Path) -> None:
    corpus, data_dir = ingested
    store = ChromaStore.open(data_dir, "docflow")
    got = store.collection().get(limit=1, include=["embeddings", "documents", "metadatas"])
    store.collection().add(
        ids=["stray"],
        embeddings=got["embeddings"],
        documents=got["documents"],
        metadatas=got["metadatas"],
    )

    summary = ingest(params(corpus, data_dir))

    assert any("1 chunks no file claims: deleted" in w for w in summary["warnings"])
    assert snapshot(data_dir) == snapshot(sample_index)  # from scratch: the same files


# --- 4. a damaged manifest ----------------------------------------------------------------


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database, it was overwritten\n" * 200)


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", [_garbage, _truncated], ids=["garbage", "truncated"])
def test_damaged_manifest_query_answers_restore_recovers(
    damage: object,
    ingested: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    corpus, data_dir = ingested
    (corpus / "queen-rearing.md").write_text("# Queens\n\nA short replacement.\n", "utf-8")
    reingest(params(corpus, data_dir))  # the serving collection is now a version
    ingest(params(corpus, data_dir))
    before = snapshot(data_dir)
    serving = serving_collection(data_dir, "docflow")
    for extra in ("state.db-wal", "state.db-shm"):
        (data_dir / extra).unlink(missing_ok=True)
    damage(data_dir / "state.db")  # type: ignore[operator]

    base = ["--data-dir", str(data_dir)]
    proc = docflow("ingest", "--source", str(corpus), *base)
    assert proc.returncode == 1
    one_error_line(proc, str(data_dir / "state.db"), "docflow restore")
    proc = in_process(capsys, "inspect", *base)
    assert proc.returncode == 1
    one_error_line(proc, "state.db", "docflow restore")

    proc = docflow("query", "how do bees survive winter?", *base, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    hits = json.loads(proc.stdout)["results"]
    assert hits and all(h["chunk_id"] in before for h in hits)
    assert f"answering from {serving}" in proc.stderr and "Traceback" not in proc.stderr

    proc = in_process(capsys, "restore", *base, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["set_aside"]
    assert len(list(data_dir.glob("state.db.corrupt-*"))) == 1
    assert snapshot(data_dir) == before
    rerun = ingest(params(corpus, data_dir))
    assert (rerun["files_unchanged"], rerun["chunks_written"]) == (12, 0)
    assert snapshot(data_dir) == before


# --- 5. a full disk -----------------------------------------------------------------------


def test_a_failure_handler_that_could_not_record_the_end_is_marked_interrupted(
    corpus: Path, warm_data_dir: Path, sample_index: Path
) -> None:
    """From the 3rd table write on the disk is full: batch parts, then the failed-run record."""
    data_dir = warm_data_dir
    proc = docflow(
        "ingest",
        "--source",
        str(corpus),
        "--data-dir",
        str(data_dir),
        env={failpoints.ENV: "tables:write=enospc@3+"},
    )
    assert proc.returncode == 1
    one_error_line(proc, "cannot write", str(data_dir), "No space left on device")
    runs = read_table(data_dir, "runs").to_pylist()
    assert [r["status"] for r in runs] == ["running"]  # its end could not be written

    summary = ingest(params(corpus, data_dir))

    assert any(runs[0]["run_id"] in w and "interrupted" in w for w in summary["warnings"])
    statuses = {r["run_id"]: r["status"] for r in read_table(data_dir, "runs").to_pylist()}
    assert statuses == {runs[0]["run_id"]: "interrupted", summary["run_id"]: "completed"}
    assert snapshot(data_dir) == snapshot(sample_index)  # from scratch: the same files


@pytest.fixture
def small_disk(tmp_path: Path) -> object:
    """A 64 MB tmpfs mounted for the test (needs root; skipped with the reason otherwise)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_fails_in_one_line_and_the_next_run_converges(
    small_disk: Path, corpus: Path, tmp_path: Path, sample_index: Path
) -> None:
    data_dir = small_disk / "data"
    warm_cache(data_dir, sample_index)  # the subject is the disk, not the vectors
    ingest(params(corpus, data_dir))  # the run itself: Chroma's files as a run leaves them
    (corpus / "queen-rearing.md").write_text(
        (corpus / "queen-rearing.md").read_text("utf-8") + "\n\n## Notes\n\nMark her.\n", "utf-8"
    )
    filler = _fill(small_disk)

    proc = docflow("ingest", "--source", str(corpus), "--data-dir", str(data_dir))
    assert proc.returncode == 1
    one_error_line(proc, str(data_dir))

    # Chroma writes when it opens its folder, so on a disk with no byte left a query fails,
    # in one line that says where (the manifest is read-only: see the next test)
    proc = docflow("query", "how do bees survive winter?", "--data-dir", str(data_dir))
    assert proc.returncode == 1
    one_error_line(proc, str(data_dir / "chroma"), "full")

    filler.unlink()
    summary = ingest(params(corpus, data_dir))
    assert summary["status"] == "completed"
    assert snapshot(data_dir) == from_scratch(corpus, tmp_path, data_dir)
    assert "running" not in {r["status"] for r in read_table(data_dir, "runs").to_pylist()}


def test_a_query_never_writes_the_manifest(ingested: tuple[Path, Path], tmp_path: Path) -> None:
    """A manifest whose WAL cannot be created (as on a full disk) still gives the pointer."""
    corpus, data_dir = ingested
    for extra in ("state.db-wal", "state.db-shm"):
        (data_dir / extra).unlink(missing_ok=True)
        (data_dir / extra).mkdir()  # SQLite can neither create nor open it: "disk I/O error"

    proc = docflow("query", "how do bees survive winter?", "--data-dir", str(data_dir), "--json")

    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["results"] and "Traceback" not in proc.stderr
