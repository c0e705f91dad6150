"""Configurations to evaluate: a splitter with its sizes, an embed backend, a retrieval.

A configuration is written ``NAME[:KEY=VALUE,...]``: NAME is a splitter, the keys are
ingest settings (``chunk_size``, ``chunk_overlap``, ``length_unit``, ``model``,
``embed_backend``...) and the query settings ``retrieval``, ``dense_weight``, ``fusion``,
``stop_words``, ``per_source``, ``feedback`` and ``feedback_weight``, e.g.
``token:chunk_size=278,chunk_overlap=139,length_unit=tokens,retrieval=hybrid,fusion=rrf``.
Anything not given is docflow's default, so ``auto`` alone is the configuration a new user
gets from ``docflow ingest`` and ``docflow query``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks.common.config import IngestParams, QueryParams
from tasks.common.errors import ConfigError


@dataclass(frozen=True)
class EvalConfig:
    """One configuration: a label, the ingest parameters of its chunks, how it ranks."""

    label: str
    params: IngestParams
    ranking: QueryParams = field(default_factory=QueryParams)

    @property
    def retrieval(self) -> str:
        """Return the ranking: hybrid, dense or lexical."""
        return self.ranking.retrieval

    @property
    def dense_weight(self) -> float:
        """Return the dense side's weight in hybrid ranking."""
        return self.ranking.dense_weight

    def describe(self) -> dict[str, Any]:
        """Return the settings as plain values (the report's leading columns)."""
        p = self.params
        return {
            "config": self.label,
            "splitter": p.splitter,
            "chunk_size": p.chunk_size,
            "chunk_overlap": p.chunk_overlap,
            "length_unit": p.length_unit,
            "model": p.model,
            "embed_backend": p.embed_backend,
            "retrieval": self.retrieval,
            "dense_weight": self.dense_weight,
            "fusion": self.ranking.fusion,
            "stop_words": self.ranking.stop_words,
            "per_source": self.ranking.per_source,
        }

    def chunking(self) -> tuple[str, str, str, str]:
        """Return what decides the chunks and their vectors.

        Configurations that share it share one chunking and one embedding pass (a sweep
        of retrieval weights costs no model time).
        """
        p = self.params
        return (p.splitter, p.content_fingerprint(), p.model, p.embed_backend)


def default_spec() -> str:
    """Return the spec of docflow's default chunking (the ranking is the query's default).

    The ranking is left to the defaults (``--retrieval``, ``--fusion``... or docflow's
    own), so ``docflow evaluate --fusion rrf`` evaluates the default chunking with it.
    """
    p = IngestParams()
    return (
        f"{p.splitter}:chunk_size={p.chunk_size},chunk_overlap={p.chunk_overlap},"
        f"length_unit={p.length_unit}"
    )


def _coerce(name: str, value: str) -> Any:
    if name in ("chunk_size", "chunk_overlap", "per_source", "feedback"):
        return int(value)
    return float(value) if name in ("dense_weight", "feedback_weight") else value


def parse_spec(
    spec: str,
    model: str | None = None,
    embed_backend: str | None = None,
    ranking: Mapping[str, Any] | None = None,
) -> EvalConfig:
    """Parse ``NAME[:KEY=VALUE,...]``, e.g. ``token:chunk_size=278,length_unit=tokens``.

    NAME is any splitter ``build_splitter`` knows (semantic ones too); keys are IngestParams
    fields and the query settings (``retrieval``, ``dense_weight``, ``fusion``,
    ``stop_words``, ``per_source``, ``feedback``, ``feedback_weight``). The other
    arguments are the defaults of settings the spec does not give (e.g. from ``--model``,
    ``DOCFLOW_EMBED_BACKEND`` or ``--fusion``); ``ranking`` holds query settings by name
    (None: not given).

    Raises:
        ConfigError: For an unknown splitter or key, or a bad value.

    """
    from pydantic import ValidationError

    from tasks.split.factory import SEMANTIC_SPLITTERS, SPLITTERS

    known = {**SPLITTERS, **SEMANTIC_SPLITTERS}
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    if name not in known:
        raise ConfigError(
            f"unknown splitter {name!r} in {spec!r}; expected one of {', '.join(known)}"
        )
    defaults = {"model": model, "embed_backend": embed_backend, **(ranking or {})}
    fields: dict[str, Any] = {k: v for k, v in defaults.items() if v is not None}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ConfigError(f"bad splitter spec {spec!r}: expected KEY=VALUE, got {item!r}")
        known_key = key in IngestParams.model_fields or key in QueryParams.model_fields
        if not known_key or key == "splitter":
            raise ConfigError(f"bad splitter spec {spec!r}: unknown setting {key!r}")
        try:
            fields[key] = _coerce(key, value)
        except ValueError as exc:
            raise ConfigError(f"bad splitter spec {spec!r}: {key} must be a number") from exc
    query = {k: fields.pop(k) for k in list(fields) if k in QueryParams.model_fields}
    try:
        params = IngestParams(**fields)
        query_params = QueryParams(**query)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"bad splitter spec {spec!r}: {where}: {first['msg']}") from exc
    params = params.model_copy(update={"splitter": name})
    return EvalConfig(spec.strip(), params, query_params)
