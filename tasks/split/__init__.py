"""Splitters with the langchain-text-splitters API, exact spans and header paths.

One module per splitter over the shared base (:mod:`tasks.split.base`):
``RecursiveCharacterTextSplitter`` (with ``from_language``, ``from_tiktoken_encoder``,
``from_huggingface_tokenizer``), ``CharacterTextSplitter``, ``TokenTextSplitter``,
``MarkdownHeaderTextSplitter``, ``HTMLHeaderTextSplitter``, ``CodeTextSplitter`` and
``AutoSplitter`` (the ingest default), and the embedding-based ``SemanticChunker`` and
``ClusterSemanticChunker``. Length units live in :mod:`tasks.split.units`.
"""

from tasks.split.auto import AutoSplitter
from tasks.split.base import Span, SpanSplitter, TextSplitter
from tasks.split.character import CharacterTextSplitter
from tasks.split.cluster import ClusterSemanticChunker
from tasks.split.code import CodeTextSplitter
from tasks.split.html import HTMLHeaderTextSplitter
from tasks.split.languages import Language
from tasks.split.markdown import MarkdownHeaderTextSplitter
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.semantic import SemanticChunker
from tasks.split.token import TokenTextSplitter

__all__ = [
    "AutoSplitter",
    "CharacterTextSplitter",
    "ClusterSemanticChunker",
    "CodeTextSplitter",
    "HTMLHeaderTextSplitter",
    "Language",
    "MarkdownHeaderTextSplitter",
    "RecursiveCharacterTextSplitter",
    "SemanticChunker",
    "Span",
    "SpanSplitter",
    "TextSplitter",
    "TokenTextSplitter",
]
