"""Unit tests for tasks/common/tables.py: schemas, round trips, atomic parts, dataset reads."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from tasks.common.documents import Chunk, Document, Header, make_chunk_id
from tasks.common.errors import StateError
from tasks.common.tables import (
    CHUNKS_SCHEMA,
    DOCUMENTS_SCHEMA,
    TABLES_URL_FILE,
    DocumentRow,
    _resolve,
    chunks_table,
    documents_table,
    embeddings_table,
    list_parts,
    part_path,
    part_sizes,
    read_chunks,
    read_documents,
    read_part,
    read_table,
    read_vectors,
    remove_run,
    table_dir,
    table_location,
    tables_url,
    use_tables_url,
    write_atomic,
    write_run,
)

RUN_A = "20250101T000000-aaaaaa"
RUN_B = "20250102T000000-bbbbbb"

UNICODE_TEXTS = [
    "plain ascii",
    "naïve café — “quotes” … ½",
    "灯台守は毎晩ランプを灯した。",
    "שלום עולם مرحبا بالعالم",
    "emoji 🚢🌊 and ZWJ 👩‍🚀",
    "e\u0301 combining, tab\tand\nnewlines\r\n",
    "",
]


def make_chunks(source: str, texts: list[str], run_tag: str = "") -> list[Chunk]:
    doc = Document("".join(texts), {"source": source})
    chunks, start = [], 0
    for i, text in enumerate(texts):
        headers = tuple(
            Header(level, f"H{level} {source} {run_tag}") for level in range(1, i % 4 + 1)
        )
        chunks.append(
            Chunk(
                chunk_id=make_chunk_id(doc.doc_id, f"fp{run_tag}", start, text),
                doc_id=doc.doc_id,
                source=source,
                chunk_index=i,
                start_index=start,
                end_index=start + len(text),
                text=text,
                n_chars=len(text),
                n_tokens=None if i % 2 else len(text.split()),
                headers=headers,
                metadata={
                    "source": source,
                    "title": "Phares — 灯台",
                    "tags": ["a", "ü"],
                    "nested": {"k": [1, 2.5, None, True]},
                    "mtime": 1700000000.25,
                },
            )
        )
        start += len(text)
    return chunks


# -- documents ------------------------------------------------------------------------------


def test_documents_round_trip(data_dir: Path) -> None:
    doc = Document(
        "# Titre\n\nLe phare — 灯台 🚢\n",
        {"source": "fr/phare.md", "file_type": "markdown", "size": 42, "mtime": 1.5, "tags": ["x"]},
    )
    page = Document("page two", {"source": "a.pdf", "page": 2, "total_pages": 3})
    rows = [
        DocumentRow("fr/phare.md", "s" * 64, "markdown", "loaded", document=doc, pages=1),
        DocumentRow("a.pdf", "p" * 64, "pdf", "loaded", document=page, pages=3),
        DocumentRow(
            "bad.txt", "b" * 64, "text", "failed", error="binary content in .txt: NUL bytes"
        ),
        DocumentRow("x.csv", "c" * 64, "", "failed", error="unsupported file type '.csv'"),
    ]
    path = write_atomic(documents_table(rows), part_path(data_dir, "documents", RUN_A, 0))
    assert path == data_dir / "tables" / "documents" / f"run_id={RUN_A}" / "part-00000.parquet"
    assert read_documents(path) == rows
    outcomes = [dataclasses.replace(r, document=None) for r in rows]
    assert read_documents(path, texts=False) == outcomes  # what the store reads

    raw = pq.read_table(path)
    assert raw.schema.equals(DOCUMENTS_SCHEMA)
    assert raw.column("doc_id").to_pylist() == [doc.doc_id, page.doc_id, None, None]
    assert json.loads(raw.column("metadata")[0].as_py()) == dict(doc.metadata)
    assert raw.column("text").to_pylist()[2:] == [None, None]


# -- chunks ---------------------------------------------------------------------------------


def test_chunks_round_trip(data_dir: Path) -> None:
    chunks = make_chunks("docs/ünïcode.md", UNICODE_TEXTS)
    path = write_atomic(chunks_table(chunks), part_path(data_dir, "chunks", RUN_A, 3))
    back = read_chunks(path)
    assert back == chunks
    assert [c.text for c in back] == UNICODE_TEXTS
    assert back[3].headers == (
        Header(1, "H1 docs/ünïcode.md "),
        Header(2, "H2 docs/ünïcode.md "),
        Header(3, "H3 docs/ünïcode.md "),
    )
    assert back[0].headers == ()
    assert back[1].n_tokens is None and back[0].n_tokens == 2


def test_chunks_schema_headers_and_metadata(data_dir: Path) -> None:
    chunks = make_chunks("a.md", ["one", "two", "three"])
    path = write_atomic(chunks_table(chunks), part_path(data_dir, "chunks", RUN_A, 0))
    raw = pq.read_table(path)
    assert raw.schema.equals(CHUNKS_SCHEMA)
    headers_type = raw.schema.field("headers").type
    assert pa.types.is_list(headers_type)
    assert pa.types.is_struct(headers_type.value_type)
    assert [f.name for f in headers_type.value_type] == ["level", "text"]
    assert raw.column("headers").to_pylist() == [
        [],
        [{"level": 1, "text": "H1 a.md "}],
        [{"level": 1, "text": "H1 a.md "}, {"level": 2, "text": "H2 a.md "}],
    ]
    assert pa.types.is_string(raw.schema.field("metadata").type)
    meta = json.loads(raw.column("metadata")[0].as_py())
    assert meta == {
        "source": "a.md",
        "title": "Phares — 灯台",
        "tags": ["a", "ü"],
        "nested": {"k": [1, 2.5, None, True]},
        "mtime": 1700000000.25,
    }
    assert "灯台" in raw.column("metadata")[0].as_py()  # stored as UTF-8, not \u escapes


def test_empty_chunks_part_round_trips(data_dir: Path) -> None:
    path = write_atomic(chunks_table([]), part_path(data_dir, "chunks", RUN_A, 0))
    assert read_chunks(path) == []
    assert pq.read_schema(path).equals(CHUNKS_SCHEMA)


# -- embeddings -----------------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "dim"), [(5, 8), (1, 384), (0, 8)])
def test_embeddings_round_trip(data_dir: Path, rows: int, dim: int) -> None:
    rng = np.random.default_rng(rows + dim)
    vectors = rng.standard_normal((rows, dim)).astype(np.float32)
    ids = [f"chunk-{i}" for i in range(rows)]
    path = write_atomic(
        embeddings_table(ids, "all-MiniLM-L6-v2", vectors),
        part_path(data_dir, "embeddings", RUN_A, 0),
    )
    back_ids, back = read_vectors(path)
    assert back_ids == ids
    assert back.dtype == np.float32
    assert back.shape == (rows, dim)
    assert np.array_equal(back, vectors)
    assert pq.read_table(path).column("model").to_pylist() == ["all-MiniLM-L6-v2"] * rows


@pytest.mark.parametrize("dim", [8, 384])
def test_embeddings_vector_is_fixed_size_list_of_float32(data_dir: Path, dim: int) -> None:
    vectors = np.ones((2, dim), dtype=np.float64)  # float64 in: stored as float32
    path = write_atomic(
        embeddings_table(["a", "b"], "m", vectors), part_path(data_dir, "embeddings", RUN_A, 1)
    )
    vtype = pq.read_schema(path).field("vector").type
    assert pa.types.is_fixed_size_list(vtype)
    assert vtype.list_size == dim
    assert vtype.value_type == pa.float32()
    assert vtype == pa.list_(pa.float32(), dim)


# -- atomic writes --------------------------------------------------------------------------


def _one_col(values: list[int]) -> pa.Table:
    return pa.table({"x": pa.array(values, pa.int64())})


def test_write_atomic_leaves_no_temp_files(data_dir: Path) -> None:
    path = part_path(data_dir, "chunks", RUN_A, 0)
    assert write_atomic(_one_col([1, 2]), path) == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["part-00000.parquet"]
    assert [p for p in data_dir.rglob("*") if p.name.startswith(".")] == []


def test_write_atomic_replaces_existing_part(data_dir: Path) -> None:
    path = part_path(data_dir, "chunks", RUN_A, 0)
    write_atomic(_one_col([1, 2, 3]), path)
    write_atomic(_one_col([9]), path)
    assert pq.read_table(path).column("x").to_pylist() == [9]
    assert sorted(p.name for p in path.parent.iterdir()) == ["part-00000.parquet"]


def _unwritable() -> pa.Table:
    # Parquet has no month_day_nano interval type: pq.write_table raises mid-write
    return pa.table({"x": pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval())})


def test_failed_write_keeps_the_old_part(data_dir: Path) -> None:
    path = part_path(data_dir, "chunks", RUN_A, 0)
    write_atomic(_one_col([1, 2, 3]), path)
    with pytest.raises(pa.ArrowNotImplementedError):
        write_atomic(_unwritable(), path)
    assert pq.read_table(path).column("x").to_pylist() == [1, 2, 3]
    assert read_table(data_dir, "chunks").num_rows == 3  # readers never see the temp file


def test_failed_write_leaves_no_temp_file(data_dir: Path) -> None:
    path = part_path(data_dir, "chunks", RUN_A, 0)
    with pytest.raises(pa.ArrowNotImplementedError):
        write_atomic(_unwritable(), path)
    assert list(path.parent.iterdir()) == []


# -- reading datasets -----------------------------------------------------------------------


def _write_chunk_parts(data_dir: Path) -> dict[str, list[Chunk]]:
    """Write two runs: A with two batches, B with one; return the chunks per run."""
    parts = {
        (RUN_A, 0): make_chunks("a.md", ["alpha", "beta"], "A0"),
        (RUN_A, 1): make_chunks("b.md", ["gamma", "delta", "epsilon"], "A1"),
        (RUN_B, 0): make_chunks("a.md", ["alpha 2", "灯台"], "B0"),
    }
    by_run: dict[str, list[Chunk]] = {RUN_A: [], RUN_B: []}
    for (run, batch), chunks in parts.items():
        write_atomic(chunks_table(chunks), part_path(data_dir, "chunks", run, batch))
        by_run[run].extend(chunks)
    return by_run


def test_read_table_over_parts_and_runs(data_dir: Path) -> None:
    by_run = _write_chunk_parts(data_dir)
    table = read_table(data_dir, "chunks")
    assert table.num_rows == 7
    rows = table.to_pylist()
    expected = {(run, c.chunk_id) for run, chunks in by_run.items() for c in chunks}
    assert {(str(r["run_id"]), r["chunk_id"]) for r in rows} == expected
    assert {r["text"] for r in rows} == {c.text for cs in by_run.values() for c in cs}


def test_read_table_columns_and_missing_table(data_dir: Path) -> None:
    _write_chunk_parts(data_dir)
    table = read_table(data_dir, "chunks", columns=["chunk_id", "source"])
    assert table.column_names == ["chunk_id", "source"]
    assert table.num_rows == 7
    assert read_table(data_dir, "embeddings").num_rows == 0
    assert not table_dir(data_dir, "embeddings").exists()


def test_a_damaged_part_is_named_in_one_line(data_dir: Path) -> None:
    """A part cut short (a copy, a bad disk): restore and inspect failed with pyarrow's
    ArrowInvalid, restore's without naming the file."""
    _write_chunk_parts(data_dir)
    part = part_path(data_dir, "chunks", RUN_B, 0)
    part.write_bytes(part.read_bytes()[:100])
    for read in (lambda: read_table(data_dir, "chunks"), lambda: read_part(part)):
        with pytest.raises(StateError) as caught:
            read()
        message = str(caught.value)
        assert message.startswith(f"table part {part} is damaged (") and "\n" not in message
        assert "docflow reingest" in message


