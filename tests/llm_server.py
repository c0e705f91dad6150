"""A small OpenAI-compatible chat server on loopback, with a rule-based "LLM", for the tests.

``POST /v1/chat/completions`` reads the numbered sentences (``[i] ...``) of the first user
message and answers the JSON the agentic chunker asks for, deterministically: consecutive
sentences in groups of ``group_size``, one proposition per sentence. ``mode`` picks other
behaviours, so every error path of the chunker can be exercised over real HTTP:

- ``ok``: the groups above; ``fenced``: the same inside a Markdown code fence;
- ``interleaved``: even and odd sentences in two groups (groups whose sentences are apart);
- ``forget``: every third sentence is cited by no proposition;
- ``bad_json`` / ``out_of_range`` / ``not_completion``: always an invalid reply;
- ``bad_json_once``: an invalid reply to a window's first request, a good one to the retry;
- ``http_500``: HTTP 500 with an error body; ``http_400``: HTTP 400 (a request error);
- ``slow``: sleeps ``delay`` seconds first.

Whatever the mode, the next ``refusals`` requests are refused with ``refuse_status`` (and a
``Retry-After`` header when ``retry_after`` is set), as a rate-limited or overloaded endpoint
does.

Every request is recorded (path, headers, JSON body) in ``requests``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SENTENCE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


@dataclass
class Recorded:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def sentences(self) -> list[tuple[int, str]]:
        """Return the numbered sentences of the first user message."""
        user = next(m["content"] for m in self.body["messages"] if m["role"] == "user")
        return [(int(n), s) for n, s in SENTENCE.findall(user)]


@dataclass
class LLMServer:
    """The running server's address, behaviour and the requests it has seen."""

    base_url: str
    mode: str = "ok"
    group_size: int = 3
    delay: float = 2.0
    refusals: int = 0
    refuse_status: int = 429
    retry_after: str | None = None
    requests: list[Recorded] = field(default_factory=list)


def _groups(numbers: list[int], mode: str, size: int) -> list[list[int]]:
    """Return the sentence numbers of each group the fake LLM forms."""
    if mode == "interleaved":
        return [g for g in (numbers[0::2], numbers[1::2]) if g]
    return [numbers[i : i + size] for i in range(0, len(numbers), size)]


def reply_content(recorded: Recorded, mode: str, size: int) -> str:
    """Return the fake LLM's answer text for a request."""
    sentences = dict(recorded.sentences)
    retry = len(recorded.body["messages"]) > 2
    if mode == "bad_json" or (mode == "bad_json_once" and not retry):
        return '{"chunks": [{"title": "unterminated'
    chunks = []
    for group in _groups(sorted(sentences), mode, size):
        cited = [n for n in group if not (mode == "forget" and n % 3 == 0)]
        props = [{"text": f"It is said that {sentences[n]}", "sentences": [n]} for n in cited]
        if mode == "out_of_range" and props:
            props[0]["sentences"] = [len(sentences) + 5]
        chunks.append(
            {
                "title": f"Sentences {group[0]}-{group[-1]}",
                "summary": f"About: {sentences[group[0]][:30]}",
                "propositions": props,
            }
        )
    content = json.dumps({"chunks": chunks})
    return f"```json\n{content}\n```" if mode == "fenced" else content


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Stay quiet (the base writes every request to stderr)."""

    def _send(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        recorded = Recorded(self.path, dict(self.headers.items()), body)
        state.requests.append(recorded)
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        if state.refusals > 0:
            state.refusals -= 1
            after = {"Retry-After": state.retry_after} if state.retry_after is not None else {}
            self._send(state.refuse_status, {"error": {"message": "slow down"}}, after)
            return
        if state.mode == "slow":
            time.sleep(state.delay)
        if state.mode == "http_500":
            self._send(500, {"error": {"message": "the model is overloaded\nplease retry"}})
            return
        if state.mode == "http_400":
            self._send(400, {"error": {"message": "unknown parameter: response_format"}})
            return
        if state.mode == "not_completion":
            self._send(200, {"hello": "world"})
            return
        content = reply_content(recorded, state.mode, state.group_size)
        message = {"role": "assistant", "content": content}
        self._send(
            200, {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: LLMServer


@contextmanager
def llm_server() -> Iterator[LLMServer]:
    """Run the server on a free 127.0.0.1 port for the ``with`` block."""
    server = _Server(("127.0.0.1", 0), _Handler)
    port = server.server_address[1]
    server.state = LLMServer(f"http://127.0.0.1:{port}/v1")
    thread = threading.Thread(target=server.serve_forever, name="llm-server", daemon=True)
    thread.start()
    try:
        yield server.state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
