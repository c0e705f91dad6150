r"""Exact token counts of document spans from ONE tokenization of the document.

Encoding every candidate piece on its own (what LangChain's length functions do) tokenizes
the text several times over. A span counter instead takes the document's tokens once and
answers ``count(start, end) == len(encode(text[start:end]))`` exactly:

- tokenizers pre-split text (tiktoken with a regex, BERT on whitespace and punctuation) and
  then encode each pre-token on its own, so at a position that is a pre-token boundary
  whatever surrounds it, a span and the whole document are tokenized the same way;
- the tokens of a span between its first and last such boundary are the document's tokens
  there (binary searches); only the short edges outside them (the partial word at each end)
  are encoded on their own, through a bounded memo of edge strings.

Boundaries that hold for every tiktoken pattern (cl100k, o200k, gpt2): a space after a
non-space (a space only ever leads a pre-token or sits in an all-whitespace one), a non-space
after a line feed (a line break only ever ends one), and an ASCII letter or digit followed by
a line break or by ASCII punctuation other than the apostrophe (letter and digit runs end
there). One more holds only when the span goes on past it (a "weak" boundary): the last
space or tab of a run of whitespace before a non-space (``\s+(?!\S)`` leaves it to the next
pre-token; at the end of a span the run would stay whole), which splits indentation from
the first word of a line. For BERT-style tokenizers: either side of whitespace or of ASCII
punctuation.

For tiktoken the rules need only the classes of the characters around each token start,
and a token's bytes tell those (:class:`TokenTables`, built once per vocabulary): the
boundaries are one pass over the document's token ids, and the characters themselves are
read only where one is split over tokens. That pass and the span counts are compiled loops
(:mod:`tasks.split.kernels`); the BERT-style counter stays in numpy and Python.

One module over ~400 lines on purpose: the boundary rules, the token tables and the memo
they feed are one algorithm, and the proof that the counts are exact reads top to bottom.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from tasks.split.kernels import EdgeMemo

#: Edge strings whose standalone counts are memoised per unit (the memo is cleared when full).
EDGE_MEMO_SIZE = 65_536
#: Below this many spans, counting them one by one beats the vectorised path.
_FEW = 8

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
#: What ``str.isspace`` (and regex ``\s``) calls whitespace: ASCII, then the rest.
_ASCII_SPACES = "".join(c for c in map(chr, range(128)) if c.isspace())
_WIDE_SPACES = tuple(i for i in range(128, 0x3001) if chr(i).isspace())
#: BERT's whitespace: space, tab, line breaks and the Unicode space separators (Zs).
_BERT_SPACES = " \t\n\r"
_BERT_WIDE_SPACES = (0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000)

# character classes (4 bits, so a pair of them indexes a 256-entry rule table)
_OTHER, _WORD, _MARK, _BLANK, _LF, _CR, _SPACE, _QUOTE, _TAB = range(9)
# per token id only: the token has one character (the next token's first tells); the token
# starts inside a character (never a boundary); its bytes alone do not tell (see the text)
_NEXT, _MID, _UNKNOWN = 13, 14, 15
_WHITE = frozenset((_BLANK, _LF, _CR, _SPACE, _TAB))
_tables: dict[str, np.ndarray] = {}


class SpanCounter(Protocol):
    """The length of ``text[start:end]`` for one bound document text."""

    def __call__(self, start: int, end: int) -> int:
        """Return the length of the span ``[start, end)``."""
        ...


def _char_codes(text: str) -> np.ndarray:
    """Return the code points of ``text`` (uint8 for ASCII text, else uint32)."""
    import numpy as np

    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _classes(codes: np.ndarray, spaces: str, wide_spaces: tuple[int, ...]) -> np.ndarray:
    """Return per character its class: word, punctuation, quote, kinds of space, other."""
    import numpy as np

    table = _tables.get(spaces)
    if table is None:
        table = np.full(128, _OTHER, dtype=np.uint8)
        for chars, cls in (
            (_ALNUM, _WORD),
            (_PUNCT, _MARK),
            ("'", _QUOTE),
            (spaces, _SPACE),
            (" ", _BLANK),
            ("\n", _LF),
            ("\r", _CR),
            ("\t", _TAB),
        ):
            table[[ord(c) for c in chars if c in spaces or cls not in _WHITE]] = cls
        _tables[spaces] = table
    if codes.dtype == np.uint8:
        ascii_classes: np.ndarray = table[codes]
        return ascii_classes
    classes: np.ndarray = table[np.minimum(codes, 127)]
    wide = np.flatnonzero(codes > 127)
    is_space = np.isin(codes[wide], np.array(wide_spaces, dtype=np.uint32))
    classes[wide] = np.where(is_space, _SPACE, _OTHER)
    return classes


def _class_table(spaces: str, wide_spaces: tuple[int, ...]) -> np.ndarray:
    """Return the class of every code point up to U+3000, and one more entry for the rest.

    (No code point above U+3000 is whitespace.) Indexing it with ``min(code, len - 1)``
    classifies any text in one gather.
    """
    import numpy as np

    key = f"full:{spaces}"
    table = _tables.get(key)
    if table is None:
        wide = np.arange(128, 0x3002, dtype=np.uint32)
        table = np.concatenate(
            (_classes(np.arange(128, dtype=np.uint8), spaces, wide_spaces),
             _classes(wide, spaces, wide_spaces))
        )  # fmt: skip
        _tables[key] = table
    return table


def _tiktoken_rule(before: int, here: int) -> bool:
    """Return whether a position between characters of these classes is a tiktoken boundary."""
    if here == _BLANK and before not in _WHITE:
        return True
    if before == _LF and here not in _WHITE:
        return True
    return before == _WORD and here in (_MARK, _LF, _CR)


def _weak_rule(before: int, here: int) -> bool:
    """Return whether ``here`` is the last space/tab of a whitespace run (if a non-space follows).

    Only these classes are surely regex whitespace (``_SPACE`` also holds U+001C..U+001F).
    """
    return here in (_BLANK, _TAB) and before in (_BLANK, _TAB, _LF, _CR)


def _bert_rule(before: int, here: int) -> bool:
    """Return whether a position between characters of these classes is a BERT boundary."""
    return bool({before, here} & {*_WHITE, _MARK, _QUOTE})


_NON_WHITE = tuple(c for c in range(16) if c not in _WHITE)


def _table_of(classes: tuple[int, ...]) -> np.ndarray:
    """Return a 16-entry table: is a class one of ``classes``."""
    import numpy as np

    key = f"in:{classes}"
    table = _tables.get(key)
    if table is None:
        table = np.isin(np.arange(16), classes)
        _tables[key] = table
    return table


def _pair_table() -> np.ndarray:
    """Return per class pair: 1 a tiktoken boundary, 2 a weak one if a non-space follows.

    3: a class is ``_UNKNOWN`` (look at the characters); a token starting inside a
    character (``_MID``) is never a boundary.
    """
    import numpy as np

    table = _tables.get("tiktoken-pairs")
    if table is None:
        strong = _rule_table("tiktoken", _tiktoken_rule)
        weak = _rule_table("tiktoken-weak", _weak_rule)
        table = np.where(strong, 1, np.where(weak, 2, 0)).astype(np.uint8)
        before, here = np.arange(256) >> 4, np.arange(256) & 15
        table[(before == _UNKNOWN) | (here == _UNKNOWN)] = 3
        table[here == _MID] = 0
        _tables["tiktoken-pairs"] = table
    return table


def _rule_table(name: str, rule: Callable[[int, int], bool]) -> np.ndarray:
    import numpy as np

    table = _tables.get(name)
    if table is None:
        table = np.array([rule(i >> 4, i & 15) for i in range(256)], dtype=bool)
        _tables[name] = table
    return table


class OffsetCounter:
    """Exact span lengths from one tokenization of a document (see the module docstring).

    Subclasses find the document's pre-token boundaries (:meth:`boundaries`).
    """

    __slots__ = ("_boundaries", "_encode_count", "_memo", "_weak", "text")
    _spaces = _ASCII_SPACES
    _wide_spaces = _WIDE_SPACES

    def __init__(self, text: str, count: Callable[[str], int], memo: dict[str, int]) -> None:
        """Bind to a document.

        Args:
            text: The document text.
            count: Counts the tokens of a string encoded on its own.
            memo: Standalone counts of edge strings, shared by the documents of a unit.

        """
        self.text = text
        self._boundaries: tuple[np.ndarray, np.ndarray] | None = None
        self._weak: np.ndarray | None = None  # per character: a weak boundary (or None)
        self._encode_count = count
        self._memo = memo

    def boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the boundary positions (with 0 and the end) and the tokens before each."""
        raise NotImplementedError

    def _alone(self, piece: str) -> int:
        """Return the standalone length of an edge string (memoised)."""
        n = self._memo.get(piece)
        if n is None:
            n = self._encode_count(piece)
            if len(self._memo) >= EDGE_MEMO_SIZE:
                self._memo.clear()
            self._memo[piece] = n
        return n

    def __call__(self, start: int, end: int) -> int:
        """Return the number of tokens of ``text[start:end]`` encoded alone."""
        if end <= start:
            return 0
        boundaries, before = self.boundaries()
        first = int(boundaries.searchsorted(start))
        last = int(boundaries.searchsorted(end, "right")) - 1
        weak = self._weak
        if weak is not None and weak[end - 1] and end - 1 > start:
            # a weak boundary needs the character after it inside the span
            first += int(boundaries[first] == end - 1)
            last -= int(boundaries[last] == end - 1)
        if first > last:
            return self._alone(self.text[start:end])
        head, tail = int(boundaries[first]), int(boundaries[last])
        n = int(before[last]) - int(before[first])
        if head > start:
            n += self._alone(self.text[start:head])
        if tail < end:
            n += self._alone(self.text[tail:end])
        return n

    def counts(self, bounds: list[int]) -> list[int]:
        """Return the length of every piece ``[bounds[i], bounds[i + 1])`` (sorted bounds)."""
        if len(bounds) <= _FEW:
            return [self(s, e) for s, e in zip(bounds, bounds[1:], strict=False)]
        return self.count_spans(bounds[:-1], bounds[1:])

    def count_spans(self, starts: list[int], ends: list[int]) -> list[int]:
        """Return the length of every span ``[starts[i], ends[i])`` (vectorised when many).

        Only the spans whose ends are not boundaries cost an edge look-up (most ends are).
        """
        if len(starts) < _FEW:
            return [self(s, e) for s, e in zip(starts, ends, strict=True)]
        import numpy as np

        (boundaries, before), text = self.boundaries(), self.text
        lo, hi = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        first = boundaries.searchsorted(lo)
        last = boundaries.searchsorted(hi, "right")
        last -= 1
        if self._weak is not None:
            bad = self._weak[hi - 1]  # a weak boundary just before the end is none
            if bad.any():
                bad &= hi - 1 > lo
                first += bad & (boundaries[first] == hi - 1)
                last -= bad & (boundaries[last] == hi - 1)
        inside = before[last]
        inside -= before[first]
        memo, alone = self._memo, self._alone
        counts: list[int] = []
        append = counts.append
        for s, e, head, tail, n in zip(
            starts,
            ends,
            boundaries[first].tolist(),
            boundaries[last].tolist(),
            inside.tolist(),
            strict=True,
        ):
            if tail < head:  # no boundary inside: a single edge (or an empty span)
                append(alone(text[s:e]) if e > s else 0)
                continue
            if head > s:
                edge = text[s:head]
                n += memo.get(edge) or alone(edge)
            if tail < e:
                edge = text[tail:e]
                n += memo.get(edge) or alone(edge)
            append(n)
        return counts


