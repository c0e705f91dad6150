"""Unit tests for tasks/index/lexical.py: the SQLite FTS5 (BM25) index, on real SQLite files."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.common.errors import StateError
from tasks.index import lexical
from tasks.index.lexical import (
    STOP_WORDS,
    LexicalIndex,
    database_name,
    database_path,
    idf,
    match_expression,
    query_words,
)

DOCS = {
    "a": "The queen lays up to two thousand eggs a day in spring.",
    "b": "Varroa mites are treated with oxalic acid in winter, when the colony is broodless.",
    "c": "A swarm leaves the hive with the old queen; the new queen stays behind.",
    "d": "Honey is extracted by spinning uncapped frames in an extractor.",
}


def records(docs: dict[str, str], **meta: object) -> list[tuple[str, str, dict[str, object]]]:
    return [(i, text, {"source": f"{i}.md", **meta}) for i, text in docs.items()]


@pytest.fixture
def index(data_dir: Path) -> LexicalIndex:
    idx = LexicalIndex.open(data_dir, "docflow")
    idx.upsert(records(DOCS))  # type: ignore[arg-type]
    return idx


def test_match_expression_quotes_every_distinct_word() -> None:
    def expression(text: str) -> str:
        return match_expression(query_words(text, stop_words=False))

    assert expression('What is "NEAR" the queen, the QUEEN?') == (
        '"what" OR "is" OR "near" OR "the" OR "queen"'
    )
    assert expression("snake_case and x-ray 3.5%") == (
        '"snake" OR "case" OR "and" OR "x" OR "ray" OR "3" OR "5"'
    )
    assert expression("?!  ...") == ""
    assert expression("crème brûlée") == '"crème" OR "brûlée"'
    assert match_expression(['say "hi"']) == '"say ""hi"""'


def test_query_words_drop_function_words_unless_asked_to_keep_them() -> None:
    assert query_words("When do the bees SWARM, and why?") == ["bees", "swarm"]
    assert query_words("When do bees swarm?", stop_words=False) == ["when", "do", "bees", "swarm"]
    assert query_words("what is this") == []
    assert query_words("don't") == []  # "don" and "t" are both in NLTK's list
    assert {"when", "the", "what", "how", "is"} <= STOP_WORDS and "bees" not in STOP_WORDS


def test_search_ranks_by_bm25_and_returns_only_matching_chunks(index: LexicalIndex) -> None:
    hits = index.search("queen eggs", k=10)
    assert list(hits) == ["a", "c"]  # "a" has both words; "c" only "queen" (twice)
    assert all(score > 0 for score in hits.values())
    assert index.search("queen eggs", k=1) == {"a": hits["a"]}
    assert index.search("submarine", k=5) == {}
    assert index.search("", k=5) == {}


def test_scores_equal_the_bm25_definition(index: LexicalIndex) -> None:
    """FTS5's bm25 (k1 = 1.2, b = 0.75) computed by hand, on the tokens FTS5 indexes."""
    tokens = {i: [w.lower() for w in lexical._WORD.findall(t)] for i, t in DOCS.items()}
    n_docs, avgdl = len(tokens), sum(map(len, tokens.values())) / len(tokens)

    def bm25(doc: str, words: list[str]) -> float:
        total = 0.0
        for w in words:
            n = sum(w in ts for ts in tokens.values())
            idf = max(math.log((n_docs - n + 0.5) / (n + 0.5)), 1e-6)
            f = Counter(tokens[doc])[w]
            dl = len(tokens[doc])
            total += idf * f * 2.2 / (f + 1.2 * (1 - 0.75 + 0.75 * dl / avgdl))
        return total

    def idf_of(w: str) -> float:
        return idf(n_docs, sum(w in ts for ts in tokens.values()))

    words = ["extractor", "frames"]
    best = 2.2 * (idf_of("extractor") + idf_of("frames"))  # (k1 + 1) * the IDFs
    assert index.best_score("the extractor frames") == pytest.approx(best)
    got = index.search("the extractor frames", k=5)
    assert got["d"] == pytest.approx(bm25("d", words) / best, rel=1e-6)


def test_idf_is_fts5s_with_its_floor() -> None:
    assert idf(10, 1) == pytest.approx(math.log(9.5 / 1.5))
    assert idf(10, 0) == pytest.approx(math.log(10.5 / 0.5))  # a word no chunk has
    assert idf(10, 5) == 1e-6 and idf(10, 9) == 1e-6  # half the chunks or more: no weight


