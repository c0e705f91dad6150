"""The agentic chunker over real HTTP to a local rule-based OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from flows.cli import cli
from tasks.common.config import IngestParams, resolve_params
from tasks.common.documents import Document
from tasks.common.errors import ConfigError, LLMError
from tasks.split.agentic import (
    API_KEY_ENV,
    BASE_URL_ENV,
    MODEL_ENV,
    RETRIES,
    AgenticChunker,
    Retry,
    parse_reply,
)
from tasks.split.factory import build_splitter
from tasks.split.invariants import check_spans
from tasks.split.units import length_unit
from tests.conftest import corpus_files
from tests.llm_server import LLMServer, llm_server

MODEL = "rule-based-test"
QUICK = Retry(wait=0.01)  # the default retries, with short pauses
ENV_NAMES = (*BASE_URL_ENV, *MODEL_ENV, *API_KEY_ENV)


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start every test without LLM settings from the machine's environment."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def _running() -> Iterator[LLMServer]:
    with llm_server() as server:
        yield server


@pytest.fixture
def llm(_running: LLMServer) -> LLMServer:
    """Return the module's server, reset to the ``ok`` mode with no requests."""
    _running.mode, _running.group_size, _running.delay = "ok", 3, 2.0
    _running.refusals, _running.refuse_status, _running.retry_after = 0, 429, None
    _running.requests.clear()
    return _running


def chunker(server: LLMServer, **kwargs: object) -> AgenticChunker:
    return AgenticChunker(server.base_url, MODEL, **kwargs)  # type: ignore[arg-type]


def sample_text(n: int = 20) -> str:
    """Return paragraphs of numbered sentences, with odd whitespace and a repeat."""
    parts = []
    for i in range(n):
        sentence = f"Sentence {i} says that bees number {i * 7} in hive {i % 4}."
        parts.append(sentence + ("\n\n" if i % 5 == 4 else "  " if i % 2 else " "))
    return "  " + "".join(parts) + "Same text. Same text.\n"


def assert_exact(text: str, splitter: AgenticChunker) -> None:
    spans = splitter.split_spans(text)
    found = check_spans(text, spans, splitter.max_size, splitter.length_function)
    assert not found, found
    assert [text[s.start : s.end] for s in spans] == splitter.split_text(text)


@pytest.mark.parametrize("mode", ["ok", "interleaved", "forget", "fenced"])
def test_spans_are_exact_cover_the_text_and_stay_in_order(llm: LLMServer, mode: str) -> None:
    llm.mode = mode
    text = sample_text()
    splitter = chunker(llm, chunk_size=400)
    spans = splitter.split_spans(text)
    assert not check_spans(text, spans, 400)
    assert all(spans[i].end <= spans[i + 1].start for i in range(len(spans) - 1))
    if mode == "interleaved":  # two groups whose sentences alternate: a chunk per sentence
        assert len(spans) == len(llm.requests[0].sentences)


def test_groups_become_chunks_of_consecutive_sentences(llm: LLMServer) -> None:
    text = "One. Two. Three. Four. Five."
    assert chunker(llm).split_text(text) == ["One. Two. Three.", "Four. Five."]


def test_forgotten_sentences_join_the_chunk_before(llm: LLMServer) -> None:
    llm.mode, llm.group_size = "forget", 2  # sentences 3, 6 are cited by no proposition
    text = "One. Two. Three. Four. Five. Six."
    assert chunker(llm).split_text(text) == ["One. Two. Three.", "Four.", "Five. Six."]


@pytest.mark.parametrize("unit", ["chars", "tokens"])
@pytest.mark.parametrize("size", [40, 120])
def test_no_chunk_exceeds_chunk_size(llm: LLMServer, unit: str, size: int) -> None:
    llm.group_size = 6
    long_sentence = "A very long sentence without any full stop " * 12 + "ends here. "
    text = sample_text(12) + long_sentence + sample_text(3)
    splitter = chunker(llm, chunk_size=size, length_function=length_unit(unit))
    spans = splitter.split_spans(text)
    assert not check_spans(text, spans, size, length_unit(unit))
    if unit == "chars":  # the first group (about 300 characters) was split under its title
        labelled = splitter.split_labelled(text)
        assert sum(1 for c in labelled if c.title == "Sentences 1-6") >= 2