def test_duckdb_reads_chunks_with_hive_run_id(data_dir: Path) -> None:
    by_run = _write_chunk_parts(data_dir)
    glob = f"{table_dir(data_dir, 'chunks')}/**/*.parquet"
    con = duckdb.connect()
    try:
        counts = dict(
            con.execute(
                "SELECT run_id, count(*) FROM read_parquet(?, hive_partitioning=true) "
                "GROUP BY run_id",
                [glob],
            ).fetchall()
        )
        headers = con.execute(
            "SELECT headers FROM read_parquet(?, hive_partitioning=true) WHERE chunk_id = ?",
            [glob, by_run[RUN_A][1].chunk_id],
        ).fetchone()
        columns = [
            d[0]
            for d in con.execute(
                "SELECT * FROM read_parquet(?, hive_partitioning=true) LIMIT 0", [glob]
            ).description
        ]
    finally:
        con.close()
    assert counts == {RUN_A: 5, RUN_B: 2}
    assert headers is not None
    assert headers[0] == [{"level": 1, "text": "H1 a.md A0"}]
    assert "run_id" in columns
    assert set(CHUNKS_SCHEMA.names) <= set(columns)


# -- tables on any fsspec URL ---------------------------------------------------------------


@pytest.fixture
def memory_tables(data_dir: Path) -> Iterator[str]:
    """Point the data dir's tables at an in-process ``memory://`` store of its own."""
    url = f"memory://docflow-{uuid.uuid4().hex[:8]}/tables"
    use_tables_url(data_dir, url)
    yield url
    fs = fsspec.filesystem("memory")
    root = fs._strip_protocol(url)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_default_tables_url_is_in_the_data_dir(data_dir: Path) -> None:
    assert tables_url(data_dir) == str(data_dir / "tables")
    use_tables_url(data_dir, None)  # keeps what is recorded
    use_tables_url(data_dir, str(data_dir / "tables"))  # the default records nothing
    assert not (data_dir / TABLES_URL_FILE).exists()


