"""Loaders: one module per format behind an extension registry (see base.register)."""

from tasks.load.base import Loader, default_includes, loader_for, register, registered_extensions
from tasks.load.batch import load_batch, load_file
from tasks.load.text import MarkdownLoader, TextLoader

register(TextLoader(), ".txt", ".text", ".rst", ".log")
register(MarkdownLoader(), ".md", ".markdown", ".mdx")

__all__ = [
    "Loader",
    "MarkdownLoader",
    "TextLoader",
    "default_includes",
    "load_batch",
    "load_file",
    "loader_for",
    "register",
    "registered_extensions",
]
