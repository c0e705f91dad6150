"""Worker processes: the same index whatever their number, and scripts that forget the guard.

Real Prefect, Chroma and files; the encoder is the HashEncoder (the subject is where the
work runs, not embedding), which measures chunks in the bundled model's tokens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flows.ingest import ingest
from tasks.common.config import IngestParams
from tasks.embed.model import register_encoder
from tasks.index.lexical import LexicalIndex, database_path
from tasks.index.store import ChromaStore
from tests.conftest import CORPORA, REPO, SAMPLE
from tests.fake_encoder import HashEncoder

MODEL = "hash-workers-64"


@pytest.fixture(autouse=True)
def _encoder() -> None:
    register_encoder(MODEL, lambda: HashEncoder(64))


def stored(data_dir: Path) -> dict[str, Any]:
    """Return every stored row (text, metadata, vector) and the lexical index's ids."""
    got = (
        ChromaStore.open(data_dir, "docflow")
        .collection()
        .get(include=["documents", "metadatas", "embeddings"])
    )
    rows = {
        cid: (text, meta, np.round(np.asarray(vec), 6).tolist())
        for cid, text, meta, vec in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }
    with LexicalIndex(database_path(data_dir, "docflow"), readonly=True) as words:
        return {"rows": rows, "lexical": words.ids()}


def test_the_index_is_the_same_with_any_number_of_workers(tmp_path: Path) -> None:
    """A slice of the shared Markdown corpus (its largest folder and its defective file)."""
    source = SAMPLE
    if (CORPORA / "markdown").exists():
        source = tmp_path / "src"
        for folder in ("prefect-docs/concepts", "bad"):
            shutil.copytree(CORPORA / "markdown" / folder, source / folder)
    runs = {}
    for workers in (0, 1, 2):
        data_dir = tmp_path / f"w{workers}"
        params = IngestParams(
            source=str(source), data_dir=str(data_dir), model=MODEL, workers=workers
        )
        summary = ingest(params)
        runs[workers] = (summary, stored(data_dir))
    reference = runs[0][1]
    assert reference["rows"] and reference["lexical"] == set(reference["rows"])
    for workers in (1, 2):
        summary, got = runs[workers]
        assert got == reference, f"workers={workers} stored something else"
        assert summary["files_failed"] == runs[0][0]["files_failed"]
        assert summary["failures"] == runs[0][0]["failures"]  # bad files recorded alike


def test_the_index_is_the_same_with_the_store_in_its_own_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first ingest and an edited rerun (a file changed, one deleted: stale chunks go)."""
    from tasks.index import store_process
    from tests.index_state import manifest_ids

    runs = {}
    for forced in ("1", "0"):
        monkeypatch.setenv(store_process.ENV, forced)
        shutil.rmtree(tmp_path / "src", ignore_errors=True)  # one folder: the same paths
        source = Path(shutil.copytree(SAMPLE, tmp_path / "src"))
        params = IngestParams(source=str(source), data_dir=str(tmp_path / forced), model=MODEL)
        ingest(params)
        with (source / "queen-rearing.md").open("a", encoding="utf-8") as edited:
            edited.write("\n\nA late queen note.\n")
        (source / "beekeeping-glossary.txt").unlink()
        summary = ingest(params)
        assert summary["chunks_deleted"] > 0 and summary["files_deleted"] == 1
        got = stored(tmp_path / forced)
        for _, meta, _ in got["rows"].values():
            del meta["mtime"]  # the edit's time, which differs between the two
        runs[forced] = got, manifest_ids(tmp_path / forced)
    assert runs["1"] == runs["0"]
    assert set(runs["1"][0]["rows"]) == runs["1"][1]


def _script(tmp_path: Path, guarded: bool) -> Path:
    corpus = tmp_path / "src"  # two files: the subject is the script, not the corpus
    corpus.mkdir()
    for name in ("queen-rearing.md", "beekeeping-glossary.txt"):
        shutil.copy(SAMPLE / name, corpus / name)
    call = (
        f"ingest(IngestParams(source={str(corpus)!r}, data_dir={str(tmp_path / 'd')!r}, workers=1))"
    )
    body = f'if __name__ == "__main__":\n    {call}\n' if guarded else f"{call}\n"
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """\
            from flows.env import apply_defaults

            apply_defaults()
            from flows.ingest import ingest
            from tasks.common.config import IngestParams

            """
        )
        + body,
        encoding="utf-8",
    )
    return script


def _run(script: Path) -> subprocess.CompletedProcess[str]:
    from prefect.settings import PREFECT_API_URL

    env = {"PREFECT_API_URL": str(PREFECT_API_URL.value()), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
        check=False,
    )


def test_a_script_without_the_main_guard_fails_at_once_saying_what_to_do(tmp_path: Path) -> None:
    """The GPU run's hang: every worker re-imported the script and waited for the lock."""
    proc = _run(_script(tmp_path, guarded=False))
    assert proc.returncode != 0
    assert "starts docflow at its module level" in proc.stderr
    assert 'under `if __name__ == "__main__":`' in proc.stderr
    assert not (tmp_path / "d" / "chroma").exists()  # it stopped before writing anything


def test_the_same_script_with_the_guard_runs(tmp_path: Path) -> None:
    proc = _run(_script(tmp_path, guarded=True))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ChromaStore.open(tmp_path / "d", "docflow").count() > 0


class FreezeWatchingEncoder(HashEncoder):
    """The HashEncoder, noting how many objects the collector had frozen at each encode."""

    frozen: list[int] = []

    def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
        import gc

        self.frozen.append(gc.get_freeze_count())
        return super().encode(texts, **kwargs)


def test_a_first_ingest_starts_its_workers_early_and_freezes_the_heap_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load and split workers start as a first ingest begins (an unchanged rerun starts
    none); full collections walked every object of the imports (0.3-0.7 s of the GIL each
    on this machine): during a run those are frozen (tasks/common/memory.py), after it the
    process collects them again."""
    import gc

    from tasks.load import worker as load_worker
    from tasks.split import pool

    calls: list[str] = []
    real_load, real_split = load_worker.prestart, pool.prestart

    def load(options: Any) -> Any:
        calls.append("load")
        return real_load(options)

    def split(workers: int) -> None:
        calls.append("split")
        real_split(workers)

    monkeypatch.setattr(load_worker, "prestart", load)
    monkeypatch.setattr(pool, "prestart", split)
    register_encoder("freeze-watch-64", lambda: FreezeWatchingEncoder(64))
    FreezeWatchingEncoder.frozen.clear()
    before = gc.get_freeze_count()
    params = IngestParams(
        source=str(SAMPLE), data_dir=str(tmp_path / "data"), model="freeze-watch-64", workers=1
    )
    first = ingest(params)
    assert first["files_new"] == 12 and calls == ["load", "split"]
    assert FreezeWatchingEncoder.frozen, "the encoder never ran"
    assert min(FreezeWatchingEncoder.frozen) > before + 10_000  # the imports' objects
    assert gc.get_freeze_count() == before
    again = ingest(params)
    assert again["files_unchanged"] == 12 and calls == ["load", "split"]  # none this time