def test_file_url_tables_land_in_another_folder_and_back(data_dir: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "docflow-tables"
    use_tables_url(data_dir, f"file://{shared}")
    assert tables_url(data_dir) == str(shared.resolve())
    by_run = _write_chunk_parts(data_dir)
    assert not (data_dir / "tables").exists()
    assert len(list(shared.rglob("part-*.parquet"))) == 3
    assert read_table(data_dir, "chunks").num_rows == 7
    assert read_chunks(part_path(data_dir, "chunks", RUN_B, 0)) == by_run[RUN_B]
    use_tables_url(data_dir, str(data_dir / "tables"))  # back to the default
    assert tables_url(data_dir) == str(data_dir / "tables")
    assert read_table(data_dir, "chunks").num_rows == 0


def test_memory_url_round_trips_every_table(data_dir: Path, memory_tables: str) -> None:
    rows = [
        DocumentRow("a.md", "sha-a", "markdown", "loaded", document=Document("hi", {"k": 1})),
        DocumentRow("bad.pdf", "sha-b", "pdf", "failed", error="encrypted"),
    ]
    docs = part_path(data_dir, "documents", RUN_A, 0)
    assert str(docs).startswith("memory:/")  # what tasks hand around (a folded URL)
    write_atomic(documents_table(rows), docs)
    assert read_documents(Path(str(docs))) == rows
    by_run = _write_chunk_parts(data_dir)
    assert read_chunks(part_path(data_dir, "chunks", RUN_A, 1)) == by_run[RUN_A][2:]
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    emb = write_atomic(
        embeddings_table(["x", "y", "z"], "m", vectors), part_path(data_dir, "embeddings", RUN_A, 0)
    )
    ids, back = read_vectors(emb)
    assert ids == ["x", "y", "z"] and np.array_equal(back, vectors)
    write_run(data_dir, RUN_A, {"run_id": RUN_A, "collection": "c", "failures": []})

    assert not (data_dir / "tables").exists()  # nothing local
    table = read_table(data_dir, "chunks")
    assert table.num_rows == 7 and set(table.column("run_id").to_pylist()) == {RUN_A, RUN_B}
    assert read_table(data_dir, "chunks", ["n_chars"], run_id=RUN_B).num_rows == 2
    assert read_table(data_dir, "runs").column("run_id").to_pylist() == [RUN_A]
    assert [p.rsplit("/", 1)[-1] for p in list_parts(data_dir, "chunks", RUN_A)] == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    assert all(p.startswith("memory://") for p in list_parts(data_dir, "chunks"))
    assert len(part_sizes(data_dir, "chunks")) == 3 and min(part_sizes(data_dir, "chunks")) > 0

    remove_run(data_dir, RUN_A)
    assert read_table(data_dir, "chunks").num_rows == 2
    assert list_parts(data_dir, "documents") == list_parts(data_dir, "runs") == []


def test_remote_write_is_atomic(data_dir: Path, memory_tables: str) -> None:
    fs = fsspec.filesystem("memory")
    path = part_path(data_dir, "chunks", RUN_A, 0)
    write_atomic(_one_col([1, 2, 3]), path)
    with pytest.raises(pa.ArrowNotImplementedError):  # fails mid-write
        write_atomic(_unwritable(), path)
    assert read_part(path).column("x").to_pylist() == [1, 2, 3]  # the old part is intact
    folder = fs._strip_protocol(table_location(data_dir, "chunks", RUN_A))
    assert [p.rsplit("/", 1)[-1] for p in fs.find(folder)] == ["part-00000.parquet"]

    # a writer killed mid-write leaves a hidden temporary key: no reader sees it
    with fs.open(f"{folder}/.part-00001.parquet.999.deadbeef.tmp", "wb") as fh:
        fh.write(b"PAR1 half a part")
    assert len(list_parts(data_dir, "chunks")) == 1
    assert read_table(data_dir, "chunks").num_rows == 3

    # a complete part appears whole, under its final name only
    write_atomic(_one_col([4]), part_path(data_dir, "chunks", RUN_A, 2))
    assert read_table(data_dir, "chunks").num_rows == 4


def test_folded_urls_resolve_like_urls() -> None:
    assert str(Path("s3://bucket/tables/x.parquet")) == "s3:/bucket/tables/x.parquet"
    for spelled in ("memory://b/t/x.parquet", Path("memory://b/t/x.parquet")):
        fs, path = _resolve(spelled)
        assert isinstance(fs, MemoryFileSystem) and path == "/b/t/x.parquet"
    assert _resolve("file:///tmp/t/x.parquet") == (None, "/tmp/t/x.parquet")
    assert _resolve(Path("relative/x.parquet")) == (None, "relative/x.parquet")
    assert _resolve("nosuchscheme://a/b") == (None, "nosuchscheme://a/b")


def test_a_write_that_fails_for_want_of_space_names_the_file(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.common import failpoints
    from tasks.common.errors import StateError

    monkeypatch.setenv(failpoints.ENV, "tables:write=enospc@*")
    path = part_path(data_dir, "chunks", RUN_A, 0)
    with pytest.raises(StateError) as info:
        write_atomic(_one_col([1]), path)
    assert str(info.value) == f"cannot write {path}: No space left on device"
    assert list(path.parent.iterdir()) == []


def test_runs_read_across_records_of_older_and_newer_releases(data_dir: Path) -> None:
    write_run(data_dir, RUN_A, {"run_id": RUN_A, "collection": "c", "status": "completed"})
    write_run(data_dir, RUN_B, {"run_id": RUN_B, "collection": "c", "warnings": ["w"]})
    rows = read_table(data_dir, "runs").to_pylist()
    assert [(r["run_id"], r.get("warnings")) for r in rows] == [(RUN_A, None), (RUN_B, '["w"]')]
    assert read_table(data_dir, "runs", ["run_id"]).column_names == ["run_id"]


def test_mark_interrupted_records_dead_running_runs_of_the_collection_only(
    data_dir: Path,
) -> None:
    from tasks.common.tables import mark_interrupted

    runs = {
        RUN_A: {"collection": "c", "status": "running", "files_seen": 3},
        RUN_B: {"collection": "c", "status": "completed"},
        "20240103T000000-cccccc": {"collection": "other", "status": "running"},
        "20240104T000000-dddddd": {"collection": "c", "status": "running"},  # this run
    }
    for run_id, row in runs.items():
        write_run(data_dir, run_id, {"run_id": run_id, **row})
    assert mark_interrupted(data_dir, "c", "20240104T000000-dddddd") == [
        f"run {RUN_A} had died without ending: marked interrupted"
    ]
    got = {r["run_id"]: r for r in read_table(data_dir, "runs").to_pylist()}
    assert got[RUN_A]["status"] == "interrupted" and got[RUN_A]["files_seen"] == 3
    assert [got[r]["status"] for r in runs][1:] == ["completed", "running", "running"]
    # a damaged record (cut short outside docflow) is named and skipped, not fatal to a run
    damaged = write_run(data_dir, "20240105T000000-eeeeee", {"collection": "c"})
    damaged.write_bytes(damaged.read_bytes()[:50])
    [line] = mark_interrupted(data_dir, "c", "20240104T000000-dddddd")
    assert line.startswith(f"table part {damaged} is damaged (")
    assert line.endswith("): skipped (one past run's record)")
