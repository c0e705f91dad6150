"""Fusions of the dense and lexical sides compared on every shared set, in seconds each.

docs/retrieval.md ("Choosing the default", query-dependent weighting) quotes this probe. It
chunks every shared data set at the default chunking, embeds through the embedding cache of
``--data-dir`` (once), builds the in-memory lexical index, and keeps, per question, each
side's candidates (as many as ``docflow evaluate`` asks for: 50 for a span question, 100 for
a BEIR query) with the exact score of every candidate on both sides, as
:func:`tasks.retrieval.rank` gets them. That is stored (``--store``); each fusion then ranks
the stored candidates and each set is scored as ``docflow evaluate`` scores it (recall@5 per
span corpus, nDCG@10 on a BEIR set): its dense, BM25 and ``absolute 0.25`` rows equal
``docflow evaluate``'s. Printed: each fusion's score per corpus, the mean, the worst corpus
and the rule (the largest deficit against the better of dense and BM25 alone on any corpus).

A fusion here sees one question's candidates only (both sides' scores, each side's order):
nothing of the corpus. ``--diagnose`` prints how well per-question signals (each side's
margin, the two sides' agreement) tell which side alone ranks a question better (AUC over
the questions where they differ). ``--weak-dense DIMS`` and ``--noise SIGMA`` rerun the
table with a deliberately weaker dense side (the vectors cut to DIMS random dimensions, or
the chunk vectors blurred by Gaussian noise of norm about SIGMA), to see which fusion keeps
the rule where the embedding is weak.

    python -m tests.benchmarks.fusion_probe --data-dir DIR [--store FILE] [--only NAME ...]
    python -m tests.benchmarks.fusion_probe --store FILE --noise 1.0 --only "absolute 0.25"
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.evaluate import chunk_dataset, default_spec, find_datasets, load_dataset, parse_spec
from tasks.evaluate.metrics import DOC_DEPTH
from tasks.evaluate.scoring import DEFAULT_K, score_retrieved
from tasks.retrieval import candidates
from tasks.retrieval.ranking import fuse

EVAL_ROOT = Path(__file__).resolve().parents[2].parent / "shared" / "eval"
#: A side's margin: its best score minus the mean of its next this many (raw scores).
DEPTH = 10


@dataclass
class Question:
    """One question's candidates: both sides' exact scores of the union, each side's list."""

    dense: dict[str, float]  # cosine of every candidate
    lexical: dict[str, float]  # relative BM25 of every candidate (0: none of its words)
    dense_top: list[str]  # the dense side's candidates, best first
    lexical_top: list[str]  # the lexical side's candidates, best first


def _cid(i: int) -> str:
    return f"{i:09d}"


def _question(cos: np.ndarray, n: int, lexical_top: list[str], lexical_of: Any) -> Question:
    """Return a question's candidates from every chunk's cosine and the lexical side."""
    dense_top = [_cid(int(i)) for i in np.argsort(-cos, kind="stable")[:n]]
    ids = sorted(set(dense_top) | set(lexical_top))
    lexical = lexical_of(ids)
    return Question(
        {i: float(cos[int(i)]) for i in ids},
        {i: lexical.get(i, 0.0) for i in ids},
        dense_top,
        lexical_top,
    )


def build(data_dir: Path, backend: str) -> dict[str, Any]:
    """Chunk, embed and index every shared set; return, per set, what a fusion needs."""
    from tasks.embed.cache import EmbeddingCache
    from tasks.embed.model import Embedder, embed_with_cache
    from tasks.index.lexical import LexicalIndex

    config = parse_spec(default_spec(), None, backend)
    cache = EmbeddingCache.open(data_dir)
    embedder = Embedder(config.params.model, backend=backend)
    out: dict[str, Any] = {}
    for path in find_datasets(EVAL_ROOT):
        dataset = load_dataset(path)
        chunks = chunk_dataset(dataset, config.params)
        vectors = embed_with_cache(embedder, cache, list(chunks.texts))[0]
        qvectors = embed_with_cache(embedder, cache, [q.text for q in dataset.questions])[0]
        words = LexicalIndex(":memory:")
        words.upsert((_cid(i), text, {}) for i, text in enumerate(chunks.texts))
        k = DOC_DEPTH if dataset.is_beir else DEFAULT_K
        n = candidates(k)
        questions, lexical_tops = [], []
        for q, question in enumerate(dataset.questions):
            found = words.search(question.text, n)
            top = sorted(found, key=lambda i: (-found[i], i))

            def lexical_of(
                ids: list[str],
                found: dict[str, float] = found,
                t: str = question.text,
                words: LexicalIndex = words,
            ) -> dict[str, float]:
                return {**found, **words.scores(t, [i for i in ids if i not in found])}

            questions.append(_question(vectors @ qvectors[q], n, top, lexical_of))
            lexical_tops.append(top)
        words.close()
        out[dataset.name] = {
            "dataset": dataset,
            "chunks": chunks,
            "k": k,
            "questions": [tuple(vars(q).values()) for q in questions],
            "vectors": vectors,
            "qvectors": qvectors,
        }
        print(f"{dataset.name}: {len(chunks)} chunks, {len(questions)} questions", flush=True)
    cache.close()
    return out