def test_relative_scores_mean_the_same_across_questions(index: LexicalIndex) -> None:
    # a chunk of about average length holding every (rare) word of the question once
    # scores about 1 / (k1 + 1) = 0.45; one holding one word of two, about half that;
    # function words and absent words weigh as described
    assert index.best_score("what is the") == 0.0
    assert index.search("when is the", k=5) == {}  # only function words: nothing
    both = index.search("oxalic acid", k=5)["b"]
    one = index.search("oxalic submarine", k=5)["b"]
    assert 0.35 < both < 0.55 and 0.1 < one < both / 2 + 0.02
    assert all(0 < s < 1 for s in index.search("queen queen swarm eggs", k=5).values())
    kept = index.search("when is the queen", k=5, stop_words=False)
    assert set(kept) >= {"a", "b", "c"}  # "when", "the" match "b" and the others
    assert set(index.search("when is the queen", k=5)) == {"a", "c"}


def test_metadata_keys_lists_every_key_once(data_dir: Path) -> None:
    idx = LexicalIndex.open(data_dir, "keys")
    idx.upsert([("x", "bees", {"source": "x.md", "h2": "A"}), ("y", "bees", {"page": 1})])
    assert idx.metadata_keys() == ["h2", "page", "source"]


def test_porter_stemming_and_case_folding(index: LexicalIndex) -> None:
    assert "c" in index.search("SWARMING", k=5)  # swarming -> swarm
    assert "b" in index.search("treating", k=5)  # treating ~ treated: both "treat"


def test_upsert_replaces_text_and_metadata_of_an_existing_id(index: LexicalIndex) -> None:
    index.upsert([("a", "Drones do not sting.", {"source": "a.md", "lang": "en"})])
    assert index.count() == 4
    assert "a" not in index.search("queen", k=5)
    assert index.search("drones", k=5) and index.search("drones", 5, {"lang": "en"})


