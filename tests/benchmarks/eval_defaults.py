"""The evaluation behind docflow's defaults (docs/retrieval.md, "Choosing the default").

The chunking grid runs ``docflow evaluate --json`` on the shared span sets (../shared/eval)
once per embed backend, over a grid of chunkings, each with dense, lexical, the previous
default (min-max fusion, dense weight 0.5, function words kept) and the ``absolute`` fusion
at several weights, then prints the tables docs/retrieval.md quotes: per chunking (mean and
worst corpus), per ranking (averaged over chunkings), and the backends compared corpus by
corpus.

The ranking grid (``--rankings``) runs the default chunking on every shared set of both
kinds, the BEIR set scifact-train included (~5 min of embedding on a CPU, then cached in
``--data-dir``), with each ranking, and prints the score per corpus (recall@5, nDCG@10), the
mean, the worst corpus, and whether the fused ranking keeps within a point of the better
single side on every corpus.

    python -m tests.benchmarks.eval_defaults                 # all three backends (~90 min)
    python -m tests.benchmarks.eval_defaults --backends onnx --out bench-results/eval
    python -m tests.benchmarks.eval_defaults --report-only   # tables from earlier runs
    python -m tests.benchmarks.eval_defaults --rankings --backends onnx   # ~10 min

Not part of ``make bench`` (it takes a while and measures quality, not speed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

CHUNKINGS = (
    "auto:chunk_size=128,chunk_overlap=0,length_unit=model_tokens",
    "auto:chunk_size=128,chunk_overlap=32,length_unit=model_tokens",
    "auto:chunk_size=160,chunk_overlap=40,length_unit=model_tokens",
    "auto:chunk_size=200,chunk_overlap=0,length_unit=model_tokens",
    "auto:chunk_size=200,chunk_overlap=50,length_unit=model_tokens",
    "auto:chunk_size=200,chunk_overlap=100,length_unit=model_tokens",
    "auto:chunk_size=224,chunk_overlap=32,length_unit=model_tokens",
    "auto:chunk_size=256,chunk_overlap=0,length_unit=model_tokens",
    "auto:chunk_size=256,chunk_overlap=64,length_unit=model_tokens",
    "auto:chunk_size=200,chunk_overlap=50,length_unit=tokens",
    "auto:chunk_size=278,chunk_overlap=139,length_unit=tokens",
    "token:chunk_size=278,chunk_overlap=139,length_unit=tokens",
    "token:chunk_size=200,chunk_overlap=100,length_unit=model_tokens",
    "auto:chunk_size=800,chunk_overlap=100,length_unit=chars",
    "auto:chunk_size=1000,chunk_overlap=200,length_unit=chars",
    "auto:chunk_size=1200,chunk_overlap=200,length_unit=chars",
)
WEIGHTS = (0.15, 0.2, 0.25, 0.3, 0.35, 0.5)
#: The ranking of the previous release, kept in the grid for comparison.
PREVIOUS = "retrieval=hybrid,fusion=minmax,dense_weight=0.5,stop_words=false"
BACKENDS = ("onnx-int8", "onnx", "torch")
DEFAULT = "auto:chunk_size=200,chunk_overlap=50,length_unit=model_tokens"
#: The ranking grid at the default chunking: each side alone, then fused rankings.
RANKINGS = (
    "retrieval=dense",
    "retrieval=lexical",
    *(
        f"retrieval=hybrid,fusion=absolute,dense_weight={w}"
        for w in (0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
    ),
    "retrieval=hybrid,fusion=absolute,dense_weight=0.25,per_source=1",
    "retrieval=dense,feedback=5,feedback_weight=0.6",
    # dense-side pseudo-relevance feedback (Rocchio) over the default fusion: Pyserini's
    # vector PRF settings (5 hits, their mean weighing 0.6) and a grid around them
    *(
        f"retrieval=hybrid,fusion=absolute,dense_weight=0.25,feedback={n},feedback_weight={b}"
        for n in (3, 5, 10)
        for b in (0.4, 0.6)
    ),
)


def span_sets() -> list[str]:
    """Return the shared span sets (the chunking grid leaves the BEIR sets out: too slow)."""
    from flows.evaluate import default_datasets
    from tasks.evaluate import is_beir

    return [p for p in default_datasets() if not is_beir(Path(p))]


def specs() -> list[str]:
    """Return every configuration of the grid."""
    out = []
    for chunking in CHUNKINGS:
        out += [f"{chunking},retrieval=dense", f"{chunking},retrieval=lexical"]
        out += [f"{chunking},{PREVIOUS}"]
        out += [f"{chunking},retrieval=hybrid,fusion=absolute,dense_weight={w}" for w in WEIGHTS]
    return out


def run(backend: str, out: Path, rankings: bool = False, data_dir: str = "data") -> Path:
    """Run a grid through the CLI with one backend; return its JSON file."""
    name = f"rankings-{backend}" if rankings else backend
    args = [sys.executable, "-m", "flows", "evaluate", "--embed-backend", backend, "--json"]
    args += ["--out", str(out / f"eval-{name}"), "--data-dir", data_dir]
    if not rankings:
        args += [x for path in span_sets() for x in ("--dataset", path)]
    for spec in [f"{DEFAULT},{r}" for r in RANKINGS] if rankings else specs():
        args += ["--splitter", spec]
    result = subprocess.run(args, capture_output=True, text=True, check=True)
    path = out / f"{name}.json"
    path.write_text(result.stdout, encoding="utf-8")
    return path


def _ranking(row: dict[str, Any]) -> str:
    return str(row["config"]).removeprefix(f"{DEFAULT},")


def report_rankings(path: Path) -> None:
    """Print the score of each ranking per corpus, the mean, the worst, and the 1-point rule."""
    rows = json.loads(path.read_text(encoding="utf-8"))["configs"]
    by = {_ranking(r): r for r in rows}
    corpora = [f"{c['dataset']}/{c['corpus_id']}" for c in rows[0]["corpora"]]
    print(f"\nat {DEFAULT}: score per corpus ({rows[0]['score_metric']}), mean, worst")
    print("  " + " | ".join(["ranking", *corpora, "mean", "worst", "rule"]))
    sides = [by["retrieval=dense"]["corpora"], by["retrieval=lexical"]["corpora"]]
    better = [max(d["score"], w["score"]) for d, w in zip(*sides, strict=True)]
    for name, row in by.items():
        scores = [c["score"] for c in row["corpora"]]
        gap = min(s - b for s, b in zip(scores, better, strict=True))
        rule = (
            ""
            if name.startswith(("retrieval=dense", "retrieval=lexical"))
            else (f"holds ({gap:+.1f})" if gap >= -1.0 else f"breaks ({gap:+.1f})")
        )
        cells = [f"{x:.1f}" for x in (*scores, row["score_mean"], row["score_min"])]
        print("  " + " | ".join([name, *cells, rule]))


def _method(row: dict[str, Any]) -> str:
    if row["retrieval"] == "hybrid":
        return f"{row['fusion']} {row['dense_weight']}"
    return str(row["retrieval"])


def _chunking(row: dict[str, Any]) -> str:
    return str(row["config"]).split(",retrieval=")[0]


#: The method names of the current default and of the previous one in the tables.
CURRENT, OLD = "absolute 0.25", "minmax 0.5"


def report(paths: dict[str, Path]) -> None:
    """Print the tables of docs/retrieval.md from the runs' JSON files."""
    runs = {b: json.loads(p.read_text(encoding="utf-8"))["configs"] for b, p in paths.items()}
    main = runs.get("onnx") or next(iter(runs.values()))
    print(f"\nby chunking ({CURRENT} and dense): recall mean / min, IoU mean / min, chunks")
    for chunking in CHUNKINGS:
        mine = {_method(r): r for r in main if _chunking(r) == chunking}
        h, d = mine[CURRENT], mine["dense"]
        print(
            f"  {chunking:64s} hybrid {h['recall_mean']:5.1f} {h['recall_min']:5.1f} "
            f"{h['iou_mean']:4.1f} {h['iou_min']:4.1f} | dense {d['recall_mean']:5.1f} "
            f"{d['recall_min']:5.1f} {d['iou_mean']:4.1f} | {h['n_chunks']} chunks, "
            f"{h['mean_chunk_chars']:.0f} chars"
        )
    print("\nby method, averaged over the chunkings: recall mean, min, IoU mean")
    by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in main:
        by_method[_method(row)].append(row)
    for method, rows in sorted(by_method.items()):
        n = len(rows)
        mean, low = (sum(r[f"recall_{x}"] for r in rows) / n for x in ("mean", "min"))
        iou = sum(r["iou_mean"] for r in rows) / n
        print(f"  {method:12s} {mean:6.2f} {low:6.2f} {iou:5.2f}")
    print(f"\nat {DEFAULT}: recall per corpus, mean, min; IoU mean")
    for backend, rows in runs.items():
        for row in rows:
            if _chunking(row) == DEFAULT and _method(row) in ("dense", "lexical", OLD, CURRENT):
                corpora = "  ".join(
                    f"{c['corpus_id']} {c['recall_mean']:5.1f}" for c in row["corpora"]
                )
                print(
                    f"  {backend:9s} {_method(row):10s} {corpora}  mean {row['recall_mean']:5.1f}"
                    f"  min {row['recall_min']:5.1f}  IoU {row['iou_mean']:4.2f}"
                )
    if "torch" in runs:
        reference = {r["config"]: r for r in runs["torch"]}
        for backend, rows in runs.items():
            if backend == "torch":
                continue
            losses = []
            for row in rows:
                if row["retrieval"] == "lexical":
                    continue
                ref = reference[row["config"]]
                worst = min(
                    c["recall_mean"] - r["recall_mean"]
                    for c, r in zip(row["corpora"], ref["corpora"], strict=True)
                )
                losses.append(worst)
            over = sum(loss < -1.0 for loss in losses)
            print(
                f"\n{backend} against torch float32: the largest loss on one corpus is "
                f"{max(0.0, -min(losses)):.1f} recall points; {over} of {len(losses)} "
                "configurations lose more than 1 point on some corpus"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the grid (or read earlier runs) and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS))
    parser.add_argument("--out", type=Path, default=Path("bench-results/eval-defaults"))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--rankings", action="store_true", help="the ranking grid")
    parser.add_argument("--data-dir", default="data", help="whose embedding cache to use")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.rankings:
        for backend in args.backends:
            path = args.out / f"rankings-{backend}.json"
            if not args.report_only:
                path = run(backend, args.out, rankings=True, data_dir=args.data_dir)
            report_rankings(path)
        return 0
    paths = {}
    for backend in args.backends:
        path = args.out / f"{backend}.json"
        paths[backend] = path if args.report_only else run(backend, args.out, False, args.data_dir)
        print(f"{backend}: {paths[backend]}", flush=True)
    report(paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
