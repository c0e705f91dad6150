"""Evaluation data sets: corpora plus questions, read from a folder, in one of two formats.

- *span sets*: a folder with ``corpora/<corpus_id>.md`` and ``questions.csv`` (columns
  ``question``, ``references``, ``corpus_id``; references are a JSON list of half-open
  character spans ``{"content", "start_index", "end_index"}`` with ``content ==
  corpus[start:end]``), the format of ../shared/eval/chunking and ../shared/eval/retrieval;
- *BEIR sets*: documents, queries and graded relevance judgements
  (:mod:`tasks.evaluate.beir`), the format of ../shared/eval/beir/scifact-train.

Both load as a :class:`Dataset`; a BEIR set has one corpus per document, and ``qrels``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tasks.common.errors import ConfigError, describe

Interval = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Question:
    """One question with the reference spans (half-open, disjoint) that answer it.

    A BEIR query has no corpus and no spans: its id, and its judgements in the Dataset.
    """

    text: str
    corpus_id: str
    references: tuple[Interval, ...]
    query_id: str = ""


@dataclass(frozen=True)
class Dataset:
    """The corpora (id to text) and the questions over them; ``name`` is the folder's.

    A BEIR set (:attr:`is_beir`) has one corpus per document (its title as a Markdown
    heading, then its text), the documents' ``titles`` and, per question, its graded
    judgements ``qrels`` (document id to relevance; unjudged documents are not relevant).
    """

    corpora: Mapping[str, str]
    questions: tuple[Question, ...]
    path: str = ""
    name: str = "dataset"
    titles: Mapping[str, str] = field(default_factory=dict)
    qrels: tuple[Mapping[str, int], ...] = ()

    @property
    def is_beir(self) -> bool:
        """Return whether the questions are judged by documents (BEIR), not by spans."""
        return bool(self.qrels)


def is_dataset(path: Path) -> bool:
    """Return whether ``path`` is a span set folder (``corpora/`` and ``questions.csv``)."""
    return (path / "corpora").is_dir() and (path / "questions.csv").is_file()


def is_any_dataset(path: Path) -> bool:
    """Return whether ``path`` is a data set folder of either format."""
    from tasks.evaluate.beir import is_beir

    return is_dataset(path) or is_beir(path)


def find_datasets(root: Path, depth: int = 2) -> list[Path]:
    """Return ``root`` if it is a data set, else every data set below it (sorted).

    Sets are looked for ``depth`` folders down, so ``../shared/eval`` finds its span sets
    and ``beir/scifact-train``.
    """
    if is_any_dataset(root):
        return [root]
    if depth == 0 or not root.is_dir():
        return []
    return [
        found
        for child in sorted(p for p in root.iterdir() if p.is_dir())
        for found in find_datasets(child, depth - 1)
    ]


@contextmanager
def read_as_utf8(path: Path) -> Iterator[None]:
    """Name ``path`` in one line when what is read from it in the block is not UTF-8."""
    try:
        yield
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start : exc.start + 1].hex()
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{bad}: {exc.reason})") from exc


def load_dataset(path: Path) -> Dataset:
    """Read a data set folder: ``corpora/*.md`` and ``questions.csv``, or a BEIR set.

    Raises:
        ConfigError: If the folder or its files are missing, or a reference does not match
            its corpus text (span sets); for a bad or inconsistent BEIR set.

    """
    from tasks.evaluate.beir import is_beir, load_beir

    if is_beir(path):
        return load_beir(path)
    corpora_dir, questions_file = path / "corpora", path / "questions.csv"
    if not is_dataset(path):
        raise ConfigError(
            f"evaluation data set not found: {path} (needs corpora/*.md and questions.csv, "
            "or corpus.jsonl, queries.jsonl and qrels.tsv)"
        )
    corpora = {}
    for corpus in sorted(corpora_dir.glob("*.md")):
        with read_as_utf8(corpus):
            corpora[corpus.stem] = corpus.read_text(encoding="utf-8")
    questions = []
    with read_as_utf8(questions_file), questions_file.open(encoding="utf-8", newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            where = f"{questions_file}:{line}"
            try:
                questions.append(_question(row, corpora, where))
            except (KeyError, TypeError, ValueError) as exc:  # JSONDecodeError is a ValueError
                raise ConfigError(f"{where}: not a question row ({describe(exc)})") from exc
    return Dataset(corpora, tuple(questions), str(path), path.name)


def _question(row: Mapping[str, str], corpora: Mapping[str, str], where: str) -> Question:
    """Return the question of one ``questions.csv`` row, its references checked."""
    corpus_id = row["corpus_id"]
    if corpus_id not in corpora:
        raise ConfigError(f"{where}: unknown corpus {corpus_id!r}")
    text = corpora[corpus_id]
    refs = []
    for ref in json.loads(row["references"]):
        start, end = int(ref["start_index"]), int(ref["end_index"])
        if text[start:end] != ref["content"]:
            raise ConfigError(f"{where}: a reference is not its span")
        refs.append((start, end))
    return Question(row["question"], corpus_id, tuple(sorted(refs)))