def test_titles_summaries_and_propositions_are_chunk_metadata(llm: LLMServer) -> None:
    text = "Bees make honey. They fly far. Wasps do not. Ants dig."
    document = Document(text, {"source": "notes.txt", "title": "the document's own"})
    chunks = chunker(llm).chunk_document(document)
    assert [c.text for c in chunks] == ["Bees make honey. They fly far. Wasps do not.", "Ants dig."]
    first = chunks[0].metadata
    assert first["title"] == "the document's own"  # not overwritten
    assert first["chunk_title"] == "Sentences 1-3"
    assert first["chunk_summary"] == "About: Bees make honey."
    assert first["propositions"] == [
        "It is said that Bees make honey.",
        "It is said that They fly far.",
        "It is said that Wasps do not.",
    ]
    assert all(text[c.start_index : c.end_index] == c.text for c in chunks)
    again = chunker(llm).chunk_document(document)
    assert [c.chunk_id for c in again] == [c.chunk_id for c in chunks]
    docs = chunker(llm, add_start_index=True).create_documents([text], [{"k": 1}])
    assert docs[1].metadata == {
        "k": 1,
        "chunk_title": "Sentences 4-4",
        "chunk_summary": "About: Ants dig.",
        "propositions": ["It is said that Ants dig."],
        "start_index": text.index("Ants"),
    }


def test_long_documents_are_sent_in_bounded_windows(llm: LLMServer) -> None:
    text = sample_text(95)
    splitter = chunker(llm, window_sentences=10, chunk_size=300)
    assert_exact(text, splitter)
    llm.requests.clear()
    splitter.split_spans(text)
    sent = [len(r.sentences) for r in llm.requests]
    assert len(sent) >= 10 and max(sent) <= 10
    assert sum(sent) == len(splitter.units(text, None))


def test_the_request_is_an_openai_chat_completion(llm: LLMServer) -> None:
    assert chunker(llm).split_spans(" \n\t ") == [] and not llm.requests  # nothing to ask
    chunker(llm).split_spans("One. Two.")
    (request,) = llm.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == MODEL
    assert [m["role"] for m in request.body["messages"]] == ["system", "user"]
    assert request.sentences == [(1, "One."), (2, "Two.")]
    assert "authorization" not in {k.lower() for k in request.headers}  # no key configured


def test_the_key_is_sent_as_a_bearer_header_and_never_kept(
    llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    chunker(llm).split_spans("One.")
    monkeypatch.setenv("DOCFLOW_LLM_API_KEY", "sk-docflow")
    splitter = chunker(llm)
    splitter.split_spans("One.")
    assert [r.headers["Authorization"] for r in llm.requests] == [
        "Bearer sk-fallback",
        "Bearer sk-docflow",
    ]
    shown = json.dumps(splitter.settings()) + repr(splitter)
    assert "sk-" not in shown
    params = resolve_params(None, {"splitter": "agentic"})
    assert "sk-" not in params.model_dump_json()


def test_missing_endpoint_or_model_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="llm_base_url .*DOCFLOW_LLM_BASE_URL"):
        AgenticChunker(model=MODEL)
    with pytest.raises(ConfigError, match="llm_model .*DOCFLOW_LLM_MODEL"):
        AgenticChunker("http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="llm_base_url"):
        build_splitter(IngestParams(splitter="agentic", llm_model=MODEL))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DOCFLOW_LLM_MODEL", "from-env")
    splitter = AgenticChunker()
    assert (splitter.base_url, splitter.model) == ("http://127.0.0.1:9/v1", "from-env")


def test_an_invalid_reply_is_asked_for_again(llm: LLMServer) -> None:
    llm.mode = "bad_json_once"
    text = "One. Two. Three. Four."
    assert chunker(llm).split_text(text) == ["One. Two. Three.", "Four."]
    assert len(llm.requests) == 2
    retry = llm.requests[1].body["messages"]
    assert retry[-1]["role"] == "user" and "invalid" in retry[-1]["content"]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("bad_json", "not JSON"),
        ("out_of_range", "sentence number 7 is out of range 1-2"),
        ("not_completion", "not a chat completion"),
    ],
)
def test_repeated_invalid_replies_fail_naming_the_document(
    llm: LLMServer, mode: str, reason: str
) -> None:
    llm.mode = mode
    with pytest.raises(LLMError, match=reason) as info:
        chunker(llm).chunk_document(Document("One. Two.", {"source": "docs/bees.md"}))
    message = str(info.value)
    assert message.startswith("docs/bees.md (sentences 1-2): no valid reply")
    assert "2 attempts" in message and "\n" not in message
    assert len(llm.requests) == 2


