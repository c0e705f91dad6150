"""What a model's folder says without loading the model: its vector size, where it is.

A new collection must know the vector size before any vector exists. Loading the model
for it (torch and the weights, or an ONNX export) made a first ingest wait 5-15 s before
it planned anything; the folder's small JSON files say the same thing at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def hub_snapshot(name: str) -> Path | None:
    """Return the Hugging Face cache's folder of model ``name``, or None.

    A bare name is also looked for as ``sentence-transformers/<name>``.
    """
    from huggingface_hub import try_to_load_from_cache

    for repo in [name] if "/" in name else [name, f"sentence-transformers/{name}"]:
        try:
            found = try_to_load_from_cache(repo, "config.json")
        except ValueError:  # not a valid repo id
            continue
        if isinstance(found, str):
            return Path(found).parent
    return None


#: The pooling modes of a sentence-transformers Pooling module; each adds a block of the
#: token embedding's size to the sentence vector.
POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def dimension_from_files(folder: Path) -> int | None:
    """Return the vector size a model folder declares, reading its small JSON files only.

    The last module that sets the size decides: a Dense layer (``out_features``), else the
    Pooling module (the token size times its pooling modes), else the transformer's
    ``hidden_size`` (a plain Hugging Face model gets mean pooling). None when the files do
    not say: the caller loads the model instead.
    """

    def read(path: Path) -> dict[str, Any] | None:
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        modules = []
    for module in reversed(modules if isinstance(modules, list) else []):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in ("Dense", "Pooling"):
            continue
        config = read(folder / str(module.get("path", "")) / "config.json") or {}
        if kind == "Dense" and isinstance(config.get("out_features"), int):
            return int(config["out_features"])
        if kind == "Pooling" and isinstance(config.get("word_embedding_dimension"), int):
            modes = sum(bool(config.get(m)) for m in POOLING_MODES) or 1
            return int(config["word_embedding_dimension"]) * modes
        return None  # a module that sets the size, unreadable: do not guess
    config = read(folder / "config.json") or {}
    hidden = config.get("hidden_size")
    return hidden if isinstance(hidden, int) else None
