"""Configurations to evaluate: a splitter with its sizes, an embed backend, a retrieval.

A configuration is written ``NAME[:KEY=VALUE,...]``: NAME is a splitter, the keys are
ingest settings (``chunk_size``, ``chunk_overlap``, ``length_unit``, ``model``,
``embed_backend``...) and the query settings ``retrieval`` and ``dense_weight``, e.g.
``token:chunk_size=278,chunk_overlap=139,length_unit=tokens,retrieval=hybrid,dense_weight=0.5``.
Anything not given is docflow's default, so ``auto`` alone is the configuration a new user
gets from ``docflow ingest`` and ``docflow query``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks.config import DEFAULT_DENSE_WEIGHT, DEFAULT_RETRIEVAL, IngestParams, QueryParams
from tasks.errors import ConfigError


@dataclass(frozen=True)
class EvalConfig:
    """One configuration: a label, the ingest parameters of its chunks, how it retrieves."""

    label: str
    params: IngestParams
    retrieval: str = DEFAULT_RETRIEVAL
    dense_weight: float = DEFAULT_DENSE_WEIGHT

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
        }

    def chunking(self) -> tuple[str, str, str, str]:
        """Return what decides the chunks and their vectors.

        Configurations that share it share one chunking and one embedding pass (a sweep
        of retrieval weights costs no model time).
        """
        p = self.params
        return (p.splitter, p.content_fingerprint(), p.model, p.embed_backend)


def default_spec() -> str:
    """Return the spec of docflow's defaults (the ingest's chunking, the query's ranking)."""
    p, q = IngestParams(), QueryParams()
    return (
        f"{p.splitter}:chunk_size={p.chunk_size},chunk_overlap={p.chunk_overlap},"
        f"length_unit={p.length_unit},retrieval={q.retrieval},dense_weight={q.dense_weight}"
    )


def _coerce(name: str, value: str) -> Any:
    if name in ("chunk_size", "chunk_overlap"):
        return int(value)
    return float(value) if name == "dense_weight" else value


def parse_spec(
    spec: str,
    model: str | None = None,
    embed_backend: str | None = None,
    retrieval: str | None = None,
    dense_weight: float | None = None,
) -> EvalConfig:
    """Parse ``NAME[:KEY=VALUE,...]``, e.g. ``token:chunk_size=278,length_unit=tokens``.

    NAME is any splitter ``build_splitter`` knows (semantic ones too); keys are IngestParams
    fields and ``retrieval``/``dense_weight``. The other arguments are the defaults of
    settings the spec does not give (e.g. from ``--model`` or ``DOCFLOW_EMBED_BACKEND``).

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
    defaults = {
        "model": model,
        "embed_backend": embed_backend,
        "retrieval": retrieval,
        "dense_weight": dense_weight,
    }
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
        ranking = QueryParams(**query)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"bad splitter spec {spec!r}: {where}: {first['msg']}") from exc
    params = params.model_copy(update={"splitter": name})
    return EvalConfig(spec.strip(), params, ranking.retrieval, ranking.dense_weight)
