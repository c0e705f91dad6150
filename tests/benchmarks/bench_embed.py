"""Embedding throughput on the CPU: plain ``SentenceTransformer.encode`` vs each backend.

The target of issue 8: a backend >= 1.5x plain ``encode`` of the same chunks (same batch
size), with retrieval recall on ../shared/eval/chunking within 1 point of float32.

Chunks: the Markdown corpus split 1000/200 characters (``BENCH_EMBED_CHUNKS``, default
1500). Rounds alternate the variants (the machine is shared) and report medians; the
first round is a warm-up (and pays the one-time ONNX export). Cosine: each backend's rows
against float32 ``encode``. ``BENCH_EMBED_RECALL=1`` adds the evaluation recall per
backend (recursive 800/100 characters). Run: ``python -m tests.benchmarks bench_embed``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import corpus_files

ROUNDS = 4  # the first is a warm-up
BATCH = 32
BACKENDS = ("torch", "onnx", "onnx-int8")
EVAL_SPEC = "recursive:chunk_size=800,chunk_overlap=100,length_unit=chars"


def chunks(limit: int) -> list[str]:
    """Return up to ``limit`` chunks of the Markdown corpus (1000/200 characters)."""
    from tasks.split import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
    texts: list[str] = []
    for path in corpus_files("markdown", ("*.md",)):
        texts += splitter.split_text(Path(path).read_text(encoding="utf-8", errors="replace"))
        if len(texts) >= limit:
            break
    return texts[:limit]


def recall(embed: Callable[[Sequence[str]], np.ndarray]) -> float | None:
    """Return the mean recall × 100 on the evaluation set, or None if it is absent."""
    from flows.evaluate import DEFAULT_DATASET
    from tasks.evaluate import evaluate_config, load_dataset, parse_spec

    if not (DEFAULT_DATASET / "questions.csv").is_file():
        return None
    summary, _ = evaluate_config(load_dataset(DEFAULT_DATASET), parse_spec(EVAL_SPEC), embed)
    return float(summary["recall_mean"])


def main() -> dict[str, Any]:
    """Time the variants, print the table and return the results (JSON-able)."""
    from tasks.embed.model import DEFAULT_MODEL, Embedder, load_model

    texts = chunks(int(os.environ.get("BENCH_EMBED_CHUNKS", "1500")))
    if not texts:
        print("../shared/corpora is absent: nothing to measure")
        return {"skipped": "../shared/corpora is absent"}
    plain = load_model(DEFAULT_MODEL, "cpu")

    def encode(batch: Sequence[str]) -> np.ndarray:
        return np.asarray(
            plain.encode(
                list(batch),
                batch_size=BATCH,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        )

    variants: dict[str, Callable[[Sequence[str]], np.ndarray]] = {"plain encode": encode}
    for backend in BACKENDS:
        variants[backend] = Embedder(DEFAULT_MODEL, BATCH, "cpu", backend).embed
    print(f"{len(texts)} chunks, batch {BATCH}, {ROUNDS - 1} timed rounds after a warm-up")
    times: dict[str, list[float]] = {name: [] for name in variants}
    vectors: dict[str, np.ndarray] = {}
    for round_ in range(ROUNDS):
        for name, embed in variants.items():
            start = time.perf_counter()
            vectors[name] = embed(texts)
            if round_:
                times[name].append(time.perf_counter() - start)
    with_recall = os.environ.get("BENCH_EMBED_RECALL") == "1"
    reference = vectors["plain encode"]
    base = statistics.median(times["plain encode"])
    rows = []
    for name, embed in variants.items():
        cosine = (vectors[name] * reference).sum(axis=1)
        median = statistics.median(times[name])
        rows.append(
            {
                "variant": name,
                "chunks_s": len(texts) / median,
                "ratio": base / median,
                "cosine_min": float(cosine.min()),
                "cosine_mean": float(cosine.mean()),
                "recall": recall(embed) if with_recall else None,
            }
        )
    head = f"{'variant':<14}{'chunks/s':>10}{'ratio':>8}{'cos min':>9}{'cos mean':>10}{'recall':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        rec = f"{r['recall']:>8.2f}" if r["recall"] is not None else f"{'-':>8}"
        print(f"{r['variant']:<14}{r['chunks_s']:>10.1f}{r['ratio']:>7.2f}x"
              f"{r['cosine_min']:>9.4f}{r['cosine_mean']:>10.4f}{rec}")  # fmt: skip
    print("ratio: vs plain SentenceTransformer.encode (float32, same chunks, same batch size)")
    return {"chunks": len(texts), "batch_size": BATCH, "rows": rows}
