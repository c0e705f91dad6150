"""The lexical index: BM25 over the chunks, in SQLite FTS5, beside the vector store.

Chroma ranks by meaning; questions that name a rare term, a figure or a code are often
answered better by the words themselves. Local Chroma has no sparse index ("Sparse vector
indexing is not enabled in local"), so docflow keeps its own: one SQLite database per
physical collection, ``<data_dir>/lexical/<physical>.sqlite``, holding exactly the chunk
ids the vector store holds (the store stage writes both, in the same crash-safe order; see
tasks/index/collection.py). SQLite is in the standard library, transactional like the manifest, and
FTS5 inserts and deletes incrementally and ranks by BM25 (k1 = 1.2, b = 0.75).

What is indexed for a chunk is what the embedding model reads
(``tasks.common.documents.model_input``: the document's title, description and header
path, then the chunk text), tokenised by FTS5's ``unicode61`` tokenizer (case and
diacritics folded) with Porter stemming.

A question becomes its distinct words minus English function words (:data:`STOP_WORDS`:
"when", "the", "what"... carry no subject, yet in a small collection they are rare
enough for BM25 to rank by them), OR-ed: BM25 sums the weight of the words a chunk has.
Scores are *relative*: a chunk's BM25 divided by the best BM25 any chunk could get for
the question (:meth:`LexicalIndex.best_score`: ``k1 + 1`` times the sum of its words'
IDF, the limit of many occurrences of every word), so they lie in [0, 1): about 0.45 is
"every word of the question once, in a chunk of average length". A question of common
words only, or of words the collection lacks, scores near 0; and a chunk's score does
not depend on which other chunks a ``where`` filter keeps (IDF is over the whole
index). Measured on every shared evaluation set, dropping function words helped BM25 on
each (docs/retrieval.md, "Choosing the default"); Porter stemming beat no stemming on each.
``where`` filters compare the chunk's flat metadata (the same keys and values Chroma
stores) for equality.

One module over ~400 lines on purpose: the schema, its writes and the BM25 read from it
are one index, and the scores' definition reads beside the rows they are computed from.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.common.concurrency import running_beside
from tasks.common.names import file_name
from tasks.common.sqlite import SQLiteFile

#: Folder of the lexical databases inside the data dir.
LEXICAL_DIR = "lexical"
SUFFIX = ".sqlite"
#: Porter stemming over unicode61 (case folding, diacritics removed, Unicode word rules).
TOKENIZER = "porter unicode61 remove_diacritics 2"
#: FTS5's BM25 term-frequency saturation (fixed in SQLite; b = 0.75 is the other constant).
BM25_K1 = 1.2
#: Ids per ``... IN (...)``: under SQLite's limit on bound variables.
_IDS_PER_QUERY = 500
#: Characters of rows per statement of a write (SQLite refuses a string over 1e9 bytes).
_CHARS_PER_STATEMENT = 50_000_000
#: The rows of a write, bound as one JSON array of ``[chunk_id, body, metadata]``.
_ROWS = """(SELECT json_extract(value, '$[0]') AS chunk_id, json_extract(value, '$[1]') AS body,
    json_extract(value, '$[2]') AS metadata FROM json_each(?1))"""

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS chunks (
    id        INTEGER PRIMARY KEY,
    chunk_id  TEXT NOT NULL UNIQUE,
    metadata  TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS terms USING fts5(body, tokenize = '{TOKENIZER}');
"""

#: A word of a query, as unicode61 sees words (letters and digits; "_" separates).
_WORD = re.compile(r"[^\W_]+")

Scalar = str | int | float | bool