@dataclass(frozen=True, slots=True)
class TokenTables:
    """What a byte-level BPE vocabulary's tokens say about characters, per token id.

    A token's bytes tell how many characters it starts and, mostly, the classes of its first,
    second and last characters; so a document's boundaries come from its token ids alone,
    without classifying its characters. Where the bytes do not tell (a character split over
    tokens) the class is ``_UNKNOWN`` and the counter looks at the text there.
    """

    started: np.ndarray  # characters the token starts (its non-continuation bytes)
    inside: np.ndarray  # 1 if its first byte continues a character begun before it
    #: all of it in one word per token (one cache line per look-up), bits from the lowest:
    #: started (10), inside (1), then the classes of its first (``_MID`` if it starts inside
    #: a character), second (``_NEXT`` if it has only one) and last characters (4 each)
    packed: np.ndarray


def _utf8_width(lead: int) -> int:
    """Return the length of the UTF-8 sequence a lead byte starts (0: a continuation byte)."""
    if lead < 0x80:
        return 1
    if lead < 0xC0:
        return 0
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def token_tables(tokens: Iterable[tuple[int, bytes]], size: int) -> TokenTables:
    """Return the :class:`TokenTables` of a vocabulary given as ``(id, bytes)`` pairs."""
    import numpy as np

    classes = _class_table(_ASCII_SPACES, _WIDE_SPACES).tolist()  # what the text's would be
    ascii_table = classes[:128]

    def kind(token: bytes, at: int) -> int:
        """Return the class of the character whose lead byte is ``token[at]``."""
        width = _utf8_width(token[at])
        if width == 1:
            return int(ascii_table[token[at]])
        piece = token[at : at + width]
        if width == 0 or len(piece) < width:
            return _UNKNOWN
        try:
            code = ord(piece.decode("utf-8"))
        except UnicodeDecodeError:
            return _UNKNOWN
        return int(classes[min(code, len(classes) - 1)])

    started = np.zeros(size, dtype=np.int64)
    inside = np.zeros(size, dtype=np.uint8)
    first = np.full(size, _UNKNOWN, dtype=np.uint8)
    second = np.full(size, _UNKNOWN, dtype=np.uint8)
    last = np.full(size, _UNKNOWN, dtype=np.uint8)
    for rank, token in tokens:
        if not token:
            continue
        if token.isascii():  # most tokens: every byte is a character
            started[rank] = len(token)
            first[rank], last[rank] = ascii_table[token[0]], ascii_table[token[-1]]
            second[rank] = ascii_table[token[1]] if len(token) > 1 else _NEXT
            continue
        leads = [i for i, byte in enumerate(token) if byte & 0xC0 != 0x80]
        started[rank] = len(leads)
        if token[0] & 0xC0 == 0x80:
            inside[rank], first[rank] = 1, _MID
        else:
            first[rank] = kind(token, 0)
            second[rank] = _NEXT if len(leads) == 1 else kind(token, leads[1])
        if leads and leads[-1] + _utf8_width(token[leads[-1]]) == len(token):
            last[rank] = kind(token, leads[-1])
    if started.max(initial=0) >= 1 << 10:
        raise ValueError("a token of over 1023 characters does not fit the packed table")
    packed = started | inside.astype(np.int64) << 10
    packed |= first.astype(np.int64) << 11 | second.astype(np.int64) << 15
    packed |= last.astype(np.int64) << 19
    return TokenTables(started.astype(np.uint16), inside, packed.astype(np.uint32))