def test_a_write_cut_into_several_statements_equals_one_statement(
    data_dir: Path, index: LexicalIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch larger than a statement's budget goes in in slices, replacements included."""
    monkeypatch.setattr(lexical, "_CHARS_PER_STATEMENT", 60)  # about one record per slice
    sliced = LexicalIndex.open(data_dir, "sliced")
    sliced.upsert(records(DOCS))  # type: ignore[arg-type]
    again = {"a": "Drones do not sting.", "e": "Wax moths eat old comb."}
    for idx in (index, sliced):
        idx.upsert(records(again, lang="en"))  # type: ignore[arg-type]
    assert sliced.ids() == index.ids() == {*DOCS, "e"}
    for question in ("queen", "drones", "moths comb", "honey frames"):
        assert sliced.search(question, k=9) == index.search(question, k=9)
    assert sliced.search("drones", 5, {"lang": "en"}) == index.search("drones", 5, {"lang": "en"})


@given(
    st.lists(st.tuples(st.text(max_size=3), st.text(max_size=40), st.text(max_size=5))),
    st.integers(min_value=1, max_value=60),
)
def test_slices_keep_every_row_in_order_within_the_budget(
    rows: list[tuple[str, str, str]], budget: int
) -> None:
    parts = list(lexical._slices(rows, budget))
    assert [row for part in parts for row in part] == rows
    for part in parts:
        assert part and (len(part) == 1 or sum(len(x) for row in part for x in row) <= budget)


def test_work_alongside_runs_on_its_own_thread_and_is_waited_for(index: LexicalIndex) -> None:
    ran: list[str] = []

    def work() -> None:
        time.sleep(0.2)  # still running when the words are in: the upsert waits for it
        ran.append(threading.current_thread().name)

    assert index.upsert(records({"e": "Wax moths eat old comb."}), work) == 1  # type: ignore[arg-type]
    assert ran and ran[0] != threading.current_thread().name
    assert "e" in index.search("moths", k=5)


def test_an_error_alongside_is_raised_and_the_words_roll_back(index: LexicalIndex) -> None:
    def work() -> None:
        raise ConnectionError("the vector store went away")

    with pytest.raises(ConnectionError, match="went away"):
        index.upsert(records({"e": "Wax moths eat old comb."}), work)  # type: ignore[arg-type]
    assert index.ids() == set(DOCS)


def test_texts_with_nul_and_control_characters_round_trip(index: LexicalIndex) -> None:
    """Whatever text a loader passes is indexed whole: the words after a NUL count too."""
    odd = {"e": "Wax\x00moths eat\x01old comb.", "f": "Propolis seals\x00\x00cracks."}
    index.upsert(records(odd, note="a\x00b"))  # type: ignore[arg-type]
    got = index.records(["e", "f"])
    assert {i: text for i, (text, _) in got.items()} == odd
    assert got["e"][1]["note"] == "a\x00b"
    assert set(index.search("moths", 5)) == {"e"} and set(index.search("cracks", 5)) == {"f"}
    index.upsert(records({"e": "Drones\x00gone."}))  # type: ignore[arg-type]
    assert index.search("moths", 5) == {} and set(index.search("drones", 5)) == {"e"}


def test_delete_removes_ids_and_their_words(index: LexicalIndex) -> None:
    assert index.delete(["a", "c", "never-there"]) == 3
    assert index.ids() == {"b", "d"} and index.count() == 2
    assert index.search("queen", k=5) == {}
    assert index.delete([]) == 0


def test_where_filters_on_flat_metadata_values_and_types(data_dir: Path) -> None:
    idx = LexicalIndex.open(data_dir, "typed")
    idx.upsert(
        [
            ("x", "bees in spring", {"source": "x.md", "page": 3, "h2": 'Say "hi"'}),
            ("y", "bees in summer", {"source": "y.md", "page": 4, "odd key": "v"}),
        ]
    )
    assert set(idx.search("bees", 5, {"source": "x.md"})) == {"x"}
    assert set(idx.search("bees", 5, {"page": 4})) == {"y"}
    assert idx.search("bees", 5, {"page": "4"}) == {}  # a string is not the number 4
    assert set(idx.search("bees", 5, {"h2": 'Say "hi"'})) == {"x"}
    assert set(idx.search("bees", 5, {"odd key": "v"})) == {"y"}
    assert idx.search("bees", 5, {"source": "x.md", "page": 4}) == {}


def test_scores_of_chosen_ids_include_non_matching_ones_as_zero(index: LexicalIndex) -> None:
    full = index.search("queen", k=10)
    got = index.scores("queen", ["a", "b", "missing"])
    assert got == {"a": full["a"], "b": 0.0}
    assert index.scores("queen", ["a", "c"], where={"source": "c.md"}) == {"c": full["c"]}


def test_the_index_persists_and_reopens_read_only(data_dir: Path, index: LexicalIndex) -> None:
    index.close()
    ro = LexicalIndex(database_path(data_dir, "docflow"), readonly=True)
    assert ro.ids() == set(DOCS)
    with pytest.raises(StateError, match="readonly"):
        ro.delete(["a"])


def test_a_failed_upsert_leaves_the_index_as_it_was(index: LexicalIndex) -> None:
    def broken() -> object:
        yield ("e", "new words here", {"source": "e.md"})
        raise RuntimeError("disk died")

    with pytest.raises(RuntimeError):
        index.upsert(broken())  # type: ignore[arg-type]
    assert index.ids() == set(DOCS)


def test_drop_and_names(data_dir: Path, index: LexicalIndex) -> None:
    LexicalIndex.open(data_dir, "docflow--v20240101T000000-abcdef").close()
    assert lexical.physical_names(data_dir) == ["docflow", "docflow--v20240101T000000-abcdef"]
    index.close()
    assert lexical.drop(data_dir, "docflow") is True
    assert lexical.drop(data_dir, "docflow") is False
    assert lexical.physical_names(data_dir) == ["docflow--v20240101T000000-abcdef"]
    assert not list((data_dir / "lexical").glob("docflow.sqlite*"))


def test_long_collection_names_get_a_short_hashed_file_name(data_dir: Path) -> None:
    long = "c" * 500
    name = database_name(long)
    assert len(name) <= 255 and name.endswith(".sqlite") and name != database_name("c" * 499)
    LexicalIndex.open(data_dir, long).close()
    assert LexicalIndex.exists(data_dir, long)
    assert lexical.drop(data_dir, lexical.physical_names(data_dir)[0])
    assert not LexicalIndex.exists(data_dir, long)
