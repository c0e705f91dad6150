"""Exact token counts of document spans from ONE tokenization of the document.

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
there). For BERT-style tokenizers: either side of whitespace or of ASCII punctuation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

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

# character classes (3 bits, so a pair of them indexes a 64-entry rule table)
_OTHER, _WORD, _MARK, _BLANK, _LF, _CR, _SPACE, _QUOTE = range(8)
_WHITE = frozenset((_BLANK, _LF, _CR, _SPACE))
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


def _tiktoken_rule(before: int, here: int) -> bool:
    """Return whether a position between characters of these classes is a tiktoken boundary."""
    if here == _BLANK and before not in _WHITE:
        return True
    if before == _LF and here not in _WHITE:
        return True
    return before == _WORD and here in (_MARK, _LF, _CR)


def _bert_rule(before: int, here: int) -> bool:
    """Return whether a position between characters of these classes is a BERT boundary."""
    return bool({before, here} & {*_WHITE, _MARK, _QUOTE})


def _rule_table(name: str, rule: Callable[[int, int], bool]) -> np.ndarray:
    import numpy as np

    table = _tables.get(name)
    if table is None:
        table = np.array([rule(i >> 3, i & 7) for i in range(64)], dtype=bool)
        _tables[name] = table
    return table


class OffsetCounter:
    """Exact span lengths from one tokenization of a document (see the module docstring).

    ``starts`` holds, for every token of the document, the index of the character its first
    byte belongs to; subclasses give the pre-token boundary rule.
    """

    __slots__ = ("_boundaries", "_encode_count", "_memo", "_starts", "text")
    _spaces = _ASCII_SPACES
    _wide_spaces = _WIDE_SPACES

    def __init__(
        self, text: str, starts: np.ndarray, count: Callable[[str], int], memo: dict[str, int]
    ) -> None:
        """Bind to a document.

        Args:
            text: The document text.
            starts: Per document token, the character its first byte belongs to (sorted).
            count: Counts the tokens of a string encoded on its own.
            memo: Standalone counts of edge strings, shared by the documents of a unit.

        """
        self.text = text
        self._starts = starts
        self._boundaries: tuple[np.ndarray, np.ndarray] | None = None
        self._encode_count = count
        self._memo = memo

    @staticmethod
    def _rule(before: int, here: int) -> bool:
        raise NotImplementedError

    def boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the boundary positions (with 0 and the end) and the tokens before each."""
        import numpy as np

        if self._boundaries is None:
            classes = _classes(_char_codes(self.text), self._spaces, self._wide_spaces)
            table = _rule_table(type(self).__name__, self._rule)
            inner = np.flatnonzero(table[(classes[:-1] << 3) | classes[1:]]) + 1
            positions = np.concatenate(([0], inner, [len(self.text)])).astype(np.int64)
            self._boundaries = positions, np.searchsorted(self._starts, positions)
        return self._boundaries

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
        head = int(boundaries[first])
        if head > end:
            return self._alone(self.text[start:end])
        last = int(boundaries.searchsorted(end, "right")) - 1
        tail = int(boundaries[last])
        n = int(before[last]) - int(before[first])
        if head > start:
            n += self._alone(self.text[start:head])
        if tail < end:
            n += self._alone(self.text[tail:end])
        return n

    def counts(self, bounds: list[int]) -> list[int]:
        """Return the length of every piece ``[bounds[i], bounds[i + 1])``."""
        if len(bounds) <= _FEW:
            return [self(s, e) for s, e in zip(bounds, bounds[1:], strict=False)]
        import numpy as np

        cuts = np.asarray(bounds, dtype=np.int64)
        return self._count(bounds[:-1], bounds[1:], cuts[:-1], cuts[1:])

    def count_spans(self, starts: list[int], ends: list[int]) -> list[int]:
        """Return the length of every span ``[starts[i], ends[i])`` (vectorised when many)."""
        if len(starts) < _FEW:
            return [self(s, e) for s, e in zip(starts, ends, strict=True)]
        import numpy as np

        lo, hi = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        return self._count(starts, ends, lo, hi)

    def _count(
        self, starts: list[int], ends: list[int], lo: np.ndarray, hi: np.ndarray
    ) -> list[int]:
        import numpy as np

        (boundaries, before), text = self.boundaries(), self.text
        first = np.searchsorted(boundaries, lo)
        last = np.searchsorted(boundaries, hi, "right") - 1
        heads, tails = boundaries[first], boundaries[last]
        whole = heads > hi  # no boundary inside: the span is a single edge
        inside = before[last] - before[first]
        if whole.any():
            inside[whole] = 0
            heads[whole] = hi[whole]
            tails[whole] = hi[whole]
        head_keys = [text[s:h] for s, h in zip(starts, heads.tolist(), strict=True)]
        tail_keys = [text[t:e] for t, e in zip(tails.tolist(), ends, strict=True)]
        head_n = list(map(self._memo.get, head_keys))
        tail_n = list(map(self._memo.get, tail_keys))
        for values, keys in ((head_n, head_keys), (tail_n, tail_keys)):
            if None in values:
                for i, value in enumerate(values):
                    if value is None:
                        values[i] = self._alone(keys[i])
        return [a + b + c for a, b, c in zip(inside.tolist(), head_n, tail_n, strict=True)]


class TiktokenCounter(OffsetCounter):
    """Span counts for tiktoken encodings (regex pre-tokenizers).

    A pre-token boundary is a token boundary on a character boundary, so the rule is only
    tested where a token starts a character: a quarter of the positions, and the tokens
    before each boundary come for free.
    """

    __slots__ = ("_cuttable",)
    #: Every ASCII character alone is one token (byte-level BPE).
    ascii_is_one_token = True
    _rule = staticmethod(_tiktoken_rule)

    def __init__(
        self,
        text: str,
        starts: np.ndarray,
        count: Callable[[str], int],
        memo: dict[str, int],
        cuttable: np.ndarray | None = None,
    ) -> None:
        """Bind to a document; ``cuttable`` marks tokens that start a character (None: all)."""
        super().__init__(text, starts, count, memo)
        self._cuttable = cuttable

    def boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the boundary positions (with 0 and the end) and the tokens before each."""
        import numpy as np

        if self._boundaries is None:
            n, at = len(self.text), self._starts
            keep = (at > 0) & (at < n)
            if self._cuttable is not None:
                keep &= self._cuttable
            tokens = np.flatnonzero(keep)
            at = at[tokens]
            codes = _char_codes(self.text)
            table = _rule_table("tiktoken", _tiktoken_rule)
            classes_before = _classes(codes[at - 1], self._spaces, self._wide_spaces)
            classes_here = _classes(codes[at], self._spaces, self._wide_spaces)
            rule = table[(classes_before << 3) | classes_here]
            self._boundaries = (
                np.concatenate(([0], at[rule], [n])).astype(np.int64),
                np.concatenate(([0], tokens[rule], [len(self._starts)])).astype(np.int64),
            )
        return self._boundaries


class WhitespaceCounter(OffsetCounter):
    """Span counts for BERT-style tokenizers: words never span whitespace or punctuation."""

    __slots__ = ()
    _spaces = _BERT_SPACES
    _wide_spaces = _BERT_WIDE_SPACES
    _rule = staticmethod(_bert_rule)
