"""Evaluation data sets: corpora plus span-annotated questions, read from a folder.

A data set is a folder with ``corpora/<corpus_id>.md`` and ``questions.csv`` (columns
``question``, ``references``, ``corpus_id``; references are a JSON list of half-open
character spans ``{"content", "start_index", "end_index"}`` with ``content ==
corpus[start:end]``), the format of ../shared/eval/chunking and ../shared/eval/retrieval.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tasks.common.errors import ConfigError

Interval = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Question:
    """One question with the reference spans (half-open, disjoint) that answer it."""

    text: str
    corpus_id: str
    references: tuple[Interval, ...]


@dataclass(frozen=True)
class Dataset:
    """The corpora (id to text) and the questions over them; ``name`` is the folder's."""

    corpora: Mapping[str, str]
    questions: tuple[Question, ...]
    path: str = ""
    name: str = "dataset"


def is_dataset(path: Path) -> bool:
    """Return whether ``path`` is a data set folder (``corpora/`` and ``questions.csv``)."""
    return (path / "corpora").is_dir() and (path / "questions.csv").is_file()


def find_datasets(root: Path) -> list[Path]:
    """Return every data set folder directly under ``root`` (sorted), or ``root`` itself."""
    if is_dataset(root):
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if is_dataset(p))


def load_dataset(path: Path) -> Dataset:
    """Read ``path/corpora/*.md`` and ``path/questions.csv``.

    Raises:
        ConfigError: If the folder or its files are missing, or a reference does not match
            its corpus text.

    """
    corpora_dir, questions_file = path / "corpora", path / "questions.csv"
    if not is_dataset(path):
        raise ConfigError(
            f"evaluation data set not found: {path} (needs corpora/*.md and questions.csv)"
        )
    corpora = {p.stem: p.read_text(encoding="utf-8") for p in sorted(corpora_dir.glob("*.md"))}
    questions = []
    with questions_file.open(encoding="utf-8", newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            corpus_id = row["corpus_id"]
            if corpus_id not in corpora:
                raise ConfigError(f"{questions_file}:{line}: unknown corpus {corpus_id!r}")
            text = corpora[corpus_id]
            refs = []
            for ref in json.loads(row["references"]):
                start, end = int(ref["start_index"]), int(ref["end_index"])
                if text[start:end] != ref["content"]:
                    raise ConfigError(f"{questions_file}:{line}: a reference is not its span")
                refs.append((start, end))
            questions.append(Question(row["question"], corpus_id, tuple(sorted(refs))))
    return Dataset(corpora, tuple(questions), str(path), path.name)
