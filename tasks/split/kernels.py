"""Compiled loops of the tiktoken span counter (numba): the per-token and per-span work.

Splitting by tiktoken tokens should cost little more than one encode of the text. Two loops
remain after the encode, and both are here:

- the boundaries: per token, the running character position and the rule on the classes of
  the characters around its start. In numpy that is a dozen passes over every token (gathers,
  shifts, comparisons, a cumulative sum); as one loop, a few nanoseconds per token.
- the span counts: per span, two binary searches and the standalone counts of its two edges.
  In Python that is two string slices and two dict look-ups per span; here the edges are
  keyed by their bytes (short ASCII edges, almost all of them) in an open-addressing table,
  and only the edges it lacks go back to Python to be encoded.

numba compiles the functions on first use and caches the machine code next to this file
(``__pycache__``), so later processes load it in a fraction of a second. The class codes
are those of :mod:`tasks.split.counting`, which passes its tables in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tasks.split.counting import _BLANK, _LF, _NEXT  # class codes (numba inlines globals)


@njit(cache=True, nogil=True)
def _kind(codes: np.ndarray, classes: np.ndarray, at: int) -> int:
    """Return the class of character ``at`` (past either end of the text: a line feed)."""
    if at < 0 or at >= len(codes):
        return _LF
    return int(classes[min(int(codes[at]), len(classes) - 1)])


@njit(cache=True, nogil=True)
def tiktoken_boundaries(
    ids: np.ndarray,
    packed: np.ndarray,
    pairs: np.ndarray,
    non_white: np.ndarray,
    codes: np.ndarray,
    classes: np.ndarray,
    n_chars: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return a document's boundaries, the tokens before each, and its weak boundaries.

    ``packed`` is the vocabulary's :class:`~tasks.split.counting.TokenTables` in one word
    per token, ``pairs`` the rule per class pair (0 none, 1 boundary, 2 weak if a non-space
    follows, 3 look at the characters), ``codes`` the text's code points (read only where a
    character is split over tokens) and ``classes`` their classes.
    """
    n = len(ids)
    positions = np.empty(n + 1, np.int64)
    before = np.empty(n + 1, np.int64)
    weak = np.empty(n, np.int64)
    found = 0
    n_weak = 0
    position = 0  # characters the tokens so far start
    previous = _LF  # class of the last character of the previous token
    for i in range(n):
        word = int(packed[ids[i]])
        at = position - ((word >> 10) & 1)  # a token starting inside a character belongs to it
        position += word & 1023
        code = 1 if i == 0 else int(pairs[(previous << 4) | ((word >> 11) & 15)])
        if code == 3:
            code = int(pairs[(_kind(codes, classes, at - 1) << 4) | _kind(codes, classes, at)])
        if code == 2:  # the last space of a run: a boundary if a non-space follows
            after = (word >> 15) & 15
            if after == _NEXT:  # a one-character token: the next token's first character
                after = (int(packed[ids[i + 1]]) >> 11) & 15 if i + 1 < n else _BLANK
            if after >= _NEXT:
                after = _kind(codes, classes, at + 1)
            if non_white[after]:
                code = 1
                weak[n_weak] = at
                n_weak += 1
        if code == 1:
            positions[found] = at
            before[found] = i
            found += 1
        previous = (word >> 19) & 15
    positions[found] = n_chars
    before[found] = n
    return positions[: found + 1], before[: found + 1], weak[:n_weak]


# -- counting spans ------------------------------------------------------------------------

#: Edges up to this many characters (all ASCII) are memoised by their bytes, in two words.
_KEY_CHARS = 15
#: Slots of an edge memo (a power of two); it is emptied when half full.
_SLOTS = 1 << 16
_MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)


@dataclass(frozen=True, slots=True)
class EdgeMemo:
    """Standalone counts of short ASCII edge strings, keyed by their bytes (open addressing).

    A row of ``table`` holds an edge's bytes and length in two words and its count plus one
    (0: an empty slot), so a probe reads one row; ``size[0]`` counts the edges stored.
    One per unit, like the string memo.
    """

    table: np.ndarray = field(default_factory=lambda: np.zeros((_SLOTS, 3), dtype=np.uint64))
    size: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))


