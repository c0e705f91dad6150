"""Embed backends (tasks/embed/backends.py) with the real bundled all-MiniLM-L6-v2, offline.

One module-scoped export cache folder holds the ONNX exports, so each backend exports once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tasks.common.config import IngestParams, resolve_params
from tasks.common.errors import ConfigError
from tasks.embed import backends as embed_backends
from tasks.embed.backends import (
    META_FILE,
    MODEL_FILE,
    export_key,
    export_onnx,
    onnx_exportable,
    resolve_backend,
)
from tasks.embed.cache import EmbeddingCache
from tasks.embed.model import DEFAULT_MODEL, Embedder, embed_with_cache, resolve_model_path

DIM = 384
CPU_BACKENDS = ("torch", "onnx", "onnx-int8")
#: Lowest cosine to torch float32 per backend on single short texts (measured: int8 per
#: channel >= 0.967 on a text of three spaces, >= 0.985 on real 800-character chunks).
MIN_COSINE = {"torch": 0.9999, "onnx": 0.9999, "onnx-int8": 0.95}
TEXTS = [
    "A lighthouse guides ships at night.",
    "x",
    "灯台は夜に船を導く。",
    "a much longer sentence " * 80,  # past the 256 word-piece limit
    "   ",
    "The keeper trimmed the wick and wrote the weather into the log, as every evening.",
]


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("models")
    old = os.environ.get("DOCFLOW_MODEL_CACHE")
    os.environ["DOCFLOW_MODEL_CACHE"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("DOCFLOW_MODEL_CACHE", None)
    else:
        os.environ["DOCFLOW_MODEL_CACHE"] = old


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return Embedder(DEFAULT_MODEL, batch_size=4, device="cpu", backend="torch").embed(TEXTS)


@pytest.mark.slow
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_backend_rows_are_unit_vectors_close_to_float32(
    backend: str, model_cache: Path, reference: np.ndarray
) -> None:
    embedder = Embedder(DEFAULT_MODEL, batch_size=4, device="cpu", backend=backend)
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), DIM)
    assert vectors.dtype == np.float32
    assert embedder.dimension == DIM
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosine = (vectors * reference).sum(axis=1)
    assert cosine.min() >= MIN_COSINE[backend], cosine
    # order: a reversed input gives the reversed rows (batches are sorted by length inside)
    backward = embedder.embed(list(reversed(TEXTS)))
    np.testing.assert_allclose(backward[::-1], vectors, atol=1e-5)
    single = embedder.embed(TEXTS[3:4])
    if backend == "onnx-int8":  # activations quantise per batch: batch-mates count a little
        assert float(single[0] @ vectors[3]) >= 0.98
    else:
        np.testing.assert_allclose(single[0], vectors[3], atol=1e-4)
    empty = embedder.embed([])
    assert empty.shape == (0, DIM)
    assert empty.dtype == np.float32


@pytest.mark.slow
def test_export_is_cached_and_reused(model_cache: Path) -> None:
    path = resolve_model_path(DEFAULT_MODEL)
    folder = export_onnx(path, "onnx")
    assert folder.parent == model_cache
    assert {MODEL_FILE, META_FILE} <= {p.name for p in folder.iterdir()}
    stamp = (folder / MODEL_FILE).stat().st_mtime_ns
    again = Embedder(DEFAULT_MODEL, device="cpu", backend="onnx")
    assert again.embed(["reuse"]).shape == (1, DIM)
    assert export_onnx(path, "onnx") == folder
    assert (folder / MODEL_FILE).stat().st_mtime_ns == stamp
    # no temp folders left behind; one folder per backend
    assert not [p for p in model_cache.iterdir() if p.name.startswith(".")]
    assert export_key(path, "onnx") != export_key(path, "onnx-int8")


@pytest.mark.slow
def test_a_lost_export_race_keeps_the_winner_and_leaves_no_partial_folder(
    model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process renames its export into place while ours is being built."""
    path = resolve_model_path(DEFAULT_MODEL)
    winner = export_onnx(path, "onnx")  # what the other process finished first
    stamp = (winner / MODEL_FILE).stat().st_mtime_ns
    calls: list[Path] = []

    def slow_export(model_path: str, folder: Path, quantize: bool) -> None:
        calls.append(folder)
        (folder / MODEL_FILE).write_bytes(b"our own, complete export")
        (folder / META_FILE).write_text("{}")

    monkeypatch.setattr(embed_backends, "_export_into", slow_export)
    # pretend our process checked before the winner appeared: force a second build
    original_is_file = Path.is_file
    checks = {"n": 0}

    def not_yet(self: Path) -> bool:
        if self == winner / META_FILE and checks["n"] < 2:
            checks["n"] += 1
            return False
        return original_is_file(self)

    monkeypatch.setattr(Path, "is_file", not_yet)
    assert export_onnx(path, "onnx") == winner
    assert calls, "the export was not rebuilt"
    assert (winner / MODEL_FILE).stat().st_mtime_ns == stamp  # the winner is untouched
    assert not calls[0].exists()  # our temp folder is gone
    assert not [p for p in model_cache.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_a_failed_export_leaves_nothing(
    model_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.common.errors import EmbedError

    def broken(model_path: str, folder: Path, quantize: bool) -> None:
        (folder / MODEL_FILE).write_bytes(b"half an export")
        raise RuntimeError("disk full")

    monkeypatch.setattr(embed_backends, "_export_into", broken)
    with pytest.raises(EmbedError, match="disk full"):
        export_onnx(resolve_model_path(DEFAULT_MODEL), "onnx", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_cache_keys_differ_per_backend_and_torch_keeps_the_plain_name() -> None:
    ids = {b: Embedder(DEFAULT_MODEL, device="cpu", backend=b).model_id for b in CPU_BACKENDS}
    assert ids["torch"] == DEFAULT_MODEL  # caches written before backends stay valid
    assert len(set(ids.values())) == len(ids)
    assert Embedder(DEFAULT_MODEL, device="cpu").model_id == f"{DEFAULT_MODEL}#onnx"


def test_cache_falls_back_to_float32_vectors_only(tmp_path: Path) -> None:
    cache = EmbeddingCache.open(tmp_path)
    reference = np.eye(2, DIM, dtype=np.float32)
    cache.put(DEFAULT_MODEL, ["a", "b"], reference)
    embedder = Embedder(DEFAULT_MODEL, device="cpu", backend="onnx-int8")
    vectors, hits = embed_with_cache(embedder, cache, ["a", "b"])  # no model load: all hits
    assert hits == 2
    np.testing.assert_array_equal(vectors, reference)
    cache.put(embedder.model_id, ["c"], np.full((1, DIM), 0.5, dtype=np.float32))
    torch = Embedder(DEFAULT_MODEL, device="cpu", backend="torch")
    assert cache.get(torch.model_id, ["c"]) == [None]  # float32 never reads int8 vectors
    cache.close()


def test_auto_resolves_per_device_and_model() -> None:
    bundled = resolve_model_path(DEFAULT_MODEL)
    assert onnx_exportable(bundled)
    assert resolve_backend("auto", "cpu", bundled) == "onnx"  # float32: int8 costs recall
    assert resolve_backend("auto", "cuda", bundled) == "torch-fp16"
    assert resolve_backend("auto", "cpu", "sentence-transformers/not-local") == "torch"
    assert resolve_backend("onnx", "cpu", bundled) == "onnx"
    with pytest.raises(ConfigError, match="CUDA"):
        resolve_backend("torch-fp16", "cpu", bundled)


def test_invalid_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="embed backend"):
        Embedder(DEFAULT_MODEL, backend="tensorrt")
    with pytest.raises(ConfigError, match="embed_backend"):
        resolve_params(overrides={"embed_backend": "tensorrt"}, environ={})
    assert IngestParams().embed_backend == "auto"
    params = resolve_params(environ={"DOCFLOW_EMBED_BACKEND": "onnx"})
    assert params.embed_backend == "onnx"


def test_backend_does_not_change_the_content_fingerprint() -> None:
    assert (
        IngestParams(embed_backend="torch").content_fingerprint()
        == IngestParams(embed_backend="onnx-int8").content_fingerprint()
    )


def test_unsupported_model_layouts_are_not_exportable(tmp_path: Path) -> None:
    assert not onnx_exportable(str(tmp_path))  # no modules.json
    (tmp_path / "modules.json").write_text(
        '[{"type": "sentence_transformers.models.Transformer", "path": ""},'
        ' {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"},'
        ' {"type": "sentence_transformers.models.Dense", "path": "2_Dense"}]'
    )
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert not onnx_exportable(str(tmp_path))  # a Dense layer


def test_the_onnx_path_reads_its_tokenizer_file_as_transformers_would(model_cache: Path) -> None:
    """Same token ids, hence the same vectors, without importing transformers (or torch)."""
    from transformers import AutoTokenizer

    from tasks.embed.backends import OnnxEncoder, TokenizerFile
    from tasks.embed.batches import BatchTokenizer

    folder = export_onnx(resolve_model_path(DEFAULT_MODEL), "onnx", cache_dir=model_cache)
    light = TokenizerFile.read(folder)
    assert light is not None
    hf = AutoTokenizer.from_pretrained(str(folder))
    assert light.pad_token_id == hf.pad_token_id
    ours, theirs = BatchTokenizer(light, 256)(TEXTS), BatchTokenizer(hf, 256)(TEXTS)
    assert (ours.ids, ours.type_ids, ours.pad_id) == (theirs.ids, theirs.type_ids, theirs.pad_id)
    encoder = OnnxEncoder(folder)
    reference = OnnxEncoder(folder)
    reference.tokens = BatchTokenizer(hf, int(reference.meta["max_seq_length"]))
    assert np.array_equal(encoder.encode(TEXTS), reference.encode(TEXTS))
    assert TokenizerFile.read(folder / "missing") is None


def test_a_cold_cpu_embed_imports_neither_torch_nor_transformers(model_cache: Path) -> None:
    """What a cold ``docflow query`` pays on a CPU: ONNX Runtime and tokenizers only."""
    code = (
        "import sys\n"
        "from tasks.embed.model import Embedder\n"
        "assert Embedder('all-MiniLM-L6-v2').embed(['when do bees swarm?']).shape == (1, 384)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    import subprocess
    import sys

    env = {**os.environ, "DOCFLOW_MODEL_CACHE": str(model_cache)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_a_second_process_waits_for_the_export_instead_of_doing_it_again(
    model_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Workers starting together on a fresh machine export the model once."""
    import fcntl
    import threading

    path = resolve_model_path(DEFAULT_MODEL)
    cache = tmp_path / "models"
    cache.mkdir()
    final = cache / export_key(path, "onnx")
    built: list[Path] = []
    monkeypatch.setattr(
        embed_backends, "_export_into", lambda m, folder, quantize: built.append(folder)
    )
    with (cache / f"{final.name}.lock").open("a") as other:  # another process is exporting
        fcntl.flock(other, fcntl.LOCK_EX)
        result: list[Path] = []
        waiter = threading.Thread(target=lambda: result.append(export_onnx(path, "onnx", cache)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not built  # it waits on the lock
        final.mkdir()  # the other process finishes its export
        (final / META_FILE).write_text("{}")
        fcntl.flock(other, fcntl.LOCK_UN)
    waiter.join(10)
    assert result == [final] and not built  # found the finished export, built nothing
