"""Build the splitter an ingest asks for, and split loaded documents into chunks."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from tasks.common.config import IngestParams
from tasks.common.documents import Chunk, FileRef, file_sha256, printable_name
from tasks.common.errors import ConfigError, LoadError
from tasks.common.tables import DocumentRow
from tasks.split.auto import HTML_HEADERS, MARKDOWN_HEADERS, AutoSplitter
from tasks.split.base import SpanSplitter
from tasks.split.character import CharacterTextSplitter
from tasks.split.cluster import ClusterSemanticChunker
from tasks.split.code import CodeTextSplitter
from tasks.split.html import HTMLHeaderTextSplitter
from tasks.split.markdown import MarkdownHeaderTextSplitter
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.semantic import SemanticChunker
from tasks.split.token import TokenTextSplitter, TokenUnit
from tasks.split.units import length_unit, model_tokens_unit, tiktoken_unit

#: The splitter names of ``--splitter``, each with what it does.
SPLITTERS: dict[str, str] = {
    "auto": "per file type: Markdown/HTML header sections, code by language, else recursive",
    "recursive": "LangChain's RecursiveCharacterTextSplitter (paragraphs, lines, words)",
    "character": "CharacterTextSplitter on blank lines",
    "token": "fixed windows of chunk_size tokens (cl100k; the model's with model_tokens)",
    "markdown": "Markdown header sections (header lines kept), capped at chunk_size",
    "html": "HTML header sections of the page text, capped at chunk_size",
    "code": "recursive with the separators of each file's language",
}
#: The embedding-based splitters (they embed while splitting, with the ingest's model).
SEMANTIC_SPLITTERS: dict[str, str] = {
    "semantic": "breaks where neighbouring sentences' embeddings drift apart, capped at chunk_size",
    "cluster": "small pieces grouped to maximise within-chunk similarity, capped at chunk_size",
}
#: The splitters that call an LLM (an OpenAI-compatible endpoint: llm_base_url, llm_model).
LLM_SPLITTERS: dict[str, str] = {
    "agentic": "an LLM groups the sentences' propositions by topic, titled, capped at chunk_size",
}


def _unit(params: IngestParams) -> Callable[[str], int]:
    try:
        return length_unit(params.length_unit, params.model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def build_splitter(params: IngestParams) -> SpanSplitter:
    """Return the splitter configured by ``params`` (name, sizes, length unit).

    Raises:
        ConfigError: For a splitter or length unit this build does not have, a model
            whose tokenizer cannot be loaded, or an LLM splitter without endpoint or model.

    """
    name: str = params.splitter
    known = {**SPLITTERS, **SEMANTIC_SPLITTERS, **LLM_SPLITTERS}
    if name not in known:
        raise ConfigError(f"unknown splitter {name!r}; expected one of {', '.join(known)}")
    unit = _unit(params)
    size, overlap = params.chunk_size, params.chunk_overlap
    if name in SEMANTIC_SPLITTERS:
        from tasks.embed.model import Embedder

        embedder = Embedder(
            params.model, batch_size=params.embed_batch_size, backend=params.embed_backend
        )
        if name == "semantic":
            return SemanticChunker(embedder, chunk_size=size, length_function=unit)
        return ClusterSemanticChunker(embedder, chunk_size=size, length_function=unit)
    if name in LLM_SPLITTERS:
        from tasks.split.agentic import AgenticChunker

        return AgenticChunker(
            params.llm_base_url, params.llm_model, chunk_size=size, length_function=unit
        )
    if name == "auto":
        return AutoSplitter(size, overlap, unit)
    if name == "recursive":
        return RecursiveCharacterTextSplitter(
            chunk_size=size, chunk_overlap=overlap, length_function=unit
        )
    if name == "character":
        return CharacterTextSplitter(chunk_size=size, chunk_overlap=overlap, length_function=unit)
    if name == "token":
        if overlap >= size:
            raise ConfigError("the token splitter needs chunk_overlap < chunk_size")
        window_unit: TokenUnit = (
            model_tokens_unit(params.model)
            if params.length_unit == "model_tokens"
            else tiktoken_unit()
        )
        return TokenTextSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=window_unit)
    if name == "markdown":
        return MarkdownHeaderTextSplitter(
            MARKDOWN_HEADERS,
            strip_headers=False,
            chunk_size=size,
            chunk_overlap=overlap,
            length_function=unit,
        )
    if name == "html":
        return HTMLHeaderTextSplitter(
            HTML_HEADERS,
            header_chunks=False,
            chunk_size=size,
            chunk_overlap=overlap,
            length_function=unit,
        )
    return CodeTextSplitter(chunk_size=size, chunk_overlap=overlap, length_function=unit)


def split_rows(rows: Iterable[DocumentRow], splitter: SpanSplitter) -> list[Chunk]:
    """Split every loaded document of a batch, in order, each with its own strategy."""
    return [c for r in rows if r.document is not None for c in splitter.chunk_document(r.document)]


def split_file(path: Path, params: IngestParams) -> tuple[list[DocumentRow], list[Chunk]]:
    """Load one file with the loader registry and split it (``docflow split``).

    Returns:
        The file's document rows and the chunks of all its documents, in order.

    Raises:
        LoadError: If the file cannot be loaded (with the loader's one-line reason).
        ConfigError: For bad splitter settings.

    """
    from tasks.load import load_file

    stat = path.stat()
    name = printable_name(path.name)
    ref = FileRef(os.path.abspath(path), name, stat.st_size, stat.st_mtime, file_sha256(path))
    rows = load_file(ref)
    failed = [r for r in rows if r.document is None]
    if failed:
        raise LoadError(f"{path}: {failed[0].error}")
    return rows, split_rows(rows, build_splitter(params))