@njit(cache=True, inline="always")
def _edge_key(codes: np.ndarray, start: int, end: int) -> tuple[np.uint64, np.uint64]:
    """Return the key of ``text[start:end]``: its bytes and length in two words, or (0, 0).

    (0, 0), no key, for an edge too long or not all ASCII: the caller counts it as a string.
    """
    length = end - start
    none = (np.uint64(0), np.uint64(0))
    if length < 1 or length > _KEY_CHARS:
        return none
    low, high = np.uint64(0), np.uint64(length) << np.uint64(56)
    for i in range(length):
        code = np.uint64(codes[start + i])
        if code >= 128:
            return none
        if i < 8:
            low |= code << np.uint64(8 * i)
        else:
            high |= code << np.uint64(8 * (i - 8))
    return low, high


@njit(cache=True, inline="always")
def _slot(table: np.ndarray, low: np.uint64, high: np.uint64) -> int:
    """Return the row of a key: where it is stored, or the empty row it would go to."""
    mask = len(table) - 1
    at = int(((low ^ (high * _MIX1)) * _MIX2) >> np.uint64(40)) & mask
    while table[at, 2] and (table[at, 0] != low or table[at, 1] != high):
        at = (at + 1) & mask
    return at


@njit(cache=True, inline="always")
def _search(values: np.ndarray, x: int, right: bool) -> int:
    """Return the insertion point of ``x`` in sorted ``values`` (``np.searchsorted``)."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < x or (right and values[mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


# the functions on a memo keep the GIL: it serialises threads that share a unit's memo
@njit(cache=True)
def count_spans(
    starts: np.ndarray,
    ends: np.ndarray,
    boundaries: np.ndarray,
    before: np.ndarray,
    weak: np.ndarray,
    codes: np.ndarray,
    table: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return span counts, less the edges the memo lacks, and those edges (span, start, end).

    The same arithmetic as :meth:`tasks.split.counting.OffsetCounter.__call__`: the tokens
    between the first and last boundary inside the span come from ``before``, the edges
    outside them from the memo's ``table``; ``weak`` marks weak boundaries (empty: none).
    """
    m = len(starts)
    counts = np.zeros(m, np.int64)
    missed = np.empty((2 * m, 3), np.int64)
    n_missed = 0
    for i in range(m):
        start, end = starts[i], ends[i]
        if end <= start:
            continue
        first = _search(boundaries, start, False)
        last = _search(boundaries, end, True) - 1
        if len(weak) and weak[end - 1] and end - 1 > start:
            # a weak boundary needs the character after it inside the span
            first += int(boundaries[first] == end - 1)
            last -= int(boundaries[last] == end - 1)
        if first > last:
            edges = ((start, end), (end, end))  # no boundary inside: one edge, the whole span
        else:
            counts[i] = before[last] - before[first]
            edges = ((start, boundaries[first]), (boundaries[last], end))
        for edge_start, edge_end in edges:
            if edge_end <= edge_start:
                continue
            low, high = _edge_key(codes, edge_start, edge_end)
            known = int(table[_slot(table, low, high), 2]) if high else 0
            if known:
                counts[i] += known - 1
            else:
                missed[n_missed, 0] = i
                missed[n_missed, 1] = edge_start
                missed[n_missed, 2] = edge_end
                n_missed += 1
    return counts, missed[:n_missed, 0], missed[:n_missed, 1], missed[:n_missed, 2]


@njit(cache=True)
def remember_edges(
    table: np.ndarray,
    size: np.ndarray,
    codes: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
) -> None:
    """Store the counts of edges ``text[starts[i]:ends[i]]`` that have a key.

    The memo is emptied when half full (like the string memo), so probes stay short.
    """
    for i in range(len(starts)):
        low, high = _edge_key(codes, starts[i], ends[i])
        if not high:
            continue
        if size[0] * 2 >= len(table):
            table[:, 2] = 0
            size[0] = 0
        at = _slot(table, low, high)
        if not table[at, 2]:
            size[0] += 1
            table[at, 0] = low
            table[at, 1] = high
        table[at, 2] = counts[i] + 1
