"""Unit tests for tasks/embed/cache.py: the (model, text sha256) → float32 vector cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tasks.embed.cache import _LOOKUP_CHUNK, EmbeddingCache

MODEL = "model-a"
DIM = 8


def vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


@pytest.fixture
def cache(data_dir: Path) -> Iterator[EmbeddingCache]:
    c = EmbeddingCache.open(data_dir)
    yield c
    c.close()


def test_put_get_round_trip_is_exact_float32(cache: EmbeddingCache) -> None:
    texts = ["alpha", "beta", "gamma"]
    vecs = vectors(3)
    cache.put(MODEL, texts, vecs)
    got = cache.get(MODEL, texts)
    for want, have in zip(vecs, got, strict=True):
        assert have is not None
        assert have.dtype == np.float32
        assert have.shape == (DIM,)
        assert np.array_equal(have, want)


def test_float64_input_is_stored_as_float32(cache: EmbeddingCache) -> None:
    vecs = vectors(1).astype(np.float64)
    cache.put(MODEL, ["x"], vecs)
    (have,) = cache.get(MODEL, ["x"])
    assert have is not None and have.dtype == np.float32
    assert np.array_equal(have, vecs[0].astype(np.float32))


def test_misses_are_none(cache: EmbeddingCache) -> None:
    cache.put(MODEL, ["known"], vectors(1))
    got = cache.get(MODEL, ["unknown", "known", "also unknown"])
    assert got[0] is None and got[2] is None
    assert got[1] is not None
    assert cache.get(MODEL, []) == []


def test_keys_are_per_model(cache: EmbeddingCache) -> None:
    a, b = vectors(1, seed=1), vectors(1, seed=2)
    cache.put(MODEL, ["same text"], a)
    assert cache.get("model-b", ["same text"]) == [None]
    cache.put("model-b", ["same text"], b)
    (from_a,) = cache.get(MODEL, ["same text"])
    (from_b,) = cache.get("model-b", ["same text"])
    assert from_a is not None and np.array_equal(from_a, a[0])
    assert from_b is not None and np.array_equal(from_b, b[0])


def test_put_replaces_the_vector_of_a_key(cache: EmbeddingCache) -> None:
    cache.put(MODEL, ["t"], vectors(1, seed=1))
    new = vectors(1, seed=2)
    cache.put(MODEL, ["t"], new)
    (have,) = cache.get(MODEL, ["t"])
    assert have is not None and np.array_equal(have, new[0])


def test_duplicate_texts_in_one_get(cache: EmbeddingCache) -> None:
    vecs = vectors(2)
    cache.put(MODEL, ["a", "b"], vecs)
    got = cache.get(MODEL, ["a", "b", "a", "missing", "a"])
    assert [g is None for g in got] == [False, False, False, True, False]
    for i, want in [(0, 0), (1, 1), (2, 0), (4, 0)]:
        have = got[i]
        assert have is not None and np.array_equal(have, vecs[want])


def test_more_keys_than_one_lookup_holds(cache: EmbeddingCache) -> None:
    n = 2 * _LOOKUP_CHUNK + 203
    texts = [f"text number {i}" for i in range(n)]
    vecs = vectors(n)
    cache.put(MODEL, texts, vecs)
    asked: list[str] = []
    for i, text in enumerate(texts):
        asked += [text, f"miss {i}"] if i % 7 == 0 else [text]
    got = cache.get(MODEL, asked)
    assert len(got) == len(asked)
    by_text = dict(zip(texts, vecs, strict=True))
    for text, have in zip(asked, got, strict=True):
        if text.startswith("miss"):
            assert have is None
        else:
            assert have is not None and np.array_equal(have, by_text[text]), text


def test_vectors_persist_across_reopen(data_dir: Path) -> None:
    vecs = vectors(4)
    texts = ["w", "x", "y", "z"]
    first = EmbeddingCache.open(data_dir)
    first.put(MODEL, texts, vecs)
    first.close()
    assert (data_dir / "cache" / "embeddings.db").is_file()
    again = EmbeddingCache.open(data_dir)
    try:
        got = again.get(MODEL, texts)
    finally:
        again.close()
    assert all(g is not None for g in got)
    assert np.array_equal(np.stack([g for g in got if g is not None]), vecs)