#: English function words a question's lexical side ignores (NLTK's English list, which
#: also holds the contraction pieces "don", "t", "ll"... that :data:`_WORD` splits off).
STOP_WORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren aren't as at be because
    been before being below between both but by can couldn couldn't d did didn didn't do does
    doesn doesn't doing don don't down during each few for from further had hadn hadn't has
    hasn hasn't have haven haven't having he her here hers herself him himself his how i if in
    into is isn isn't it it's its itself just ll m ma me mightn mightn't more most mustn
    mustn't my myself needn needn't no nor not now o of off on once only or other our ours
    ourselves out over own re s same shan shan't she she's should should've shouldn shouldn't
    so some such t than that that'll the their theirs them themselves then there these they
    this those through to too under until up ve very was wasn wasn't we were weren weren't
    what when where which while who whom why will with won won't wouldn wouldn't y you you'd
    you'll you're you've your yours yourself yourselves
    """.split()
)


def query_words(text: str, stop_words: bool = True) -> list[str]:
    """Return the distinct words of ``text``, lower-cased, in order (minus stop words)."""
    words = dict.fromkeys(w.lower() for w in _WORD.findall(text))
    return [w for w in words if not (stop_words and w in STOP_WORDS)]


def match_expression(words: Sequence[str]) -> str:
    """Return the FTS5 query for words: each quoted, joined by OR ("" for no word).

    Quoting makes every word a literal (no FTS5 operators or column filters from user
    text).
    """
    return " OR ".join(_quoted(w) for w in words)


def _quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


def idf(rows: int, having: int) -> float:
    """Return FTS5's BM25 weight of a word in ``having`` of ``rows`` chunks.

    ``log((N - n + 0.5) / (n + 0.5))``, and 1e-6 where that is not positive (a word in
    half the chunks or more), as in SQLite's fts5_aux.c.
    """
    weight = math.log((rows - having + 0.5) / (having + 0.5))
    return weight if weight > 0 else 1e-6


def database_name(physical: str) -> str:
    """Return the file name of a physical collection's database (long names are hashed)."""
    return file_name(physical, SUFFIX)


def database_path(data_dir: Path, physical: str) -> Path:
    """Return where the lexical index of ``physical`` lives in ``data_dir``."""
    return data_dir / LEXICAL_DIR / database_name(physical)


def _json_path(key: str) -> str:
    """Return the JSON path of a top-level key, quoted so any key name works."""
    return '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _chunked(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for lo in range(0, len(items), _IDS_PER_QUERY):
        yield items[lo : lo + _IDS_PER_QUERY]


def _slices(
    rows: Sequence[tuple[str, str, str]], budget: int | None = None
) -> Iterator[list[tuple[str, str, str]]]:
    """Cut ``rows`` into runs of ``budget`` characters (:data:`_CHARS_PER_STATEMENT`) at most.

    A row longer than that goes alone.
    """
    budget = budget or _CHARS_PER_STATEMENT
    part: list[tuple[str, str, str]] = []
    size = 0
    for row in rows:
        length = sum(map(len, row))
        if part and size + length > budget:
            yield part
            part, size = [], 0
        part.append(row)
        size += length
    if part:
        yield part


def _wire(rows: Sequence[tuple[str, str, str]]) -> list[tuple[str, str | None, str]]:
    """Return ``rows`` as they go into a statement's JSON: a body with a NUL as null."""
    return [(i, None if "\x00" in body else body, meta) for i, body, meta in rows]


