"""Before a run writes: the manifest, the vector store and the lexical index agree.

The manifest says which chunks the store holds; incremental runs trust it. If one of them
was lost or damaged behind docflow's back, trusting it would leave the index wrong for good:
a lost manifest makes every file "new" and never deletes the chunks of files removed since
(orphans); a lost store makes every file "unchanged" and the index stays empty. So each run
first compares them (two counts, in the normal case) and repairs what it finds:

- **the manifest has no rows for a collection the store holds**: its rows are rebuilt from
  the tables (``state_from_tables``, what ``docflow restore`` does) when those account for
  exactly the store's chunks; otherwise the run refuses, naming ``docflow restore`` and
  ``docflow reingest``;
- **the store lacks chunks the manifest records** (the Chroma folder lost or wiped): the
  files they belong to are marked pending, so this run indexes them again (vectors from the
  embedding cache where it has them);
- **the store holds chunks no file claims** (orphans): they are deleted;
- **the lexical index differs from the store**: it is rebuilt from the store's records
  (a damaged lexical database is set aside first).

Every repair is a warning in the run's summary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from tasks.common.errors import StateError
from tasks.index.admin import state_from_tables
from tasks.index.collection import Index, reconcile
from tasks.index.lexical import LexicalIndex, database_path
from tasks.index.manifest import Manifest
from tasks.index.store import ChromaStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Checked:
    """What the check found and repaired (all zero: everything agreed)."""

    manifest_rebuilt: int = 0  # manifest rows rebuilt from the tables
    files_reindexed: int = 0  # files marked pending: the store lacked their chunks
    orphans_deleted: int = 0  # chunks in the store that no file claimed
    lexical_added: int = 0
    lexical_removed: int = 0
    warnings: tuple[str, ...] = ()


def _rebuild_manifest(
    manifest: Manifest, data_dir: Path, name: str, physical: str, run_id: str, stored: set[str]
) -> int:
    """Rebuild a collection's manifest rows from the tables, if they match the store."""
    rows, _ = state_from_tables(data_dir, name)
    live = {i for r in rows for i in r.chunk_ids}
    if not rows or live != stored:
        raise StateError(
            f"collection {physical!r} holds {len(stored)} chunks but the manifest "
            f"{manifest.path} has no record of them and the tables account for "
            f"{len(live & stored)}: run docflow restore to rebuild the index and the manifest "
            "from the tables, or docflow reingest to rebuild them from the sources"
        )
    manifest.commit(physical, run_id, rows)
    return len(rows)


def check(index: Index, manifest: Manifest, data_dir: Path, name: str, run_id: str) -> Checked:
    """Compare the manifest with the store (and the lexical index) and repair them.

    Args:
        index: The physical collection's vector store and lexical index (the collection
            exists: the run created or opened it).
        manifest: The data dir's manifest.
        data_dir: The data dir (its tables, for a lost manifest).
        name: The logical collection (its runs in the tables).
        run_id: The run that repairs (recorded on rebuilt manifest rows).

    Raises:
        StateError: If the manifest was lost and the tables cannot account for the store.

    """
    physical = index.vectors.name
    warnings: list[str] = []
    stored_count = index.vectors.count()
    rows, committed, pending = manifest.counts(physical)
    rebuilt = reindexed = orphans = 0
    if rows == 0 and stored_count > 0:
        stored = index.vectors.ids()
        rebuilt = _rebuild_manifest(manifest, data_dir, name, physical, run_id, stored)
        warnings.append(
            f"the manifest had no rows for collection {physical!r} (state.db lost?): "
            f"rebuilt {rebuilt} from the tables"
        )
    elif stored_count != committed:
        stored = index.vectors.ids()
        files = manifest.files(physical)
        claimed = {i for f in files.values() for i in f.chunk_ids}
        missing = claimed - stored
        if missing:
            lost = sorted(s for s, f in files.items() if missing & set(f.chunk_ids))
            manifest.mark_pending(physical, lost)
            reindexed = len(lost)
            warnings.append(
                f"the store lacks {len(missing)} of the {len(claimed)} chunks the manifest "
                f"records (Chroma data lost?): {reindexed} files are indexed again"
            )
        extra = stored - claimed - {i for f in files.values() for i in f.pending_ids}
        if extra:
            orphans = index.delete(extra)
            warnings.append(f"the store held {orphans} chunks no file claims: deleted")
    lexical = reconcile(index)
    if lexical.added or lexical.removed:
        warnings.append(
            f"lexical index of {physical!r}: {lexical.added} chunks added from the vector "
            f"store, {lexical.removed} removed"
        )
    for line in warnings:
        log.debug("%s", line)
    return Checked(rebuilt, reindexed, orphans, lexical.added, lexical.removed, tuple(warnings))


# --- Prefect edge ---
from prefect import task  # noqa: E402

from tasks.common.runs import RunContext  # noqa: E402
from tasks.index.sync import STORE_RETRIES, retry_transient  # noqa: E402


@task(name="open-index", retry_condition_fn=retry_transient, **STORE_RETRIES)
def open_index_task(ctx: RunContext) -> Checked:
    """Create or check the collection, then make manifest, store and lexical index agree.

    A model mismatch fails fast. A new collection takes its dimension from the model's
    files (tasks/embed/model.py, ``model_dimension``): the run plans, loads and splits while
    the model has not been loaded.
    """
    from tasks.embed.cache import EmbeddingCache, cache_path
    from tasks.embed.model import model_dimension

    data_dir = Path(ctx.data_dir)
    store = ChromaStore.open(data_dir, ctx.physical, ctx.chroma_host, ctx.chroma_port)
    store.ensure(ctx.model, lambda: model_dimension(ctx.model, ctx.embed_backend))
    opened: tuple[str, ...] = ()
    # a damaged embedding cache is set aside (it is only a cache): vectors are computed again
    cache, moved = EmbeddingCache.open_or_set_aside(cache_path(data_dir))
    cache.close()
    if moved:
        opened += (f"the embedding cache was damaged: moved to {moved}, vectors computed again",)
    # a damaged lexical index is set aside: check() rebuilds it from the vector store
    path = database_path(data_dir, ctx.physical)
    words, moved = LexicalIndex.open_or_set_aside(path)
    if moved:
        opened += (
            f"the lexical index {path} was damaged: moved to {moved.name}, rebuilt from the store",
        )
    with Index(store, words) as index, Manifest.open(data_dir) as manifest:
        checked = check(index, manifest, data_dir, ctx.collection, ctx.run_id)
    return replace(checked, warnings=(*opened, *checked.warnings))  # the flow logs them
