"""`AgenticChunker`: an LLM groups propositions into chunks (Kamradt's level 5), exact spans.

The text is cut into sentences (the regex of :mod:`tasks.split.semantic`), numbered, and sent
in windows to any OpenAI-compatible chat endpoint (``POST {base_url}/chat/completions``). The
LLM rewrites the window as propositions (short standalone statements), each citing the
sentence numbers it came from, and groups them into chunks with a title and a summary. The
reply must be strict JSON (:data:`SYSTEM_PROMPT`); a reply that does not parse or cites a
number out of range is asked for once more, then fails with :class:`LLMError`. A request
the endpoint refuses for now (HTTP 408, 429, 500, 502, 503, 504, or a dropped connection) is
sent again after a pause (its ``Retry-After`` when given, else 1, 2, 4 s), up to
:data:`RETRIES` times; other HTTP errors and timeouts fail at once.

The LLM chooses the grouping only; chunk text is always the source, so this chunker keeps the
docflow splitter invariants:

- a sentence belongs to the first group that cites it; each run of consecutive sentences of
  one group is a chunk, the exact span from its first sentence to its last (a group whose
  sentences are apart becomes several chunks);
- a sentence no proposition cites joins the chunk before it (at the start of a window, the
  chunk after it), so all the non-whitespace text is covered;
- no chunk is longer than ``chunk_size`` in the unit of ``length_function``: a sentence over
  it is split beforehand, and a run over it is split with
  :class:`RecursiveCharacterTextSplitter` (each piece keeps the run's labels);
- chunks never cross a window (at most ``window_sentences`` sentences and about
  :data:`WINDOW_CHARS` characters per request), so a request stays bounded.

Each chunk's metadata gets ``chunk_title``, ``chunk_summary`` and ``propositions`` (the texts
of the propositions that cite its sentences). Chunk ids depend on the spans only; the LLM's
answer may differ between runs, so do the spans.

Configuration: ``base_url`` and ``model`` as arguments (the ingest's ``llm_base_url`` and
``llm_model``) or from ``DOCFLOW_LLM_BASE_URL``/``OPENAI_BASE_URL`` and ``DOCFLOW_LLM_MODEL``;
the API key only from ``DOCFLOW_LLM_API_KEY`` or ``OPENAI_API_KEY`` (optional, for servers
that need none). It is sent as a Bearer header and never stored, logged or fingerprinted.

One module over ~400 lines on purpose: the prompt, the reply's validation, the request
loop and the mapping of propositions back to exact spans are one algorithm; splitting them
would spread the contract with the LLM over several files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tasks.common.documents import Chunk, Document
from tasks.common.errors import ConfigError, LLMError
from tasks.split.base import Span, SpanSplitter, TextSplitter
from tasks.split.counting import SpanCounter
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.semantic import DEFAULT_SENTENCE_REGEX, capped_sentences
from tasks.split.units import span_counter

log = logging.getLogger(__name__)

#: Where the endpoint, model and key come from, in order, when not given as arguments.
BASE_URL_ENV: tuple[str, ...] = ("DOCFLOW_LLM_BASE_URL", "OPENAI_BASE_URL")
MODEL_ENV: tuple[str, ...] = ("DOCFLOW_LLM_MODEL",)
API_KEY_ENV: tuple[str, ...] = ("DOCFLOW_LLM_API_KEY", "OPENAI_API_KEY")
#: Sentences per request, and the characters of sentence text a request aims to stay under
#: (a window always holds at least one sentence, and no sentence is over ``chunk_size``).
WINDOW_SENTENCES = 40
WINDOW_CHARS = 8000
#: Seconds one request may take; replies asked for per window (the first and one retry).
TIMEOUT_S = 120.0
ATTEMPTS = 2
#: A refused request (rate limit, overload, dropped connection) is sent again this many
#: times, after ``RETRY_WAIT_S`` doubling each time, or the endpoint's ``Retry-After`` up to
#: ``MAX_WAIT_S``: a rate limit slows a long ingest down rather than failing its files.
RETRIES = 3
RETRY_WAIT_S = 1.0
MAX_WAIT_S = 60.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: The instructions; part of the fingerprint, since a new prompt makes new chunks.
SYSTEM_PROMPT = """\
You split a document into chunks of propositions.
The user sends numbered sentences, one per line: [1] ..., [2] ...
1. Rewrite their content as propositions: short standalone statements, each understandable \
alone (replace pronouns with what they refer to, keep names, numbers and terms).
2. Group the propositions about the same topic into chunks. Prefer consecutive sentences \
in one chunk. Give each chunk a short title and a one-sentence summary.
3. Every proposition lists the numbers of the sentences it came from. Cite every sentence \
at least once, and only numbers that were sent.
Reply with JSON only, no prose and no code fence, exactly in this form:
{"chunks": [{"title": "...", "summary": "...", \
"propositions": [{"text": "...", "sentences": [1, 2]}]}]}"""
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class _InvalidReply(ValueError):
    """A reply that is not the JSON the prompt asks for (the reason is the message)."""


@dataclass(frozen=True, slots=True)
class Proposition:
    """A standalone statement and the sentences (0-based, in its window) it came from."""

    text: str
    sentences: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Group:
    """One chunk the LLM proposed: a title, a summary and its propositions."""

    title: str
    summary: str
    propositions: tuple[Proposition, ...]


@dataclass(frozen=True, slots=True)
class LabelledSpan:
    """A chunk's exact span with the labels of the group it came from."""

    span: Span
    title: str
    summary: str
    propositions: tuple[str, ...]

    def labels(self) -> dict[str, Any]:
        """Return the chunk metadata keys (prefixed: documents may have a ``title``)."""
        return {
            "chunk_title": self.title,
            "chunk_summary": self.summary,
            "propositions": list(self.propositions),
        }


