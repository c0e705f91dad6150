"""Lexical pseudo-relevance feedback (RM3) on a BEIR set, measured, not shipped.

docs/retrieval.md ("Choosing the default") quotes this probe: RM3 on the lexical side, fused
with the dense side as the default ranking does (absolute, dense weight 0.25), on a BEIR set
(nDCG@10 over documents, as ``docflow evaluate`` scores it).

RM3 (Abdul-Jaleel et al., 2004; Anserini's defaults: 10 feedback documents, 10 terms, the
question's words weighing 0.5): the top ``fb_docs`` chunks of a first ranking (BM25, or the
fused ranking with ``--feedback-from fused``) give each of their words a weight
``sum over chunks of tf / |chunk| x the chunk's share of the first-pass scores`` (function
words, numbers and single letters left out); the ``fb_terms`` heaviest are interpolated with
the question's words (each ``original / n``). A chunk's lexical score is ``sum_t w(t) x
BM25_t(chunk)`` (FTS5's BM25 of each word alone) over its bound ``sum_t w(t) x (k1 + 1) x
idf(t)``, the relative BM25 of tasks/index/lexical.py with weighted words; the candidates
are the first pass's 50 and the expanded query's 50. With ``--original 1`` it is the default
ranking exactly (a check). FTS5 cannot weight a query's words, so a query costs one
FTS5 search per word on top of the two passes.

    python -m tests.benchmarks.rm3_probe ../shared/eval/beir/scifact-train --data-dir DIR \\
        --fb-docs 10 --fb-terms 10 --original 0.5
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tasks.common.config import QueryParams
from tasks.embed.cache import EmbeddingCache
from tasks.embed.model import Embedder, embed_with_cache
from tasks.evaluate import chunk_dataset, default_spec, load_dataset, parse_spec
from tasks.evaluate.metrics import document_scores, documents_in_order
from tasks.index.lexical import BM25_K1, STOP_WORDS, LexicalIndex, idf, query_words
from tasks.retrieval import rank

DEPTH, CANDIDATES = 100, 50
WORD = re.compile(r"[^\W_]+")


def main(argv: list[str] | None = None) -> int:
    """Print nDCG@10 of the fused ranking with RM3 on its lexical side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="embedding cache")
    parser.add_argument("--embed-backend", default="onnx")
    parser.add_argument("--fb-docs", type=int, default=10)
    parser.add_argument("--fb-terms", type=int, default=10)
    parser.add_argument("--original", type=float, default=0.5)
    parser.add_argument("--feedback-from", choices=("bm25", "fused"), default="bm25")
    parser.add_argument("--lexical-only", action="store_true", help="BM25 + RM3 alone")
    args = parser.parse_args(argv)
    dataset = load_dataset(args.dataset)
    config = parse_spec(default_spec(), None, args.embed_backend)
    chunks = chunk_dataset(dataset, config.params)
    cache = EmbeddingCache.open(args.data_dir)
    embedder = Embedder(config.params.model, backend=args.embed_backend)
    vectors = embed_with_cache(embedder, cache, list(chunks.texts))[0]
    questions = embed_with_cache(embedder, cache, [q.text for q in dataset.questions])[0]
    cache.close()
    words = LexicalIndex(":memory:")
    words.upsert((f"{i:09d}", text, {}) for i, text in enumerate(chunks.texts))
    rows, db = words.count(), words.db
    tokens = [
        [t for t in (w.lower() for w in WORD.findall(text)) if t not in STOP_WORDS]
        for text in chunks.texts
    ]
    having: dict[str, int] = {}

    def df(word: str) -> int:
        if word not in having:
            sql = "SELECT count(*) FROM terms WHERE terms MATCH ?"
            having[word] = int(db.execute(sql, (f'"{word}"',)).fetchone()[0])
        return having[word]

    def word_bm25(word: str, ids: Sequence[str]) -> dict[str, float]:
        sql = (
            "SELECT c.chunk_id, -bm25(terms) FROM terms JOIN chunks c ON c.id = terms.rowid "
            f"WHERE terms MATCH ? AND c.chunk_id IN ({','.join('?' * len(ids))})"
        )
        return dict(db.execute(sql, (f'"{word}"', *ids)).fetchall())

    fused = QueryParams()
    final = QueryParams(retrieval="lexical") if args.lexical_only else fused
    ndcgs = []
    for q, question in enumerate(dataset.questions):
        first = words.search(question.text, CANDIDATES)
        cosines = vectors @ questions[q]
        best = np.argsort(-cosines, kind="stable")[:CANDIDATES]
        dense_top = {f"{int(i):09d}": float(cosines[i]) for i in best}

        def dense_of(ids: Sequence[str], s: np.ndarray = cosines) -> dict[str, float]:
            return {i: float(s[int(i)]) for i in ids}

        def plain_of(ids: Sequence[str], text: str = question.text) -> dict[str, float]:
            return words.scores(text, ids)

        if args.feedback_from == "fused":
            top = rank(fused, args.fb_docs, dense_top, first, dense_of, plain_of)
            share = {r.chunk_id: 1.0 for r in top}
        else:
            share = {i: first[i] for i in list(first)[: args.fb_docs]}
        total = sum(share.values()) or 1.0
        model: Counter[str] = Counter()
        for i, s in share.items():
            kept = [t for t in tokens[int(i)] if len(t) > 1 and not t.isdigit()] or ["-"]
            for t, n in Counter(kept).items():
                model[t] += n / len(kept) * s / total
        expansion = dict(model.most_common(args.fb_terms))
        mass = sum(expansion.values()) or 1.0
        original = query_words(question.text)
        weight: Counter[str] = Counter({w: args.original / len(original) for w in original})
        for t, v in expansion.items():
            weight[t] += (1.0 - args.original) * v / mass
        bound = sum(v * (BM25_K1 + 1.0) * idf(rows, df(t)) for t, v in weight.items()) or 1.0

        def lexical_of(
            ids: Sequence[str], weight: Counter[str] = weight, bound: float = bound
        ) -> dict[str, float]:
            out = dict.fromkeys(ids, 0.0)
            for t, v in weight.items():
                for i, s in (word_bm25(t, ids) if ids else {}).items():
                    out[i] += v * s / bound
            return out

        pool = sorted(set(first) | set(words.search(" ".join(weight), CANDIDATES)))
        scored = lexical_of(pool)
        lexical_top = dict(sorted(scored.items(), key=lambda kv: -kv[1])[:CANDIDATES])
        ranked = rank(final, DEPTH, dense_top, lexical_top, dense_of, lexical_of)
        documents = documents_in_order(chunks.corpus[int(r.chunk_id)] for r in ranked)
        ndcgs.append(document_scores(documents, dataset.qrels[q])["ndcg_10"])
    print(f"{vars(args)}: nDCG@10 {100 * float(np.mean(ndcgs)):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
