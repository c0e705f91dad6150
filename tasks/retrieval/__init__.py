"""Retrieval: rank chunks for a question by meaning (dense), by words (lexical) or both.

- :mod:`~tasks.retrieval.ranking`: the pure ranking (the fusions of hybrid ranking, why
  ``absolute`` is the default), shared by queries and ``docflow evaluate``;
- :mod:`~tasks.retrieval.retriever`: the :class:`Retriever` over one collection.
"""

from tasks.retrieval.ranking import (
    CANDIDATES,
    FUSIONS,
    RETRIEVALS,
    Ranked,
    candidates,
    check_question,
    collapse,
    describe_score,
    fuse,
    rank,
    rocchio,
)
from tasks.retrieval.retriever import Retriever

__all__ = [
    "CANDIDATES",
    "FUSIONS",
    "RETRIEVALS",
    "Ranked",
    "Retriever",
    "candidates",
    "check_question",
    "collapse",
    "describe_score",
    "fuse",
    "rank",
    "rocchio",
]
