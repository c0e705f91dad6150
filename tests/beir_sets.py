"""BEIR-format sets for the tests: a hand-written one, and slices of ../shared's scifact-train.

The hand-written set is small enough to rank by hand under BM25
(:func:`expected_lexical_ndcg`); a slice keeps the first queries of the shared set, the
documents they are judged against and the first other documents, so the real model and
the flow run on it in seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import SHARED

SCIFACT = SHARED / "eval" / "beir" / "scifact-train"

#: A hand-written BEIR set: four short documents, three queries, graded judgements.
DOCUMENTS = [
    ("d1", "Varroa mites", "Varroa mites feed on honey bee brood and weaken the colony."),
    (
        "d2",
        "Oxalic acid",
        "Oxalic acid treats varroa mites in winter when the colony has no brood.",
    ),
    ("d3", "Swarming", "Colonies swarm in spring when the hive is crowded."),
    ("d4", "Honey harvest", "Beekeepers take the honey off in late summer."),
]
QUERIES = [
    ("q1", "oxalic acid winter treatment"),
    ("q2", "when do colonies swarm?"),
    ("q3", "what do beekeepers do in late summer"),
]
#: q1: d2 very relevant (2), d1 relevant (1); q2: d3; q3: d4 and d3, d1 judged not relevant.
QRELS = [
    ("q1", "d2", 2),
    ("q1", "d1", 1),
    ("q2", "d3", 1),
    ("q3", "d4", 1),
    ("q3", "d3", 1),
    ("q3", "d1", 0),
]


def write_beir(
    folder: Path,
    documents: Sequence[tuple[str, str, str]] = DOCUMENTS,
    queries: Sequence[tuple[str, str]] = QUERIES,
    qrels: Sequence[tuple[str, str, object]] = QRELS,
    qrels_name: str = "qrels.tsv",
) -> Path:
    """Write a BEIR folder (the qrels with CRLF line ends, as BEIR's SciFact files have)."""
    (folder / qrels_name).parent.mkdir(parents=True, exist_ok=True)
    corpus = [{"_id": i, "title": t, "text": x, "metadata": {}} for i, t, x in documents]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    lines = [json.dumps({"_id": i, "text": t, "metadata": {"d1": "an answer"}}) for i, t in queries]
    (folder / "queries.jsonl").write_text("\n".join(lines) + "\n")
    rows = ["query-id\tcorpus-id\tscore", *("\t".join(map(str, r)) for r in qrels)]
    (folder / qrels_name).write_bytes("\r\n".join(rows).encode() + b"\r\n")
    return folder


def expected_lexical_ndcg() -> list[float]:
    """nDCG@10 of the hand-written set under BM25 (``retrieval=lexical``), by hand.

    q1 "oxalic acid winter treatment": only d2 has any of its words (d1 has none:
    "treatment" and "treats" stem apart) -> [d2]: DCG 2, ideal [2, 1]: 2 + 1/log2(3).
    q2 "colonies swarm": d3 has both words, d1 and d2 "colony" only -> d3 first: 1.
    q3 "beekeepers late summer": only d4 -> [d4]: DCG 1, ideal [1, 1]: 1 + 1/log2(3).
    """
    return [2 / (2 + 1 / math.log2(3)), 1.0, 1 / (1 + 1 / math.log2(3))]


def scifact_slice(folder: Path, queries: int, documents: int) -> Path:
    """Write the first ``queries`` claims of scifact-train, their judged abstracts and the
    first ``documents`` abstracts (as distractors) as a BEIR folder."""
    folder.mkdir(parents=True, exist_ok=True)
    claims = (SCIFACT / "queries.jsonl").read_text(encoding="utf-8").splitlines()[:queries]
    ids = {json.loads(line)["_id"] for line in claims}
    rows = (SCIFACT / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    judged = [r for r in rows[1:] if r.split("\t")[0] in ids]
    wanted = {r.split("\t")[1] for r in judged}
    lines = (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    kept = [x for n, x in enumerate(lines) if n < documents or json.loads(x)["_id"] in wanted]
    (folder / "corpus.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    (folder / "queries.jsonl").write_text("\n".join(claims) + "\n", encoding="utf-8")
    (folder / "qrels.tsv").write_text("\n".join([rows[0], *judged]) + "\n", encoding="utf-8")
    return folder
