"""Query the index: the question's best chunks by hybrid, dense or lexical ranking.

No Prefect here: a query is one embedding and two lookups, and should answer in a second.
The ranking lives in :mod:`tasks.retrieval`; this is the one-call form the CLI and the
``docflow`` package use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tasks.common.config import DEFAULT_DENSE_WEIGHT, DEFAULT_FUSION, DEFAULT_RETRIEVAL
from tasks.index.store import Hit, Scalar
from tasks.retrieval import Retriever, check_question


def query(
    text: str,
    data_dir: Path | str = "data",
    collection: str = "docflow",
    k: int = 5,
    where: Mapping[str, Scalar] | None = None,
    host: str | None = None,
    port: int = 8000,
    retrieval: str = DEFAULT_RETRIEVAL,
    dense_weight: float = DEFAULT_DENSE_WEIGHT,
    fusion: str = DEFAULT_FUSION,
    stop_words: bool = True,
    per_source: int | None = None,
) -> list[Hit]:
    """Return the ``k`` best chunks for ``text`` as a list of hits, best first.

    ``retrieval`` is ``hybrid`` (default), ``dense`` or ``lexical``; ``dense_weight`` and
    ``fusion`` say how ``hybrid`` weighs the two sides (see tasks/retrieval/ranking.py). The
    vectors come from a Chroma server when ``host`` is given. ``per_source`` keeps at most
    that many chunks of one source file (its best ones), for more distinct documents.

    Raises:
        ValueError: For an empty (or whitespace-only) question.
        ConfigError: For bad settings, a missing data dir or collection.

    """
    check_question(text)  # before anything is opened or loaded
    with Retriever(
        data_dir, collection, retrieval, dense_weight, host, port, fusion, stop_words, per_source
    ) as retriever:
        return retriever.search(text, k=k, where=where)
