"""``docflow query``: the chunks that best answer a question, with their scores."""

from __future__ import annotations

import json
from pathlib import Path

import click

from flows.commands.common import (
    check_data_dir,
    collection_options,
    errors_to_exit_codes,
    ranking_options,
    warn_unknown_env,
)
from tasks.common.documents import shown_name
from tasks.common.errors import ConfigError


def _parse_where(pairs: tuple[str, ...]) -> dict[str, str | int | float | bool]:
    where: dict[str, str | int | float | bool] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--where expects KEY=VALUE, got {pair!r}")
        parsed: str | int | float | bool = value
        for cast in (int, float):
            try:
                parsed = cast(value)
                break
            except ValueError:
                continue
        if value in ("true", "false"):
            parsed = value == "true"
        where[key] = parsed
    return where


@click.command()
@click.argument("text")
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Results.")
@click.option("--where", multiple=True, help="Metadata filter KEY=VALUE (repeatable).")
@ranking_options
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="TOML config file (its [query] table: retrieval, dense_weight, fusion, stop_words, "
    "per_source).",
)
@collection_options(tables=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def query(
    text: str,
    k: int,
    where: tuple[str, ...],
    retrieval: str | None,
    dense_weight: float | None,
    fusion: str | None,
    stop_words: bool | None,
    per_source: int | None,
    config_file: Path | None,
    data_dir: str,
    collection: str,
    chroma_host: str | None,
    chroma_port: int,
    as_json: bool,
) -> None:
    """Print the chunks that best answer TEXT with their source and score.

    Example: docflow query "how do I treat varroa in winter?" -k 3 --retrieval hybrid
    """
    from tasks.common.config import resolve_query_params
    from tasks.retrieval import Retriever, check_question, describe_score

    with errors_to_exit_codes():
        try:
            check_question(text)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        check_data_dir(data_dir)
        given = {
            "retrieval": retrieval,
            "dense_weight": dense_weight,
            "fusion": fusion,
            "stop_words": stop_words,
            "per_source": per_source,
        }
        settings = resolve_query_params(config_file, given)
        warn_unknown_env()
        filters = _parse_where(where)
        with Retriever(
            Path(data_dir),
            collection,
            settings.retrieval,
            settings.dense_weight,
            chroma_host,
            chroma_port,
            settings.fusion,
            settings.stop_words,
            settings.per_source,
            settings.feedback,
            settings.feedback_weight,
        ) as retriever:
            hits = retriever.search(text, k=k, where=filters)
            unknown = []
            if not hits and filters:
                keys = retriever.metadata_keys()
                unknown = [key for key in filters if key not in keys]
    if as_json:
        rows = [
            {
                "rank": i,
                "score": round(h.score, 4),
                "dense_score": None if h.dense_score is None else round(h.dense_score, 4),
                "lexical_score": None if h.lexical_score is None else round(h.lexical_score, 4),
                "source": h.source,
                "chunk_id": h.chunk_id,
                "text": h.text,
                "metadata": h.metadata,
            }
            for i, h in enumerate(hits, start=1)
        ]
        payload = {
            "query": text,
            **settings.model_dump(),
            "score": describe_score(settings),
            "results": rows,
        }
        click.echo(json.dumps(payload, ensure_ascii=False))
        return
    if not hits:
        why = " with these --where filters" if filters else ""
        if unknown:
            why = (
                f": no chunk has the metadata key {unknown[0]!r} "
                f"(keys: {', '.join(keys) or 'none'})"
            )
        click.echo(f"no results for {text!r}{why}")
        return
    click.echo(f"score = {describe_score(settings)}")
    for i, h in enumerate(hits, start=1):
        snippet = " ".join(h.text.split())
        sides = [
            f"{name} {value:.3f}"
            for name, value in (("cosine", h.dense_score), ("bm25", h.lexical_score))
            if value is not None
        ]
        click.echo(
            f"{i}. [{settings.retrieval} {h.score:.3f}] {shown_name(h.source)}  "
            f"({', '.join(sides)})\n"
            f"   {snippet[:240]}"
        )