def test_http_errors_and_timeouts_are_one_line_errors(llm: LLMServer) -> None:
    llm.mode = "http_500"  # a refusal: sent again, then the error
    with pytest.raises(LLMError, match=r"answered HTTP 500: .*overloaded please retry") as info:
        chunker(llm, retry=QUICK).split_spans("One.")
    assert "\n" not in str(info.value) and len(llm.requests) == 1 + RETRIES
    llm.mode = "http_400"  # not a refusal: fails at once
    llm.requests.clear()
    with pytest.raises(LLMError, match=r"answered HTTP 400: unknown parameter"):
        chunker(llm, retry=QUICK).split_spans("One.")
    assert len(llm.requests) == 1
    llm.mode, llm.delay = "slow", 2.0
    llm.requests.clear()
    with pytest.raises(LLMError, match="timed out after 0.3 s"):
        chunker(llm, timeout=0.3, retry=QUICK).split_spans("One.")
    assert len(llm.requests) == 1
    with pytest.raises(LLMError, match="failed"):  # nothing listens on the discard port
        AgenticChunker("http://127.0.0.1:9/v1", MODEL, retry=QUICK).split_spans("One.")


@pytest.mark.parametrize(("status", "retry_after"), [(429, "0"), (503, None), (502, None)])
def test_refused_requests_are_sent_again(
    llm: LLMServer, status: int, retry_after: str | None
) -> None:
    """A rate limit or an overloaded endpoint slows the chunker down; the chunks are the
    same as without the refusals."""
    text = sample_text(6)
    expected = chunker(llm).split_text(text)
    llm.requests.clear()
    llm.refusals, llm.refuse_status, llm.retry_after = RETRIES, status, retry_after
    assert chunker(llm, retry=QUICK).split_text(text) == expected
    assert len(llm.requests) == RETRIES + 1
    assert llm.requests[0].body == llm.requests[-1].body  # the same request, sent again


def test_refusals_beyond_the_retries_fail_with_the_last_answer(llm: LLMServer) -> None:
    llm.refusals, llm.retry_after = RETRIES + 1, "0"
    with pytest.raises(LLMError, match=r"answered HTTP 429: slow down"):
        chunker(llm, retry=QUICK).split_spans("One. Two.")
    assert len(llm.requests) == RETRIES + 1


