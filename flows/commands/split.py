"""``docflow split``: how one file is split, as text, JSON or an HTML page."""

from __future__ import annotations

import json
from pathlib import Path

import click

from flows.commands.common import errors_to_exit_codes


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--splitter",
    help="Splitting strategy [auto]: auto, recursive, character, token, markdown, html, code, "
    "semantic, cluster, agentic (LLM: env DOCFLOW_LLM_BASE_URL, DOCFLOW_LLM_MODEL, "
    "DOCFLOW_LLM_API_KEY).",
)
@click.option("--chunk-size", type=int, help="Maximum chunk size in the length unit [200].")
@click.option("--chunk-overlap", type=int, help="Overlap between chunks [50].")
@click.option(
    "--length-unit", help="Unit of the sizes [model_tokens]: chars, tokens, model_tokens."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write an HTML page highlighting the chunks and overlaps to this file.",
)
def split(
    file: Path,
    splitter: str | None,
    chunk_size: int | None,
    chunk_overlap: int | None,
    length_unit: str | None,
    as_json: bool,
    html_out: Path | None,
) -> None:
    """Show how FILE is split: every chunk with its span, size and header path.

    Example: docflow split data/raw/queen-rearing.md --length-unit tokens --chunk-size 256
    """
    from tasks.common.config import resolve_params
    from tasks.common.documents import printable_name
    from tasks.split.factory import split_file

    overrides = {
        "splitter": splitter,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
        "length_unit": length_unit,
    }
    with errors_to_exit_codes():
        params = resolve_params(None, overrides)
        rows, chunks = split_file(file, params)
    docs = {r.document.doc_id: i for i, r in enumerate(rows) if r.document is not None}
    shown = printable_name(str(file))  # a name that is not UTF-8 cannot go into HTML or JSON
    records = [
        {
            "document": docs[c.doc_id],
            "chunk_index": c.chunk_index,
            "start_index": c.start_index,
            "end_index": c.end_index,
            "n_chars": c.n_chars,
            "n_tokens": c.n_tokens,
            "headers": [h.to_dict() for h in c.headers],
            "chunk_id": c.chunk_id,
            "text": c.text,
        }
        for c in chunks
    ]
    if html_out is not None:
        from tasks.split.visualize import render_chunks_html

        documents = [r.document for r in rows if r.document is not None]
        page_settings = {k: getattr(params, k) for k in overrides}
        with errors_to_exit_codes():
            page = render_chunks_html(documents, chunks, shown, page_settings)
            html_out.write_text(page, encoding="utf-8")
        click.echo(f"wrote {html_out}", err=True)  # stderr: --json keeps one object on stdout
    if as_json:
        settings = {k: getattr(params, k) for k in overrides}
        payload = {"file": shown, **settings, "documents": len(rows), "chunks": records}
        click.echo(json.dumps(payload, ensure_ascii=False))
        return
    click.echo(
        f"{shown}: {len(rows)} document(s), {len(chunks)} chunks "
        f"({params.splitter}, {params.chunk_size}/{params.chunk_overlap} {params.length_unit})"
    )
    for c in chunks:
        path = " > ".join(f"h{h.level} {h.text}" for h in c.headers) or "-"
        tokens = f", {c.n_tokens} tokens" if c.n_tokens is not None else ""
        click.echo(
            f"\n--- doc {docs[c.doc_id]} chunk {c.chunk_index} "
            f"[{c.start_index}:{c.end_index}] {c.n_chars} chars{tokens} | {path}"
        )
        click.echo(c.text)
