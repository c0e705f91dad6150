"""The peer of the pipeline benchmark: the same job written as LangChain's documentation shows.

``python -m tests.benchmarks.langchain_job SOURCE PERSIST_DIR`` loads every file type with a
``DirectoryLoader`` per type, splits with ``RecursiveCharacterTextSplitter`` (the docs'
1000/200 with start indices), embeds with the sentence-transformers wrapper and writes
``Chroma.from_documents``. It prints one JSON line: documents, chunks, seconds per step.
Bench-only dependencies (``make bench``): langchain-community, langchain-chroma.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Any

#: glob → loader class name and keyword arguments, one DirectoryLoader per file type.
LOADERS: dict[str, tuple[str, dict[str, Any]]] = {
    "**/*.md": ("TextLoader", {"autodetect_encoding": True}),
    "**/*.rst": ("TextLoader", {"autodetect_encoding": True}),
    "**/*.txt": ("TextLoader", {"autodetect_encoding": True}),
    "**/*.pdf": ("PyPDFLoader", {}),
    "**/*.csv": ("CSVLoader", {}),
    "**/*.html": ("BSHTMLLoader", {}),
    "**/*.json": ("TextLoader", {}),
    "**/*.py": ("TextLoader", {}),
    "**/*.js": ("TextLoader", {}),
    "**/*.ts": ("TextLoader", {}),
    "**/*.tsx": ("TextLoader", {}),
    "**/*.go": ("TextLoader", {}),
    "**/*.rs": ("TextLoader", {}),
    "**/*.java": ("TextLoader", {}),
}


def run(source: str, persist_dir: str, model_path: str, batch_size: int) -> dict[str, Any]:
    """Load, split, embed and store ``source`` the LangChain way; return counts and times."""
    warnings.filterwarnings("ignore")
    from langchain_chroma import Chroma
    from langchain_community import document_loaders
    from langchain_community.embeddings import HuggingFaceEmbeddings
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    t0 = time.perf_counter()
    docs = []
    for glob, (loader_name, kwargs) in LOADERS.items():
        loader = document_loaders.DirectoryLoader(
            source,
            glob=glob,
            loader_cls=getattr(document_loaders, loader_name),
            loader_kwargs=kwargs,
            silent_errors=True,
            exclude=["**/bad/**"],
        )
        docs.extend(loader.load())
    t1 = time.perf_counter()
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=1000, chunk_overlap=200, add_start_index=True
    )
    splits = splitter.split_documents(docs)
    t2 = time.perf_counter()
    embeddings = HuggingFaceEmbeddings(
        model_name=model_path,
        encode_kwargs={"normalize_embeddings": True, "batch_size": batch_size},
    )
    t3 = time.perf_counter()
    Chroma.from_documents(splits, embeddings, persist_directory=persist_dir)
    t4 = time.perf_counter()
    return {
        "documents": len(docs),
        "chunks": len(splits),
        "load_s": t1 - t0,
        "split_s": t2 - t1,
        "model_load_s": t3 - t2,
        "embed_store_s": t4 - t3,
    }


if __name__ == "__main__":
    from tasks.embed.model import resolve_model_path

    src, out = sys.argv[1], sys.argv[2]
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    print(json.dumps(run(src, out, resolve_model_path("all-MiniLM-L6-v2"), size)))
