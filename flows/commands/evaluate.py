"""``docflow evaluate``: score configurations by span-level and BEIR document metrics."""

from __future__ import annotations

import json
from pathlib import Path

import click

from flows.commands.common import (
    EMBED_BACKENDS,
    check_data_dir,
    errors_to_exit_codes,
    flow_runs,
    ranking_options,
)
from tasks.common.errors import ConfigError


@click.command()
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Evaluation data set: a folder with corpora/*.md and questions.csv, a BEIR folder "
    "(corpus.jsonl, queries.jsonl, qrels.tsv), or a folder of them (repeatable) [every data "
    "set under ../shared/eval].",
)
@click.option(
    "--splitter",
    "specs",
    multiple=True,
    help="Configuration NAME[:KEY=VALUE,...] with ingest settings and the query's "
    "retrieval, dense_weight, fusion, stop_words, per_source, e.g. token:chunk_size=278,"
    "chunk_overlap=139,length_unit=tokens,retrieval=hybrid,fusion=rrf (repeatable) "
    "[docflow's defaults].",
)
@click.option("--model", help="Embedding model name or path [all-MiniLM-L6-v2].")
@click.option(
    "--embed-backend",
    envvar="DOCFLOW_EMBED_BACKEND",
    type=click.Choice(EMBED_BACKENDS),
    help="How the model runs, where a configuration does not say [auto; env "
    "DOCFLOW_EMBED_BACKEND].",
)
@ranking_options
@click.option(
    "-k",
    "k",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Top k chunks of span sets (BEIR sets rank 100 deep).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the Parquet files and the plot [DATA_DIR/eval].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data"),
    show_default=True,
    help="Data folder whose embedding cache the evaluation reads and fills.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def evaluate(
    datasets: tuple[Path, ...],
    specs: tuple[str, ...],
    model: str | None,
    embed_backend: str | None,
    retrieval: str | None,
    dense_weight: float | None,
    fusion: str | None,
    stop_words: bool | None,
    per_source: int | None,
    k: int,
    out: Path | None,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Score configurations by retrieval recall, precision and IoU, or nDCG@10.

    Per configuration and data set: chunk every corpus (a BEIR set: every document), embed
    chunks and questions, retrieve (dense, lexical or hybrid, as docflow query does), and
    report per span corpus the recall, precision, IoU and precision_Ω of the top k (× 100),
    per BEIR set nDCG@10, recall@10, recall@100 and MRR@10 over documents, the mean over
    corpora and the worst corpus. Writes Parquet files and a PNG plot to --out.

    Example: docflow evaluate --splitter auto:retrieval=dense --splitter auto:retrieval=hybrid
    """
    from flows import temporary_server

    # the server comes up while the checks below import and read
    with temporary_server.started() as early, errors_to_exit_codes():
        from flows.evaluate import EVAL_ROOT
        from tasks.common.config import resolve_query_params
        from tasks.embed.model import DEFAULT_MODEL
        from tasks.evaluate import (
            default_spec,
            find_datasets,
            format_table,
            load_dataset,
            parse_spec,
        )

        found = {root: find_datasets(root) for root in list(datasets) or [EVAL_ROOT]}
        paths = [p for sets in found.values() for p in sets]
        missing = [root for root, sets in found.items() if not sets]
        if missing:
            raise ConfigError(
                f"evaluation data set not found: {missing[0]} "
                "(needs corpora/*.md and questions.csv, or corpus.jsonl, queries.jsonl and "
                "qrels.tsv, or folders of them)"
            )
        chosen = list(dict.fromkeys(specs)) or [default_spec()]
        given = {
            "retrieval": retrieval,
            "dense_weight": dense_weight,
            "fusion": fusion,
            "stop_words": stop_words,
            "per_source": per_source,
        }
        ranking = resolve_query_params(None, given)  # flags, DOCFLOW_* env, defaults
        for spec in chosen:  # bad specs are usage errors, before any flow
            parse_spec(spec, model, embed_backend, ranking.model_dump())
        check_data_dir(data_dir)
        for path in paths:  # so is a bad data set (one line, before the flow starts)
            load_dataset(path)
        from flows.evaluate import evaluate as run

        with flow_runs(temporary_server.adopt(early), store=False):  # no Chroma
            result = run(
                datasets=[str(p) for p in paths],
                splitters=chosen,
                model=model or DEFAULT_MODEL,
                embed_backend=embed_backend,
                k=k,
                out=str(out) if out else None,
                retrieval=ranking.retrieval,
                dense_weight=ranking.dense_weight,
                fusion=ranking.fusion,
                stop_words=ranking.stop_words,
                per_source=ranking.per_source,
                data_dir=str(data_dir),
            )
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, default=str))
        return
    click.echo(
        f"{', '.join(result['datasets'])}: {result['n_questions']} questions, "
        f"k = {result['k']} (per corpus: mean ± population std, × 100)\n"
    )
    click.echo(format_table(result["configs"]))
    click.echo(f"\nwrote {result['parquet']}, {result['questions_parquet']}, {result['plot']}")
