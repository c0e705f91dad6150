"""docflow evaluate on BEIR-format sets: the loader and its one-line errors, the document
metrics by hand, a BEIR set scored beside a span set, and the shared scifact-train set read
whole (no embedding: the evaluation of a slice of it with the real model is an integration
test)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from flows.cli import main
from tasks.common.errors import ConfigError
from tasks.evaluate import (
    chunk_dataset,
    document_scores,
    documents_in_order,
    evaluate_config,
    find_datasets,
    format_table,
    is_beir,
    load_beir,
    load_dataset,
    ndcg,
    parse_spec,
    write_results,
)
from tests.beir_sets import DOCUMENTS, QRELS, QUERIES, SCIFACT, expected_lexical_ndcg, write_beir

# --- the metrics, by hand -----------------------------------------------------------------


def test_document_metrics_by_hand() -> None:
    qrels = {"a": 2, "b": 1, "c": 0}
    # a relevant document at rank 2 (grade 1) and the very relevant one at rank 3 (grade 2)
    ranked = ["x", "b", "a", "c"]
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    scores = document_scores(ranked, qrels)
    assert scores["ndcg_10"] == pytest.approx(dcg / ideal)
    assert scores["recall_10"] == scores["recall_100"] == 1.0  # c (grade 0) is not relevant
    assert scores["mrr_10"] == 0.5
    assert ndcg(["a", "b"], qrels, 10) == 1.0
    assert ndcg(["a"] + ["x"] * 10 + ["b"], qrels, 10) == pytest.approx(2 / ideal)
    late = document_scores(["x"] * 10 + ["a"], qrels)  # found, but below the cut-offs of 10
    assert (late["ndcg_10"], late["recall_10"], late["recall_100"], late["mrr_10"]) == (
        0.0,
        0.0,
        0.5,
        0.0,
    )
    assert document_scores(["x"], {"a": 0})["ndcg_10"] == 0.0  # nothing relevant: 0, not NaN
    # chunks to documents: each document once, at the rank of its best chunk
    assert documents_in_order(["b", "b", "a", "b", "c", "a"]) == ["b", "a", "c"]


# --- the loader ---------------------------------------------------------------------------


def test_load_beir(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "bees")
    assert is_beir(folder) and find_datasets(tmp_path) == [folder]
    dataset = load_dataset(folder)
    assert dataset.is_beir and dataset.name == "bees"
    assert (
        dataset.corpora["d3"] == "# Swarming\n\nColonies swarm in spring when the hive is crowded."
    )
    assert dataset.titles["d1"] == "Varroa mites"
    assert [(q.query_id, q.text) for q in dataset.questions] == QUERIES
    assert dataset.qrels[0] == {"d2": 2, "d1": 1} and dataset.qrels[2]["d1"] == 0
    # BEIR's own layout, qrels/test.tsv; queries of other splits (not in the qrels) are left out
    other = write_beir(
        tmp_path / "split", queries=[*QUERIES, ("q9", "x")], qrels_name="qrels/test.tsv"
    )
    assert [q.query_id for q in load_beir(other).questions] == ["q1", "q2", "q3"]


def test_a_lone_surrogate_escape_in_a_set_becomes_the_replacement_character(
    tmp_path: Path,
) -> None:
    """``"\\ud800"`` is valid JSON but no character: chunks, tables and the tokenizer refuse it."""
    documents = [(i, t, x.replace("spring", "spring \ud800")) for i, t, x in DOCUMENTS]
    queries = [(i, q.replace("swarm", "swarm \udc00")) for i, q in QUERIES]
    dataset = load_beir(write_beir(tmp_path / "odd", documents, queries))
    assert "spring \ufffd when" in dataset.corpora["d3"]
    assert any("swarm \ufffd?" in q.text for q in dataset.questions)
    for text in [*dataset.corpora.values(), *(q.text for q in dataset.questions)]:
        text.encode("utf-8")


def test_a_title_is_the_heading_and_the_context_of_every_chunk(tmp_path: Path) -> None:
    long_text = " ".join(["Bees forage on clover and store nectar as honey."] * 40)
    folder = write_beir(tmp_path / "b", [("d", "Forage", long_text)], qrels=[("q1", "d", 1)])
    dataset = load_beir(folder)
    params = parse_spec("recursive:chunk_size=400,chunk_overlap=0,length_unit=chars").params
    chunks = chunk_dataset(dataset, params)
    assert len(chunks) > 2
    for start, end, text in zip(chunks.starts, chunks.ends, chunks.texts, strict=True):
        # embedded and indexed: the title, a blank line, then the exact span
        assert text == "Forage\n\n" + dataset.corpora["d"][start:end]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"documents": []}, "no document"),
        ({"documents": [*DOCUMENTS, DOCUMENTS[0]]}, "document id 'd1' appears twice"),
        ({"documents": [*DOCUMENTS, ("d5", "", " ")]}, "document 'd5' is empty"),
        ({"queries": [("q1", "   "), *QUERIES[1:]]}, "query 'q1' is empty"),
        ({"qrels": [*QRELS, ("q7", "d1", 1)]}, "query 'q7' is not in queries.jsonl"),
        ({"qrels": [*QRELS, ("q1", "d9", 1)]}, "document 'd9' is not in corpus.jsonl"),
        ({"qrels": [*QRELS, ("q1", "d3", "high")]}, "score must be a whole number"),
        ({"qrels": [*QRELS, ("q1", "d3", -1)]}, "score must be a whole number"),
        ({"qrels": [("q1", "d1")]}, "expected query-id, corpus-id and score"),
        ({"qrels": []}, "no judgement"),
    ],
)
def test_a_bad_or_inconsistent_set_is_a_one_line_error(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    folder = write_beir(tmp_path / "bad", **change)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message) as caught:
        load_dataset(folder)
    assert "\n" not in str(caught.value) and str(folder) in str(caught.value)


def test_missing_files_bad_lines_and_headers(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "b")
    (folder / "qrels.tsv").unlink()
    with pytest.raises(ConfigError, match="qrels.tsv or qrels/test.tsv is missing"):
        load_dataset(folder)
    folder = write_beir(tmp_path / "c")
    (folder / "queries.jsonl").unlink()
    with pytest.raises(ConfigError, match="queries.jsonl is missing"):
        load_dataset(folder)
    folder = write_beir(tmp_path / "d")
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n{"title": "no id"}\n')
    with pytest.raises(ConfigError, match=r"corpus.jsonl:2: expected a JSON object with an _id"):
        load_dataset(folder)
    (folder / "corpus.jsonl").write_text("{not json\n")
    with pytest.raises(ConfigError, match=r"corpus.jsonl:1: not JSON"):
        load_dataset(folder)
    (folder / "corpus.jsonl").write_bytes(b'{"_id": "d1", "text": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match=r"corpus.jsonl: not UTF-8 text \(byte 0xe9"):
        load_dataset(folder)  # was a bare UnicodeDecodeError
    folder = write_beir(tmp_path / "e")
    (folder / "qrels.tsv").write_text("qid\tdocid\trel\nq1\td1\t1\n")
    with pytest.raises(ConfigError, match="expected the header query-id, corpus-id, score"):
        load_dataset(folder)


def test_the_cli_refuses_a_bad_set_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_beir(tmp_path / "bad", qrels=[("q1", "d9", 1)])
    assert main(["evaluate", "--dataset", str(folder), "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert "document 'd9' is not in corpus.jsonl" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d").exists()  # refused before any flow or cache


# --- scoring a BEIR set beside a span set -------------------------------------------------


def _ones(texts: Sequence[str]) -> np.ndarray:
    return np.ones((len(texts), 2), dtype=np.float32) / math.sqrt(2)


def _span_set(folder: Path) -> Path:
    import csv

    (folder / "corpora").mkdir(parents=True)
    text = "the hive is crowded in spring. colonies swarm then."
    (folder / "corpora" / "c.md").write_text(text)
    with (folder / "questions.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["question", "references", "corpus_id"])
        ref = [{"content": "colonies swarm", "start_index": 31, "end_index": 45}]
        writer.writerow(["when do colonies swarm?", json.dumps(ref), "c"])
    return folder


def test_a_beir_set_is_scored_by_documents_beside_a_span_set(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    beir = load_dataset(write_beir(tmp_path / "bees"))
    spans = load_dataset(_span_set(tmp_path / "spans"))
    config = parse_spec("auto:retrieval=lexical")
    summary, rows = evaluate_config([spans, beir], config, _ones)
    documents = [r for r in rows if r["dataset"] == "bees"]
    assert [r["query_id"] for r in documents] == ["q1", "q2", "q3"]
    assert [r["ndcg_10"] for r in documents] == pytest.approx(expected_lexical_ndcg())
    assert [r["recall_10"] for r in documents] == [0.5, 1.0, 0.5]
    [corpus] = [c for c in summary["corpora"] if c["dataset"] == "bees"]
    ndcg_mean = sum(expected_lexical_ndcg()) / 3 * 100
    assert corpus["corpus_id"] == "corpus" and corpus["n_documents"] == 4
    assert (corpus["metric"], corpus["score"]) == ("ndcg_10", pytest.approx(ndcg_mean))
    # the score over both kinds: recall@5 of the span corpus (100), nDCG@10 of the BEIR set
    assert summary["score_metric"] == "recall@5 / nDCG@10"
    assert summary["score_mean"] == pytest.approx((100 + ndcg_mean) / 2)
    assert summary["score_min"] == pytest.approx(ndcg_mean)
    assert summary["worst_corpus"] == "bees/corpus"
    assert summary["recall_mean"] == 100.0 and summary["ndcg_10_mean"] == pytest.approx(ndcg_mean)
    table = format_table([summary, summary | {"config": "again"}])
    assert "nDCG@10" in table and "bees/corpus *" in table
    assert "mean of 2 corpora (recall@5 / nDCG@10)" in table
    s_path, q_path = write_results(tmp_path / "out", [summary], rows)
    written = pq.read_table(s_path).to_pylist()
    beir_row = next(r for r in written if r["dataset"] == "bees")
    assert beir_row["recall_mean"] is None  # a corpus row has only its own metrics
    assert beir_row["ndcg_10_mean"] == pytest.approx(ndcg_mean)
    by_query = {r["query_id"]: r for r in pq.read_table(q_path).to_pylist() if r["query_id"]}
    assert by_query["q1"]["ndcg_10"] == pytest.approx(expected_lexical_ndcg()[0])


def test_per_source_in_a_spec_keeps_documents_distinct(tmp_path: Path) -> None:
    text = " ".join(["Swarming colonies leave the hive in spring."] * 30)
    documents = [*DOCUMENTS, ("big", "Swarms", text)]
    beir = load_dataset(write_beir(tmp_path / "b", documents=documents))
    spec = "recursive:chunk_size=200,chunk_overlap=0,length_unit=chars,retrieval=lexical"
    config, collapsed = parse_spec(spec), parse_spec(f"{spec},per_source=1")
    assert collapsed.ranking.per_source == 1 and collapsed.describe()["per_source"] == 1
    from tasks.evaluate import retrieve

    chunks = chunk_dataset(beir, config.params)
    plain = retrieve(beir, chunks, None, None, ranking=config.ranking)
    one = retrieve(beir, chunks, None, None, ranking=collapsed.ranking)
    swarm = [q.query_id for q in beir.questions].index("q2")
    assert len(plain[swarm]) > len({chunks.corpus[i] for i in plain[swarm]})  # repeats
    sources = [chunks.corpus[i] for i in one[swarm]]
    assert len(sources) == len(set(sources)) == 4  # big, d3, and d1, d2 ("colony")
    # the collapsed list keeps the order: each document at its best chunk's place
    assert sources == documents_in_order(chunks.corpus[i] for i in plain[swarm])


# --- the shared set -------------------------------------------------------------------------


def test_the_shared_scifact_train_set_loads_whole() -> None:
    if not SCIFACT.exists():
        pytest.skip(f"../shared is absent here ({SCIFACT} not found)")
    dataset = load_dataset(SCIFACT)
    assert (len(dataset.corpora), len(dataset.questions)) == (5183, 807)
    assert sum(len(q) for q in dataset.qrels) == 917
    assert all(g == 1 for q in dataset.qrels for g in q.values())
    assert SCIFACT in find_datasets(SCIFACT.parents[1])  # found by a bare docflow evaluate
