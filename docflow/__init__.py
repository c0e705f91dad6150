"""docflow's Python API, for applications that query an index docflow built.

    import docflow

    hits = docflow.query("when do bees swarm?", data_dir="data", k=3)
    with docflow.Retriever("data", "docflow", retrieval="hybrid") as retriever:
        hits = retriever.search("varroa treatment in winter", where={"source": "varroa.md"})

Each :class:`Hit` has ``chunk_id``, ``source``, ``score``, ``text``, ``metadata``,
``dense_score`` (cosine) and ``lexical_score`` (BM25). Building the index is the CLI's and
the Prefect flows' job (``docflow ingest``).
"""

from __future__ import annotations

from pathlib import Path

from flows.query import query
from tasks.config import DEFAULT_DENSE_WEIGHT, DEFAULT_RETRIEVAL
from tasks.manifest import serving_collection as _serving
from tasks.retrieval import RETRIEVALS, Retriever
from tasks.store import Hit


def serving_collection(data_dir: str | Path = "data", collection: str = "docflow") -> str:
    """Return the Chroma collection that serves ``collection`` now (it moves on reingest).

    What another Chroma client (langchain-chroma, say) must open to read docflow's vectors.
    """
    return _serving(Path(data_dir), collection)


__all__ = [
    "DEFAULT_DENSE_WEIGHT",
    "DEFAULT_RETRIEVAL",
    "RETRIEVALS",
    "Hit",
    "Retriever",
    "query",
    "serving_collection",
]
