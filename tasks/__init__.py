"""docflow's stages, in pipeline order, each a pure core plus its Prefect task at the edge.

    discover/   which files a run reads, and which changed (globs, fingerprints, the plan)
    load/       files to Documents, one loader per format
    split/      Documents to Chunks, one module per splitter
    embed/      Chunks to vectors (sentence-transformers, backends, the embedding cache)
    index/      where vectors are written and how the index stays true (Chroma, BM25,
                the manifest, the crash-safe store stage, consistency, whole-collection
                operations)
    retrieval   ranking chunks for a question (dense, lexical, hybrid): query and evaluate
    evaluate/   span-level retrieval evaluation (``docflow evaluate``)
    common/     plumbing every stage shares: settings, errors, the data model, Parquet
                tables, runs

The flows (``flows/``) compose these stages' tasks; nothing here starts a flow.
"""
