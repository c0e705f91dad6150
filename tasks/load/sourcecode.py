"""Source code loader: one Document per file, ``language`` from the extension.

``language`` takes the values of LangChain's ``Language`` enum ("python", "js", "ts",
"rust"...), which the code splitter's ``from_language`` presets use; ``file_type`` is "code".
"""

from __future__ import annotations

from collections.abc import Iterator

from tasks.common.documents import Document, FileRef
from tasks.load.base import BaseLoader

LANGUAGES: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".js": "js",
    ".mjs": "js",
    ".cjs": "js",
    ".jsx": "js",
    ".ts": "ts",
    ".tsx": "ts",
    ".mts": "ts",
    ".cts": "ts",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".c": "c",
    ".h": "c",
    ".cpp": "cpp",
    ".cc": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".cs": "csharp",
    ".php": "php",
    ".rb": "ruby",
    ".scala": "scala",
    ".sc": "scala",
    ".swift": "swift",
    ".lua": "lua",
    ".pl": "perl",
    ".pm": "perl",
    ".hs": "haskell",
    ".ex": "elixir",
    ".exs": "elixir",
    ".ps1": "powershell",
    ".psm1": "powershell",
    ".sol": "sol",
    ".cob": "cobol",
    ".cbl": "cobol",
    ".proto": "proto",
    ".tex": "latex",
    ".r": "r",
    ".bas": "visualbasic6",
}
"""Extension → LangChain ``Language`` value."""


class CodeLoader(BaseLoader):
    """Load a source file as one Document with its ``language``."""

    name = "code"
    file_type = "code"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the file's text; empty, binary or undecodable files are a LoadError."""
        decoded = self.read_text(file)
        meta = self.metadata(file, decoded)
        meta["language"] = LANGUAGES.get(file.extension, file.extension.lstrip("."))
        yield Document(decoded.text, meta)
