"""The ingest flow end to end: real Prefect (harness), real Chroma, real model, real files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from flows.ingest import ingest
from flows.query import query
from tasks.common.config import IngestParams
from tasks.common.tables import read_table
from tasks.index.store import ChromaStore
from tasks.split.units import model_tokens_unit
from tests.conftest import shared_path

MODEL_TOKENS = model_tokens_unit()


#: The slice of ../shared/corpora/markdown the module ingests: the folders that hold the
#: answers of the questions below, the other clouds' pages as distractors (each has its own
#: secret store), and the defective file. The subject is the flow and retrieval on real
#: pages, not the whole corpus (a fifth of its text).
SLICE = (
    *(
        f"prefect-docs/concepts/{name}.md"
        for name in (
            "agents automations artifacts deployments index results schedules states storage tasks"
        ).split()
    ),
    "prefect-docs/integrations/prefect-aws",
    "prefect-docs/integrations/prefect-gcp",
    "prefect-docs/integrations/prefect-azure",
    "bad",
)


@pytest.fixture(scope="module")
def markdown_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """Ingest a slice of ../shared/corpora/markdown (bad/ included) once for the module."""
    corpus = shared_path("markdown")
    root = tmp_path_factory.mktemp("md")
    for part in SLICE:
        target = root / "src" / part
        if (corpus / part).is_dir():
            shutil.copytree(corpus / part, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(corpus / part, target)
    data_dir = root / "data"
    summary = ingest(IngestParams(source=str(root / "src"), data_dir=str(data_dir)))
    return summary, data_dir


def test_summary_counts_equal_tables_and_store(markdown_run: tuple[dict[str, Any], Path]) -> None:
    summary, data_dir = markdown_run
    docs = read_table(data_dir, "documents")
    chunks = read_table(data_dir, "chunks")
    embeddings = read_table(data_dir, "embeddings")
    store = ChromaStore.open(data_dir, "docflow")

    assert summary["files_seen"] == docs.num_rows  # one document per text/markdown file
    statuses = docs.column("status").to_pylist()
    assert summary["files_failed"] == statuses.count("failed") == 1  # the zero-byte README
    assert summary["failures"] == [
        {"source": "bad/zero-byte__README.md", "error": "empty file: no text"}
    ]
    assert summary["documents"] == statuses.count("loaded")
    # identical chunk texts (repeated boilerplate) are embedded once, the rest come from the cache
    assert summary["chunks_written"] == chunks.num_rows
    assert summary["chunks_embedded"] + summary["chunks_from_cache"] == chunks.num_rows
    assert embeddings.num_rows == chunks.num_rows == store.count() > 400
    assert len(set(chunks.column("chunk_id").to_pylist())) == chunks.num_rows
    assert read_table(data_dir, "runs").column("run_id").to_pylist() == [summary["run_id"]]


def test_summary_reports_busy_seconds_per_stage(markdown_run: tuple[dict[str, Any], Path]) -> None:
    summary, data_dir = markdown_run
    stages = summary["stage_seconds"]
    assert set(stages) == {"plan", "load", "split", "embed", "store", "tables"}
    assert all(seconds >= 0 for seconds in stages.values())
    # the run embedded real chunks with the real model: that stage took measurable time
    assert stages["embed"] > 0 and stages["load"] > 0 and stages["store"] > 0
    (recorded,) = read_table(data_dir, "runs").column("stage_seconds").to_pylist()
    assert json.loads(recorded) == stages


def test_tables_are_readable_by_duckdb(markdown_run: tuple[dict[str, Any], Path]) -> None:
    summary, data_dir = markdown_run
    pattern = str(data_dir / "tables" / "chunks" / "**" / "*.parquet")
    ((n, runs),) = duckdb.sql(
        "select count(*), count(distinct run_id) "
        f"from read_parquet('{pattern}', hive_partitioning=true)"
    ).fetchall()
    assert (n, runs) == (summary["chunks_written"], 1)


def test_chunks_are_exact_spans_of_the_loaded_text(
    markdown_run: tuple[dict[str, Any], Path],
) -> None:
    _, data_dir = markdown_run
    texts = {
        r["doc_id"]: r["text"]
        for r in read_table(data_dir, "documents", ["doc_id", "text", "status"]).to_pylist()
        if r["status"] == "loaded"
    }
    for c in read_table(
        data_dir, "chunks", ["doc_id", "start_index", "end_index", "text", "n_chars", "n_tokens"]
    ).to_pylist():
        assert texts[c["doc_id"]][c["start_index"] : c["end_index"]] == c["text"]
        assert c["n_chars"] == len(c["text"])
        # the default unit is the model's own tokens: no chunk is longer than it reads
        assert c["n_tokens"] == MODEL_TOKENS(c["text"])
        assert c["n_tokens"] <= 200


@pytest.mark.parametrize(
    "question,expected",
    [
        (
            "Create an automation that fires when a flow run is stuck in a Running state "
            "for too long",
            "prefect-docs/concepts/automations.md",
        ),
        (
            # two pages answer: the prefect-aws page's section with a flow that writes a
            # secret, and the guide to using secrets kept in AWS Secrets Manager from a flow
            # (dense alone ranked the API page whose body is one directive first)
            "How do I store a secret in AWS Secrets Manager from a flow?",
            "prefect-docs/integrations/prefect-aws/index.md#aws_secret.write_secret"
            "|prefect-docs/guides/secrets.md#AWS Secrets Manager",
        ),
        (
            "What states can a flow run be in, and what does Crashed mean?",
            "prefect-docs/concepts/states.md",
        ),
    ],
)
def test_query_returns_the_file_that_answers_first(
    markdown_run: tuple[dict[str, Any], Path], question: str, expected: str
) -> None:
    _, data_dir = markdown_run
    hits = query(question, data_dir, "docflow", k=5)  # hybrid, the default
    assert len(hits) == 5
    answers = dict(a.partition("#")[::2] for a in expected.split("|"))  # source: phrase
    assert hits[0].source in answers
    assert answers[hits[0].source] in hits[0].text  # the chunk that answers, not only its file
    assert hits[0].score >= hits[-1].score


def test_where_filter_restricts_results(markdown_run: tuple[dict[str, Any], Path]) -> None:
    _, data_dir = markdown_run
    only = "prefect-docs/concepts/states.md"
    hits = query("deploy a flow to kubernetes", data_dir, "docflow", k=3, where={"source": only})
    assert hits and all(h.source == only for h in hits)


@pytest.mark.parametrize(
    "question,expected",
    [
        (
            "How many millilitres of acid solution go between each pair of frames when treating a "
            "broodless colony in December?",
            "varroa-mite-control.md",
        ),
        (
            "Below what air temperature do the bees huddle together?",
            "seasons/winter-preparation.md",
        ),
        ("What colour dot should a queen hatched in 2025 get?", "queen-rearing.md"),
        ("Which avenue trees give the big July nectar flow?", "forage-plants-faq.txt"),
    ],
)
def test_sample_corpus_answers_its_questions(
    sample_index: Path, question: str, expected: str
) -> None:
    hits = query(question, sample_index, "docflow", k=3)
    assert hits[0].source == expected


def test_full_refresh_rerun_is_idempotent_in_the_store(tmp_path: Path, tiny_corpus: Path) -> None:
    params = IngestParams(source=str(tiny_corpus), data_dir=str(tmp_path / "data"))
    first = ingest(params)
    again = ingest(params.model_copy(update={"full_refresh": True}))
    assert again["files_unchanged"] == 4 and again["documents"] == 4  # .md x2, .txt, one CSV row
    assert first["chunks_written"] == again["chunks_written"] == again["chunks_from_cache"] > 0
    assert again["chunks_embedded"] == again["chunks_deleted"] == 0
    assert ChromaStore.open(params.data_path, "docflow").count() == first["chunks_written"]


def test_model_change_is_refused(tmp_path: Path, tiny_corpus: Path) -> None:
    from tasks.common.errors import StoreError

    data_dir = tmp_path / "data"
    ChromaStore.open(data_dir, "docflow").collection("some-other-model", 384)
    with pytest.raises(StoreError, match="reingest"):
        ingest(IngestParams(source=str(tiny_corpus), data_dir=str(data_dir)))
