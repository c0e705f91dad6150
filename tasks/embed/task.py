"""Prefect edge of the embed stage: embed one batch (cache first), write its ``embeddings`` part.

Apart from :mod:`~tasks.embed.model` so that a query, which embeds its question, does not
import Prefect.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import get_run_logger, task

from tasks.common.documents import model_input
from tasks.common.failpoints import failpoint
from tasks.common.runs import RunContext
from tasks.common.tables import PartRef, embeddings_table, part_path, read_chunks, write_atomic
from tasks.embed.cache import EmbeddingCache
from tasks.embed.model import Embedder, embed_with_cache


@task(name="embed")
def embed_task(ctx: RunContext, chunks: PartRef, batch_size: int, batch: int) -> PartRef:
    """Embed a batch's chunks (cache first) and write its ``embeddings`` part."""
    started = time.perf_counter()
    rows = read_chunks(Path(chunks.path))
    if not rows:  # a batch of failed files: nothing to embed, no part to write
        return PartRef("embeddings", "", 0)
    read = time.perf_counter()
    embedder = Embedder(ctx.model, batch_size=batch_size, backend=ctx.embed_backend)
    cache = EmbeddingCache.open(Path(ctx.data_dir))
    try:
        vectors, from_cache = embed_with_cache(embedder, cache, [model_input(c) for c in rows])
    finally:
        cache.close()
    failpoint("embed:after-encode")
    embedded = time.perf_counter()
    table = embeddings_table([c.chunk_id for c in rows], ctx.model, vectors)
    path = write_atomic(table, part_path(Path(ctx.data_dir), "embeddings", ctx.run_id, batch))
    get_run_logger().info("batch %d: %d chunks, %d from cache", batch, len(rows), from_cache)
    return PartRef(
        "embeddings",
        str(path),
        len(rows),
        cached=from_cache,
        seconds=embedded - read,
        table_seconds=(read - started) + (time.perf_counter() - embedded),
    )