class LexicalIndex(SQLiteFile):
    """The BM25 index of one physical collection (open one per use, or hold one: held.py)."""

    SCHEMA = SCHEMA

    @classmethod
    def open(cls, data_dir: Path, physical: str) -> LexicalIndex:
        """Open the lexical index of ``physical`` in ``data_dir``, creating it if missing."""
        return cls(database_path(data_dir, physical))

    def damaged(self, exc: Exception) -> str:
        """Return the one-line error of an unreadable lexical index, with its cure."""
        return (
            f"the lexical index {self.path} is damaged ({exc}): the next docflow ingest "
            "rebuilds it from the vector store"
        )

    @staticmethod
    def exists(data_dir: Path, physical: str) -> bool:
        """Return whether ``physical`` has a lexical index in ``data_dir``."""
        return database_path(data_dir, physical).is_file()

    # -- writing ----------------------------------------------------------------------------

    def upsert(
        self,
        records: Iterable[tuple[str, str, Mapping[str, Scalar]]],
        alongside: Callable[[], object] | None = None,
    ) -> int:
        """Index ``(chunk_id, body, metadata)`` records, replacing those already there.

        One transaction: a crash leaves the index as it was before the call. The rows go
        in as one JSON array per statement (``json_each``), which SQLite works through
        without the GIL; a statement per row would retake it at every row, each time
        behind any busy thread of the process (docs/performance.md, "The store stage").
        An id already present has its words removed first.

        ``alongside``: work to run on a thread of its own while SQLite indexes the words
        (the vector store's upsert: an embedded Chroma holds the GIL for the whole of it,
        which that statement does not need). It starts once the quick statements are done,
        right before the words' (about three quarters of the time: a statement that ends
        waits for the GIL, so only one can run beside Chroma), is called exactly once and
        is waited for before the transaction commits; its error is raised first (and
        nothing is committed).
        """
        rows = [
            (chunk_id, body, json.dumps(dict(meta), ensure_ascii=False, sort_keys=True))
            for chunk_id, body, meta in records
        ]
        if not rows:
            if alongside is not None:
                alongside()
            return 0
        payloads = [(json.dumps(_wire(part), ensure_ascii=False),) for part in _slices(rows)]
        # json_extract ends a string at a NUL: such bodies go bound, a statement each (rare)
        with_nul = [(body, chunk_id) for chunk_id, body, _ in rows if "\x00" in body]
        with self._transaction() as db, running_beside(alongside) as start:
            for payload in payloads:  # the ids' old words out, their rows in: quick
                db.execute(
                    "DELETE FROM terms WHERE rowid IN (SELECT c.id FROM chunks c "
                    f"JOIN {_ROWS} j ON c.chunk_id = j.chunk_id)",
                    payload,
                )
                db.execute(
                    f"INSERT INTO chunks (chunk_id, metadata) SELECT chunk_id, metadata "
                    f"FROM {_ROWS} WHERE true "
                    "ON CONFLICT (chunk_id) DO UPDATE SET metadata = excluded.metadata",
                    payload,
                )
            start()
            for payload in payloads:
                db.execute(
                    "INSERT INTO terms (rowid, body) SELECT c.id, j.body "
                    f"FROM {_ROWS} j JOIN chunks c ON c.chunk_id = j.chunk_id "
                    "WHERE j.body IS NOT NULL",
                    payload,
                )
            db.executemany(
                "INSERT INTO terms (rowid, body) SELECT id, ? FROM chunks WHERE chunk_id = ?",
                with_nul,
            )
        return len(rows)

    def delete(self, chunk_ids: Iterable[str]) -> int:
        """Remove chunks by id (ids not present are ignored); return how many were asked.

        One JSON array of the ids, as in :meth:`upsert`.
        """
        todo = sorted(set(chunk_ids))
        wanted = "SELECT id FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))"
        payload = (json.dumps(todo),)
        with self._transaction() as db:
            db.execute(f"DELETE FROM terms WHERE rowid IN ({wanted})", payload)
            db.execute(f"DELETE FROM chunks WHERE id IN ({wanted})", payload)
        return len(todo)

    # -- reading ----------------------------------------------------------------------------

    def count(self) -> int:
        """Return the number of indexed chunks."""
        return int(self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def ids(self) -> set[str]:
        """Return every indexed chunk id."""
        return {str(r[0]) for r in self.db.execute("SELECT chunk_id FROM chunks")}

    def search(
        self,
        text: str,
        k: int,
        where: Mapping[str, Scalar] | None = None,
        stop_words: bool = True,
    ) -> dict[str, float]:
        """Return up to ``k`` chunk ids that share words with ``text``, best first.

        Scores are relative BM25 (see the module docstring), higher is better; chunks
        without any word of the question are not returned.
        """
        return self._scores(text, where, ids=None, limit=k, stop_words=stop_words)

    def scores(
        self,
        text: str,
        chunk_ids: Iterable[str],
        where: Mapping[str, Scalar] | None = None,
        stop_words: bool = True,
    ) -> dict[str, float]:
        """Return the relative BM25 score of each of ``chunk_ids`` (0.0 without a match).

        Ids not in the index (or filtered out by ``where``) are left out.
        """
        wanted = sorted(set(chunk_ids))
        out: dict[str, float] = {}
        for part in _chunked(wanted):
            marks = ",".join("?" * len(part))
            clause, args = self._where(where)
            present = self.db.execute(
                f"SELECT c.chunk_id FROM chunks c WHERE c.chunk_id IN ({marks}){clause}",
                (*part, *args),
            ).fetchall()
            out.update({str(r[0]): 0.0 for r in present})
            out.update(self._scores(text, where, ids=part, limit=None, stop_words=stop_words))
        return out

    def best_score(self, text: str, stop_words: bool = True) -> float:
        """Return the BM25 no chunk reaches for ``text``: ``k1 + 1`` times its words' IDF.

        A word's BM25 term tends to ``(k1 + 1) * IDF`` as it occurs more often; relative
        scores are divided by this bound. Words no chunk has count with the IDF of a word
        in no chunk, so a question the collection cannot answer by its words scores low;
        function words (and words in half the chunks or more) weigh next to nothing.
        0.0 for a question without words.
        """
        words = query_words(text, stop_words)
        if not words:
            return 0.0
        rows = self.count()
        total = 0.0
        for word in words:
            having = self.db.execute(
                "SELECT count(*) FROM terms WHERE terms MATCH ?", (_quoted(word),)
            ).fetchone()[0]
            total += idf(rows, int(having))
        return (BM25_K1 + 1.0) * total

    def records(self, chunk_ids: Sequence[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """Return ``{chunk_id: (text, metadata)}`` of indexed chunks, without the vector store.

        The indexed body is the chunk's text after its context block, and the text is the
        exact span ``start_index:end_index`` of its document: its length is the body's tail
        to take. What a lexical query shows while the Chroma server does not answer.
        """
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for part in _chunked(list(chunk_ids)):
            rows = self.db.execute(
                "SELECT c.chunk_id, c.metadata, t.body FROM chunks c "
                f"JOIN terms t ON t.rowid = c.id WHERE c.chunk_id IN ({','.join('?' * len(part))})",
                tuple(part),
            )
            for chunk_id, meta_json, body in rows:
                meta = json.loads(meta_json)
                size = int(meta.get("end_index", 0)) - int(meta.get("start_index", 0))
                text = str(body)[-size:] if 0 < size <= len(body) else str(body)
                out[str(chunk_id)] = (text, meta)
        return out

    def metadata_keys(self) -> list[str]:
        """Return every metadata key of the indexed chunks, sorted (names a bad filter)."""
        rows = self.db.execute(
            "SELECT DISTINCT j.key FROM chunks, json_each(chunks.metadata) AS j ORDER BY 1"
        )
        return [str(r[0]) for r in rows]

    def _scores(
        self,
        text: str,
        where: Mapping[str, Scalar] | None,
        ids: Sequence[str] | None,
        limit: int | None,
        stop_words: bool,
    ) -> dict[str, float]:
        expression = match_expression(query_words(text, stop_words))
        if not expression or limit == 0:
            return {}
        clause, args = self._where(where)
        if ids is not None:
            clause += f" AND c.chunk_id IN ({','.join('?' * len(ids))})"
            args = (*args, *ids)
        sql = (
            "SELECT c.chunk_id, -bm25(terms) AS score FROM terms "
            f"JOIN chunks c ON c.id = terms.rowid WHERE terms MATCH ?{clause} "
            "ORDER BY score DESC, c.chunk_id"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self.db.execute(sql, (expression, *args)).fetchall()
        if not rows:
            return {}
        best = self.best_score(text, stop_words)
        return {str(chunk_id): float(score) / best for chunk_id, score in rows}

    @staticmethod
    def _where(where: Mapping[str, Scalar] | None) -> tuple[str, tuple[Any, ...]]:
        """Return the SQL (``AND ...``) and arguments of an equality filter on metadata."""
        clause, args = "", ()  # type: tuple[str, tuple[Any, ...]]
        for key, value in (where or {}).items():
            clause += " AND json_extract(c.metadata, ?) = ?"
            args = (*args, _json_path(key), value)
        return clause, args


def drop(data_dir: Path, physical: str) -> bool:
    """Delete the lexical index of ``physical`` (its database and WAL files), if any."""
    path = database_path(data_dir, physical)
    found = path.exists()
    for extra in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + extra).unlink(missing_ok=True)
    return found


def physical_names(data_dir: Path) -> list[str]:
    """Return the physical collections that have a lexical index in ``data_dir``.

    Hashed long names come back as their file stem (enough to drop them).
    """
    folder = data_dir / LEXICAL_DIR
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(SUFFIX)] for p in folder.glob("*" + SUFFIX))