def weaken(store: dict[str, Any], dims: int | None, sigma: float, seed: int = 0) -> None:
    """Replace each question's dense side by a weaker embedding's (in place)."""
    from tasks.index.lexical import LexicalIndex

    rng = np.random.default_rng(seed)

    def unit(x: np.ndarray) -> np.ndarray:
        return np.asarray(x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12))

    for entry in store.values():
        vectors, qvectors = entry["vectors"], entry["qvectors"]
        if dims:
            keep = rng.permutation(vectors.shape[1])[:dims]
            vectors, qvectors = unit(vectors[:, keep]), unit(qvectors[:, keep])
        if sigma:
            noise = rng.standard_normal(vectors.shape) / np.sqrt(vectors.shape[1])
            vectors = unit(vectors + sigma * noise)
        words = LexicalIndex(":memory:")
        words.upsert((_cid(i), text, {}) for i, text in enumerate(entry["chunks"].texts))
        questions = []
        for q, stored in enumerate(entry["questions"]):
            old = Question(*stored)
            text = entry["dataset"].questions[q].text

            def lexical_of(
                ids: list[str], old: Question = old, text: str = text, words: LexicalIndex = words
            ) -> dict[str, float]:
                new = [i for i in ids if i not in old.lexical]
                return {**old.lexical, **words.scores(text, new)}

            n = len(old.dense_top)
            new = _question(vectors @ qvectors[q], n, old.lexical_top, lexical_of)
            questions.append(tuple(vars(new).values()))
        words.close()
        entry["questions"] = questions


# --- fusions: one question's candidates -> its ids, best first ----------------------------

Fusion = Callable[[Question], list[str]]


def by_score(scores: dict[str, float]) -> list[str]:
    """Return ids best first (ties: the lower id, as :func:`fuse`)."""
    return sorted(scores, key=lambda i: (-scores[i], i))


def library(name: str, w: float) -> Fusion:
    """A fusion of tasks/retrieval/ranking.py (``fuse``), by name and dense weight."""
    return lambda q: [r.chunk_id for r in fuse(q.dense, q.lexical, w, name)]


def only(side: str) -> Fusion:
    """One side alone (its own candidates, in its order, as ``rank`` returns them)."""
    return lambda q: q.dense_top if side == "dense" else q.lexical_top


def absolute(q: Question, w: float) -> dict[str, float]:
    """The default's scores at dense weight ``w``: ``w max(cos, 0) + (1 - w) relative BM25``."""
    return {i: w * max(q.dense[i], 0.0) + (1 - w) * q.lexical[i] for i in q.dense}


def _sides(q: Question) -> tuple[list[float], list[float]]:
    """Each side's scores of its own candidates, best first (BM25: [0] when it has none)."""
    return [q.dense[i] for i in q.dense_top], [q.lexical[i] for i in q.lexical_top] or [0.0]


def top_margin(values: list[float], depth: int | None = None) -> float:
    """The best score minus the mean of the next ``depth`` (:data:`DEPTH`; 0 with fewer
    than two)."""
    depth = depth or DEPTH
    return values[0] - float(np.mean(values[1 : 1 + depth])) if len(values) > 1 else 0.0


def margin_weight(q: Question, w: float, power: float = 1.0, relative: bool = False) -> float:
    """The dense weight moved toward the side whose best candidate stands out more.

    ``w' = w m_d^p / (w m_d^p + (1 - w) m_l^p)``, ``m`` a side's :func:`top_margin` on its
    raw scores (cosine; relative BM25), or over its best score (``relative``).
    """
    d, x = _sides(q)
    md, ml = top_margin(d), top_margin(x)
    if relative:
        md, ml = md / max(d[0], 1e-9), ml / max(x[0], 1e-9)
    a, b = w * max(md, 0.0) ** power, (1 - w) * max(ml, 0.0) ** power
    return a / (a + b) if a + b > 0 else w


def margin(w: float, power: float = 1.0, relative: bool = False) -> Fusion:
    """``absolute`` at the per-question :func:`margin_weight`."""
    return lambda q: by_score(absolute(q, margin_weight(q, w, power, relative)))


