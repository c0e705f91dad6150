"""Query the index: embed the question with the collection's own model, return the top k.

No Prefect here: a query is one embedding and one lookup, and should answer in a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tasks.embed import Embedder
from tasks.errors import StoreError
from tasks.manifest import serving_collection
from tasks.store import ChromaStore, Hit, Scalar


def query(
    text: str,
    data_dir: Path,
    collection: str,
    k: int = 5,
    where: Mapping[str, Scalar] | None = None,
    host: str | None = None,
    port: int = 8000,
) -> list[Hit]:
    """Return the ``k`` chunks nearest to ``text``, best first (from a server if ``host``)."""
    store = ChromaStore.open(data_dir, serving_collection(data_dir, collection), host, port)
    model = (store.collection().metadata or {}).get("embedding_model")
    if not model:
        raise StoreError(f"collection {collection!r} records no embedding model")
    vector = Embedder(str(model)).embed([text])[0]
    return store.query(vector, k=k, where=where)
