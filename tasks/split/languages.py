"""Separators per programming/markup language, as data (LangChain's presets, one table).

``SEPARATORS[language]`` lists the regular expressions ``RecursiveCharacterTextSplitter``
tries in order (``from_language`` sets ``is_separator_regex=True``), most preferred first:
definitions, then control flow, then blank lines, lines, words and characters. The values are
langchain-text-splitters 1.1.3's, so ``from_language`` gives LangChain's chunks. Perl has an
enum value but no preset in LangChain (it raises); docflow adds one.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import PurePosixPath


class Language(StrEnum):
    """Languages with separator presets (LangChain's ``Language`` values)."""

    CPP = "cpp"
    GO = "go"
    JAVA = "java"
    KOTLIN = "kotlin"
    JS = "js"
    TS = "ts"
    PHP = "php"
    PROTO = "proto"
    PYTHON = "python"
    R = "r"
    RST = "rst"
    RUBY = "ruby"
    RUST = "rust"
    SCALA = "scala"
    SWIFT = "swift"
    MARKDOWN = "markdown"
    LATEX = "latex"
    HTML = "html"
    SOL = "sol"
    CSHARP = "csharp"
    COBOL = "cobol"
    C = "c"
    LUA = "lua"
    PERL = "perl"
    HASKELL = "haskell"
    ELIXIR = "elixir"
    POWERSHELL = "powershell"
    VISUALBASIC6 = "visualbasic6"


_LINES = ("\n\n", "\n", " ", "")
_C_FAMILY = (
    *("\nclass ", "\nvoid ", "\nint ", "\nfloat ", "\ndouble "),
    *("\nif ", "\nfor ", "\nwhile ", "\nswitch ", "\ncase "),
    *_LINES,
)
_VB = r"(?:Public|Private|Friend|Global|Static)\s+"

#: Separators per language, most preferred first (regular expressions).
SEPARATORS: dict[Language, tuple[str, ...]] = {
    Language.C: _C_FAMILY,
    Language.CPP: _C_FAMILY,
    Language.GO: (
        *("\nfunc ", "\nvar ", "\nconst ", "\ntype "),
        *("\nif ", "\nfor ", "\nswitch ", "\ncase "),
        *_LINES,
    ),
    Language.JAVA: (
        *("\nclass ", "\npublic ", "\nprotected ", "\nprivate ", "\nstatic "),
        *("\nif ", "\nfor ", "\nwhile ", "\nswitch ", "\ncase "),
        *_LINES,
    ),
    Language.KOTLIN: (
        *("\nclass ", "\npublic ", "\nprotected ", "\nprivate ", "\ninternal ", "\ncompanion "),
        *("\nfun ", "\nval ", "\nvar "),
        *("\nif ", "\nfor ", "\nwhile ", "\nwhen ", "\nelse "),
        *_LINES,
    ),
    Language.JS: (
        *("\nfunction ", "\nconst ", "\nlet ", "\nvar ", "\nclass "),
        *("\nif ", "\nfor ", "\nwhile ", "\nswitch ", "\ncase ", "\ndefault "),
        *_LINES,
    ),
    Language.TS: (
        *("\nenum ", "\ninterface ", "\nnamespace ", "\ntype ", "\nclass "),
        *("\nfunction ", "\nconst ", "\nlet ", "\nvar "),
        *("\nif ", "\nfor ", "\nwhile ", "\nswitch ", "\ncase ", "\ndefault "),
        *_LINES,
    ),
    Language.PHP: (
        *("\nfunction ", "\nclass "),
        *("\nif ", "\nforeach ", "\nwhile ", "\ndo ", "\nswitch ", "\ncase "),
        *_LINES,
    ),
    Language.PROTO: (
        *("\nmessage ", "\nservice ", "\nenum ", "\noption ", "\nimport ", "\nsyntax "),
        *_LINES,
    ),
    Language.PYTHON: ("\nclass ", "\ndef ", "\n\tdef ", *_LINES),
    Language.R: (
        *("\nfunction ", "\nsetClass\\(", "\nsetMethod\\(", "\nsetGeneric\\("),
        *("\nif ", "\nelse ", "\nfor ", "\nwhile ", "\nrepeat "),
        *("\nlibrary\\(", "\nrequire\\("),
        *_LINES,
    ),
    Language.RST: ("\n=+\n", "\n-+\n", "\n\\*+\n", "\n\n.. *\n\n", *_LINES),
    Language.RUBY: (
        *("\ndef ", "\nclass "),
        *("\nif ", "\nunless ", "\nwhile ", "\nfor ", "\ndo ", "\nbegin ", "\nrescue "),
        *_LINES,
    ),
    Language.ELIXIR: (
        *("\ndef ", "\ndefp ", "\ndefmodule ", "\ndefprotocol ", "\ndefmacro ", "\ndefmacrop "),
        *("\nif ", "\nunless ", "\ncase ", "\ncond ", "\nwith ", "\nfor ", "\ndo "),
        *_LINES,
    ),
    Language.RUST: (
        *("\nfn ", "\nconst ", "\nlet "),
        *("\nif ", "\nwhile ", "\nfor ", "\nloop ", "\nmatch "),
        *_LINES,
    ),
    Language.SCALA: (
        *("\nclass ", "\nobject ", "\ndef ", "\nval ", "\nvar "),
        *("\nif ", "\nfor ", "\nwhile ", "\nmatch ", "\ncase "),
        *_LINES,
    ),
    Language.SWIFT: (
        *("\nfunc ", "\nclass ", "\nstruct ", "\nenum "),
        *("\nif ", "\nfor ", "\nwhile ", "\ndo ", "\nswitch ", "\ncase "),
        *_LINES,
    ),
    Language.MARKDOWN: (
        *("\n#{1,6} ", "```\n", "\n\\*\\*\\*+\n", "\n---+\n", "\n___+\n"),
        *_LINES,
    ),
    Language.LATEX: (
        *("\n\\\\chapter{", "\n\\\\section{", "\n\\\\subsection{", "\n\\\\subsubsection{"),
        *("\n\\\\begin{enumerate}", "\n\\\\begin{itemize}", "\n\\\\begin{description}"),
        *("\n\\\\begin{list}", "\n\\\\begin{quote}", "\n\\\\begin{quotation}"),
        *("\n\\\\begin{verse}", "\n\\\\begin{verbatim}", "\n\\\\begin{align}"),
        *("$$", "$", " ", ""),
    ),
    Language.HTML: (
        *("<body", "<div", "<p", "<br", "<li", "<h1", "<h2", "<h3", "<h4", "<h5", "<h6"),
        *("<span", "<table", "<tr", "<td", "<th", "<ul", "<ol", "<header", "<footer", "<nav"),
        *("<head", "<style", "<script", "<meta", "<title", ""),
    ),
    Language.CSHARP: (
        *("\ninterface ", "\nenum ", "\ndelegate ", "\nevent ", "\nclass ", "\nabstract "),
        *("\npublic ", "\nprotected ", "\nprivate ", "\nstatic ", "\nreturn "),
        *("\nif ", "\ncontinue ", "\nfor ", "\nforeach ", "\nwhile ", "\nswitch "),
        *("\nbreak ", "\ncase ", "\nelse ", "\ntry ", "\nthrow ", "\nfinally ", "\ncatch "),
        *_LINES,
    ),
    Language.SOL: (
        *("\npragma ", "\nusing ", "\ncontract ", "\ninterface ", "\nlibrary "),
        *("\nconstructor ", "\ntype ", "\nfunction ", "\nevent ", "\nmodifier ", "\nerror "),
        *("\nstruct ", "\nenum ", "\nif ", "\nfor ", "\nwhile ", "\ndo while ", "\nassembly "),
        *_LINES,
    ),
    Language.COBOL: (
        *("\nIDENTIFICATION DIVISION.", "\nENVIRONMENT DIVISION.", "\nDATA DIVISION."),
        *("\nPROCEDURE DIVISION.", "\nWORKING-STORAGE SECTION.", "\nLINKAGE SECTION."),
        *("\nFILE SECTION.", "\nINPUT-OUTPUT SECTION.", "\nOPEN ", "\nCLOSE ", "\nREAD "),
        *("\nWRITE ", "\nIF ", "\nELSE ", "\nMOVE ", "\nPERFORM ", "\nUNTIL ", "\nVARYING "),
        *("\nACCEPT ", "\nDISPLAY ", "\nSTOP RUN."),
        *("\n", " ", ""),
    ),
    Language.LUA: (
        *("\nlocal ", "\nfunction ", "\nif ", "\nfor ", "\nwhile ", "\nrepeat "),
        *_LINES,
    ),
    Language.PERL: (
        *("\nsub ", "\npackage ", "\nuse ", "\nmy "),
        *("\nif ", "\nunless ", "\nforeach ", "\nfor ", "\nwhile ", "\nuntil "),
        *_LINES,
    ),
    Language.HASKELL: (
        *("\nmain :: ", "\nmain = ", "\nlet ", "\nin ", "\ndo ", "\nwhere ", "\n:: ", "\n= "),
        *("\ndata ", "\nnewtype ", "\ntype ", "\nmodule ", "\nimport ", "\nqualified "),
        *("\nimport qualified ", "\nclass ", "\ninstance ", "\ncase ", "\n| ", "\n= {", "\n, "),
        *_LINES,
    ),
    Language.POWERSHELL: (
        *("\nfunction ", "\nparam ", "\nif ", "\nforeach ", "\nfor ", "\nwhile ", "\nswitch "),
        *("\nclass ", "\ntry ", "\ncatch ", "\nfinally "),
        *_LINES,
    ),
    Language.VISUALBASIC6: (
        rf"\n(?!End\s){_VB}?Sub\s+",
        rf"\n(?!End\s){_VB}?Function\s+",
        rf"\n(?!End\s){_VB}?Property\s+(?:Get|Let|Set)\s+",
        rf"\n(?!End\s){_VB}?Type\s+",
        rf"\n(?!End\s){_VB}?Enum\s+",
        *(r"\n(?!End\s)If\s+", r"\nElseIf\s+", r"\nElse\s+", r"\nSelect\s+Case\s+"),
        *(r"\nCase\s+", r"\nFor\s+", r"\nDo\s+", r"\nWhile\s+", r"\nWith\s+"),
        *(r"\n\n", r"\n", " ", ""),
    ),
}

#: File extensions (lower case) → language, for the code splitter and ``auto``.
EXTENSIONS: dict[str, Language] = {
    **dict.fromkeys((".py", ".pyi", ".pyw"), Language.PYTHON),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx"), Language.JS),
    **dict.fromkeys((".ts", ".tsx", ".mts", ".cts"), Language.TS),
    ".go": Language.GO,
    ".rs": Language.RUST,
    ".java": Language.JAVA,
    **dict.fromkeys((".kt", ".kts"), Language.KOTLIN),
    **dict.fromkeys((".c", ".h"), Language.C),
    **dict.fromkeys((".cpp", ".cc", ".cxx", ".c++", ".hpp", ".hh", ".hxx"), Language.CPP),
    ".cs": Language.CSHARP,
    ".php": Language.PHP,
    ".rb": Language.RUBY,
    **dict.fromkeys((".scala", ".sc"), Language.SCALA),
    ".swift": Language.SWIFT,
    ".lua": Language.LUA,
    **dict.fromkeys((".pl", ".pm"), Language.PERL),
    ".hs": Language.HASKELL,
    **dict.fromkeys((".ex", ".exs"), Language.ELIXIR),
    **dict.fromkeys((".ps1", ".psm1"), Language.POWERSHELL),
    ".sol": Language.SOL,
    **dict.fromkeys((".cob", ".cbl", ".cpy"), Language.COBOL),
    ".proto": Language.PROTO,
    ".rst": Language.RST,
    **dict.fromkeys((".md", ".markdown", ".mdx"), Language.MARKDOWN),
    ".tex": Language.LATEX,
    **dict.fromkeys((".html", ".htm"), Language.HTML),
    ".r": Language.R,
    **dict.fromkeys((".vb", ".bas", ".cls", ".frm"), Language.VISUALBASIC6),
}


def as_language(language: object) -> Language:
    """Return our ``Language`` for a member, a LangChain ``Language`` member or a value.

    Raises:
        ValueError: For a value no preset has.

    """
    value = getattr(language, "value", language)
    try:
        return Language(str(value).lower())
    except ValueError:
        known = ", ".join(m.value for m in Language)
        raise ValueError(f"Language {value} is not supported! Please choose from {known}") from None


def language_for_path(path: str) -> Language | None:
    """Return the language of a file name from its extension, or None."""
    return EXTENSIONS.get(PurePosixPath(path).suffix.lower())