def zgap(w: float) -> Fusion:
    """``absolute``, weights by how many standard deviations each side's best stands above
    its next :data:`DEPTH` candidates."""

    def run(q: Question) -> list[str]:
        d, x = (np.asarray(s[: DEPTH + 1]) for s in _sides(q))
        zd = (d[0] - d[1:].mean()) / (d[1:].std() + 1e-9) if len(d) > 2 else 0.0
        zx = (x[0] - x[1:].mean()) / (x[1:].std() + 1e-9) if len(x) > 2 else 0.0
        a, b = w * max(zd, 0.0), (1 - w) * max(zx, 0.0)
        return by_score(absolute(q, a / (a + b) if a + b > 0 else w))

    return run


def agreement(q: Question, depth: int = DEPTH) -> float:
    """The share of the dense side's top ``depth`` that the lexical side's top holds too."""
    return len(set(q.dense_top[:depth]) & set(q.lexical_top[:depth])) / depth


def agree(w_lo: float, w_hi: float) -> Fusion:
    """``absolute``, the dense weight from ``w_lo`` (no agreement) to ``w_hi`` (all)."""
    return lambda q: by_score(absolute(q, w_lo + (w_hi - w_lo) * agreement(q)))


def cross_support(w: float, gain: float) -> Fusion:
    """``absolute``, the weight moved toward the side whose top the other side ranks high.

    A side's support: the other side's mean rank percentile of its top :data:`DEPTH` (1:
    the other's best; 0: not among its candidates); ``w' = w + gain (support_d - support_l)``.
    """

    def pct(top: list[str]) -> dict[str, float]:
        return {i: 1 - r / len(top) for r, i in enumerate(top)}

    def run(q: Question) -> list[str]:
        pd, pl = pct(q.dense_top), pct(q.lexical_top)
        sd = float(np.mean([pl.get(i, 0.0) for i in q.dense_top[:DEPTH]]))
        sl = float(np.mean([pd.get(i, 0.0) for i in q.lexical_top[:DEPTH]] or [0.0]))
        return by_score(absolute(q, min(1.0, max(0.0, w + gain * (sd - sl)))))

    return run


def background(w: float) -> Fusion:
    """``absolute`` with the cosine counted above the dense side's last candidate's."""

    def run(q: Question) -> list[str]:
        floor = q.dense[q.dense_top[-1]]
        return by_score(
            {i: w * max(q.dense[i] - floor, 0.0) + (1 - w) * q.lexical[i] for i in q.dense}
        )

    return run


def rrf(k: int = 60) -> Fusion:
    """Unweighted reciprocal-rank fusion over each side's own candidate list."""

    def run(q: Question) -> list[str]:
        s: dict[str, float] = {}
        for side in (q.dense_top, q.lexical_top):
            for r, i in enumerate(side, start=1):
                s[i] = s.get(i, 0.0) + 1.0 / (k + r)
        return by_score(s)

    return run


def combmnz() -> Fusion:
    """CombMNZ: min-max scores over the union, summed, times how many sides proposed it."""

    def run(q: Question) -> list[str]:
        def mm(s: dict[str, float]) -> dict[str, float]:
            lo, hi = min(s.values()), max(s.values())
            return {i: (v - lo) / (hi - lo) if hi > lo else 0.0 for i, v in s.items()}

        d, x = mm(q.dense), mm(q.lexical)
        dt, lt = set(q.dense_top), set(q.lexical_top)
        return by_score({i: (d[i] + x[i]) * ((i in dt) + (i in lt)) for i in q.dense})

    return run


def fusions() -> dict[str, Fusion]:
    """Every fusion measured, by name (as printed)."""
    out: dict[str, Fusion] = {"dense": only("dense"), "bm25": only("lexical")}
    out |= {f"absolute {w}": library("absolute", w) for w in (0.2, 0.25, 0.3, 0.35)}
    out |= {
        "rrf k=60": rrf(60),
        "rrf 0.3": library("rrf", 0.3),
        "combmnz": combmnz(),
        "zscore 0.4": library("zscore", 0.4),
        "confidence 0.3": library("confidence", 0.3),
    }
    for w in (0.25, 0.3, 0.35):
        out[f"margin {w}"] = margin(w)
    for w in (0.25, 0.3):
        out[f"margin^2 {w}"] = margin(w, power=2.0)
        out[f"margin/top {w}"] = margin(w, relative=True)
        out[f"zgap {w}"] = zgap(w)
        out[f"cross {w} g0.4"] = cross_support(w, 0.4)
    out |= {"agree 0.1-0.4": agree(0.1, 0.4), "agree 0-0.5": agree(0.0, 0.5)}
    out |= {f"background {w}": background(w) for w in (0.3, 0.5)}
    return out


