"""BEIR-format data sets: documents, queries written apart from them, graded judgements.

The format of the retrieval field's benchmarks (BEIR, MTEB, Anserini; see
../shared/eval/beir/README.md), in a folder:

- ``corpus.jsonl``: one document per line, ``{"_id", "title", "text"}`` (title may be empty);
- ``queries.jsonl``: one query per line, ``{"_id", "text"}`` (``metadata`` is never read:
  it may hold the answers);
- ``qrels.tsv`` (or BEIR's ``qrels/test.tsv``): a header, then ``query-id``, ``corpus-id``,
  ``score`` per judged pair; the score is a graded relevance (0: judged not relevant).

The set's queries are those the qrels name, in ``queries.jsonl`` order (a BEIR
``queries.jsonl`` may hold other splits' queries too). Each document becomes one corpus of a
:class:`~tasks.evaluate.dataset.Dataset`: its title as a Markdown heading, then its text, so
the splitters and the context block each chunk is embedded and indexed with see the title,
as they would in an ingested Markdown file. Ids stay strings.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.common.documents import valid_text
from tasks.common.errors import ConfigError
from tasks.evaluate.dataset import Dataset, Question, read_as_utf8

CORPUS = "corpus.jsonl"
QUERIES = "queries.jsonl"
#: Where the judgements may be, in order of preference.
QRELS = ("qrels.tsv", "qrels/test.tsv")
#: The id every BEIR row of the summaries has for its corpus (the whole document set).
CORPUS_ID = "corpus"


def qrels_file(path: Path) -> Path | None:
    """Return the judgements file of a BEIR folder, or None."""
    return next((path / name for name in QRELS if (path / name).is_file()), None)


def is_beir(path: Path) -> bool:
    """Return whether ``path`` looks like a BEIR set (its corpus file, and queries or qrels)."""
    return (path / CORPUS).is_file() and (
        (path / QUERIES).is_file() or qrels_file(path) is not None
    )


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` of each non-blank line of a JSON-lines file."""
    with read_as_utf8(path), path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict) or "_id" not in record:
                raise ConfigError(f"{where}: expected a JSON object with an _id")
            yield where, record


def _text(record: dict[str, Any], key: str, where: str) -> str:
    value = record.get(key) or ""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string")
    return str(valid_text(value))  # a "\\ud800" escape: U+FFFD, as a loader does


def _documents(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Return the corpora (title heading + text) and the titles, by document id."""
    corpora: dict[str, str] = {}
    titles: dict[str, str] = {}
    for where, record in _records(path):
        doc_id = str(record["_id"])
        if doc_id in corpora:
            raise ConfigError(f"{where}: document id {doc_id!r} appears twice")
        title = " ".join(_text(record, "title", where).split())
        text = _text(record, "text", where).strip()
        if not (title or text):
            raise ConfigError(f"{where}: document {doc_id!r} is empty (no title, no text)")
        corpora[doc_id] = f"# {title}\n\n{text}" if title else text
        titles[doc_id] = title
    if not corpora:
        raise ConfigError(f"{path}: no document")
    return corpora, titles


def _judgements(
    path: Path, queries: dict[str, str], documents: dict[str, str]
) -> dict[str, dict[str, int]]:
    """Return the graded judgements by query id, then document id."""
    qrels: dict[str, dict[str, int]] = {}
    with read_as_utf8(path), path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = [h.strip() for h in next(reader, [])]
        if header[:3] != ["query-id", "corpus-id", "score"]:
            raise ConfigError(f"{path}: expected the header query-id, corpus-id, score")
        for number, row in enumerate(reader, start=2):
            if not any(cell.strip() for cell in row):
                continue
            where = f"{path}:{number}"
            if len(row) < 3:
                raise ConfigError(f"{where}: expected query-id, corpus-id and score")
            query_id, doc_id, score = (cell.strip() for cell in row[:3])
            if query_id not in queries:
                raise ConfigError(f"{where}: query {query_id!r} is not in {QUERIES}")
            if doc_id not in documents:
                raise ConfigError(f"{where}: document {doc_id!r} is not in {CORPUS}")
            try:
                grade = int(score)
            except ValueError:
                grade = -1
            if grade < 0:
                raise ConfigError(f"{where}: score must be a whole number >= 0, got {score!r}")
            qrels.setdefault(query_id, {})[doc_id] = grade
    if not qrels:
        raise ConfigError(f"{path}: no judgement")
    return qrels


def load_beir(path: Path) -> Dataset:
    """Read a BEIR folder into a Dataset (one corpus per document, ``qrels`` per question).

    Raises:
        ConfigError: With one line naming the file (and line) for a missing file, a line
            that is not a JSON object with an ``_id``, a duplicate or empty document, an
            empty query, or judgements that name an unknown query or document or have a
            bad score.

    """
    for name in (CORPUS, QUERIES):
        if not (path / name).is_file():
            raise ConfigError(f"BEIR data set {path}: {name} is missing")
    judgements = qrels_file(path)
    if judgements is None:
        raise ConfigError(f"BEIR data set {path}: {' or '.join(QRELS)} is missing")
    corpora, titles = _documents(path / CORPUS)
    queries: dict[str, str] = {}
    empty: dict[str, str] = {}
    for where, record in _records(path / QUERIES):
        query_id, text = str(record["_id"]), _text(record, "text", where)
        queries[query_id] = text
        if not text.strip():
            empty[query_id] = where
    qrels = _judgements(judgements, queries, corpora)
    for query_id in qrels:
        if query_id in empty:
            raise ConfigError(f"{empty[query_id]}: query {query_id!r} is empty")
    questions = tuple(Question(queries[q], "", (), q) for q in queries if q in qrels)
    return Dataset(
        corpora,
        questions,
        str(path),
        path.name,
        titles,
        tuple(qrels[q.query_id] for q in questions),
    )
