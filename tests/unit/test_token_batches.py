"""Model inputs built by tasks/embed/batches.py, and the torch path that feeds on them.

The batching functions are checked as properties; the tokenizer and the torch path against
the real bundled all-MiniLM-L6-v2 (its tokenizer through transformers, ``encode`` itself).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.embed.batches import BatchTokenizer, Tokenised, length_batches, padded
from tasks.embed.model import DEFAULT_MODEL, Embedder, load_model, resolve_model_path
from tasks.embed.torch_path import TorchEncoder, supported, torch_encoder

token_lists = st.lists(st.lists(st.integers(1, 30_000), min_size=1, max_size=40), max_size=60)


@given(token_lists, st.integers(1, 9), st.one_of(st.none(), st.integers(1, 200)))
def test_batches_take_every_row_once_longest_first(
    ids: list[list[int]], batch_size: int, budget: int | None
) -> None:
    tokens = Tokenised(ids, [[0] * len(x) for x in ids], pad_id=0)
    batches = list(length_batches(tokens.lengths, batch_size, budget))
    rows = np.concatenate(batches) if batches else np.array([], dtype=np.int64)
    assert sorted(rows.tolist()) == list(range(len(ids)))
    widths = [len(ids[i]) for i in rows]
    assert widths == sorted(widths, reverse=True)
    for batch in batches[:-1]:  # only the last batch may be short
        width = len(ids[batch[0]])
        expected = batch_size if budget is None else max(batch_size, budget // width)
        assert len(batch) == expected
    if budget is not None:  # a batch wider than one row never exceeds the budget
        for batch in batches:
            if len(batch) > batch_size:
                assert len(batch) * len(ids[batch[0]]) <= budget


@given(token_lists, st.integers(0, 5))
def test_padded_arrays_hold_each_rows_tokens_then_padding(ids: list[list[int]], pad: int) -> None:
    if not ids:
        return
    types = [[i % 2 for i in range(len(x))] for x in ids]
    tokens = Tokenised(ids, types, pad_id=pad)
    rows = np.arange(len(ids))[::-1]
    arrays = padded(rows, tokens)
    width = max(len(x) for x in ids)
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert arrays[name].shape == (len(ids), width)
        assert arrays[name].dtype == np.int64
    for r, i in enumerate(rows):
        n = len(ids[i])
        assert arrays["input_ids"][r, :n].tolist() == ids[i]
        assert (arrays["input_ids"][r, n:] == pad).all()
        assert arrays["attention_mask"][r].tolist() == [1] * n + [0] * (width - n)
        assert arrays["token_type_ids"][r, :n].tolist() == types[i]


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))


TEXTS = [
    "A lighthouse guides ships at night.",
    "x",
    "灯台は夜に船を導く。",
    "a much longer sentence " * 100,  # past the 256-token limit
    "   ",
    "Ünïcödé, UPPER case and 1,234.5 numbers",
]


def test_batch_tokenizer_gives_the_ids_of_the_tokenizers_own_call(tokenizer) -> None:  # type: ignore[no-untyped-def]
    tokens = BatchTokenizer(tokenizer, 256)(TEXTS)
    expected = tokenizer(TEXTS, truncation=True, max_length=256)
    assert tokens.ids == expected["input_ids"]
    assert tokens.type_ids == expected["token_type_ids"]
    assert max(tokens.lengths) == 256
    # the shared tokenizer is left as it was: no truncation or padding set on its backend
    assert tokenizer(TEXTS[3:4])["input_ids"][0] != tokens.ids[3]


@pytest.mark.slow
@pytest.mark.parametrize("budget", [None, 4 * 256])
def test_the_torch_path_embeds_as_encode_does(budget: int | None) -> None:
    model = load_model(DEFAULT_MODEL, "cpu")
    texts = TEXTS + [f"note {i}: the keeper trimmed wick number {i}" for i in range(20)]
    reference = model.encode(texts, batch_size=4, normalize_embeddings=True)
    got = TorchEncoder(model).encode(texts, batch_size=4, token_budget=budget)
    assert got.shape == reference.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, reference, atol=1e-5)
    assert TorchEncoder(model).encode([]).shape == (0, 384)


@pytest.mark.slow
def test_torch_backend_uses_the_fast_path_only_where_it_is_checked() -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense

    model = load_model(DEFAULT_MODEL, "cpu")
    assert supported(model)
    assert isinstance(torch_encoder(model), TorchEncoder)
    assert isinstance(Embedder(DEFAULT_MODEL, device="cpu", backend="torch").model, TorchEncoder)
    # a model with a Dense layer after pooling: its inputs are not ours to build
    modules = list(model) + [Dense(384, 16)]
    projected = SentenceTransformer(modules=modules, device="cpu")
    assert not supported(projected)
    assert torch_encoder(projected) is projected
