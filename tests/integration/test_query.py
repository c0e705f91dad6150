"""Queries over a real index: hybrid, dense and lexical, over the CLI and the Python API.

One ingest of the sample corpus with the real all-MiniLM-L6-v2 model (real Prefect,
Chroma and SQLite), shared by the session (``sample_index``); tests that damage it make
their own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import docflow
from flows.cli import main
from flows.ingest import ingest
from tasks.common.config import IngestParams, QueryParams
from tasks.index.collection import Index
from tasks.index.lexical import LexicalIndex, database_path
from tasks.index.store import ChromaStore
from tests import docs
from tests.conftest import SAMPLE

QUESTION = "Below what temperature do bees form a winter cluster?"
WINTER = "seasons/winter-preparation.md"
METHODS = ("hybrid", "dense", "lexical")


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    code = main(["query", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    payload = json.loads(out)
    assert isinstance(payload, dict)
    return payload


@pytest.mark.parametrize("method", METHODS)
def test_cli_query_ranks_by_each_method_and_reports_both_scores(
    method: str, sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = cli_json(
        capsys, QUESTION, "-k", "4", "--data-dir", str(sample_index), "--retrieval", method
    )
    default = QueryParams()
    assert payload["retrieval"] == method and payload["dense_weight"] == default.dense_weight
    assert payload["fusion"] == "absolute" and payload["score"].startswith(method)
    hits = payload["results"]
    assert isinstance(hits, list) and len(hits) == 4
    assert hits[0]["source"] == WINTER and "14 °C" in hits[0]["text"]
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:
        if method == "dense":
            assert h["score"] == h["dense_score"] and h["lexical_score"] is not None
        elif method == "lexical":
            assert h["score"] == h["lexical_score"] > 0 and h["dense_score"] is None
        else:
            w = default.dense_weight
            expected = w * max(h["dense_score"], 0) + (1 - w) * h["lexical_score"]
            assert h["score"] == pytest.approx(expected, abs=2e-4)
        if method != "dense":
            assert 0.0 <= h["lexical_score"] < 1.0  # relative BM25


def test_the_printed_lines_name_the_ranking(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for method in METHODS:
        assert (
            main(
                [
                    "query",
                    QUESTION,
                    "-k",
                    "2",
                    "--data-dir",
                    str(sample_index),
                    "--retrieval",
                    method,
                ]
            )
            == 0
        )
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"score = {method}:")
        assert out[1].startswith(f"1. [{method} ") and WINTER in out[1]


def test_scores_are_comparable_across_questions(sample_index: Path) -> None:
    """Junk and function-word questions score far below a real question's best chunk."""

    def best(question: str) -> float:
        return docflow.query(question, data_dir=sample_index, k=1)[0].score

    real = best(QUESTION)
    for junk in ("the", "zebra quantum lasagna", "what is it"):
        assert best(junk) < 0.1 < 0.3 < real, junk


def test_function_words_do_not_decide_the_ranking(sample_index: Path) -> None:
    """'when' once ranked a 'Who to call' chunk first; the swarm sections come first now."""
    hits = docflow.query("when do bees swarm?", data_dir=sample_index, k=3)
    assert all(h.source == "swarm-management.md" for h in hits)
    assert not any(h.text.startswith("## Who to Call") for h in hits)


@pytest.mark.parametrize("method", METHODS)
def test_a_where_filter_never_changes_a_score(method: str, sample_index: Path) -> None:
    everywhere = {
        h.chunk_id: h.score
        for h in docflow.query(QUESTION, data_dir=sample_index, k=50, retrieval=method)
    }
    where = {"source": WINTER}
    narrowed = docflow.query(QUESTION, data_dir=sample_index, k=3, where=where, retrieval=method)
    assert narrowed
    for h in narrowed:
        assert h.score == pytest.approx(everywhere[h.chunk_id], abs=1e-9)