# -- the endpoint -------------------------------------------------------------------------


def _first_env(names: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """Return the first non-empty variable of ``names``, or None."""
    return next((environ[n] for n in names if environ.get(n)), None)


def _one_line(text: str, limit: int = 200) -> str:
    """Return ``text`` on one line, cut to ``limit`` characters (for error messages)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _error_text(response: httpx.Response) -> str:
    """Return the one-line reason of an error response (OpenAI's ``error.message``)."""
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text
    return _one_line(str(message)) or response.reason_phrase


def connect(api_key: str | None, timeout: float) -> httpx.Client:
    """Return an HTTP client that sends the key as a Bearer header (none without a key).

    One client per document, so the requests of its windows share a connection.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(headers=headers, timeout=timeout)


@dataclass(frozen=True, slots=True)
class Retry:
    """How often and after what pause a refused request is sent again."""

    times: int = RETRIES
    wait: float = RETRY_WAIT_S
    most: float = MAX_WAIT_S

    def pause(self, attempt: int, response: httpx.Response | None) -> float:
        """Return the seconds to wait before retry ``attempt`` (1, 2, ...).

        The endpoint's ``Retry-After`` (in seconds) wins where it gives one, capped at
        ``most``; otherwise ``wait`` doubles with each attempt.
        """
        given = response.headers.get("Retry-After") if response is not None else None
        try:
            seconds = float(given) if given is not None else None
        except ValueError:  # an HTTP date: keep to our own pace
            seconds = None
        if seconds is None or seconds < 0:
            seconds = self.wait * 2 ** (attempt - 1)
        return min(seconds, self.most)


def post(client: httpx.Client, url: str, body: dict[str, Any], retry: Retry) -> httpx.Response:
    """POST ``body``; send it again while the endpoint refuses it for now (see :class:`Retry`).

    Returns the last response, an error status included once the retries are spent.

    Raises:
        LLMError: On a timeout, or a connection that still fails after the retries.

    """
    attempt = 0
    while True:
        response: httpx.Response | None = None
        try:
            response = client.post(url, json=body)
        except httpx.TimeoutException as exc:
            seconds = client.timeout.read
            raise LLMError(f"LLM request to {url} timed out after {seconds:g} s") from exc
        except httpx.TransportError as exc:  # refused, reset or dropped: worth another try
            if attempt == retry.times:
                raise LLMError(f"LLM request to {url} failed: {_one_line(str(exc))}") from exc
        else:
            if response.status_code not in TRANSIENT_STATUS or attempt == retry.times:
                return response
        attempt += 1
        pause = retry.pause(attempt, response)
        log.info("LLM endpoint %s refused a request; again in %.1f s", url, pause)
        time.sleep(pause)


def chat(
    client: httpx.Client,
    base_url: str,
    model: str,
    messages: list[dict[str, str]],
    retry: Retry = Retry(),  # frozen: one shared default is safe
) -> str:
    """Return the content of the first choice of a chat completion.

    Raises:
        LLMError: On a timeout, a connection failure or an HTTP error status (after the
            retries of a refused request), in one line.
        _InvalidReply: If the answer is not an OpenAI chat completion.

    """
    url = base_url.rstrip("/") + "/chat/completions"
    body = {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    response = post(client, url, body, retry)
    if response.status_code >= 400:
        raise LLMError(
            f"LLM endpoint {url} answered HTTP {response.status_code}: {_error_text(response)}"
        )
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise _InvalidReply(f"not a chat completion: {_one_line(response.text)}") from exc
    if not isinstance(content, str):
        raise _InvalidReply("the completion has no text content")
    return content


# -- the reply ----------------------------------------------------------------------------


def _sentence_numbers(value: Any, n: int) -> tuple[int, ...]:
    """Return 1-based sentence numbers as 0-based indices, checking they are in range."""
    if not isinstance(value, list) or not value:
        raise _InvalidReply("a proposition has no list of sentence numbers")
    out = []
    for number in value:
        if isinstance(number, bool) or not isinstance(number, int):
            raise _InvalidReply(f"sentence number {number!r} is not an integer")
        if not 1 <= number <= n:
            raise _InvalidReply(f"sentence number {number} is out of range 1-{n}")
        out.append(number - 1)
    return tuple(out)


def _text(item: Mapping[str, Any], key: str) -> str:
    """Return the string ``item[key]`` ('' when missing), or reject the reply."""
    value = item.get(key, "")
    if not isinstance(value, str):
        raise _InvalidReply(f"{key} is not a string")
    return value.strip()


def parse_reply(content: str, n: int) -> list[Group]:
    """Parse and validate a reply for a window of ``n`` sentences (a code fence is allowed).

    Raises:
        _InvalidReply: For bad JSON, a wrong shape, or a sentence number outside ``1..n``.

    """
    fenced = _FENCE.match(content)
    try:
        data = json.loads(fenced.group(1) if fenced else content)
    except ValueError as exc:
        raise _InvalidReply(f"not JSON: {exc}") from exc
    chunks = data.get("chunks") if isinstance(data, dict) else None
    if not isinstance(chunks, list) or not chunks:
        raise _InvalidReply('no non-empty "chunks" list')
    groups = []
    for item in chunks:
        if not isinstance(item, dict) or not isinstance(item.get("propositions"), list):
            raise _InvalidReply('a chunk is not an object with a "propositions" list')
        props = []
        for prop in item["propositions"]:
            if not isinstance(prop, dict):
                raise _InvalidReply("a proposition is not an object")
            props.append(
                Proposition(_text(prop, "text"), _sentence_numbers(prop.get("sentences"), n))
            )
        groups.append(Group(_text(item, "title"), _text(item, "summary"), tuple(props)))
    if not any(g.propositions for g in groups):
        raise _InvalidReply("no proposition cites a sentence")
    return groups


# -- from groups to spans -----------------------------------------------------------------


def assign(n: int, groups: Sequence[Group]) -> list[int]:
    """Return the group of each of ``n`` sentences: the first group that cites it.

    A sentence no group cites takes the group of the sentence before it (the first ones,
    that of the first cited sentence; :func:`parse_reply` checks that one is cited).
    """
    owner: list[int | None] = [None] * n
    for g, group in enumerate(groups):
        for prop in group.propositions:
            for i in prop.sentences:
                if owner[i] is None:
                    owner[i] = g
    out: list[int] = []
    last = next((g for g in owner if g is not None), 0)
    for cited in owner:
        if cited is not None:
            last = cited
        out.append(last)
    return out


def runs(owners: Sequence[int]) -> list[tuple[int, int, int]]:
    """Return ``(first, last, group)`` for each run of consecutive sentences of one group."""
    out: list[tuple[int, int, int]] = []
    for i, g in enumerate(owners):
        if out and out[-1][2] == g:
            out[-1] = (out[-1][0], i, g)
        else:
            out.append((i, i, g))
    return out


def windows(units: Sequence[Span], most: int, chars: int) -> list[tuple[int, int]]:
    """Return ``[a, b)`` ranges of at most ``most`` units and ``chars`` characters (or one unit)."""
    out: list[tuple[int, int]] = []
    a, size = 0, 0
    for i, unit in enumerate(units):
        n = unit.end - unit.start
        if i > a and (i - a >= most or size + n > chars):
            out.append((a, i))
            a, size = i, 0
        size += n
    if a < len(units):
        out.append((a, len(units)))
    return out


class AgenticChunker(TextSplitter):
    """Chunks of sentences an LLM grouped by topic, labelled, capped at ``chunk_size``."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        chunk_size: int = 1024,
        length_function: Callable[[str], int] = len,
        window_sentences: int = WINDOW_SENTENCES,
        sentence_split_regex: str = DEFAULT_SENTENCE_REGEX,
        timeout: float = TIMEOUT_S,
        api_key: str | None = None,
        add_start_index: bool = False,
        retry: Retry = Retry(),  # frozen: one shared default is safe
    ) -> None:
        """Create the chunker; the endpoint and model must be configured.

        Args:
            base_url: The OpenAI-compatible API root (``.../v1``); default from
                ``DOCFLOW_LLM_BASE_URL`` or ``OPENAI_BASE_URL``.
            model: The chat model name; default from ``DOCFLOW_LLM_MODEL``.
            chunk_size: The cap on every chunk, in the unit of ``length_function``.
            length_function: Measures a chunk (``len``, or a unit of :mod:`tasks.split.units`).
            window_sentences: At most this many sentences per request.
            sentence_split_regex: Where sentences end (a sentence runs to the match's end).
            timeout: Seconds one request may take.
            api_key: The key for library callers; default from ``DOCFLOW_LLM_API_KEY`` or
                ``OPENAI_API_KEY`` (the ingest reads it only from there). None sends no key.
            add_start_index: Put ``start_index`` in the metadata of created Documents.
            retry: How a refused request is sent again (default :class:`Retry`: 3 times).

        Raises:
            ConfigError: If no endpoint or model is configured, naming what to set.
            ValueError: For sizes that are not positive.

        """
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=0,
            length_function=length_function,
            add_start_index=add_start_index,
        )
        if window_sentences < 1:
            raise ValueError(f"window_sentences must be >= 1, got {window_sentences}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        env = os.environ
        base_url = base_url or _first_env(BASE_URL_ENV, env)
        if not base_url:
            raise ConfigError(
                "the agentic splitter needs an OpenAI-compatible endpoint: set llm_base_url "
                "(config file) or DOCFLOW_LLM_BASE_URL / OPENAI_BASE_URL, e.g. "
                "https://api.openai.com/v1"
            )
        model = model or _first_env(MODEL_ENV, env)
        if not model:
            raise ConfigError(
                "the agentic splitter needs a chat model: set llm_model (config file) or "
                "DOCFLOW_LLM_MODEL, e.g. gpt-4o-mini"
            )
        self.base_url, self.model = base_url, model
        self.window_sentences = window_sentences
        self.sentence_split_regex = sentence_split_regex
        self._sentence_pattern = re.compile(sentence_split_regex)
        self.timeout = timeout
        self.retry = retry
        self._api_key = api_key or _first_env(API_KEY_ENV, env)
        self._pieces = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size, chunk_overlap=0, length_function=length_function
        )

    def __repr__(self) -> str:
        """Show the endpoint and model, never the key."""
        return f"AgenticChunker(base_url={self.base_url!r}, model={self.model!r})"

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output (the endpoint and key do not)."""
        return {
            **super().settings(),
            "model": self.model,
            "window_sentences": self.window_sentences,
            "window_chars": WINDOW_CHARS,
            "sentence_split_regex": self.sentence_split_regex,
            "prompt": hashlib.sha256(SYSTEM_PROMPT.encode("utf-8")).hexdigest()[:16],
        }

    # -- the algorithm ------------------------------------------------------------------

    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as exact spans, each within ``chunk_size``."""
        return [c.span for c in self.split_labelled(text)]

    def split_labelled(self, text: str, name: str = "text") -> list[LabelledSpan]:
        """Return the chunks of ``text`` with their titles, summaries and propositions.

        Args:
            text: The document text.
            name: What error messages call the document (its source).

        Raises:
            LLMError: If the endpoint fails, or twice gives no valid reply for a window.

        """
        measure = span_counter(self._length_function, text)
        units = self.units(text, measure)
        out: list[LabelledSpan] = []
        with connect(self._api_key, self.timeout) as client:
            for a, b in windows(units, self.window_sentences, WINDOW_CHARS):
                window = units[a:b]
                groups = self.ask(client, text, window, f"{name} (sentences {a + 1}-{b})")
                out += self._labelled(text, window, groups, measure)
        return out

    def _labelled(
        self,
        text: str,
        window: Sequence[Span],
        groups: Sequence[Group],
        measure: SpanCounter | None,
    ) -> list[LabelledSpan]:
        """Return one window's runs of sentences as labelled spans, split if over the cap."""
        out: list[LabelledSpan] = []
        for first, last, g in runs(assign(len(window), groups)):
            group, start, end = groups[g], window[first].start, window[last].end
            cites = range(first, last + 1)
            props = tuple(
                p.text for p in group.propositions if any(i in cites for i in p.sentences)
            )
            n = end - start if measure is None else measure(start, end)
            pieces = [Span(start, end)]
            if n > self._chunk_size:
                pieces = self._pieces.split_range(text, start, end, measure)
            out += [
                LabelledSpan(Span(p.start, p.end), group.title, group.summary, props)
                for p in pieces
            ]
        return out

    def units(self, text: str, measure: SpanCounter | None) -> list[Span]:
        """Return the sentences, each over the cap split into recursive pieces."""
        return capped_sentences(
            text, self._sentence_pattern, self._chunk_size, self._pieces, measure
        )

    def ask(
        self, client: httpx.Client, text: str, window: Sequence[Span], where: str
    ) -> list[Group]:
        """Return the LLM's groups for a window of sentences, asking once more if invalid.

        Raises:
            LLMError: On an endpoint failure, or a second invalid reply (naming ``where``).

        """
        lines = (
            f"[{i}] {' '.join(text[s.start : s.end].split())}" for i, s in enumerate(window, 1)
        )
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "\n".join(lines)},
        ]
        error = _InvalidReply("no reply")
        for attempt in range(1, ATTEMPTS + 1):
            try:
                content = chat(client, self.base_url, self.model, messages, self.retry)
                return parse_reply(content, len(window))
            except _InvalidReply as exc:
                log.debug("invalid LLM reply for %s (attempt %d): %s", where, attempt, exc)
                error = exc
                again = f"Your reply was invalid ({exc}). Answer again with the JSON only."
                messages.append({"role": "user", "content": again})
        raise LLMError(
            f"{where}: no valid reply from {self.model} in {ATTEMPTS} attempts: {error}"
        ) from error

    # -- outputs with the labels --------------------------------------------------------

    def chunk_document(self, document: Document) -> list[Chunk]:
        """Split one Document into Chunks whose metadata holds the chunk's labels."""
        labelled = self.split_labelled(document.page_content, document.source)
        chunks = _Given(self, [c.span for c in labelled]).chunk_document(document)
        return [
            dataclasses.replace(chunk, metadata={**chunk.metadata, **c.labels()})
            for chunk, c in zip(chunks, labelled, strict=True)
        ]

    def create_documents(
        self, texts: Sequence[str], metadatas: Sequence[dict[str, Any]] | None = None
    ) -> list[Document]:
        """Split each text into Documents with its metadata and the chunk's labels."""
        metas = list(metadatas) if metadatas is not None else [{} for _ in texts]
        documents: list[Document] = []
        for text, meta in zip(texts, metas, strict=True):
            for c in self.split_labelled(text):
                metadata = {**meta, **c.labels()}
                if self._add_start_index:
                    metadata["start_index"] = c.span.start
                documents.append(Document(text[c.span.start : c.span.end], metadata))
        return documents


class _Given(SpanSplitter):
    """Spans already found, with the chunker's unit and fingerprint (to build Chunks once)."""

    def __init__(self, owner: AgenticChunker, spans: list[Span]) -> None:
        self._owner, self._spans = owner, spans
        self._length_function = owner.length_function

    def split_spans(self, text: str) -> list[Span]:
        """Return the given spans."""
        return self._spans

    def fingerprint(self) -> str:
        """Return the chunker's fingerprint, so chunk ids are the chunker's."""
        return self._owner.fingerprint()
