"""docflow's Python API, for applications that query an index docflow built.

    import docflow

    hits = docflow.query("when do bees swarm?", data_dir="data", k=3)
    with docflow.Retriever("data", "docflow", retrieval="hybrid") as retriever:
        hits = retriever.search("varroa treatment in winter", where={"source": "varroa.md"})
        pages = retriever.search("swarming", k=5, per_source=1)  # five distinct files

``docflow.query`` returns a list of :class:`Hit`, best first (not the CLI's ``--json``
object). Each has ``chunk_id``, ``source``, ``score`` (what it was ranked by),
``text``, ``metadata``, ``dense_score`` (cosine) and ``lexical_score`` (BM25 relative to
the question's best possible, in [0, 1)). An empty question raises ``ValueError``; bad
settings or a missing data dir or collection raise :class:`ConfigError`, a closed
Retriever :class:`StoreError`. Building the index is the CLI's and the Prefect flows' job
(``docflow ingest``).
"""

from __future__ import annotations

from pathlib import Path

from flows.query import query
from tasks.common.config import DEFAULT_DENSE_WEIGHT, DEFAULT_FUSION, DEFAULT_RETRIEVAL
from tasks.common.errors import ConfigError, DocflowError, StoreError
from tasks.index.manifest import serving_collection as _serving
from tasks.index.store import Hit
from tasks.retrieval import RETRIEVALS, Retriever


def serving_collection(data_dir: str | Path = "data", collection: str = "docflow") -> str:
    """Return the Chroma collection that serves ``collection`` now (it moves on reingest).

    What another Chroma client (langchain-chroma, say) must open to read docflow's vectors.
    """
    return _serving(Path(data_dir), collection)


__all__ = [
    "DEFAULT_DENSE_WEIGHT",
    "DEFAULT_FUSION",
    "DEFAULT_RETRIEVAL",
    "RETRIEVALS",
    "ConfigError",
    "DocflowError",
    "Hit",
    "Retriever",
    "StoreError",
    "query",
    "serving_collection",
]