def test_the_pause_follows_retry_after_then_doubles() -> None:
    def refused(**headers: str) -> httpx.Response:
        return httpx.Response(429, headers=headers)

    retry = Retry(times=5, wait=0.5, most=30.0)
    assert retry.pause(1, refused(**{"Retry-After": "7"})) == 7.0
    assert retry.pause(3, refused(**{"Retry-After": "0"})) == 0.0
    assert retry.pause(1, refused(**{"Retry-After": "3600"})) == 30.0  # capped
    assert [retry.pause(n, refused()) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    date = "Wed, 21 Oct 2026 07:28:00 GMT"  # an HTTP date: our own pace
    assert retry.pause(2, refused(**{"Retry-After": date})) == 1.0
    assert retry.pause(7, None) == 30.0  # a dropped connection, capped


def test_parse_reply_accepts_only_the_asked_shape() -> None:
    good = {"chunks": [{"title": "t", "propositions": [{"text": "p", "sentences": [2]}]}]}
    (group,) = parse_reply(json.dumps(good), 2)
    assert (group.title, group.summary, group.propositions[0].sentences) == ("t", "", (1,))
    bad = [
        "[]",
        '{"chunks": []}',
        '{"chunks": [{"title": "t"}]}',
        '{"chunks": [{"propositions": [{"text": "p", "sentences": []}]}]}',
        '{"chunks": [{"propositions": [{"text": "p", "sentences": [true]}]}]}',
        '{"chunks": [{"propositions": [{"text": "p", "sentences": [0]}]}]}',
        '{"chunks": [{"title": 3, "propositions": []}]}',
        '{"chunks": [{"title": "t", "propositions": []}]}',
        '```json\n{"chunks": [{"propositions": [{"text": "p", "sentences": [3]}]}]}\n```',
    ]
    for content in bad:
        with pytest.raises(ValueError):
            parse_reply(content, 2)


def test_fingerprints_follow_the_model_not_the_endpoint(llm: LLMServer) -> None:
    a = chunker(llm)
    assert a.fingerprint() == AgenticChunker("http://elsewhere/v1", MODEL).fingerprint()
    assert a.fingerprint() != AgenticChunker(llm.base_url, "other-model").fingerprint()
    base = IngestParams(splitter="agentic", llm_model="m1")
    assert (
        base.content_fingerprint()
        != base.model_copy(update={"llm_model": "m2"}).content_fingerprint()
    )
    assert (
        base.content_fingerprint()
        == base.model_copy(update={"llm_base_url": "http://x/v1"}).content_fingerprint()
    )
    plain = IngestParams()  # other splitters: the LLM settings change nothing
    assert plain.content_fingerprint() == IngestParams(llm_model="m1").content_fingerprint()


def test_build_splitter_and_env_settings(llm: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    params = IngestParams(
        splitter="agentic", llm_base_url=llm.base_url, llm_model=MODEL, chunk_size=200
    )
    splitter = build_splitter(params)
    assert isinstance(splitter, AgenticChunker) and splitter.max_size == 200
    assert_exact(sample_text(), splitter)
    monkeypatch.setenv("DOCFLOW_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("DOCFLOW_LLM_MODEL", MODEL)
    resolved = resolve_params(None, {"splitter": "agentic"})
    assert (resolved.llm_base_url, resolved.llm_model) == (llm.base_url, MODEL)


def test_cli_split_with_the_agentic_splitter(
    llm: LLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bees.txt"
    text = sample_text(10)
    path.write_text(text, encoding="utf-8")
    runner = CliRunner()
    args = ["split", str(path), "--splitter", "agentic", "--chunk-size", "150", "--json"]
    failed = runner.invoke(cli, args)
    assert failed.exit_code == 2 and "DOCFLOW_LLM_BASE_URL" in failed.output
    monkeypatch.setenv("DOCFLOW_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("DOCFLOW_LLM_MODEL", MODEL)
    monkeypatch.setenv("DOCFLOW_LLM_API_KEY", "sk-cli")
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    chunks = json.loads(result.stdout)["chunks"]
    assert chunks and all(text[c["start_index"] : c["end_index"]] == c["text"] for c in chunks)
    assert all(c["n_chars"] <= 150 for c in chunks)
    assert llm.requests and llm.requests[-1].headers["Authorization"] == "Bearer sk-cli"
    llm.mode = "http_400"
    broken = runner.invoke(cli, args)
    assert broken.exit_code == 1 and "HTTP 400" in broken.output


MARKDOWN = corpus_files("markdown", ("*.md",))[::40]


@pytest.mark.parametrize("unit", ["chars", "tokens"])
def test_real_markdown_files_keep_exact_spans_and_the_size_limit(llm: LLMServer, unit: str) -> None:
    if not MARKDOWN:
        pytest.skip("../shared/corpora/markdown is absent here; the real corpora live there")
    size = 300 if unit == "chars" else 80
    splitter = chunker(llm, chunk_size=size, length_function=length_unit(unit))
    for path in MARKDOWN:
        text = path.read_text(encoding="utf-8")
        document = Document(text, {"source": str(path)})
        chunks = splitter.chunk_document(document)
        spans = splitter.split_spans(text)
        assert not check_spans(text, spans, size, length_unit(unit)), path
        assert [c.text for c in chunks] == [text[c.start_index : c.end_index] for c in chunks]
        assert all(c.metadata["chunk_title"].startswith("Sentences ") for c in chunks)