class TiktokenCounter(OffsetCounter):
    """Span counts for tiktoken encodings (regex pre-tokenizers).

    A pre-token boundary is a token boundary on a character boundary, so the rule is only
    tested where a token starts, on classes looked up by token id (:class:`TokenTables`),
    in one compiled pass over the token ids (:mod:`tasks.split.kernels`); the tokens
    before each boundary come for free.
    """

    __slots__ = ("_codes", "_edge_keys", "_ids", "_token_tables")
    #: Every ASCII character alone is one token (byte-level BPE).
    ascii_is_one_token = True

    def __init__(
        self,
        text: str,
        ids: np.ndarray,
        tables: TokenTables,
        count: Callable[[str], int],
        memo: dict[str, int],
        edge_keys: EdgeMemo,
    ) -> None:
        """Bind to a document (see the base class for ``count`` and ``memo``).

        ``ids`` are its tokens, ``tables`` the vocabulary's, and ``edge_keys`` the unit's
        memo of short ASCII edges by their bytes (:class:`tasks.split.kernels.EdgeMemo`).
        """
        super().__init__(text, count, memo)
        self._ids = ids
        self._token_tables = tables
        self._edge_keys = edge_keys
        self._codes: np.ndarray | None = None

    def codes(self) -> np.ndarray:
        """Return the text's code points (uint8 for ASCII text), computed once."""
        if self._codes is None:
            self._codes = _char_codes(self.text)
        return self._codes

    def count_spans(self, starts: list[int], ends: list[int]) -> list[int]:
        """Return the length of every span ``[starts[i], ends[i])``, in one compiled loop.

        Edges the memo of keys lacks (new ones, long ones, non-ASCII ones) are counted as
        strings, through the string memo, and their keys remembered.
        """
        if len(starts) < _FEW:
            return [self(s, e) for s, e in zip(starts, ends, strict=True)]
        import numpy as np

        from tasks.split.kernels import count_spans, remember_edges

        (boundaries, before), codes, memo = self.boundaries(), self.codes(), self._edge_keys
        weak = self._weak if self._weak is not None else np.zeros(0, dtype=bool)
        counts, spans, lo, hi = count_spans(
            np.asarray(starts, dtype=np.int64),
            np.asarray(ends, dtype=np.int64),
            boundaries,
            before,
            weak,
            codes,
            memo.table,
        )
        if len(spans):
            text, alone = self.text, self._alone
            found = [alone(text[a:b]) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
            np.add.at(counts, spans, found)
            found_counts = np.asarray(found, dtype=np.int64)
            remember_edges(memo.table, memo.size, codes, lo, hi, found_counts)
        result: list[int] = counts.tolist()
        return result

    def boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the boundary positions (with 0 and the end) and the tokens before each."""
        import numpy as np

        from tasks.split.kernels import tiktoken_boundaries

        if self._boundaries is None:
            text, tables = self.text, self._token_tables
            codes = self.codes()  # read only where a character is split over tokens
            positions, before, weak = tiktoken_boundaries(
                self._ids,
                tables.packed,
                _pair_table(),
                _table_of(_NON_WHITE),
                codes,
                _class_table(self._spaces, self._wide_spaces),
                len(text),
            )
            if len(weak):
                self._weak = np.zeros(len(text) + 1, dtype=bool)
                self._weak[weak] = True
            self._boundaries = positions, before
        return self._boundaries


class WhitespaceCounter(OffsetCounter):
    """Span counts for BERT-style tokenizers: words never span whitespace or punctuation."""

    __slots__ = ("_starts",)
    _spaces = _BERT_SPACES
    _wide_spaces = _BERT_WIDE_SPACES

    def __init__(
        self, text: str, starts: np.ndarray, count: Callable[[str], int], memo: dict[str, int]
    ) -> None:
        """Bind to a document; ``starts`` holds each token's first character (sorted)."""
        super().__init__(text, count, memo)
        self._starts = starts

    def boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the boundary positions (with 0 and the end) and the tokens before each."""
        import numpy as np

        if self._boundaries is None:
            classes = _classes(_char_codes(self.text), self._spaces, self._wide_spaces)
            table = _rule_table("bert", _bert_rule)
            inner = np.flatnonzero(table[(classes[:-1] << 4) | classes[1:]]) + 1
            positions = np.concatenate(([0], inner, [len(self.text)])).astype(np.int64)
            self._boundaries = positions, np.searchsorted(self._starts, positions)
        return self._boundaries
