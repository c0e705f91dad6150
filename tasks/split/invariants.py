"""Check a splitter's output against the invariants of DESIGN.md (tests and benchmarks).

1. exact spans: in range, non-empty, in document order (starts never go back);
2. size: no span longer than the limit in its unit, measured on the span's own text
   (an indivisible unit, one character here, may be longer);
3. coverage: the spans, in order, cover every non-whitespace character;
4. determinism is the caller's to check (split twice, compare ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tasks.split.base import Span


@dataclass(slots=True)
class Violations:
    """What a split got wrong; empty lists mean it kept every invariant."""

    bad_spans: list[tuple[int, int]] = field(default_factory=list)
    out_of_order: list[int] = field(default_factory=list)
    over_limit: list[tuple[int, int, int]] = field(default_factory=list)  # start, end, size
    uncovered: list[int] = field(default_factory=list)  # offsets of uncovered characters

    def __bool__(self) -> bool:
        """Return True when something is wrong."""
        return bool(self.bad_spans or self.out_of_order or self.over_limit or self.uncovered)


def check_spans(
    text: str,
    spans: Sequence[Span],
    max_size: int | None = None,
    length: Callable[[str], int] = len,
    coverage: bool = True,
) -> Violations:
    """Return the invariant violations of ``spans`` over ``text``.

    Args:
        text: The text that was split.
        spans: The splitter's spans, in its order.
        max_size: The size limit, or None for unbounded chunks.
        length: Measures a chunk's text alone (``len``, a token unit...).
        coverage: Whether every non-whitespace character must be covered.

    """
    found = Violations()
    last_start, reach = -1, 0
    for i, span in enumerate(spans):
        if not 0 <= span.start < span.end <= len(text):
            found.bad_spans.append((span.start, span.end))
            continue
        if span.start < last_start:
            found.out_of_order.append(i)
        last_start = span.start
        if max_size is not None and span.end - span.start > 1:
            size = length(text[span.start : span.end])
            if size > max_size:
                found.over_limit.append((span.start, span.end, size))
        if coverage and span.start > reach:
            gap = text[reach : span.start]
            found.uncovered.extend(reach + j for j, ch in enumerate(gap) if not ch.isspace())
        reach = max(reach, span.end)
    if coverage and reach < len(text):
        tail = text[reach:]
        found.uncovered.extend(reach + j for j, ch in enumerate(tail) if not ch.isspace())
    return found
