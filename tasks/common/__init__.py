"""Plumbing every stage shares: no stage of its own, no Prefect flow.

- :mod:`~tasks.common.config`: the settings (ingest, query, collection, backfill) and where
  they come from (defaults < config file < ``DOCFLOW_*`` environment < flags);
- :mod:`~tasks.common.errors`: docflow's exceptions (the CLI maps them to exit codes);
- :mod:`~tasks.common.documents`: the data model: ``FileRef``, ``Document``, ``Chunk``;
- :mod:`~tasks.common.tables`: the Parquet tables every hand-off is written to;
- :mod:`~tasks.common.runs`: a run's id, context and summary;
- :mod:`~tasks.common.stats`: run statistics read back from the tables;
- :mod:`~tasks.common.sqlite`: the SQLite files of the state (manifest, lexical index, cache);
- :mod:`~tasks.common.memory`, :mod:`~tasks.common.failpoints`: giving memory back, and the
  named places where tests crash a run on purpose.

Import the modules themselves (``from tasks.common.config import IngestParams``): this
package exports nothing, so importing one piece of plumbing never pulls in the rest.
"""