def per_question(entry: dict[str, Any], fusion: Fusion) -> dict[str, np.ndarray]:
    """Return each corpus's per-question score (recall@5, nDCG@10) under ``fusion``."""
    dataset, chunks, k = entry["dataset"], entry["chunks"], entry["k"]
    top = [[int(i) for i in fusion(Question(*q))[:k]] for q in entry["questions"]]
    metric = "ndcg_10" if dataset.is_beir else "recall"
    by: dict[str, list[float]] = {}
    for r in score_retrieved(dataset, chunks, top):
        label = dataset.name if dataset.is_beir else str(r["corpus_id"])
        by.setdefault(label, []).append(float(r[metric]))
    return {c: np.asarray(v) for c, v in sorted(by.items())}


def evaluate(store: dict[str, Any], fusion: Fusion) -> dict[str, float]:
    """Return the score of every corpus (× 100)."""
    return {
        c: 100 * float(v.mean())
        for entry in store.values()
        for c, v in per_question(entry, fusion).items()
    }


def _auc(x: np.ndarray, y: np.ndarray) -> float:
    pos, neg = x[y], x[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


def diagnose(store: dict[str, Any]) -> None:
    """Print, per corpus, how well each signal tells that dense alone beats BM25 alone."""
    signals: dict[str, Callable[[Question], float]] = {
        "margin share": lambda q: margin_weight(q, 0.5),
        "margin/top share": lambda q: margin_weight(q, 0.5, relative=True),
        "agreement": agreement,
        "best cosine": lambda q: q.dense[q.dense_top[0]],
    }
    print("AUC of each signal for 'dense alone beats BM25 alone' (questions where they differ)")
    for entry in store.values():
        dense, bm25 = per_question(entry, only("dense")), per_question(entry, only("lexical"))
        by_corpus: dict[str, list[Question]] = {}
        for n, stored in enumerate(entry["questions"]):
            question = entry["dataset"].questions[n]
            label = entry["dataset"].name if entry["dataset"].is_beir else question.corpus_id
            by_corpus.setdefault(label, []).append(Question(*stored))
        for c, qs in by_corpus.items():
            diff = dense[c] - bm25[c]
            differ = np.abs(diff) > 1e-9
            y = diff[differ] > 0
            cells = []
            for name, signal in signals.items():
                x = np.asarray([signal(q) for q, d in zip(qs, differ, strict=True) if d])
                cells.append(f"{name} {_auc(x, y):.2f}")
            print(
                f"  {c}: {int(differ.sum())} differ, dense better in {int(y.sum())}; "
                + ", ".join(cells)
            )


def main(argv: list[str] | None = None) -> int:
    """Build or load the stored candidates, then print each fusion's row."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="embedding cache")
    parser.add_argument("--embed-backend", default="onnx")
    parser.add_argument("--store", type=Path, default=Path("bench-results/fusion-probe.pkl"))
    parser.add_argument("--only", nargs="*", help="fusions to run (names as printed)")
    parser.add_argument("--diagnose", action="store_true", help="per-question signals' AUC")
    parser.add_argument("--weak-dense", type=int, default=None, metavar="DIMS")
    parser.add_argument("--noise", type=float, default=0.0, metavar="SIGMA")
    parser.add_argument("--depth", type=int, default=DEPTH, help="margin: next N candidates")
    args = parser.parse_args(argv)
    globals()["DEPTH"] = args.depth
    if args.store.exists():
        store = pickle.loads(args.store.read_bytes())
    else:
        store = build(args.data_dir, args.embed_backend)
        args.store.parent.mkdir(parents=True, exist_ok=True)
        args.store.write_bytes(pickle.dumps(store))
    if args.weak_dense or args.noise:
        weaken(store, args.weak_dense, args.noise)
    if args.diagnose:
        diagnose(store)
        return 0
    table = fusions()
    names = ["dense", "bm25", *(args.only or [n for n in table if n not in ("dense", "bm25")])]
    rows = {n: evaluate(store, table[n]) for n in names}
    corpora = list(rows["dense"])
    better = {c: max(rows["dense"][c], rows["bm25"][c]) for c in corpora}
    print(" | ".join(["fusion", *corpora, "mean", "worst", "rule"]))
    for n, row in rows.items():
        scores = [row[c] for c in corpora]
        gap = min(row[c] - better[c] for c in corpora)
        cells = [f"{s:.1f}" for s in (*scores, np.mean(scores), min(scores))]
        print(" | ".join([n, *cells, f"{gap:+.1f}"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
