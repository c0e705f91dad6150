"""Loaders: one module per format behind an extension registry (see base.register).

Every built-in loader sets ``file_type`` in :data:`~tasks.load.base.FILE_TYPES`; the
registry maps extensions (case-insensitive) to loaders, and users may register their own.
"""

from tasks.load.base import (
    BaseLoader,
    ConfigurableLoader,
    Loader,
    default_includes,
    loader_for,
    register,
    registered_extensions,
)
from tasks.load.batch import iter_load, load_batch, load_file
from tasks.load.csvfile import CsvLoader
from tasks.load.html import HtmlLoader, HtmlText, html_to_text
from tasks.load.jsonfile import JSON_LINES, JsonLoader
from tasks.load.markdown import MarkdownLoader
from tasks.load.pdf import PdfLoader
from tasks.load.sourcecode import LANGUAGES, CodeLoader
from tasks.load.text import TextLoader

register(TextLoader(), ".txt", ".text", ".rst", ".log")
register(MarkdownLoader(), ".md", ".markdown", ".mdx")
register(PdfLoader(), ".pdf")
register(CsvLoader(), ".csv", ".tsv")
register(HtmlLoader(), ".html", ".htm", ".xhtml")
register(JsonLoader(), ".json", *JSON_LINES)
register(CodeLoader(), *LANGUAGES)

__all__ = [
    "BaseLoader",
    "CodeLoader",
    "ConfigurableLoader",
    "CsvLoader",
    "HtmlLoader",
    "HtmlText",
    "JsonLoader",
    "Loader",
    "MarkdownLoader",
    "PdfLoader",
    "TextLoader",
    "default_includes",
    "html_to_text",
    "iter_load",
    "load_batch",
    "load_file",
    "loader_for",
    "register",
    "registered_extensions",
]
