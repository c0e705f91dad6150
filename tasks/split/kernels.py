"""Compiled loops of the token span counter (numba), for the per-token work numpy cannot fuse.

Splitting by tiktoken tokens should cost little more than one encode of the text. The
boundary rule needs, per token, the running character position and the classes of the
characters around its start: one pass over the token ids. In numpy that pass becomes a
dozen passes (gathers, shifts, comparisons, a cumulative sum), each over every token, and
costs as much as a fifth of the encode; as one compiled loop it costs a fiftieth.

numba compiles the functions on first use and caches the machine code next to this file
(``__pycache__``), so later processes load it in milliseconds. The class codes are those
of :mod:`tasks.split.counting`; that module passes its tables in.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# class codes shared with tasks.split.counting (kept as literals: numba inlines them)
_BLANK, _LF = 3, 4
_NEXT = 13


@njit(cache=True, nogil=True)
def _kind(codes: np.ndarray, classes: np.ndarray, at: int) -> int:
    """Return the class of character ``at`` (past either end of the text: a line feed)."""
    if at < 0 or at >= len(codes):
        return _LF
    return int(classes[min(int(codes[at]), len(classes) - 1)])


@njit(cache=True, nogil=True)
def tiktoken_boundaries(
    ids: np.ndarray,
    started: np.ndarray,
    inside: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    last: np.ndarray,
    pairs: np.ndarray,
    non_white: np.ndarray,
    codes: np.ndarray,
    classes: np.ndarray,
    n_chars: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return a document's boundaries, the tokens before each, and its weak boundaries.

    ``started``..``last`` are the vocabulary's :class:`~tasks.split.counting.TokenTables`,
    ``pairs`` the rule per class pair (0 none, 1 boundary, 2 weak if a non-space follows,
    3 look at the characters), ``codes`` the text's code points (read only where a
    character is split over tokens; empty for ASCII text) and ``classes`` their classes.
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
        token = ids[i]
        at = position - int(inside[token])  # a token starting inside a character belongs to it
        position += int(started[token])
        code = 1 if i == 0 else int(pairs[(previous << 4) | int(first[token])])
        if code == 3:
            code = int(pairs[(_kind(codes, classes, at - 1) << 4) | _kind(codes, classes, at)])
        if code == 2:  # the last space of a run: a boundary if a non-space follows
            after = int(second[token])
            if after == _NEXT:  # a one-character token: the next token's first character
                after = int(first[ids[i + 1]]) if i + 1 < n else _BLANK
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
        previous = int(last[token])
    positions[found] = n_chars
    before[found] = n
    return positions[: found + 1], before[: found + 1], weak[:n_weak]