def test_empty_questions_are_refused(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for empty in ("", "   "):
        assert main(["query", empty, "--data-dir", str(sample_index)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "question is empty" in err
        with pytest.raises(ValueError, match="question is empty"):
            docflow.query(empty, data_dir=sample_index)


def test_query_edges_are_one_line(
    sample_index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [QUESTION, "--data-dir", str(sample_index)]
    # a --where key no chunk has: the "no results" line names the keys there are
    assert main(["query", *base, "--where", "sorce=x.md"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no results") and "'sorce'" in out and "source" in out
    assert out.count("\n") == 1
    # an unknown key of the config file's [query] table
    config = tmp_path / "docflow.toml"
    config.write_text("[query]\nretreival = 'dense'\n", encoding="utf-8")
    assert main(["query", *base, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "docflow: error: unknown setting 'retreival' (did you mean 'retrieval'?) "
        f"(from config file {config})\n"
    )
    # a data dir that does not exist: one line, and nothing is created there
    missing = tmp_path / "no-such-dir"
    assert main(["query", QUESTION, "--data-dir", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert not missing.exists()
    # a Retriever used after its with block
    with docflow.Retriever(sample_index) as retriever:
        assert retriever.search(QUESTION, k=1)
    with pytest.raises(docflow.StoreError, match="closed"):
        retriever.search(QUESTION, k=1)


def test_the_python_api_returns_what_the_cli_prints(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for method in METHODS:
        cli = cli_json(capsys, QUESTION, "--data-dir", str(sample_index), "--retrieval", method)
        api = docflow.query(QUESTION, data_dir=sample_index, k=5, retrieval=method)
        with docflow.Retriever(sample_index, "docflow", retrieval=method) as retriever:
            again = retriever.search(QUESTION, k=5)
        rows = cli["results"]
        assert isinstance(rows, list)
        assert (
            [r["chunk_id"] for r in rows]
            == [h.chunk_id for h in api]
            == [h.chunk_id for h in again]
        )
        assert [r["score"] for r in rows] == [round(h.score, 4) for h in api]


@pytest.mark.parametrize("method", METHODS)
def test_where_filters_both_sides(
    method: str, sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--data-dir", str(sample_index), "--retrieval", method, "-k", "5"]
    payload = cli_json(capsys, QUESTION, *args, "--where", "source=varroa-mite-control.md")
    hits = payload["results"]
    assert isinstance(hits, list) and hits
    assert {h["source"] for h in hits} == {"varroa-mite-control.md"}
    assert {h["metadata"]["source"] for h in hits} == {"varroa-mite-control.md"}


def test_dense_weight_from_flag_env_and_config_file(
    sample_index: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = [QUESTION, "-k", "5", "--data-dir", str(sample_index)]

    def ids(*extra: str) -> list[str]:
        rows = cli_json(capsys, *base, *extra)["results"]
        assert isinstance(rows, list)
        return [r["chunk_id"] for r in rows]

    dense, lexical = ids("--retrieval", "dense"), ids("--retrieval", "lexical")
    assert dense != lexical
    assert ids("--dense-weight", "1") == dense  # hybrid with all the weight on cosine
    for fusion in ("minmax", "zscore", "rrf", "confidence"):
        assert ids("--fusion", fusion, "--dense-weight", "1") == dense, fusion
    swarm = ["when do bees swarm?", "-k", "3", "--data-dir", str(sample_index)]
    kept = cli_json(capsys, *swarm, "--retrieval", "lexical", "--keep-stop-words")["results"]
    dropped = cli_json(capsys, *swarm, "--retrieval", "lexical")["results"]
    assert isinstance(kept, list) and isinstance(dropped, list)
    assert [r["chunk_id"] for r in kept] != [r["chunk_id"] for r in dropped]
    config = tmp_path / "docflow.toml"
    config.write_text("[query]\ndense_weight = 0.0\n", encoding="utf-8")
    assert ids("--config", str(config)) == lexical
    monkeypatch.setenv("DOCFLOW_DENSE_WEIGHT", "1.0")
    assert ids("--config", str(config)) == dense  # env over file
    assert ids("--config", str(config), "--dense-weight", "0") == lexical  # flag over env
    monkeypatch.setenv("DOCFLOW_RETRIEVAL", "lexical")
    payload = cli_json(capsys, *base)
    assert payload["retrieval"] == "lexical"
    assert main(["query", *base, "--dense-weight", "2"]) == 2
    assert "dense_weight" in capsys.readouterr().err


def test_a_query_without_results_says_so(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["zyzzyva quux", "--data-dir", str(sample_index), "--retrieval", "lexical"]
    assert main(["query", *args]) == 0
    assert "no results" in capsys.readouterr().out
    assert cli_json(capsys, *args)["results"] == []


def test_a_lost_lexical_index_is_rebuilt_by_the_next_ingest(
    sample_index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A collection built before the lexical index existed, or whose database was lost."""
    mine = tmp_path / "data"
    shutil.copytree(sample_index, mine)
    for path in (mine / "lexical").iterdir():
        path.unlink()
    assert main(["query", QUESTION, "--data-dir", str(mine)]) == 1
    assert "has no lexical index" in capsys.readouterr().err
    summary = ingest(IngestParams(source=str(SAMPLE), data_dir=str(mine)))
    assert summary["chunks_embedded"] == summary["chunks_written"] == 0  # nothing re-embedded
    with Index.open(mine, "docflow") as index:
        assert index.words.ids() == index.vectors.ids()
    assert cli_json(capsys, QUESTION, "--data-dir", str(mine))["results"]


def test_langchain_chroma_reads_the_collection_dense_only(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented snippet (docs/retrieval.md), run as written (with this test's data dir)."""
    code = docs.code_blocks(docs.section("### Reading a collection with LangChain"), "python")
    assert code, "the docs section has a python block"
    snippet = code[0].replace('data_dir = "data"', f"data_dir = {str(sample_index)!r}")
    namespace: dict[str, object] = {"question": QUESTION}
    exec(snippet, namespace)  # noqa: S102 - the documentation's own code
    found = namespace["docs"]
    assert isinstance(found, list)
    dense = cli_json(capsys, QUESTION, "--data-dir", str(sample_index), "--retrieval", "dense")
    rows = dense["results"]
    assert isinstance(rows, list)
    assert [d.id for d, _ in found] == [r["chunk_id"] for r in rows][: len(found)]
    assert found[0][0].metadata["source"] == WINTER


def test_the_lexical_index_is_a_file_in_the_data_dir(sample_index: Path) -> None:
    path = database_path(sample_index, "docflow")
    assert path == sample_index / "lexical" / "docflow.sqlite" and path.is_file()
    with LexicalIndex(path, readonly=True) as words:
        assert words.ids() == ChromaStore.open(sample_index, "docflow").ids()


def test_a_query_and_inspect_import_no_prefect(sample_index: Path) -> None:
    """Commands that only read the index skip Prefect's import (about a second of each).

    The stages' Prefect tasks live where a query does not import them (tasks/embed/task.py,
    tasks/index/sync.py): a module a query needs must not pull one in.
    """
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from flows.cli import main\n"
        f"for argv in (['query', {QUESTION!r}, '-k', '2'], ['inspect']):\n"
        f"    assert main([*argv, '--data-dir', {str(sample_index)!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefect')[:3])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_cold_query_benchmarks_peer_answers_from_the_same_index(sample_index: Path) -> None:
    """bench_commands times ``docflow query`` against a bare Chroma + model process."""
    from tests.benchmarks import bench_commands

    seconds, out = bench_commands.cold_peer(sample_index)
    assert seconds > 0 and out == WINTER
