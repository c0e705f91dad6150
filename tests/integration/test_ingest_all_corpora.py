"""Ingest the whole ../shared/corpora tree (every format, defective files included).

The subject is loading, so embedding uses a fast deterministic hashing encoder
("fake-hash-64") instead of the real model, and chunks are large (4,000 characters: a
quarter of the rows to split and store); everything else is real: the Prefect flow, the
load worker processes, the splitter, the tables and Chroma.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.ingest import ingest
from tasks.common.config import IngestParams
from tasks.common.tables import read_table
from tasks.discover.files import discover
from tasks.embed.model import CUSTOM_ENCODERS, register_encoder
from tasks.index.store import ChromaStore
from tests.conftest import shared_path
from tests.fake_encoder import HashEncoder

FAKE_MODEL = "fake-hash-64"
WHITESPACE_ONLY_PDFS = {"pdf/git.pdf"}  # its only text is " \n": no text layer


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path]]:
    source = shared_path()
    register_encoder(FAKE_MODEL, HashEncoder)
    data_dir = tmp_path_factory.mktemp("corpora") / "data"
    params = IngestParams(
        source=str(source),
        data_dir=str(data_dir),
        model=FAKE_MODEL,
        collection="all-corpora",
        chunk_size=4000,
        chunk_overlap=0,
        length_unit="chars",
    )
    try:
        yield ingest(params), data_dir
    finally:
        CUSTOM_ENCODERS.pop(FAKE_MODEL, None)


def test_every_file_is_seen_and_failures_are_one_line(run: tuple[dict[str, Any], Path]) -> None:
    summary, data_dir = run
    files = {f.source for f in discover(shared_path(), ["**/*"])}
    assert summary["files_seen"] == len(files) > 400
    docs = read_table(data_dir, "documents", ["source", "status", "error"]).to_pylist()
    assert {d["source"] for d in docs} == files  # every file has a documents row
    failed = {d["source"]: d["error"] for d in docs if d["status"] == "failed"}
    assert {(f["source"], f["error"]) for f in summary["failures"]} == set(failed.items())
    assert summary["files_failed"] == len(failed)
    for source, error in failed.items():
        assert error and "\n" not in error, source
        assert "bad" in source.split("/") or source in WHITESPACE_ONLY_PDFS, (source, error)


def test_every_good_file_is_in_the_index(run: tuple[dict[str, Any], Path]) -> None:
    summary, data_dir = run
    good = {
        f.source
        for f in discover(shared_path(), ["**/*"])
        if "bad" not in f.source.split("/") and f.source not in WHITESPACE_ONLY_PDFS
    }
    store = ChromaStore.open(data_dir, summary.get("physical") or "all-corpora")
    metadatas = store.collection().get(include=["metadatas"])["metadatas"] or []
    indexed = Counter(str(m["source"]) for m in metadatas)
    missing = sorted(good - set(indexed))
    assert not missing, missing
    chunks = read_table(data_dir, "chunks", ["chunk_id"])
    assert store.count() == chunks.num_rows == summary["chunks_written"] == len(metadatas)


def test_formats_and_metadata_reach_the_store(run: tuple[dict[str, Any], Path]) -> None:
    summary, data_dir = run
    store = ChromaStore.open(data_dir, summary.get("physical") or "all-corpora")
    metadatas = store.collection().get(include=["metadatas"])["metadatas"] or []
    types = Counter(str(m["file_type"]) for m in metadatas)
    assert set(types) == {"text", "markdown", "pdf", "csv", "html", "json", "code"}
    languages = {m.get("language") for m in metadatas if m["file_type"] == "code"}
    assert {"python", "js", "ts", "go", "rust", "java"} <= languages
    pages = {(m["source"], m.get("page")) for m in metadatas if m["file_type"] == "pdf"}
    geobase = {p for s, p in pages if s == "pdf/GeoBase_NHNC1_Data_Model_UML_EN.pdf"}
    assert geobase == set(range(19))


def test_chunks_are_exact_spans_of_the_loaded_documents(run: tuple[dict[str, Any], Path]) -> None:
    _, data_dir = run
    texts = {
        r["doc_id"]: r["text"]
        for r in read_table(data_dir, "documents", ["doc_id", "text", "status"]).to_pylist()
        if r["status"] == "loaded"
    }
    chunks = read_table(data_dir, "chunks", ["doc_id", "start_index", "end_index", "text"])
    for c in chunks.to_pylist():
        assert texts[c["doc_id"]][c["start_index"] : c["end_index"]] == c["text"]
